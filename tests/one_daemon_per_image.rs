//! One daemon per image: a second daemon on the same data directory, admin
//! socket or image, a second LUN on one image in one configuration, and a
//! LUN added live on an image another LUN serves are refused with an error
//! that names the image (or directory, or socket), before any portal is
//! bound; the first daemon goes on serving I/O.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use admin_common::cli;
use common::{run_tool, Daemon, DEFAULT_IQN, TOOL_TIMEOUT};

/// How long a refused daemon may take to exit.
const EXIT_WITHIN: Duration = Duration::from_secs(30);

/// Runs `rustgt` with `args`, its portal on an address this test holds
/// bound, expects it to exit with an error within [`EXIT_WITHIN`] and
/// returns its stderr. Had it tried to bind its portal before refusing,
/// its error would be that it cannot listen there.
fn refused(args: &[&str]) -> String {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let portal = taken.local_addr().expect("address").to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rustgt"))
        .args(["--listen", portal.as_str(), "--log", "info"])
        .args(args)
        .env_remove("RUSTGT_CONFIG")
        .env_remove("RUSTGT_DATA_DIR")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rustgt");
    let deadline = Instant::now() + EXIT_WITHIN;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("a second daemon was not refused within {EXIT_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !status.success(),
        "refused daemon exited 0\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("cannot listen") && !stdout.contains("listening on"),
        "no portal may be bound before the refusal\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    drop(taken);
    stderr
}

fn write_config(dir: &Path, body: &str) -> String {
    let path = dir.join("rustgt.toml");
    std::fs::write(&path, body).expect("config");
    path.display().to_string()
}

/// The first daemon's default LUN still answers: INQUIRY and a write and
/// read-back through libiscsi.
fn still_serves(d: &Daemon) {
    let url = d.url(DEFAULT_IQN, 0);
    let inq = run_tool("iscsi-inq", &[url], TOOL_TIMEOUT);
    inq.assert_success();
    let mut s = admin_common::Session::login(d.portal, DEFAULT_IQN, "iqn.2026-12.org.test:img", 1);
    s.settle(0);
    let block = [0x5au8; 512];
    assert_eq!(
        s.write(0, 7, &block).status,
        0,
        "write on the first daemon\n{}",
        d.stderr_tail(20)
    );
    let back = s.read(0, 7, 1);
    assert_eq!(back.status, 0);
    assert_eq!(back.data, block, "read back on the first daemon");
}

#[test]
fn a_second_daemon_on_the_same_image_data_dir_or_socket_is_refused() {
    let first = Daemon::start();
    let image = first.data_dir().join("lun0.img");
    assert!(image.exists(), "the default LUN's image");
    let image_text = image.display().to_string();

    // The same data directory: refused before anything is opened.
    let err = refused(&["--data-dir", &first.data_dir().display().to_string()]);
    assert!(
        err.contains(&first.data_dir().display().to_string()) && err.contains("another rustgt"),
        "the error names the data directory:\n{err}"
    );

    // Another data directory, the same image: refused, naming it.
    let other = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        other.path(),
        &format!(
            "data_dir = \"{}\"\n\
             [[targets]]\niqn = \"iqn.2026-12.org.test:second\"\n\
             [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"{image_text}\"\n",
            other.path().join("data").display()
        ),
    );
    let err = refused(&["--config", &config]);
    assert!(
        err.contains(&image_text) && err.contains("another process"),
        "the error names the image:\n{err}"
    );
    // Read-only, too: the first daemon writes to it.
    let ro = write_config(
        other.path(),
        &format!(
            "data_dir = \"{}\"\n\
             [[targets]]\niqn = \"iqn.2026-12.org.test:second\"\n\
             [[targets.luns]]\nid = 0\nbackstore = \"mmap\"\nread_only = true\npath = \"{image_text}\"\n",
            other.path().join("data").display()
        ),
    );
    let err = refused(&["--config", &ro]);
    assert!(err.contains(&image_text), "read-only LUN refused:\n{err}");

    // Its admin socket: refused, naming it.
    let socket = first.data_dir().join("admin.sock");
    let sock_cfg = write_config(
        other.path(),
        &format!(
            "data_dir = \"{}\"\nadmin_socket = \"{}\"\n",
            other.path().join("data2").display(),
            socket.display()
        ),
    );
    let err = refused(&["--config", &sock_cfg]);
    assert!(
        err.contains(&socket.display().to_string()),
        "the error names the admin socket:\n{err}"
    );

    still_serves(&first);
    assert!(first.exit_status().is_none(), "the first daemon runs on");
}

#[test]
fn two_luns_on_one_image_are_refused_at_start_and_when_added_live() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let image = scratch.path().join("shared.img");
    std::fs::write(&image, vec![0u8; 1 << 20]).expect("image");
    let image_text = image.display().to_string();
    let two_luns = |first: &str, second: &str| {
        write_config(
            scratch.path(),
            &format!(
                "data_dir = \"{}\"\n\
                 [[targets]]\niqn = \"iqn.2026-12.org.test:a\"\n\
                 [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"{first}\"\n\
                 [[targets.luns]]\nid = 3\nbackstore = \"file\"\npath = \"{second}\"\n",
                scratch.path().join("data").display()
            ),
        )
    };
    // The same path twice: the configuration check names both keys.
    let err = refused(&["--config", &two_luns(&image_text, &image_text)]);
    for needle in [image_text.as_str(), "luns[0]", "luns[1]"] {
        assert!(err.contains(needle), "the error names {needle:?}:\n{err}");
    }
    // The same image under another name (a symbolic link): the image
    // lock names it and both LUNs.
    let link = scratch.path().join("alias.img");
    std::os::unix::fs::symlink(&image, &link).expect("symlink");
    let link_text = link.display().to_string();
    let err = refused(&["--config", &two_luns(&image_text, &link_text)]);
    for needle in [link_text.as_str(), "iqn.2026-12.org.test:a LUN 0", "LUN 3"] {
        assert!(err.contains(needle), "the error names {needle:?}:\n{err}");
    }

    // Live: `lun add` of a LUN on the image the default LUN serves.
    // (Under another name: the same path is the configuration check's.)
    let d = Daemon::start();
    let alias = scratch.path().join("lun0-alias.img");
    std::os::unix::fs::symlink(d.data_dir().join("lun0.img"), &alias).expect("symlink");
    let image = alias.display().to_string();
    let out = cli(
        &d,
        &[
            "lun",
            "add",
            DEFAULT_IQN,
            "5",
            "--backstore",
            "file",
            "--path",
            &image,
        ],
    );
    out.assert_failure();
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        text.contains(&image) && text.contains("LUN 0") && text.contains("LUN 5"),
        "the refusal names the image and both LUNs:\n{text}"
    );
    // A resize (a reopen of the same LUN's image while it runs) is not a
    // conflict.
    let out = cli(&d, &["lun", "resize", DEFAULT_IQN, "0", "2G"]);
    out.assert_success();
    still_serves(&d);
    drop(d);

    // Nor is a reload that reopens the image (SIGHUP, the size changed).
    let cfg = |size: &str| {
        format!(
            "[[targets]]\niqn = \"{DEFAULT_IQN}\"\n\
             [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"{{data_dir}}/lun0.img\"\nsize = \"{size}\"\n"
        )
    };
    let d = Daemon::start_with_config(&cfg("64M"), 1);
    let path = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    let body = cfg("128M").replace("{data_dir}", &d.data_dir().display().to_string());
    std::fs::write(&path, body).expect("rewrite config");
    let pid = d.pid().expect("running");
    // SAFETY: kill(2) has no memory effects; the pid is the daemon this
    // test started, which is still running.
    unsafe {
        libc::kill(libc::pid_t::try_from(pid).expect("pid"), libc::SIGHUP);
    }
    admin_common::eventually("SIGHUP applied", || {
        d.stderr().contains("SIGHUP: configuration")
    });
    assert!(
        d.stderr().contains("SIGHUP: configuration re-applied"),
        "{}",
        d.stderr_tail(20)
    );
    assert_eq!(
        std::fs::metadata(d.data_dir().join("lun0.img"))
            .map(|m| m.len())
            .ok(),
        Some(128 << 20),
        "reopened at the new size"
    );
    still_serves(&d);
}
