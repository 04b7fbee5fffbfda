//! Login redirection, black-box with libiscsi: a daemon whose target has
//! `[targets.redirect]` answers logins with TARGET MOVED and the other
//! daemon's portal; `iscsi-inq` through the redirecting portal follows it
//! and gets its answer from the daemon it was sent to, which logs the
//! login, while the redirecting daemon logs a redirect and no session.
//! Discovery through the redirecting portal still lists the target.

mod common;

use std::time::Duration;

use common::{run_tool, Daemon};

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
