//! Login redirection, black-box with libiscsi: a daemon whose target has
//! `[targets.redirect]` answers logins with TARGET MOVED and the other
//! daemon's portal; `iscsi-inq` through the redirecting portal follows it
//! and gets its answer from the daemon it was sent to, which logs the
//! login, while the redirecting daemon logs a redirect and no session.
//! Discovery through the redirecting portal still lists the target.
//! With `metrics`, logins go to the gateway with the fewest sessions.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::time::{Duration, Instant};

use admin_common::{Admin, Session};
use common::{run_tool, Daemon};
use serde_json::json;

const TARGET: &str = "iqn.2026-11.org.rustgt:redirected";

fn config(redirect: &str) -> String {
    format!(
        "[[targets]]\niqn = \"{TARGET}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n{redirect}"
    )
}

#[test]
fn a_redirected_login_lands_on_the_portal_it_was_sent_to() {
    let dest = Daemon::start_with_config(&config(""), 1);
    let moved = Daemon::start_with_config(
        &config(&format!(
            "[targets.redirect]\nto = [\"{},1\"]\n",
            dest.portal
        )),
        1,
    );
    let url = format!("iscsi://{}/{TARGET}/0", moved.portal);
    let out = run_tool(
        "iscsi-inq",
        std::slice::from_ref(&url),
        Duration::from_secs(60),
    );
    assert!(
        out.success(),
        "iscsi-inq {url}: {}\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("DIRECT_ACCESS"), "{}", out.stdout);

    let served = dest.stderr();
    assert!(
        served.contains("login complete"),
        "the destination served the session: {served}"
    );
    let redirected = moved.stderr();
    assert!(
        redirected.contains("login redirected"),
        "the redirecting daemon redirected: {redirected}"
    );
    assert!(
        !redirected.contains("login complete"),
        "the redirecting daemon served no session: {redirected}"
    );

    // Discovery is not redirected: the target is listed at the portal
    // that redirects its logins.
    let out = run_tool(
        "iscsi-ls",
        &[format!("iscsi://{}", moved.portal)],
        Duration::from_secs(60),
    );
    assert!(out.success(), "iscsi-ls: {}", out.stderr);
    assert!(out.stdout.contains(TARGET), "{}", out.stdout);
}

/// The metrics endpoint of a daemon started with `metrics_listen`.
fn metrics_of(d: &Daemon) -> String {
    Admin::connect(d).ok(json!({"cmd": "status"}))["metrics"]
        .as_str()
        .expect("metrics address")
        .to_owned()
}

/// Waits (at most 30 s) until `d`'s log holds `what` `n` times.
fn wait_log(d: &Daemon, what: &str, n: usize) {
    let t0 = Instant::now();
    while d.stderr().matches(what).count() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no {n} x {what:?} within 30 s: {}",
            d.stderr_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One login through the redirecting portal (iscsi-inq follows the
/// redirect and logs out); returns which gateway served it.
fn inq_lands_on(moved: &Daemon, gateways: [&Daemon; 2]) -> usize {
    let before: Vec<usize> = gateways
        .iter()
        .map(|g| g.stderr().matches("login complete").count())
        .collect();
    let url = format!("iscsi://{}/{TARGET}/0", moved.portal);
    let out = run_tool("iscsi-inq", &[url], Duration::from_secs(60));
    assert!(out.success(), "iscsi-inq: {}\n{}", out.stdout, out.stderr);
    let t0 = Instant::now();
    loop {
        let landed: Vec<usize> = gateways
            .iter()
            .zip(&before)
            .enumerate()
            .filter(|(_, (g, b))| g.stderr().matches("login complete").count() > **b)
            .map(|(i, _)| i)
            .collect();
        if let [i] = landed[..] {
            return i;
        }
        assert!(
            landed.is_empty() && t0.elapsed() < Duration::from_secs(10),
            "the login landed on {landed:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn with_metrics_logins_go_to_the_gateway_with_the_fewest_sessions() {
    let gateway = format!("metrics_listen = \"127.0.0.1:0\"\n{}", config(""));
    let a = Daemon::start_with_config(&gateway, 1);
    let b = Daemon::start_with_config(&gateway, 1);
    let (ma, mb) = (metrics_of(&a), metrics_of(&b));
    let held_a: Vec<Session> = (0..4)
        .map(|i| {
            Session::login(
                a.portal,
                TARGET,
                &format!("iqn.2026-11.org.rustgt.test:a{i}"),
                i,
            )
        })
        .collect();
    let moved = Daemon::start_with_config(
        &config(&format!(
            "[targets.redirect]\nto = [\"{},1\", \"{},1\"]\nmetrics = [\"{ma}\", \"{mb}\"]\n",
            a.portal, b.portal
        )),
        1,
    );
    wait_log(&moved, "redirect gateway load read", 2);

    // a holds 4 sessions, b none: in turn, a would get every other one.
    let landed: Vec<usize> = (0..3).map(|_| inq_lands_on(&moved, [&a, &b])).collect();
    assert_eq!(landed, [1, 1, 1], "a has 4 sessions, b none");

    // b now holds 8: once read (every second), logins go to a.
    let held_b: Vec<Session> = (0..8)
        .map(|i| {
            Session::login(
                b.portal,
                TARGET,
                &format!("iqn.2026-11.org.rustgt.test:b{i}"),
                i,
            )
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let landed: Vec<usize> = (0..3).map(|_| inq_lands_on(&moved, [&a, &b])).collect();
    assert_eq!(landed, [0, 0, 0], "a has 4 sessions, b 8");

    // a gone: its load is unreadable, so b gets the logins though it has
    // more sessions.
    drop(held_a);
    let _ = a.stop();
    wait_log(&moved, "redirect gateway load unreadable", 1);
    let url = format!("iscsi://{}/{TARGET}/0", moved.portal);
    let before = b.stderr().matches("login complete").count();
    for _ in 0..2 {
        let out = run_tool(
            "iscsi-inq",
            std::slice::from_ref(&url),
            Duration::from_secs(60),
        );
        assert!(out.success(), "iscsi-inq with a down: {}", out.stderr);
    }
    assert_eq!(b.stderr().matches("login complete").count(), before + 2);
    drop(held_b);
}
