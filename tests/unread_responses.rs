//! Black-box: an initiator that keeps sending READs but never reads the
//! responses cannot make the daemon hold memory without bound. Over a real
//! socket on 127.0.0.1 against the real daemon with its default target:
//!
//! - one session sends immediate READ(16)s of 64 KiB (outside the CmdSN
//!   window, which bounds the others), 32 at a time every 2 ms
//!   (CmdSN rising, never reading a byte back) until the target stops
//!   taking them (a send blocks for 2 s) or 400,000 have gone (19 MB of
//!   commands, more than the socket buffers of both ends hold): without a
//!   bound that is 26 GB of Data-In; the target must stop taking them, and
//!   the daemon's resident memory must grow by less than 128 MiB;
//! - meanwhile another session's writes and reads complete and return
//!   their data;
//! - when the first initiator finally reads, its reads complete GOOD, and
//!   those past the bound of immediate commands in flight were refused
//!   with a Reject, reason 0x06 (RFC 7143 §11.17.1).
//!
//! Every loop is bounded in count and time.

mod common;
use rustgt_test_initiator as initiator;

use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{rss_kib, Daemon, DaemonOptions, DEFAULT_IQN};
use initiator::pdu::{scsi_command, CommandIds};
use initiator::{rw16, Session};
use rustgt_iscsi::pdu::{encode_lun, RejectReason, Reply};

const READ_LEN: u32 = 64 << 10;
const MAX_COMMANDS: u32 = 400_000;
/// Commands sent back to back before the sender pauses.
const BATCH: u32 = 32;
/// Resident memory the flood may add (the connection's output bound and
/// what the CmdSN window's commands produce, with room to spare).
const GROWTH_MIB: u64 = 128;
/// The sender gives up, and the test fails, past this growth.
const CAP_MIB: u64 = 1024;

#[test]
fn an_initiator_that_never_reads_cannot_grow_the_daemon() {
    let d = Daemon::start();
    let pid = d.pid().expect("daemon running");
    let mut flooder = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-12.org.rustgt:flooder",
        [0x80, 0, 0, 0, 0, 1],
    );
    flooder.clear_unit_attentions(0);
    let mut other = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-12.org.rustgt:other",
        [0x80, 0, 0, 0, 0, 2],
    );
    other.clear_unit_attentions(0);
    let idle_kib = rss_kib(pid);

    let mut sock = flooder.wire().stream().try_clone().expect("clone socket");
    sock.set_write_timeout(Some(Duration::from_secs(2)))
        .expect("write timeout");
    let first_sn = flooder.cmd_sn();
    let peak = Arc::new(AtomicU64::new(idle_kib));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (peak, stop) = (Arc::clone(&peak), Arc::clone(&stop));
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut sent = 0u32;
            let cdb = rw16(0x88, 0, READ_LEN / 512);
            while sent < MAX_COMMANDS && Instant::now() < deadline {
                let ids = CommandIds {
                    lun: encode_lun(0),
                    itt: 0x1000_0000 + sent,
                    cmd_sn: first_sn.wrapping_add(sent),
                    exp_stat_sn: 0,
                    read: true,
                    write: false,
                    final_bit: true,
                    expected_data_len: READ_LEN,
                };
                let mut pdu = scsi_command(ids, &cdb, Vec::new()).encode(false, false);
                // Immediate delivery (RFC 7143 §3.2.2.1): outside the CmdSN
                // window, so the window alone does not bound them.
                if let Some(b) = pdu.first_mut() {
                    *b |= 0x40;
                }
                match sock.write_all(&pdu) {
                    Ok(()) => {
                        sent += 1;
                        // Paced so each batch finds the CmdSN window the
                        // previous one's completions opened (a blind flood
                        // would run past MaxCmdSN and be dropped).
                        if sent % BATCH == 0 {
                            thread::sleep(Duration::from_millis(2));
                        }
                    }
                    // The target stopped reading commands: what we wanted.
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        break
                    }
                    Err(e) => panic!("send: {e}"),
                }
                if sent % 256 == 0 {
                    let now = rss_kib(pid);
                    peak.fetch_max(now, Ordering::SeqCst);
                    if now.saturating_sub(idle_kib) > CAP_MIB << 10 {
                        break;
                    }
                }
            }
            stop.store(true, Ordering::SeqCst);
            sent
        })
    };

    // Meanwhile another session works normally.
    let payload: Vec<u8> = (0..1u32 << 20).map(|b| (b % 251) as u8).collect();
    let mut rounds = 0;
    while !stop.load(Ordering::SeqCst) && rounds < 200 {
        let lba = 8192 + (rounds % 8) * 2048;
        let w = other.command(0, &rw16(0x8a, lba, 2048), &payload, 0);
        assert!(w.is_good(), "write while another initiator floods: {w}");
        let r = other.command(0, &rw16(0x88, lba, 2048), &[], 1 << 20);
        assert!(r.is_good(), "read while another initiator floods: {r}");
        assert!(r.data == payload, "read returned other data");
        peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
        rounds += 1;
    }
    let sent = sender.join().expect("sender");
    // Let whatever the daemon still does with what it read settle.
    for _ in 0..10 {
        peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
        thread::sleep(Duration::from_millis(100));
    }
    let grew_mib = peak.load(Ordering::SeqCst).saturating_sub(idle_kib) >> 10;
    eprintln!(
        "sent {sent} READs of {} KiB unread; RSS grew {grew_mib} MiB at most; \
         the other session ran {rounds} write+read rounds meanwhile",
        READ_LEN >> 10
    );

    // Now the flooder reads: its reads complete, GOOD, in order of ITT.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut good, mut bad, mut rejects) = (0u32, 0u32, 0u32);
    while Instant::now() < deadline {
        match flooder.wire().try_recv(Duration::from_millis(500)) {
            Ok(Some(Reply::DataIn(d))) if d.has_status => {
                if d.status == 0 {
                    good += 1;
                } else {
                    bad += 1;
                }
            }
            Ok(Some(Reply::Reject(r))) => {
                assert_eq!(
                    r.reason,
                    RejectReason::IMMEDIATE_COMMAND_REJECT,
                    "a Reject for another reason"
                );
                rejects += 1;
            }
            Ok(Some(Reply::ScsiResponse(_))) => bad += 1,
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(_) => panic!("the target closed the flooder's connection"),
        }
    }
    eprintln!(
        "the flooder then read {good} GOOD completions, {rejects} Rejects (too many immediate \
         commands), {bad} others"
    );
    assert!(rounds > 0, "the other session got nothing done");
    assert!(
        sent < MAX_COMMANDS,
        "the target took all {sent} commands without waiting for their responses to be read"
    );
    assert!(
        grew_mib < GROWTH_MIB,
        "the daemon grew {grew_mib} MiB for an initiator that does not read"
    );

    assert_eq!(bad, 0, "reads that did not complete GOOD");
    assert!(
        good >= 16,
        "the flooder's responses did not come once it read ({good})"
    );
}

/// Reads in the CmdSN window whose answers are never read: their Data-In
/// is held in the data buffer budget until the socket takes it, so the
/// daemon holds at most the budget for them (without it, the whole window
/// of long reads: here 128 x 8 MiB = 1 GiB); another session's reads and
/// writes complete meanwhile; and when the reader finally reads, every
/// one of its reads completes GOOD.
#[test]
fn unread_long_reads_stay_within_the_data_buffer_budget() {
    const BUDGET_MIB: u64 = 128;
    const LONG: u32 = 8 << 20;
    const COUNT: u32 = 128;
    const REGIONS: u64 = 32;
    let d = Daemon::start_with(DaemonOptions {
        env: vec![(
            "RUSTGT_LIMITS__DATA_BUFFER_BYTES".to_owned(),
            format!("{BUDGET_MIB}M"),
        )],
        ..DaemonOptions::default()
    });
    let pid = d.pid().expect("daemon running");
    let mut reader = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-12.org.rustgt:long-reader",
        [0x80, 0, 0, 0, 0, 3],
    );
    reader.clear_unit_attentions(0);
    let mut other = Session::login(
        d.portal,
        DEFAULT_IQN,
        "iqn.2026-12.org.rustgt:other",
        [0x80, 0, 0, 0, 0, 4],
    );
    other.clear_unit_attentions(0);
    // Data in the regions read (holes would be read from a shared page of
    // zeros and cost nothing): 32 regions of 8 MiB, each read 4 times.
    let region: Vec<u8> = (0..LONG).map(|b| (b % 241) as u8).collect();
    for i in 0..REGIONS {
        let w = other.command(
            0,
            &rw16(0x8a, i * u64::from(LONG / 512), LONG / 512),
            &region,
            0,
        );
        assert!(w.is_good(), "writing region {i}: {w}");
    }
    let idle_kib = rss_kib(pid);

    // The whole window in one write, so the target reads every command
    // before the first answer fills its output; never read.
    let first_sn = reader.cmd_sn();
    let mut burst = Vec::new();
    for i in 0..COUNT {
        let lba = (u64::from(i) % REGIONS) * u64::from(LONG / 512);
        let ids = CommandIds {
            lun: encode_lun(0),
            itt: 0x2000_0000 + i,
            cmd_sn: first_sn.wrapping_add(i),
            exp_stat_sn: 0,
            read: true,
            write: false,
            final_bit: true,
            expected_data_len: LONG,
        };
        burst.extend(
            scsi_command(ids, &rw16(0x88, lba, LONG / 512), Vec::new()).encode(false, false),
        );
    }
    reader.wire().send(&burst);
    let mut peak = idle_kib;
    for _ in 0..20 {
        peak = peak.max(rss_kib(pid));
        thread::sleep(Duration::from_millis(100));
    }
    // Meanwhile another session works.
    let payload: Vec<u8> = (0..1u32 << 20).map(|b| (b % 253) as u8).collect();
    for i in 0..4u64 {
        let lba = (1 << 20) + i * 2048;
        let w = other.command(0, &rw16(0x8a, lba, 2048), &payload, 0);
        assert!(w.is_good(), "write beside unread long reads: {w}");
        let r = other.command(0, &rw16(0x88, lba, 2048), &[], 1 << 20);
        assert!(r.is_good(), "read beside unread long reads: {r}");
        assert!(r.data == payload, "read returned other data");
        peak = peak.max(rss_kib(pid));
    }
    let grew_mib = peak.saturating_sub(idle_kib) >> 10;
    eprintln!(
        "{COUNT} unread READs of {} MiB: RSS grew {grew_mib} MiB at most (budget {BUDGET_MIB} MiB)",
        LONG >> 20
    );
    assert!(
        grew_mib < BUDGET_MIB + 96,
        "the daemon grew {grew_mib} MiB for unread reads with a {BUDGET_MIB} MiB budget"
    );

    // Now the reader reads: every one of its reads completes GOOD.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut done = 0u32;
    while done < COUNT && Instant::now() < deadline {
        match reader.wire().try_recv(Duration::from_millis(500)) {
            Ok(Some(Reply::DataIn(d))) if d.has_status => {
                assert_eq!(d.status, 0, "a read did not complete GOOD");
                done += 1;
            }
            Ok(Some(Reply::ScsiResponse(r))) => panic!("a read ended with {r:?}"),
            Ok(_) => {}
            Err(_) => panic!("the target closed the reader's connection"),
        }
    }
    assert_eq!(done, COUNT, "reads completed once the reader read");
}
