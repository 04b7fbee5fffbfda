//! Targets behind their own portals (issue 14 item 6): a target is
//! reachable and discoverable only through the portals it lists, and a
//! change of its portals over the admin socket takes effect for the next
//! login. Checked with libiscsi's iscsi-inq and iscsi-ls against the real
//! daemon listening on two loopback portals.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::net::SocketAddr;

use admin_common::Admin;
use common::{run_tool, Daemon, DaemonOptions, ToolOutput, TOOL_TIMEOUT};
use serde_json::json;

const A: &str = "iqn.2026-11.org.rustgt:portal-a";
const B: &str = "iqn.2026-11.org.rustgt:portal-b";
/// Shares A's portal, so that portal stays open when A leaves it.
const C: &str = "iqn.2026-11.org.rustgt:portal-c";

fn config() -> String {
    let lun = "[[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n";
    format!(
        "[[targets]]\niqn = \"{A}\"\nportals = [\"127.0.0.1:0\"]\n{lun}\
         [[targets]]\niqn = \"{B}\"\nportals = [\"127.0.0.2:0\"]\n{lun}\
         [[targets]]\niqn = \"{C}\"\nportals = [\"127.0.0.1:0\"]\n{lun}"
    )
}

/// The portal a target's start-up URL names.
fn portal_of(d: &Daemon, iqn: &str) -> SocketAddr {
    d.urls
        .iter()
        .find_map(|u| {
            let rest = u.strip_prefix("iscsi://")?;
            let (portal, path) = rest.split_once('/')?;
            path.starts_with(&format!("{iqn}/"))
                .then(|| portal.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no URL for {iqn} in {:?}", d.urls))
}

fn inq(portal: SocketAddr, iqn: &str) -> ToolOutput {
    run_tool(
        "iscsi-inq",
        &args![format!("iscsi://{portal}/{iqn}/0")],
        TOOL_TIMEOUT,
    )
}

fn assert_reachable(d: &Daemon, portal: SocketAddr, iqn: &str) {
    let out = inq(portal, iqn);
    assert!(
        out.success() && out.stdout.lines().any(|l| l.starts_with("Vendor:RUSTGT")),
        "{iqn} should answer through {portal}: {out}\n{}",
        d.stderr_tail(10)
    );
}

/// Refused as not served here (not for some other reason: the daemon
/// says why).
fn assert_fenced(d: &Daemon, portal: SocketAddr, iqn: &str) {
    let before = fenced_count(d);
    inq(portal, iqn).assert_failure();
    assert!(
        fenced_count(d) > before,
        "{iqn} through {portal} should be refused as not served there:\n{}",
        d.stderr_tail(10)
    );
}

fn fenced_count(d: &Daemon) -> usize {
    d.stderr()
        .lines()
        .filter(|l| l.contains("target not served on this portal") && l.contains("0x0203"))
        .count()
}

/// The targets SendTargets lists on `portal`, with their addresses.
fn discover(portal: SocketAddr) -> Vec<String> {
    let out = run_tool(
        "iscsi-ls",
        &args![format!("iscsi://{portal}")],
        TOOL_TIMEOUT,
    );
    out.assert_success();
    let mut lines: Vec<String> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("Target:"))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn targets_are_reachable_and_discoverable_only_through_their_own_portals() {
    let d = Daemon::start_with(DaemonOptions {
        config: Some(config()),
        targets: Some(3),
        keep_portals: true,
        ..DaemonOptions::default()
    });
    let pa = portal_of(&d, A);
    let pb = portal_of(&d, B);
    assert_eq!(portal_of(&d, C), pa);
    assert_ne!(pa, pb);

    assert_reachable(&d, pa, A);
    assert_reachable(&d, pb, B);
    assert_reachable(&d, pa, C);
    assert_fenced(&d, pb, A);
    assert_fenced(&d, pa, B);
    assert_fenced(&d, pb, C);

    assert_eq!(
        discover(pa),
        [
            format!("Target:{A} Portal:{pa},1"),
            format!("Target:{C} Portal:{pa},1")
        ]
    );
    assert_eq!(discover(pb), [format!("Target:{B} Portal:{pb},1")]);

    // A moves from pa to pb over the admin socket: the next logins and
    // discoveries see it at once.
    let mut admin = Admin::connect(&d);
    admin.ok(json!({"cmd": "add_portal", "target": A, "portal": pb.to_string()}));
    assert_reachable(&d, pb, A);
    admin.ok(json!({"cmd": "remove_portal", "target": A, "portal": pa.to_string()}));
    assert_fenced(&d, pa, A);
    assert_reachable(&d, pb, A);
    // pa still serves C.
    assert_reachable(&d, pa, C);
    assert_eq!(discover(pa), [format!("Target:{C} Portal:{pa},1")]);
    assert_eq!(
        discover(pb),
        [
            format!("Target:{A} Portal:{pb},1"),
            format!("Target:{B} Portal:{pb},1")
        ]
    );
}
