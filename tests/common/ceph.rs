//! Shared helpers of the tests on a Ceph cluster (tests/rbd*.rs): the
//! cluster from `tests/ceph/with-cluster`, images of a test's own, and a
//! gateway of a two-gateway pair.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::Duration;

use crate::common::{run_tool, Daemon, DEFAULT_IQN};

pub const TOOL: Duration = Duration::from_secs(60);

/// The cluster's ceph.conf, from `tests/ceph/with-cluster`; without it
/// the test fails and says how to run it (never a silent pass).
pub fn ceph_conf() -> String {
    std::env::var("RUSTGT_CEPH_CONF").unwrap_or_else(|_| {
        panic!(
            "RUSTGT_CEPH_CONF is not set: these tests need a Ceph cluster; run them with \
             `tests/ceph/with-cluster cargo test --features rustgt/rbd --test rbd` \
             (or rbd_gateways, rbd_gateways_raw; tests/run does)"
        )
    })
}

/// Runs the `rbd` tool against the test cluster and asserts it succeeded.
pub fn rbd(args: &[&str]) -> String {
    let mut all = vec!["--conf".to_owned(), ceph_conf()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let out = run_tool("rbd", &all, TOOL);
    out.assert_success();
    out.stdout
}

/// An image of the test's own, removed on drop.
pub struct Image {
    pub name: String,
}

impl Image {
    pub fn create(test: &str, size_mib: u64) -> Image {
        let name = format!("{test}-{}", std::process::id());
        // A leftover of an earlier, killed run of the same pid.
        let _ = run_tool(
            "rbd",
            &[
                "--conf".into(),
                ceph_conf(),
                "rm".into(),
                format!("rbd/{name}"),
            ],
            TOOL,
        );
        rbd(&[
            "create",
            "--size",
            &format!("{size_mib}M"),
            &format!("rbd/{name}"),
        ]);
        Image { name }
    }

    pub fn spec(&self) -> String {
        format!("rbd/{}", self.name)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = run_tool(
            "rbd",
            &["--conf".into(), ceph_conf(), "rm".into(), self.spec()],
            TOOL,
        );
    }
}

/// Gateway `tpgt` (1 = A, 2 = B) of a pair on `image` (`port_groups =
/// [1, 2]`), on a fresh data directory; asserts it runs in gateway mode.
pub fn gateway(image: &Image, tpgt: u16) -> Daemon {
    gateway_with(image, tpgt, "")
}

/// [`gateway`] with `rbd_extra` (TOML lines) added to its
/// `[targets.luns.rbd]` table.
pub fn gateway_with(image: &Image, tpgt: u16, rbd_extra: &str) -> Daemon {
    gateway_lun(image, tpgt, "", rbd_extra)
}

/// [`gateway_with`] with `lun_extra` (TOML lines) added to the LUN's own
/// table (`alua = "explicit"`, ...).
pub fn gateway_lun(image: &Image, tpgt: u16, lun_extra: &str, rbd_extra: &str) -> Daemon {
    let toml = format!(
        "[[targets]]\niqn = \"{DEFAULT_IQN}\"\nportals = [\"127.0.0.1:0\"]\ntpgt = {tpgt}\n\
         port_groups = [1, 2]\n\n\
         [[targets.luns]]\nid = 0\nbackstore = \"rbd\"\nblock_size = 512\n{lun_extra}\n\
         [targets.luns.rbd]\npool = \"rbd\"\nimage = \"{}\"\nceph_conf = \"{}\"\n{rbd_extra}",
        image.name,
        ceph_conf()
    );
    let d = Daemon::start_with_config(&toml, 1);
    // The daemon logs it before it says it listens, but on stderr, which
    // another thread of the test collects: wait for that thread (bounded:
    // 500 x 20 ms), not for the daemon.
    let mut tries = 0;
    while !d.stderr().contains("rbd gateway mode") && tries < 500 {
        std::thread::sleep(Duration::from_millis(20));
        tries += 1;
    }
    assert!(
        d.stderr().contains("rbd gateway mode"),
        "gateway {tpgt} is not in gateway mode: {}",
        d.stderr_tail(20)
    );
    d
}

/// Runs the `ceph` tool against the test cluster and asserts it succeeded.
pub fn ceph(args: &[&str]) -> String {
    let mut all = vec!["--conf".to_owned(), ceph_conf()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let out = run_tool("ceph", &all, TOOL);
    out.assert_success();
    out.stdout
}
