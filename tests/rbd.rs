//! Black-box: LUNs on Ceph RBD images (`backstore = "rbd"`, cargo feature
//! `rbd`), against a real Ceph cluster.
//!
//! The cluster comes from `tests/ceph/with-cluster`, which starts a
//! one-node cluster, exports `RUSTGT_CEPH_CONF` and always stops it;
//! tests/run runs this file that way. Without that variable every test
//! here fails and says how to run it (never a silent pass). Each test
//! works on an image of its own, created and removed with the `rbd` tool.
//!
//! What is checked:
//! - data written through rustgt is in the image (read back through a
//!   restarted daemon and, independently, with `rbd export`), and an
//!   unmapped range reads back as zeros;
//! - a resize made with `rbd resize` reaches the initiators as the new
//!   capacity and a CAPACITY DATA HAS CHANGED unit attention;
//! - while another client holds the image's exclusive lock, a WRITE gets
//!   CHECK CONDITION, NOT READY, ASYMMETRIC ACCESS STATE TRANSITION (never
//!   a silent success), and nothing of it reaches the image;
//! - an image that does not exist stops the daemon at start with an error
//!   that names it.
//!
//! The libiscsi suites on an RBD LUN run in the conformance matrix
//! (tests/conformance.rs, configuration `rbd`).

#![cfg(feature = "rbd")]

mod admin_common;
#[path = "common/ceph.rs"]
mod ceph;
mod common;
use rustgt_test_initiator as initiator;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ceph::{ceph_conf, rbd, Image, TOOL};
use common::{
    qemu_io, run_tool, verify, write_and_verify, Daemon, QemuTarget, Region, DEFAULT_IQN,
};
use initiator::{rw16, Session, CHECK_CONDITION, GOOD, READ_16, WRITE_16};

const MIB: u64 = 1 << 20;

fn config(image: &Image, extra: &str) -> String {
    format!(
        "[[targets]]\niqn = \"{DEFAULT_IQN}\"\nportals = [\"127.0.0.1:0\"]\n\n\
         [[targets.luns]]\nid = 0\nbackstore = \"rbd\"\nblock_size = 512\n{extra}\n\
         [targets.luns.rbd]\npool = \"rbd\"\nimage = \"{}\"\nceph_conf = \"{}\"\n",
        image.name,
        ceph_conf()
    )
}

fn start(image: &Image) -> Daemon {
    Daemon::start_with_config(&config(image, ""), 1)
}

/// A raw session on LUN 0, unit attentions of the login cleared.
fn login(d: &Daemon, initiator: &str, isid_tail: u8) -> Session {
    let mut s = Session::login(
        d.portal,
        DEFAULT_IQN,
        initiator,
        [0x80, 0, 0, 0, 0, isid_tail],
    );
    s.clear_unit_attentions(0);
    s
}

fn url(d: &Daemon) -> QemuTarget {
    QemuTarget::Url(d.url(DEFAULT_IQN, 0))
}

fn regions() -> Vec<Region> {
    vec![
        Region {
            offset: 0,
            len: 64 * 1024,
            pattern: 0x5a,
        },
        Region {
            offset: 3 * MIB + 512,
            len: 1536,
            pattern: 0xc3,
        },
        Region {
            offset: 4 * MIB - 4096,
            len: 8192,
            pattern: 0x17,
        },
        Region {
            offset: 60 * MIB,
            len: MIB,
            pattern: 0xe8,
        },
    ]
}

#[test]
fn on_ceph_writes_are_in_the_image_and_survive_a_restart() {
    let image = Image::create("persist", 64);
    let regions = regions();
    let d = start(&image);
    assert!(
        d.stderr().contains("the store's asynchronous API"),
        "the LUN's reads and writes do not go to librbd's asynchronous API: {}",
        d.stderr_tail(20)
    );
    // Built with rbd, the daemon's malloc is tcmalloc's (src/allocator.rs).
    assert!(
        d.stderr().contains("allocator=gperftools"),
        "the daemon's malloc is not tcmalloc's: {}",
        d.stderr_tail(20)
    );
    write_and_verify(&url(&d), &regions);
    // Deallocation (WRITE SAME with UNMAP) reads back as zeros, even for
    // less than an object and less than librbd's discard granularity.
    qemu_io(
        &url(&d),
        &[
            "write -P 0x99 8M 4096".into(),
            "write -z -u 8M 512".into(),
            "read -P 0 8M 512".into(),
            "read -P 0x99 8389120 3584".into(),
        ],
    );
    assert!(d.stop().success(), "daemon did not exit cleanly");

    let d = start(&image);
    verify(&url(&d), &regions);
    drop(d);

    // Independently of rustgt: the image's own bytes.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("export.img");
    rbd(&["export", &image.spec(), &path.to_string_lossy()]);
    common::assert_file_regions(&path, &regions);
}

/// `iscsi-readcapacity16`'s "Total size" of LUN 0.
fn capacity(d: &Daemon) -> u64 {
    let out = run_tool("iscsi-readcapacity16", &[d.url(DEFAULT_IQN, 0)], TOOL);
    out.assert_success();
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("Total size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Total size in {out}"))
}

#[test]
fn on_ceph_resize_elsewhere_reaches_the_initiators() {
    let image = Image::create("resize", 32);
    let d = start(&image);
    assert_eq!(capacity(&d), 32 * MIB);
    let mut s = login(&d, "iqn.2026-12.test:rbd-resize", 7);
    let before = s.command(0, &rw16(READ_16, 0, 1), &[], 512);
    assert_eq!(before.status, GOOD, "{before:?}");

    rbd(&["resize", "--size", "48M", &image.spec()]);
    // The watch delivers the change within moments; bounded wait.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = None;
    while Instant::now() < deadline {
        let r = s.command(0, &rw16(READ_16, 0, 1), &[], 512);
        if r.status == CHECK_CONDITION {
            last = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let ua = last.expect("no unit attention within 20 s of the resize");
    assert_eq!(
        ua.sense_code(),
        Some((0x06, 0x2a, 0x09)),
        "expected UNIT ATTENTION, CAPACITY DATA HAS CHANGED: {ua:?}"
    );
    assert_eq!(capacity(&d), 48 * MIB);
    // The new blocks are usable.
    let last_block = 48 * MIB / 512 - 1;
    let w = s.command(0, &rw16(WRITE_16, last_block, 1), &[0x42; 512], 0);
    assert_eq!(w.status, GOOD, "{w:?}");
    s.logout();
}

/// Holds the image's exclusive lock in another librbd client (python3-rbd,
/// which ceph-common brings) until dropped.
struct LockHolder {
    child: std::process::Child,
}

impl LockHolder {
    fn take(image: &Image) -> LockHolder {
        let script = format!(
            "import rados, rbd, sys\n\
             c = rados.Rados(conffile={conf:?}); c.connect()\n\
             io = c.open_ioctx('rbd'); im = rbd.Image(io, {name:?})\n\
             im.lock_acquire(rbd.RBD_LOCK_MODE_EXCLUSIVE)\n\
             print('locked', flush=True)\n\
             sys.stdin.read()\n\
             im.lock_release(); im.close(); io.close(); c.shutdown()\n",
            conf = ceph_conf(),
            name = image.name
        );
        let mut child = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut out = child.stdout.take().expect("stdout");
        let mut line = [0u8; 7];
        std::io::Read::read_exact(&mut out, &mut line).expect("lock holder did not start");
        assert_eq!(&line, b"locked\n");
        LockHolder { child }
    }
}

impl Drop for LockHolder {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn on_ceph_writes_while_another_client_holds_the_lock_are_refused_not_lost() {
    let image = Image::create("fenced", 16);
    let d = start(&image);
    let mut s = login(&d, "iqn.2026-12.test:rbd-fenced", 8);
    let w = s.command(0, &rw16(WRITE_16, 100, 1), &[0x11; 512], 0);
    assert_eq!(w.status, GOOD, "{w:?}");

    let holder = LockHolder::take(&image);
    let w = s.command(0, &rw16(WRITE_16, 100, 1), &[0x22; 512], 0);
    assert_eq!(
        w.status, CHECK_CONDITION,
        "a write past another owner's lock: {w:?}"
    );
    assert_eq!(
        w.sense_code(),
        Some((0x02, 0x04, 0x0a)),
        "expected NOT READY, ASYMMETRIC ACCESS STATE TRANSITION: {w:?}"
    );
    drop(holder);

    // The refused write left nothing behind; the lock comes back.
    let r = s.command(0, &rw16(READ_16, 100, 1), &[], 512);
    assert_eq!(r.status, GOOD, "{r:?}");
    assert_eq!(
        r.data,
        vec![0x11; 512],
        "the refused write reached the image"
    );
    // Once the other client has let go, writes go through again; the
    // transition sense tells an initiator to retry, and this one does,
    // within a bound, as librbd learns the lock is free.
    let deadline = Instant::now() + Duration::from_secs(20);
    let w = loop {
        let w = s.command(0, &rw16(WRITE_16, 100, 1), &[0x33; 512], 0);
        let transition = w.status == CHECK_CONDITION && w.sense_code() == Some((0x02, 0x04, 0x0a));
        if !transition || Instant::now() >= deadline {
            break w;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(w.status, GOOD, "write after the other client let go: {w:?}");
    let r = s.command(0, &rw16(READ_16, 100, 1), &[], 512);
    assert_eq!(
        r.data,
        vec![0x33; 512],
        "the write after the lock came back is not there"
    );
    s.logout();
}

#[test]
fn on_ceph_missing_image_stops_the_start_and_names_it() {
    let _ = ceph_conf();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("rustgt.toml");
    let missing = Image {
        name: format!("never-created-{}", std::process::id()),
    };
    std::fs::write(&cfg, config(&missing, "")).expect("config");
    std::mem::forget(missing);
    let out = Command::new(env!("CARGO_BIN_EXE_rustgt"))
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .stdin(Stdio::null())
        .output()
        .expect("run rustgt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started without its image: {stderr}");
    assert!(
        stderr.contains("rbd image rbd/never-created-") && stderr.contains("opening the image"),
        "the error does not name the image: {stderr}"
    );
}

#[test]
fn on_ceph_admin_adds_an_rbd_lun_to_a_running_daemon() {
    let image = Image::create("admin", 16);
    let d = Daemon::start_with_config(
        &format!(
            "[[targets]]\niqn = \"{DEFAULT_IQN}\"\nportals = [\"127.0.0.1:0\"]\n\n\
             [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n"
        ),
        1,
    );
    let conf = ceph_conf();
    let out = admin_common::cli(
        &d,
        &[
            "lun",
            "add",
            DEFAULT_IQN,
            "1",
            "--backstore",
            "rbd",
            "--rbd-image",
            &image.spec(),
            "--ceph-conf",
            &conf,
        ],
    );
    out.assert_success();
    let lun1 = QemuTarget::Url(d.url(DEFAULT_IQN, 1));
    let regions = [Region {
        offset: MIB,
        len: 64 * 1024,
        pattern: 0x6d,
    }];
    write_and_verify(&lun1, &regions);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("export.img");
    rbd(&["export", &image.spec(), &path.to_string_lossy()]);
    common::assert_file_regions(&path, &regions);
    // A malformed image spec is refused by the client, naming the option.
    let bad = admin_common::cli(
        &d,
        &[
            "lun",
            "add",
            DEFAULT_IQN,
            "2",
            "--backstore",
            "rbd",
            "--rbd-image",
            "no-pool",
        ],
    );
    bad.assert_failure();
    assert!(bad.stderr.contains("--rbd-image"), "{bad}");
}
