//! Black-box: the daemon-wide budget of write data buffers (`[limits]
//! data_buffer_bytes`, `data_out_timeout_secs`), over real sockets on
//! 127.0.0.1 against the real daemon with its default target.
//!
//! Four sessions (InitialR2T=Yes) each send 128 WRITE(16) commands of
//! 32 MiB and answer every R2T but the one that ends each command, so
//! every write they are let start is held open. With a 256 MiB budget:
//! - the daemon's resident memory grows by less than the budget plus
//!   128 MiB (without the budget it would be 4 x 4 GiB);
//! - a fifth session's writes and reads complete meanwhile;
//! - each holding connection is closed within the Data-Out timeout (plus
//!   slack) after its last Data-Out, and nothing panics;
//! - once they are gone the budget's use is back to 0 in `status`.
//!
//! Every loop is bounded in count and time.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use admin_common::Admin;
use common::{rss_kib, Daemon, DaemonOptions, DEFAULT_IQN};
use initiator::{rw16, Closed, Session};
use rustgt_iscsi::pdu::{encode_lun, Reply};
use serde_json::{json, Value};

const BUDGET_MIB: u64 = 256;
const TIMEOUT_SECS: u64 = 5;
const WRITE_LEN: u32 = 32 << 20;
const WRITES: usize = 128;
const HOLDERS: usize = 4;
/// Resident memory the daemon may add beyond the budget.
const OVERHEAD_MIB: u64 = 128;
/// Bound of every wait in the test.
const SETTLE: Duration = Duration::from_secs(60);

fn data_buffers(a: &mut Admin) -> Value {
    a.ok(json!({"cmd": "status"}))["data_buffers"].clone()
}

/// What one holding session saw.
struct Held {
    /// R2Ts answered, and R2Ts left unanswered (the last of a command).
    answered: usize,
    held: usize,
    /// SCSI Responses to its writes (none is expected: none completes).
    responses: usize,
    last_data: Instant,
    closed_at: Option<Instant>,
}

/// Sends the writes, answers every R2T but the last of each command, and
/// reads until the target closes the connection (bounded by SETTLE).
fn hold(mut s: Session, data: Arc<Vec<u8>>, closed: Arc<AtomicBool>) -> Held {
    let blocks = WRITE_LEN / 512;
    for _ in 0..WRITES {
        s.start_write(0, &rw16(0x8a, 0, blocks), WRITE_LEN);
    }
    let raw_lun = encode_lun(0);
    let mut h = Held {
        answered: 0,
        held: 0,
        responses: 0,
        last_data: Instant::now(),
        closed_at: None,
    };
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        match s.wire().try_recv(Duration::from_millis(200)) {
            Ok(Some(Reply::R2t(r))) => {
                if u64::from(r.buffer_offset) + u64::from(r.desired_len) < u64::from(WRITE_LEN) {
                    s.answer_r2t(&r, raw_lun, &data);
                    h.answered += 1;
                    h.last_data = Instant::now();
                } else {
                    h.held += 1;
                }
            }
            Ok(Some(Reply::ScsiResponse(_))) => h.responses += 1,
            Ok(_) => {}
            Err(Closed) => {
                h.closed_at = Some(Instant::now());
                closed.store(true, Ordering::SeqCst);
                break;
            }
        }
    }
    h
}

#[test]
fn held_writes_stay_within_the_budget_and_others_keep_flowing() {
    let d = Daemon::start_with(DaemonOptions {
        env: vec![
            (
                "RUSTGT_LIMITS__DATA_BUFFER_BYTES".to_owned(),
                format!("{BUDGET_MIB}M"),
            ),
            (
                "RUSTGT_LIMITS__DATA_OUT_TIMEOUT_SECS".to_owned(),
                TIMEOUT_SECS.to_string(),
            ),
        ],
        ..DaemonOptions::default()
    });
    let pid = d.pid().expect("daemon running");
    let mut admin = Admin::connect(&d);
    assert_eq!(
        data_buffers(&mut admin)["budget_bytes"],
        BUDGET_MIB << 20,
        "the configured budget"
    );

    // Log everyone in first, and let the fifth session settle, so the
    // memory measured is that of the writes.
    let holders: Vec<Session> = (0..HOLDERS)
        .map(|i| {
            let name = format!("iqn.2026-12.org.rustgt:holder{i}");
            Session::login(d.portal, DEFAULT_IQN, &name, [0x80, 0, 0, 0, 0, i as u8])
        })
        .collect();
    let mut other = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-12.org.rustgt:other",
        [0x80, 0, 0, 0, 1, 0],
    );
    other.clear_unit_attentions(0);
    let idle_kib = rss_kib(pid);

    let data = Arc::new(vec![0u8; WRITE_LEN as usize]);
    let closed = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle_kib));
    let sampler = {
        let (done, peak) = (Arc::clone(&done), Arc::clone(&peak));
        thread::spawn(move || {
            let deadline = Instant::now() + SETTLE * 2;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let threads: Vec<_> = holders
        .into_iter()
        .map(|s| {
            let (data, closed) = (Arc::clone(&data), Arc::clone(&closed));
            thread::spawn(move || hold(s, data, closed))
        })
        .collect();

    // Wait until the holders sit on their writes and the rest of theirs
    // wait for room.
    let deadline = Instant::now() + SETTLE;
    loop {
        let b = data_buffers(&mut admin);
        let used = b["used_bytes"].as_u64().unwrap_or(0);
        let waiting = b["waiting_connections"].as_u64().unwrap_or(0);
        if used >= (HOLDERS as u64) * u64::from(WRITE_LEN) && waiting >= 1 {
            assert!(used <= BUDGET_MIB << 20, "over budget: {b}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the holders never filled the budget: {b}"
        );
        thread::sleep(Duration::from_millis(20));
    }

    // Meanwhile a fifth session writes and reads.
    let started = Instant::now();
    for i in 0..8u64 {
        let payload: Vec<u8> = (0..1u32 << 20)
            .map(|b| (b as u8) ^ (i as u8).wrapping_mul(37))
            .collect();
        let lba = 4096 + i * 2048;
        let w = other.command(0, &rw16(0x8a, lba, 2048), &payload, 0);
        assert!(w.is_good(), "write {i} while the budget is held: {w}");
        let r = other.command(0, &rw16(0x88, lba, 2048), &[], 1 << 20);
        assert!(r.is_good(), "read {i} while the budget is held: {r}");
        assert!(r.data == payload, "read {i} returned other data");
    }
    let other_took = started.elapsed();
    assert!(
        !closed.load(Ordering::SeqCst),
        "a holder was closed before the fifth session was done ({other_took:?})"
    );

    let held: Vec<Held> = threads
        .into_iter()
        .map(|t| t.join().expect("holder thread"))
        .collect();
    done.store(true, Ordering::SeqCst);
    sampler.join().expect("sampler");
    let peak_kib = peak.load(Ordering::SeqCst);

    for (i, h) in held.iter().enumerate() {
        assert!(h.held >= 1, "holder {i} was never let start a write");
        assert_eq!(h.responses, 0, "holder {i}: a held write completed");
        let closed_at = h
            .closed_at
            .unwrap_or_else(|| panic!("holder {i} was never closed"));
        let after = closed_at.duration_since(h.last_data);
        assert!(
            after <= Duration::from_secs(TIMEOUT_SECS + 5),
            "holder {i} closed {after:?} after its last Data-Out"
        );
    }
    let grown_mib = peak_kib.saturating_sub(idle_kib) / 1024;
    eprintln!(
        "RSS idle {idle_kib} KiB, peak {peak_kib} KiB (+{grown_mib} MiB); fifth session's 8 writes and reads took {other_took:?}; R2Ts answered {:?}",
        held.iter().map(|h| h.answered).collect::<Vec<_>>()
    );
    assert!(
        grown_mib < BUDGET_MIB + OVERHEAD_MIB,
        "RSS grew by {grown_mib} MiB, more than the budget ({BUDGET_MIB} MiB) + {OVERHEAD_MIB} MiB"
    );

    // The memory is given back to the budget.
    let deadline = Instant::now() + SETTLE;
    loop {
        let b = data_buffers(&mut admin);
        if b["used_bytes"] == 0 && b["waiting_connections"] == 0 {
            assert!(
                b["data_out_timeouts"].as_u64().unwrap_or(0) >= HOLDERS as u64,
                "{b}"
            );
            assert!(b["waits"].as_u64().unwrap_or(0) >= 1, "{b}");
            break;
        }
        assert!(Instant::now() < deadline, "budget still in use: {b}");
        thread::sleep(Duration::from_millis(20));
    }
    // And the fifth session still works.
    let r = other.command(0, &rw16(0x88, 4096, 8), &[], 4096);
    assert!(r.is_good(), "read after the holders left: {r}");
    let stderr = d.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains("within the Data-Out timeout"),
        "the closes are logged"
    );
}

/// A write larger than the whole budget still runs (alone, one burst at a
/// time), and several sessions' writes larger than their shares all
/// complete: they wait for room, never fail.
#[test]
fn writes_larger_than_the_budget_or_the_share_complete() {
    let d = Daemon::start_with(DaemonOptions {
        env: vec![(
            "RUSTGT_LIMITS__DATA_BUFFER_BYTES".to_owned(),
            "4M".to_owned(),
        )],
        ..DaemonOptions::default()
    });
    let threads: Vec<_> = (0..3u8)
        .map(|i| {
            let portal = d.portal;
            thread::spawn(move || {
                let name = format!("iqn.2026-12.org.rustgt:big{i}");
                let mut s = Session::login(portal, DEFAULT_IQN, &name, [0x80, 0, 0, 2, 0, i]);
                s.clear_unit_attentions(0);
                for round in 0..3u64 {
                    let len: usize = if round == 0 { 8 << 20 } else { 3 << 20 };
                    let payload: Vec<u8> = (0..len).map(|b| (b as u8) ^ i ^ round as u8).collect();
                    let lba = u64::from(i) * 65536 + round * 32768;
                    let blocks = u32::try_from(len / 512).expect("blocks");
                    let w = s.command(0, &rw16(0x8a, lba, blocks), &payload, 0);
                    assert!(w.is_good(), "session {i} write {round}: {w}");
                    let r = s.command(0, &rw16(0x88, lba, blocks), &[], len as u32);
                    assert!(r.is_good(), "session {i} read {round}: {r}");
                    assert!(r.data == payload, "session {i} read {round}: other data");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("session thread");
    }
    let mut admin = Admin::connect(&d);
    let b = data_buffers(&mut admin);
    assert_eq!(b["used_bytes"], 0, "{b}");
    let stderr = d.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
}
