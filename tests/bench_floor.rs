//! `rustgt bench floor`, the reference responder of the paced benchmark,
//! driven by `rustgt bench load` over loopback: it holds a paced load of
//! reads and writes with no errors, answers a 1 MiB read in Data-In PDUs
//! the initiator takes, refuses a write it cannot take with CHECK
//! CONDITION, closes a connection that sends garbage while it serves the
//! others, serves connections that queued while it had no file descriptor
//! left once one frees, and listens on loopback addresses only; over epoll
//! and over io_uring (`--io-uring`) alike.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{bench_load_json, run_tool};

const BIN: &str = env!("CARGO_BIN_EXE_rustgt");

/// A running `rustgt bench floor` on an ephemeral loopback port.
struct Floor {
    child: Child,
    addr: String,
}

/// The floor's two drivers: epoll readiness and io_uring.
const MODES: [&[&str]; 2] = [&[], &["--io-uring"]];

impl Floor {
    fn start(mode: &[&str]) -> Floor {
        Floor::spawn(
            Command::new(BIN)
                .args(["bench", "floor", "--listen", "127.0.0.1:0"])
                .args(mode),
        )
    }

    /// The floor with at most `nofile` file descriptors (`ulimit -n`).
    fn start_with_nofile(nofile: u32, mode: &[&str]) -> Floor {
        Floor::spawn(
            Command::new("sh")
                .args([
                    "-c",
                    &format!(
                        "ulimit -n {nofile} && exec \"$0\" bench floor --listen 127.0.0.1:0 \"$@\""
                    ),
                    BIN,
                ])
                .args(mode),
        )
    }

    fn spawn(cmd: &mut Command) -> Floor {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rustgt bench floor");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the floor says where it listens");
        let addr = line
            .trim()
            .strip_prefix("rustgt bench floor: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Floor { child, addr }
    }

    fn url(&self) -> String {
        format!("iscsi://{}/iqn.2026-11.org.rustgt:floor/0", self.addr)
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn load(&self, extra: &[&str]) -> serde_json::Value {
        bench_load_json(&self.url(), extra)
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_clean(r: &serde_json::Value) {
    assert_eq!(r["error_count"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
}

#[test]
fn the_floor_holds_a_paced_load_of_reads_and_writes() {
    for mode in MODES {
        eprintln!("floor {mode:?}");
        the_floor_holds_a_paced_load_of_reads_and_writes_on(mode);
    }
}

fn the_floor_holds_a_paced_load_of_reads_and_writes_on(mode: &[&str]) {
    let f = Floor::start(mode);
    let pid = f.pid();
    for rw in ["read", "write"] {
        let r = f.load(&[
            "--sessions",
            "4",
            "--rate",
            "250",
            "--seconds",
            "1",
            "--warmup",
            "0.5",
            "--rw",
            rw,
            "--pid",
            &pid,
        ]);
        assert_clean(&r);
        let iops = r["iops"].as_f64().expect("iops");
        assert!(
            (900.0..=1100.0).contains(&iops),
            "{rw}: {iops} of 1000: {r}"
        );
        assert_eq!(
            r["pids"][0]["pid"].as_u64().map(|v| v.to_string()),
            Some(pid.clone()),
            "{r}"
        );
    }
    // 1 MiB reads: Data-In PDUs within the initiator's segment length, in
    // order, the last with status.
    let r = f.load(&[
        "--sessions",
        "1",
        "--qd",
        "4",
        "--bs",
        "1m",
        "--seconds",
        "1",
        "--rw",
        "read",
    ]);
    assert_clean(&r);
    assert!(r["reads"].as_u64().is_some_and(|n| n > 0), "{r}");
}

#[test]
fn a_write_beyond_its_immediate_data_gets_check_condition() {
    for mode in MODES {
        eprintln!("floor {mode:?}");
        a_write_beyond_its_immediate_data_gets_check_condition_on(mode);
    }
}

fn a_write_beyond_its_immediate_data_gets_check_condition_on(mode: &[&str]) {
    let f = Floor::start(mode);
    // 256 KiB writes carry 64 KiB of immediate data (FirstBurstLength);
    // the floor sends no R2T and refuses them, ILLEGAL REQUEST / INVALID
    // FIELD IN CDB.
    let r = f.load(&[
        "--sessions",
        "1",
        "--rate",
        "20",
        "--bs",
        "256k",
        "--rw",
        "write",
        "--seconds",
        "1",
    ]);
    assert!(
        r["errors"]["status 0x02 sense 5/24/00"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{r}"
    );
    assert_eq!(
        r["transport_errors"].as_array().map(Vec::len),
        Some(0),
        "{r}"
    );
}

#[test]
fn garbage_closes_that_connection_and_the_floor_serves_on() {
    for mode in MODES {
        eprintln!("floor {mode:?}");
        garbage_closes_that_connection_and_the_floor_serves_on_on(mode);
    }
}

fn garbage_closes_that_connection_and_the_floor_serves_on_on(mode: &[&str]) {
    let f = Floor::start(mode);
    // A header declaring a data segment larger than the floor takes, and
    // one of an opcode no initiator sends.
    let mut unknown = [0u8; 48];
    unknown[0] = 0x3f;
    for junk in [&[0x3f_u8; 96][..], &unknown[..]] {
        let mut s = TcpStream::connect(&f.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(junk).expect("send");
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).expect("the floor closes, not hangs");
        assert_eq!(n, 0, "expected the connection closed, got {n} bytes");
    }
    let r = f.load(&[
        "--sessions",
        "2",
        "--rate",
        "100",
        "--seconds",
        "1",
        "--rw",
        "read",
    ]);
    assert_clean(&r);
}

/// Sends a login request on `s` and waits up to `wait` for a Login
/// Response: whether one came.
fn login_answered(s: &mut TcpStream, wait: Duration) -> bool {
    use rustgt_iscsi::pdu::{Reply, Stage};
    use rustgt_test_initiator::pdu::{login_request, LoginIds};
    let ids = LoginIds {
        isid: [0x80, 0, 0, 0, 0, 1],
        tsih: 0,
        itt: 1,
        cid: 1,
        cmd_sn: 1,
        exp_stat_sn: 0,
    };
    let keys = [
        ("InitiatorName", "iqn.2026-12.org.rustgt:floor-test"),
        ("TargetName", "iqn.2026-11.org.rustgt:floor"),
        ("SessionType", "Normal"),
        ("AuthMethod", "None"),
    ];
    let pdu = login_request(ids, Stage::SECURITY, Stage::FULL_FEATURE, true, &keys);
    s.write_all(&pdu.encode(false, false))
        .expect("send a login");
    s.set_read_timeout(Some(wait)).expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if let Ok((r, _)) = Reply::decode(&got, false, false) {
            return matches!(r, Reply::LoginResponse(_));
        }
    }
}

#[test]
fn connections_queued_while_descriptors_ran_out_are_served_once_one_frees() {
    for mode in MODES {
        eprintln!("floor {mode:?}");
        connections_queued_while_descriptors_ran_out_are_served_once_one_frees_on(mode);
    }
}

fn connections_queued_while_descriptors_ran_out_are_served_once_one_frees_on(mode: &[&str]) {
    // Descriptors 0-2, the epoll and the listener leave five for
    // connections, fewer if the floor inherited some: connect until one
    // is not answered, for want of a descriptor to accept it with.
    let f = Floor::start_with_nofile(10, mode);
    let mut served: Vec<TcpStream> = Vec::new();
    let mut queued = loop {
        assert!(served.len() < 10, "the floor never ran out of descriptors");
        let mut s = TcpStream::connect(&f.addr).expect("connect (the kernel queues it)");
        if login_answered(&mut s, Duration::from_secs(2)) {
            served.push(s);
        } else {
            break s;
        }
    };
    assert!(!served.is_empty(), "not one connection served");
    // One served connection goes: its descriptor lets the queued one in
    // (its login already sent), with no new connection arriving to wake
    // the listener.
    drop(served.remove(0));
    queued
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    let n = queued.read(&mut buf).unwrap_or(0);
    assert!(
        n > 0,
        "the queued connection's login was never answered after a descriptor freed"
    );
}

#[test]
fn the_floor_listens_on_loopback_only() {
    let out = run_tool(
        BIN,
        &[
            "bench".to_owned(),
            "floor".to_owned(),
            "--listen".to_owned(),
            "192.0.2.1:3299".to_owned(),
        ],
        Duration::from_secs(20),
    );
    assert!(!out.success(), "{}", out.stdout);
    assert!(
        out.stderr.contains("loopback addresses only"),
        "{}",
        out.stderr
    );
}
