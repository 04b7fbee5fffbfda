//! Helpers of the admin black-box tests: a client of the admin socket (raw
//! JSON lines and the `rustgt admin` command), and a session over
//! `initiator::Wire` that holds one connection open across admin changes,
//! sends single SCSI commands and notices async messages and closes.
//!
//! Every wait is bounded; nothing depends on timing beyond those bounds.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustgt_iscsi::pdu::*;
use serde_json::Value;

use crate::common::{run_tool, Daemon, ToolOutput};
use crate::initiator::pdu::{login_request, LoginIds};
use crate::initiator::{nop_out, Wire};

// ---------------------------------------------------------------------------
// Admin socket
// ---------------------------------------------------------------------------

/// The admin socket of a test daemon (`<data_dir>/admin.sock`).
pub fn socket_of(d: &Daemon) -> PathBuf {
    d.data_dir().join("admin.sock")
}

/// A connection to the admin socket.
pub struct Admin {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    pub path: PathBuf,
}

impl Admin {
    pub fn connect(d: &Daemon) -> Admin {
        Self::connect_path(&socket_of(d))
    }

    pub fn connect_path(path: &Path) -> Admin {
        let s =
            UnixStream::connect(path).unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        Admin {
            writer: s.try_clone().expect("clone"),
            reader: BufReader::new(s),
            path: path.to_owned(),
        }
    }

    /// Sends one line, returns the parsed reply object.
    pub fn line(&mut self, line: &str) -> Value {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .expect("send");
        let mut answer = String::new();
        self.reader.read_line(&mut answer).expect("reply");
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("bad reply {answer:?}: {e}"))
    }

    pub fn request(&mut self, req: Value) -> Value {
        self.line(&req.to_string())
    }

    /// The result of a request that must succeed.
    pub fn ok(&mut self, req: Value) -> Value {
        let r = self.request(req.clone());
        assert_eq!(r["ok"], true, "request {req} failed: {r}");
        r["result"].clone()
    }

    /// The error of a request that must fail.
    pub fn err(&mut self, req: Value) -> String {
        let r = self.request(req.clone());
        assert_eq!(r["ok"], false, "request {req} should have failed: {r}");
        r["error"].as_str().expect("error text").to_owned()
    }

    /// The running configuration as TOML.
    pub fn saved(&mut self) -> String {
        self.ok(serde_json::json!({"cmd": "config_save"}))["toml"]
            .as_str()
            .expect("toml")
            .to_owned()
    }
}

/// Runs `rustgt admin --socket SOCK ARGS...`.
pub fn cli(d: &Daemon, args: &[&str]) -> ToolOutput {
    let mut all = vec![
        "admin".to_owned(),
        "--socket".to_owned(),
        socket_of(d).display().to_string(),
    ];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    run_tool(env!("CARGO_BIN_EXE_rustgt"), &all, Duration::from_secs(60))
}

/// Polls `f` every 50 ms for up to 10 s.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

// ---------------------------------------------------------------------------
// A raw iSCSI initiator
// ---------------------------------------------------------------------------

/// SCSI status, sense and data of one command.
pub use crate::initiator::CmdResult as Outcome;

/// One logged-in session over one TCP connection.
pub struct Session {
    wire: Wire,
    cmd_sn: u32,
    exp_stat_sn: u32,
    itt: u32,
    pub isid: [u8; 6],
    /// Async messages seen (event codes).
    pub async_events: Vec<u8>,
}

/// SAM single-level LUN (peripheral addressing up to 255, flat above).
fn sam_lun(lun: u64) -> u64 {
    if lun < 256 {
        lun << 48
    } else {
        (0x4000 | lun) << 48
    }
}

impl Session {
    /// Logs in to `target` as `initiator` (no authentication).
    pub fn login(portal: SocketAddr, target: &str, initiator: &str, isid_tail: u8) -> Session {
        let mut s = Session {
            wire: Wire::connect(portal),
            cmd_sn: 1,
            exp_stat_sn: 0,
            itt: 0x100,
            isid: [0x80, 0, 0, 0, 0x42, isid_tail],
            async_events: Vec::new(),
        };
        let req = login_request(
            LoginIds {
                isid: s.isid,
                tsih: 0,
                itt: 1,
                cid: 0,
                cmd_sn: s.cmd_sn,
                exp_stat_sn: 0,
            },
            Stage::SECURITY,
            Stage::FULL_FEATURE,
            true,
            &[
                ("InitiatorName", initiator),
                ("TargetName", target),
                ("SessionType", "Normal"),
                ("AuthMethod", "None"),
            ],
        );
        s.send(&req.encode(false, false));
        match s.recv(Duration::from_secs(10)) {
            Ok(Some(Reply::LoginResponse(lr))) => {
                assert_eq!(lr.status, LoginStatus::SUCCESS, "login to {target} failed");
                assert!(lr.transit && lr.nsg == Stage::FULL_FEATURE, "{lr:?}");
                s.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            }
            other => panic!("login: {other:?}"),
        }
        s
    }

    fn send(&mut self, bytes: &[u8]) {
        self.wire.send(bytes);
    }

    /// Next reply, `None` on timeout, `Err` when the target closed.
    fn recv(&mut self, within: Duration) -> Result<Option<Reply>, ()> {
        self.wire.try_recv(within).map_err(|_| ())
    }

    /// Answers a target NOP-In ping; records async messages.
    fn housekeeping(&mut self, r: &Reply) -> bool {
        match r {
            Reply::NopIn(n) if n.ttt != RESERVED_TAG => {
                let pdu = nop_out(n.lun, RESERVED_TAG, n.ttt, self.cmd_sn, self.exp_stat_sn);
                self.send(&pdu);
                true
            }
            Reply::AsyncMessage(a) => {
                self.exp_stat_sn = a.stat_sn.wrapping_add(1);
                self.async_events.push(a.event.0);
                true
            }
            _ => false,
        }
    }

    /// Sends a SCSI command (with `data_out` as immediate data) and
    /// collects its Data-In and status. `Err` if the target closed.
    pub fn command(
        &mut self,
        lun: u64,
        cdb: &[u8],
        data_in_len: u32,
        data_out: &[u8],
    ) -> Result<Outcome, ()> {
        self.itt = self.itt.wrapping_add(1);
        let itt = self.itt;
        let mut cdb16 = cdb.to_vec();
        cdb16.resize(16, 0);
        let req = Request {
            header: RequestHeader::ScsiCommand(ScsiCommand {
                immediate: false,
                final_bit: true,
                read: data_in_len > 0,
                write: !data_out.is_empty(),
                attr: TaskAttribute::SIMPLE,
                lun: sam_lun(lun),
                itt,
                expected_data_len: if data_out.is_empty() {
                    data_in_len
                } else {
                    u32::try_from(data_out.len()).expect("small write")
                },
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                cdb: cdb16.into(),
                bidi_read_len: None,
            }),
            data: data_out.to_vec(),
        };
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&req.encode(false, false));
        let mut data = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("no answer to CDB {cdb:02x?} within 20 s");
            }
            let Some(r) = self.recv(left)? else { continue };
            if self.housekeeping(&r) {
                continue;
            }
            match r {
                Reply::DataIn(d) if d.itt == itt => {
                    data.extend_from_slice(&d.data);
                    if d.has_status {
                        self.exp_stat_sn = d.stat_sn.wrapping_add(1);
                        return Ok(Outcome {
                            status: d.status,
                            sense: Vec::new(),
                            data,
                        });
                    }
                }
                Reply::ScsiResponse(sr) if sr.itt == itt => {
                    self.exp_stat_sn = sr.stat_sn.wrapping_add(1);
                    return Ok(Outcome {
                        status: sr.status,
                        sense: sr.sense,
                        data,
                    });
                }
                other => panic!("unexpected reply to CDB {cdb:02x?}: {other:?}"),
            }
        }
    }

    pub fn test_unit_ready(&mut self, lun: u64) -> Result<Outcome, ()> {
        self.command(lun, &[0x00, 0, 0, 0, 0, 0], 0, &[])
    }

    /// TEST UNIT READY until GOOD (clears pending unit attentions).
    pub fn settle(&mut self, lun: u64) {
        for _ in 0..16 {
            if self.test_unit_ready(lun).expect("session alive").is_good() {
                return;
            }
        }
        panic!("LUN {lun} never became ready");
    }

    /// READ CAPACITY(16): capacity in bytes.
    pub fn capacity(&mut self, lun: u64) -> u64 {
        let mut cdb = [0u8; 16];
        cdb[0] = 0x9e;
        cdb[1] = 0x10;
        cdb[13] = 32;
        let o = self.command(lun, &cdb, 32, &[]).expect("session alive");
        assert!(o.is_good(), "READ CAPACITY(16) failed: {o:?}");
        let last = u64::from_be_bytes(o.data[0..8].try_into().expect("8 bytes"));
        let bs = u32::from_be_bytes(o.data[8..12].try_into().expect("4 bytes"));
        (last + 1) * u64::from(bs)
    }

    /// WRITE(10) of `data` (whole 512-byte blocks) at `lba`.
    pub fn write(&mut self, lun: u64, lba: u32, data: &[u8]) -> Outcome {
        let blocks = u16::try_from(data.len() / 512).expect("few blocks");
        let mut cdb = [0u8; 10];
        cdb[0] = 0x2a;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
        self.command(lun, &cdb, 0, data).expect("session alive")
    }

    /// READ(10) of `blocks` 512-byte blocks at `lba`.
    pub fn read(&mut self, lun: u64, lba: u32, blocks: u16) -> Outcome {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
        self.command(lun, &cdb, u32::from(blocks) * 512, &[])
            .expect("session alive")
    }

    /// NOP-Out ping; true if answered.
    pub fn ping(&mut self) -> bool {
        self.itt = self.itt.wrapping_add(1);
        let itt = self.itt;
        let pdu = nop_out(0, itt, RESERVED_TAG, self.cmd_sn, self.exp_stat_sn);
        self.send(&pdu);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.recv(Duration::from_millis(200)) {
                Err(()) => return false,
                Ok(Some(r)) => {
                    if self.housekeeping(&r) {
                        continue;
                    }
                    if let Reply::NopIn(n) = r {
                        if n.itt == itt {
                            return true;
                        }
                    }
                }
                Ok(None) => {}
            }
        }
        false
    }

    /// Waits (bounded) for an Async Message with `event`.
    pub fn wait_async(&mut self, event: u8) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.async_events.contains(&event) {
                return true;
            }
            match self.recv(Duration::from_millis(200)) {
                Err(()) => return false,
                Ok(Some(r)) => {
                    self.housekeeping(&r);
                }
                Ok(None) => {}
            }
        }
        self.async_events.contains(&event)
    }

    /// True once the target has closed the connection (bounded wait).
    pub fn closed(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.recv(Duration::from_millis(200)) {
                Err(()) => return true,
                Ok(Some(r)) => {
                    self.housekeeping(&r);
                }
                Ok(None) => {}
            }
        }
        false
    }
}

/// ASC/ASCQ of REPORTED LUNS DATA HAS CHANGED and CAPACITY DATA HAS CHANGED.
pub const REPORTED_LUNS_CHANGED: (u8, u8, u8) = (0x06, 0x3f, 0x0e);
pub const CAPACITY_CHANGED: (u8, u8, u8) = (0x06, 0x2a, 0x09);
