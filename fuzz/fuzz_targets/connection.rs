//! The `Connection` state machine, over TCP (byte stream) or iSER
//! (messages), fed an input-chosen sequence of events: raw input, well-formed
//! SCSI Command PDUs at the right CmdSN, command completions with random
//! status, sense, Data-In and residuals (in any order), task-management
//! results, finished RDMA Reads, time passing (timeouts, NOP-Ins), a
//! logout request from the target and a transport failure. Optionally it
//! first logs in with a well-formed login. Every PDU the target sends must
//! decode; on iSER every Send must be one whole control PDU.
#![no_main]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::iser::{ControlHeader, IserMessage, RemoteBuffer};
use rustgt_iscsi::negotiate::{Limits, Transport};
use rustgt_iscsi::pdu::{
    LoginRequest, PduError, Reply, Request, RequestHeader, ScsiCommand, Stage, TaskAttribute,
};
use rustgt_iscsi::text::encode_text;
use rustgt_iscsi::{
    Connection, ConnectionSetup, Event, IserOp, IserParams, PortalConfig, RdmaRead, SessionTable,
    TargetInfo,
};
use rustgt_scsi::{Command, Residual, Response, Status, TmfResponse};

const TARGET: &str = "iqn.2026-11.org.rustgt:fuzz";
const INITIATOR: &str = "iqn.2026-11.org.rustgt:initiator";

fn config() -> Arc<PortalConfig> {
    Arc::new(PortalConfig {
        targets: vec![TargetInfo {
            name: TARGET.into(),
            alias: Some("fuzz".into()),
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            iser_portals: vec!["127.0.0.1:3260".into()],
            acl: vec![],
            chap: ChapPolicy::default(),
            groups: Vec::new(),
            redirect: None,
        }],
        limits: Limits {
            max_recv_data_segment_length: 8192,
            first_burst_length: 8192,
            max_burst_length: 16384,
            initial_r2t: false,
            ..Limits::default()
        },
        queue_depth: 16,
        nop_interval: Some(Duration::from_secs(5)),
        nop_timeout: Duration::from_secs(10),
        ..PortalConfig::default()
    })
}

struct Harness {
    iser: bool,
    conn: Connection,
    now: Instant,
    /// Stream bytes from the target not yet decoded.
    rx: Vec<u8>,
    commands: Vec<Command>,
    tmfs: Vec<u32>,
    reads: Vec<RdmaRead>,
    cmd_sn: u32,
    exp_stat_sn: u32,
    itt: u32,
    logged_in: bool,
}

impl Harness {
    fn feed(&mut self, bytes: &[u8]) {
        if self.iser {
            self.conn.handle_message(bytes, self.now);
        } else {
            self.conn.handle_input(bytes, self.now);
        }
    }

    fn send(&mut self, req: &Request, remote: ControlHeader) {
        if self.iser {
            let mut msg = remote.encode().to_vec();
            msg.extend_from_slice(&req.encode(false, false));
            self.feed(&msg);
        } else {
            self.feed(&req.encode(false, false));
        }
    }

    fn seen(&mut self, r: &Reply) {
        if let Reply::LoginResponse(lr) = r {
            self.exp_stat_sn = lr.stat_sn.wrapping_add(1);
            if lr.nsg == Stage::FULL_FEATURE && lr.transit && lr.status.0 == 0 {
                self.logged_in = true;
            }
        }
    }

    /// Collects what the target produced; checks every PDU it sent.
    fn drain(&mut self) {
        for _ in 0..1000 {
            let mut progressed = false;
            while let Some(ev) = self.conn.poll_event() {
                progressed = true;
                match ev {
                    Event::Command(c) => self.commands.push(c),
                    Event::TaskMgmt { itt, .. } => self.tmfs.push(itt),
                    Event::LoggedIn(_) | Event::Reinstate { .. } => {}
                }
            }
            if let Some(out) = self.conn.poll_transmit() {
                progressed = true;
                for seg in out {
                    self.rx.extend_from_slice(&seg);
                }
                let mut pos = 0;
                while let Some(rest) = self.rx.get(pos..).filter(|r| !r.is_empty()) {
                    match Reply::decode(rest, false, false) {
                        Ok((r, n)) => {
                            pos += n;
                            self.seen(&r);
                        }
                        Err(PduError::Incomplete(_)) => break,
                        Err(e) => panic!("target sent an undecodable PDU: {e}"),
                    }
                }
                self.rx.drain(..pos);
            }
            while let Some(op) = self.conn.poll_op() {
                progressed = true;
                match op {
                    IserOp::Send(s) => match IserMessage::parse(&s.msg) {
                        Ok(IserMessage::Control { pdu, .. }) => {
                            let (r, n) = Reply::decode(pdu, false, false)
                                .unwrap_or_else(|e| panic!("target sent an undecodable PDU: {e}"));
                            assert_eq!(n, pdu.len(), "one PDU per Send");
                            self.seen(&r);
                        }
                        Ok(IserMessage::HelloReply(_)) => {}
                        other => panic!("target sent {other:?}"),
                    },
                    IserOp::Write(_) => {}
                    IserOp::Read(r) => self.reads.push(r),
                }
            }
            if !progressed {
                return;
            }
        }
        panic!("the connection kept producing output for 1000 rounds");
    }

    fn login_request(&self, csg: Stage, nsg: Stage, keys: &[(&str, &str)]) -> Request {
        let pairs: Vec<(String, String)> = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Request {
            header: RequestHeader::Login(LoginRequest {
                transit: true,
                cont: false,
                csg,
                nsg,
                version_max: 0,
                version_min: 0,
                isid: [0x80, 0, 0, 0x12, 0x34, 0x56],
                tsih: 0,
                itt: 1,
                cid: 1,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data: encode_text(&pairs),
        }
    }

    fn login(&mut self) {
        let sec = self.login_request(
            Stage::SECURITY,
            Stage::OPERATIONAL,
            &[
                ("InitiatorName", INITIATOR),
                ("TargetName", TARGET),
                ("SessionType", "Normal"),
                ("AuthMethod", "None"),
            ],
        );
        self.send(&sec, ControlHeader::default());
        self.drain();
        let mut ops = vec![
            ("InitialR2T", "No"),
            ("ImmediateData", "Yes"),
            ("MaxBurstLength", "16384"),
            ("FirstBurstLength", "8192"),
            ("MaxRecvDataSegmentLength", "8192"),
        ];
        if self.iser {
            ops.push(("RDMAExtensions", "Yes"));
        }
        let op = self.login_request(Stage::OPERATIONAL, Stage::FULL_FEATURE, &ops);
        self.send(&op, ControlHeader::default());
        self.drain();
    }
}

/// Reads input bytes; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let sel = input.byte();
    let iser = sel & 1 != 0;
    let now = Instant::now();
    let setup = ConnectionSetup {
        conn_id: 1,
        transport: if iser {
            Transport::Iser
        } else {
            Transport::Tcp
        },
        local_addr: "127.0.0.1:3260".into(),
        peer_addr: "127.0.0.1:50000".into(),
        random: [7u8; 32],
    };
    let table = Arc::new(Mutex::new(SessionTable::new()));
    let conn = if iser {
        let params = IserParams {
            read_depth: 4,
            max_rdma_len: 4096,
            remote_invalidate: sel & 4 != 0,
        };
        Connection::new_iser(config(), table, setup, params, now)
    } else {
        Connection::new(config(), table, setup, now)
    };
    let mut h = Harness {
        iser,
        conn,
        now,
        rx: Vec::new(),
        commands: Vec::new(),
        tmfs: Vec::new(),
        reads: Vec::new(),
        cmd_sn: 1,
        exp_stat_sn: 0,
        itt: 0x100,
        logged_in: false,
    };
    if sel & 2 != 0 {
        h.login();
        assert!(
            h.logged_in,
            "the well-formed login reaches full feature phase"
        );
    }
    for _ in 0..64 {
        if input.0.is_empty() {
            break;
        }
        match input.byte() % 10 {
            // Raw input: a stream chunk or one whole iSER message.
            0 | 1 => {
                let n = usize::from(input.u16() % 2048);
                let chunk = input.bytes(n).to_vec();
                h.feed(&chunk);
            }
            // A well-formed SCSI command at the expected CmdSN.
            2 | 3 => {
                let flags = input.byte();
                let edtl = u32::from(input.u16());
                let imm = usize::from(input.byte()) * 4;
                let mut cdb = [0u8; 16];
                cdb.copy_from_slice(&{
                    let mut c = input.bytes(16).to_vec();
                    c.resize(16, 0);
                    c
                });
                h.itt = h.itt.wrapping_add(1);
                let cmd = ScsiCommand {
                    immediate: flags & 0x80 != 0,
                    final_bit: flags & 0x40 != 0,
                    read: flags & 0x20 != 0,
                    write: flags & 0x10 != 0,
                    attr: TaskAttribute(flags & 7),
                    lun: if flags & 8 != 0 {
                        0x0001_0000_0000_0000
                    } else {
                        0
                    },
                    itt: h.itt,
                    expected_data_len: edtl,
                    cmd_sn: h.cmd_sn,
                    exp_stat_sn: h.exp_stat_sn,
                    cdb: cdb.into(),
                    bidi_read_len: None,
                };
                if !cmd.immediate {
                    h.cmd_sn = h.cmd_sn.wrapping_add(1);
                }
                let buf = RemoteBuffer {
                    stag: 0x1000,
                    base: 0x7f00_0000_0000,
                };
                let remote = ControlHeader {
                    write: cmd.read.then_some(buf),
                    read: cmd.write.then_some(RemoteBuffer {
                        stag: 0x2000,
                        ..buf
                    }),
                };
                let data = input.bytes(imm).to_vec();
                let req = Request {
                    header: RequestHeader::ScsiCommand(cmd),
                    data,
                };
                h.send(&req, remote);
            }
            // Complete one of the commands handed out, with a random result.
            4 | 5 => {
                let pick = usize::from(input.byte());
                let status = input.byte();
                let len = u32::from(input.u16());
                let sense_len = usize::from(input.byte() % 64);
                let residual = input.byte();
                if !h.commands.is_empty() {
                    let c = h.commands.remove(pick % h.commands.len());
                    let data_len = len.min(c.data_in_len);
                    let (status, sense) = match status % 4 {
                        0 => (Status::GOOD, Vec::new()),
                        1 => (Status::CHECK_CONDITION, {
                            let mut s = vec![0x70u8; sense_len.max(1)];
                            s.truncate(sense_len.max(8));
                            s
                        }),
                        2 => (Status(status), Vec::new()),
                        _ => (Status::BUSY, Vec::new()),
                    };
                    let data_in = if status == Status::GOOD {
                        vec![0xa5; data_len as usize]
                    } else {
                        Vec::new()
                    };
                    let residual = match residual % 3 {
                        0 => Residual::None,
                        1 => Residual::Underflow(c.data_in_len.saturating_sub(data_len)),
                        _ => Residual::Overflow(u32::from(residual)),
                    };
                    h.conn.complete(Response {
                        tag: c.tag,
                        status,
                        sense,
                        data_in: data_in.into(),
                        residual,
                        aborted: status.0 == 0x40 && residual == Residual::None,
                    });
                }
            }
            // Time passes: timeouts, NOP-In pings, held logins.
            6 => {
                let secs = u64::from(input.byte() % 32);
                h.now += Duration::from_millis(secs * 500);
                h.conn.handle_timeout(h.now);
            }
            // A finished RDMA Read, or a task-management result.
            7 => {
                let pick = usize::from(input.byte());
                let short = input.byte();
                if !h.reads.is_empty() {
                    let mut r = h.reads.remove(pick % h.reads.len());
                    let len = if short & 1 != 0 {
                        usize::from(short)
                    } else {
                        r.len as usize
                    };
                    if short & 2 != 0 && r.dest.is_some() {
                        // As if placed in its destination (the bytes there
                        // stay stale: only the bookkeeping is fuzzed).
                        h.conn.read_done(r, u32::try_from(len).unwrap_or(u32::MAX));
                    } else {
                        // The copy path: the destination goes first.
                        drop(r.dest.take());
                        h.conn
                            .data_arrived(r.itt, r.ttt, &vec![0x5a; len.min(1 << 20)]);
                    }
                } else if !h.tmfs.is_empty() {
                    let itt = h.tmfs.remove(pick % h.tmfs.len());
                    let r = match short % 6 {
                        0 => TmfResponse::FunctionComplete,
                        1 => TmfResponse::FunctionSucceeded,
                        2 => TmfResponse::FunctionRejected,
                        3 => TmfResponse::IncorrectLun,
                        4 => TmfResponse::TaskNotFound,
                        _ => TmfResponse::NotSupported,
                    };
                    h.conn.tmf_done(itt, r);
                }
            }
            8 => h.conn.request_logout(u16::from(input.byte())),
            _ => {
                if input.byte() == 0xff {
                    h.conn.fail();
                }
            }
        }
        h.drain();
    }
    let _ = (
        h.logged_in,
        h.conn.is_closing(),
        h.conn.in_flight(),
        h.conn.poll_timeout(),
    );
    // Late completions after everything else must be harmless too.
    for c in std::mem::take(&mut h.commands) {
        h.conn.complete(Response {
            tag: c.tag,
            ..Response::default()
        });
    }
    h.drain();
});
