//! Black-box: fault injection (`[targets.luns.fault]`, `rustgt admin lun
//! fault`) over a real daemon.
//!
//! - A READ of a faulty range gets CHECK CONDITION, MEDIUM ERROR /
//!   UNRECOVERED READ ERROR (11h/00h); a WRITE, MEDIUM ERROR / WRITE ERROR
//!   (0Ch/00h); a WRITE where the thin LUN is out of space, DATA PROTECT /
//!   SPACE ALLOCATION FAILED WRITE PROTECT (27h/07h, SBC-3 §4.7.3.6).
//!   Blocks outside the ranges, the other LUN and a second session work
//!   meanwhile. qemu-io (libiscsi) sees EIO and ENOSPC.
//! - A hung READ is ended by ABORT TASK and by LOGICAL UNIT RESET: each
//!   answer arrives within [`TMF_BOUND`], the aborted READ gets no
//!   response, and the session carries on.
//! - A delay is observed (a generous lower bound only).
//! - Faults set and cleared live over the admin socket: a READ hung by
//!   an injected hang completes once the fault is cleared.

#[path = "admin_common/mod.rs"]
mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::time::{Duration, Instant};

use admin_common::{cli, Admin};
use common::{run_tool, Daemon};
use initiator::{rw16, CmdResult, Session, CHECK_CONDITION, READ_16, UNIT_ATTENTION, WRITE_16};
use rustgt_iscsi::pdu::{Reply, TmfCode, TmfResult};
use serde_json::json;

const IQN: &str = "iqn.2026-11.org.rustgt:fault";
const BLOCK: usize = 512;
/// How long a task management function may take on a hung I/O (an
/// initiator's TMF timeout is typically 10 to 30 s).
const TMF_BOUND: Duration = Duration::from_secs(10);
/// How long a hung command must stay unanswered before we believe it hangs.
const HANG_CHECK: Duration = Duration::from_millis(500);

const MEDIUM_ERROR: u8 = 0x3;
const DATA_PROTECT: u8 = 0x7;

/// LUN 0: a thin RAM LUN with faults at fixed LBAs; LUN 1: a clean one.
fn config() -> String {
    format!(
        "[[targets]]\niqn = \"{IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n\
         [targets.luns.fault]\n\
         read_error = {{ lba = \"100-199\" }}\n\
         write_error = {{ lba = \"200-299\" }}\n\
         write_nospace = {{ lba = \"300-399\" }}\n\
         hang = {{ lba = \"1000-1007\" }}\n\
         delay = {{ time = \"300ms\", lba = \"2000\" }}\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"16M\"\n"
    )
}

fn session(d: &Daemon, name: &str, isid_tail: u8) -> Session {
    let mut s = Session::login(
        d.portal,
        IQN,
        &format!("iqn.2026-11.org.rustgt:test-{name}"),
        [0x40, 0, 0, 0, 0, isid_tail],
    );
    s.clear_unit_attentions(0);
    s.clear_unit_attentions(1);
    s
}

fn read(s: &mut Session, lun: u64, lba: u64) -> CmdResult {
    s.command(lun, &rw16(READ_16, lba, 1), &[], BLOCK as u32)
}

fn write(s: &mut Session, lun: u64, lba: u64) -> CmdResult {
    s.command(lun, &rw16(WRITE_16, lba, 1), &[0xA5; BLOCK], 0)
}

fn assert_good(r: &CmdResult, what: &str) {
    assert!(r.is_good(), "{what}: {r}");
}

fn assert_sense(r: &CmdResult, want: (u8, u8, u8), what: &str) {
    assert_eq!(r.status, CHECK_CONDITION, "{what}: {r}");
    assert_eq!(r.sense_code(), Some(want), "{what}: {r}");
}

#[test]
fn injected_errors_carry_their_sense_and_stay_in_their_lun() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut s = session(&d, "a", 1);

    assert_good(&read(&mut s, 0, 99), "READ before the bad range");
    let r = read(&mut s, 0, 150);
    assert_sense(&r, (MEDIUM_ERROR, 0x11, 0x00), "READ in read_error");
    // A multi-block READ that only touches the range fails too.
    let r = s.command(0, &rw16(READ_16, 96, 8), &[], 8 * BLOCK as u32);
    assert_sense(&r, (MEDIUM_ERROR, 0x11, 0x00), "READ across read_error");
    assert_good(&write(&mut s, 0, 150), "WRITE in read_error");

    let r = write(&mut s, 0, 250);
    assert_sense(&r, (MEDIUM_ERROR, 0x0C, 0x00), "WRITE in write_error");
    assert_good(&read(&mut s, 0, 250), "READ in write_error");

    let r = write(&mut s, 0, 350);
    assert_sense(&r, (DATA_PROTECT, 0x27, 0x07), "WRITE in write_nospace");
    // Nothing was written by the failed WRITE.
    let r = read(&mut s, 0, 350);
    assert_good(&r, "READ in write_nospace");
    assert!(
        r.data.iter().all(|&b| b == 0),
        "the refused write left data"
    );

    // Clean blocks, the other LUN and another session are unaffected.
    assert_good(&write(&mut s, 0, 0), "WRITE of a clean block");
    assert_eq!(read(&mut s, 0, 0).data, vec![0xA5; BLOCK]);
    for lba in [150, 250, 350] {
        assert_good(&write(&mut s, 1, lba), "WRITE on LUN 1");
        assert_good(&read(&mut s, 1, lba), "READ on LUN 1");
    }
    let mut other = session(&d, "b", 2);
    assert_good(&read(&mut other, 0, 0), "second session, clean block");
    let r = read(&mut other, 0, 150);
    assert_sense(&r, (MEDIUM_ERROR, 0x11, 0x00), "second session, bad block");
    other.logout();

    // libiscsi (through qemu-io) turns the sense into EIO and ENOSPC.
    let url = d.url(IQN, 0);
    let args: Vec<String> = [
        "-f",
        "raw",
        "-c",
        "read 51200 512",
        "-c",
        "write 153600 512",
        "-c",
        "read 0 512",
        &url,
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let out = run_tool("qemu-io", &args, Duration::from_secs(60));
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("read failed: Input/output error"),
        "qemu-io READ in read_error: {out}"
    );
    assert!(
        all.contains("write failed: No space left on device"),
        "qemu-io WRITE in write_nospace: {out}"
    );
    assert!(all.contains("read 512/512"), "qemu-io clean READ: {out}");

    s.logout();
    assert!(d.stop().success(), "the daemon exits cleanly");
}

/// Starts a READ of a hung block and checks that it stays unanswered,
/// while a READ on the same session and the other LUN completes.
fn start_hung_read(s: &mut Session, lba: u64) -> (u32, u32) {
    let hung = s.start_command(0, &rw16(READ_16, lba, 1), BLOCK as u32);
    let early = s.replies_within(HANG_CHECK).expect("connection open");
    assert!(early.is_empty(), "the hung READ was answered: {early:?}");
    assert_good(&read(s, 1, 0), "LUN 1 while LUN 0 hangs");
    assert_good(&read(s, 0, 0), "LUN 0 clean block while a READ hangs");
    hung
}

fn answers_itt(replies: &[Reply], itt: u32) -> bool {
    replies.iter().any(|r| match r {
        Reply::ScsiResponse(x) => x.itt == itt,
        Reply::DataIn(x) => x.itt == itt,
        _ => false,
    })
}

#[test]
fn abort_task_and_lun_reset_end_a_hung_read() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut s = session(&d, "a", 1);
    let mut other = session(&d, "b", 2);

    // ABORT TASK.
    let hung = start_hung_read(&mut s, 1000);
    assert_good(&read(&mut other, 0, 0), "another session while LUN 0 hangs");
    let t = Instant::now();
    let (resp, replies) = s.task_mgmt(TmfCode::ABORT_TASK, 0, hung);
    let took = t.elapsed();
    assert_eq!(resp, TmfResult::COMPLETE, "ABORT TASK: {replies:?}");
    assert!(took < TMF_BOUND, "ABORT TASK took {took:?}");
    let later = s.replies_within(HANG_CHECK).expect("connection open");
    assert!(
        !answers_itt(&replies, hung.0) && !answers_itt(&later, hung.0),
        "an aborted task gets no response: {replies:?} {later:?}"
    );
    assert_good(&read(&mut s, 0, 0), "the session carries on");

    // LOGICAL UNIT RESET, with a hung READ on each session.
    let hung_a = start_hung_read(&mut s, 1003);
    let hung_b = start_hung_read(&mut other, 1007);
    let t = Instant::now();
    let (resp, replies) = s.task_mgmt(TmfCode::LOGICAL_UNIT_RESET, 0, (0, 0));
    let took = t.elapsed();
    assert_eq!(resp, TmfResult::COMPLETE, "LOGICAL UNIT RESET: {replies:?}");
    assert!(took < TMF_BOUND, "LOGICAL UNIT RESET took {took:?}");
    let later = s.replies_within(HANG_CHECK).expect("connection open");
    assert!(!answers_itt(&replies, hung_a.0) && !answers_itt(&later, hung_a.0));
    let other_replies = other.replies_within(HANG_CHECK).expect("connection open");
    assert!(!answers_itt(&other_replies, hung_b.0), "{other_replies:?}");
    // Both sessions learn of the reset and carry on.
    for sess in [&mut s, &mut other] {
        let r = read(sess, 0, 0);
        assert_eq!(
            r.sense_code().map(|c| c.0),
            Some(UNIT_ATTENTION),
            "the reset is reported: {r}"
        );
        sess.clear_unit_attentions(0);
        assert_good(&read(sess, 0, 0), "after the reset");
    }
    s.logout();
    other.logout();
    assert!(d.stop().success(), "the daemon exits cleanly");
}

#[test]
fn a_delay_is_observed() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut s = session(&d, "a", 1);
    let t = Instant::now();
    assert_good(&read(&mut s, 0, 2000), "delayed READ");
    assert_good(&write(&mut s, 0, 2000), "delayed WRITE");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(550),
        "two 300 ms delays took {took:?}"
    );
    s.logout();
}

#[test]
fn faults_set_and_cleared_live() {
    // No fault table at start: the LUN runs on its fast path.
    let cfg = format!(
        "[[targets]]\niqn = \"{IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"16M\"\n"
    );
    let d = Daemon::start_with_config(&cfg, 1);
    let mut s = session(&d, "a", 1);
    assert_good(&write(&mut s, 0, 10), "clean WRITE");

    // Over the socket: a hang on block 10 and read errors on 20..=29.
    let mut a = Admin::connect(&d);
    a.ok(json!({"cmd": "set_faults", "target": IQN, "lun": 0,
                "fault": {"hang": {"lba": "10"}, "read_error": {"lba": "20-29"}}}));
    let saved = a.saved();
    assert!(
        saved.contains("[targets.luns.fault"),
        "config save shows it:\n{saved}"
    );
    let luns = a.ok(json!({"cmd": "list_luns", "target": IQN}));
    assert_eq!(
        luns[0]["faults"]["set"],
        json!(["read_error", "hang"]),
        "{luns}"
    );
    assert!(luns[1]["faults"].is_null(), "LUN 1 takes no faults: {luns}");
    // The data survived the switch to the fault wrapper.
    let r = read(&mut s, 0, 11);
    assert_good(&r, "READ next to the hang");
    let r = read(&mut s, 0, 25);
    assert_sense(&r, (MEDIUM_ERROR, 0x11, 0x00), "injected read error");
    let hung = s.start_command(0, &rw16(READ_16, 10, 1), BLOCK as u32);
    let early = s.replies_within(HANG_CHECK).expect("connection open");
    assert!(early.is_empty(), "the hung READ was answered: {early:?}");

    // Clearing the faults (the command line, no fault option) lets the
    // hung READ go on: it completes with the data written before.
    let out = cli(&d, &["lun", "fault", IQN, "0"]);
    assert!(out.success(), "rustgt admin lun fault: {out}");
    let replies = s.replies_within(Duration::from_secs(5)).expect("open");
    let data: Vec<u8> = replies
        .iter()
        .filter_map(|r| match r {
            Reply::DataIn(x) if x.itt == hung.0 => Some(x.data.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    let status = replies.iter().find_map(|r| match r {
        Reply::DataIn(x) if x.itt == hung.0 && x.has_status => Some(x.status),
        Reply::ScsiResponse(x) if x.itt == hung.0 => Some(x.status),
        _ => None,
    });
    assert_eq!(status, Some(0), "the released READ completes: {replies:?}");
    assert_eq!(data, vec![0xA5; BLOCK], "with the data written before");
    assert_good(&read(&mut s, 0, 25), "read error cleared");

    // A write fault by the command line, every 2nd write.
    let out = cli(&d, &["lun", "fault", IQN, "0", "--write-error", "every=2"]);
    assert!(out.success(), "rustgt admin lun fault: {out}");
    assert_good(&write(&mut s, 0, 40), "1st write");
    let r = write(&mut s, 0, 40);
    assert_sense(&r, (MEDIUM_ERROR, 0x0C, 0x00), "2nd write");
    assert_good(&write(&mut s, 1, 40), "LUN 1 is untouched");
    // A bad trigger is refused with the key named.
    let out = cli(&d, &["lun", "fault", IQN, "0", "--hang", "every=0"]);
    assert!(!out.success(), "every=0 accepted: {out}");
    assert!(format!("{out}").contains("every"), "{out}");
    // Off again, with a READ hung: the table is gone and the READ goes on
    // (well before the 30 s a store swap would wait for it).
    let out = cli(&d, &["lun", "fault", IQN, "0", "--hang", "lba=10"]);
    assert!(out.success(), "rustgt admin lun fault: {out}");
    let hung = s.start_command(0, &rw16(READ_16, 10, 1), BLOCK as u32);
    let early = s.replies_within(HANG_CHECK).expect("connection open");
    assert!(early.is_empty(), "the hung READ was answered: {early:?}");
    let t = Instant::now();
    let out = cli(&d, &["lun", "fault", IQN, "0", "--off"]);
    assert!(out.success(), "rustgt admin lun fault --off: {out}");
    assert!(t.elapsed() < TMF_BOUND, "--off took {:?}", t.elapsed());
    let replies = s.replies_within(Duration::from_secs(5)).expect("open");
    let status = replies.iter().find_map(|r| match r {
        Reply::DataIn(x) if x.itt == hung.0 && x.has_status => Some(x.status),
        Reply::ScsiResponse(x) if x.itt == hung.0 => Some(x.status),
        _ => None,
    });
    assert_eq!(status, Some(0), "the released READ completes: {replies:?}");
    assert_good(&write(&mut s, 0, 40), "no fault any more");
    assert_good(&write(&mut s, 0, 40), "no fault any more");
    assert!(
        !a.saved().contains("[targets.luns.fault"),
        "the table is gone"
    );
    s.logout();
    assert!(d.stop().success(), "the daemon exits cleanly");
}

#[test]
fn a_hung_read_does_not_hold_up_shutdown() {
    let d = Daemon::start_with_config(&config(), 1);
    let mut s = session(&d, "a", 1);
    let _hung = start_hung_read(&mut s, 1001);
    // SIGTERM with the READ still hung: the daemon ends the session and
    // its LUNs, and exits cleanly well within the stop bound.
    let t = Instant::now();
    let status = d.stop();
    assert!(status.success(), "exit status {status:?}");
    assert!(t.elapsed() < TMF_BOUND, "shutdown took {:?}", t.elapsed());
}
