//! An in-memory initiator driving a real [`Connection`] over a real SCSI
//! core with a RAM backstore, with simulated time. No sockets: bytes go
//! straight from the initiator's encoder into `handle_input`.


#![allow(dead_code)]

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustgt_backstore::{open, BackstoreSpec, EngineKind};
use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::negotiate::{Limits, Transport};
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::{encode_text, parse_text};
use rustgt_iscsi::{Connection, ConnectionSetup, Event, PortalConfig, SessionTable, TargetInfo};
use rustgt_scsi::{LunConfig, Response, ScsiTarget};

pub const TARGET: &str = "iqn.2026-11.org.rustgt:test";
pub const INITIATOR: &str = "iqn.2026-11.org.rustgt:initiator";

pub fn portal_config(limits: Limits, chap: ChapPolicy) -> PortalConfig {
    PortalConfig {
        targets: vec![TargetInfo {
            name: TARGET.into(),
            alias: Some("test".into()),
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            acl: vec![],
            chap,
        }],
        limits,
        queue_depth: 16,
        nop_interval: Some(Duration::from_secs(5)),
        nop_timeout: Duration::from_secs(10),
        ..PortalConfig::default()
    }
}

pub fn scsi_target(blocks: u64) -> Arc<ScsiTarget> {
    let t = ScsiTarget::new(TARGET);
    let store = open(&BackstoreSpec {
        kind: EngineKind::Ram,
        path: None,
        size: Some(blocks * 512),
        block_size: 512,
        read_only: false,
        thin: false,
    })
    .expect("ram backstore");
    let mut lc = LunConfig::new(store);
    lc.workers = 2;
    t.add_lun(0, lc).expect("add lun");
    t
}

/// Initiator side state plus the target connection under test.
pub struct Pair {
    pub conn: Connection,
    pub target: Arc<ScsiTarget>,
    pub now: Instant,
    pub hd: bool,
    pub dd: bool,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub itt: u32,
    pub isid: [u8; 6],
    rx: Vec<u8>,
    done_tx: mpsc::Sender<Response>,
    done_rx: mpsc::Receiver<Response>,
    pub tmf_results: Vec<(u32, rustgt_scsi::TmfResponse)>,
}

impl Pair {
    pub fn new(cfg: PortalConfig) -> Pair {
        Self::with_table(cfg, Arc::new(Mutex::new(SessionTable::new())), 1)
    }

    pub fn with_table(cfg: PortalConfig, table: Arc<Mutex<SessionTable>>, conn_id: u64) -> Pair {
        let now = Instant::now();
        let setup = ConnectionSetup {
            conn_id,
            transport: Transport::Tcp,
            local_addr: "127.0.0.1:3260".into(),
            peer_addr: "127.0.0.1:50000".into(),
            random: [7u8; 32],
        };
        let (done_tx, done_rx) = mpsc::channel();
        Pair {
            conn: Connection::new(Arc::new(cfg), table, setup, now),
            target: scsi_target(2048),
            now,
            hd: false,
            dd: false,
            cmd_sn: 1,
            exp_stat_sn: 0,
            itt: 0x100,
            isid: [0x80, 0, 0, 0x12, 0x34, conn_id as u8],
            rx: Vec::new(),
            done_tx,
            done_rx,
            tmf_results: Vec::new(),
        }
    }

    pub fn next_itt(&mut self) -> u32 {
        self.itt += 1;
        self.itt
    }

    /// Feed raw bytes to the target and run whatever it asks for.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.conn.handle_input(bytes, self.now);
        self.pump();
    }

    pub fn send(&mut self, req: &Request) {
        let bytes = req.encode(self.hd, self.dd);
        self.feed(&bytes);
    }

    /// Run events through the SCSI core until the connection is idle.
    pub fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(ev) = self.conn.poll_event() {
                progressed = true;
                match ev {
                    Event::Command(cmd) => {
                        let tx = self.done_tx.clone();
                        self.target.submit(
                            cmd,
                            Box::new(move |r| {
                                let _ = tx.send(r);
                            }),
                        );
                    }
                    Event::TaskMgmt { itt, lun, function } => {
                        let nexus = self.conn.session().expect("session").nexus.clone();
                        let r = self.target.task_management(&nexus, lun, function);
                        self.tmf_results.push((itt, r));
                        self.conn.tmf_done(itt, r);
                    }
                    Event::LoggedIn(_) | Event::Reinstate { .. } => {}
                }
            }
            while self.conn.in_flight() > 0 {
                match self.done_rx.recv_timeout(Duration::from_secs(10)) {
                    Ok(r) => {
                        self.conn.complete(r);
                        progressed = true;
                    }
                    Err(_) => panic!("SCSI core did not complete a command in 10 s"),
                }
            }
            if let Some(out) = self.conn.poll_transmit() {
                for seg in out {
                    self.rx.extend_from_slice(&seg);
                }
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
    }

    /// Decode every reply the target sent so far.
    pub fn replies(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < self.rx.len() {
            match Reply::decode(&self.rx[pos..], self.hd, self.dd) {
                Ok((r, n)) => {
                    pos += n;
                    if let Some(sn) = stat_sn_of(&r) {
                        self.exp_stat_sn = sn.wrapping_add(1);
                    }
                    out.push(r);
                }
                Err(PduError::Incomplete(_)) => break,
                Err(e) => panic!("target sent an undecodable PDU: {e}"),
            }
        }
        self.rx.drain(..pos);
        out
    }

    pub fn login_request(
        &mut self,
        csg: Stage,
        nsg: Stage,
        transit: bool,
        keys: &[(&str, &str)],
    ) -> Request {
        let pairs: Vec<(String, String)> = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Request {
            header: RequestHeader::Login(LoginRequest {
                transit,
                cont: false,
                csg,
                nsg,
                version_max: 0,
                version_min: 0,
                isid: self.isid,
                tsih: 0,
                itt: 1,
                cid: 1,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
            }),
            data: encode_text(&pairs),
        }
    }

    /// Send one login request and return the (single) login response and its keys.
    pub fn login_step(
        &mut self,
        csg: Stage,
        nsg: Stage,
        transit: bool,
        keys: &[(&str, &str)],
    ) -> (LoginResponse, Vec<(String, String)>) {
        let req = self.login_request(csg, nsg, transit, keys);
        self.send(&req);
        let mut r = self.replies();
        assert_eq!(r.len(), 1, "one login response expected: {r:?}");
        match r.remove(0) {
            Reply::LoginResponse(lr) => {
                let kv = parse_text(&lr.data).expect("login response text");
                (lr, kv)
            }
            other => panic!("expected a login response, got {other:?}"),
        }
    }

    /// Log in to the test target with no authentication, offering `ops`.
    pub fn login(&mut self, ops: &[(&str, &str)]) -> Vec<(String, String)> {
        let (lr, _) = self.login_step(
            Stage::SECURITY,
            Stage::OPERATIONAL,
            true,
            &[
                ("InitiatorName", INITIATOR),
                ("TargetName", TARGET),
                ("SessionType", "Normal"),
                ("AuthMethod", "None"),
            ],
        );
        assert_eq!(lr.status, LoginStatus::SUCCESS);
        assert!(lr.transit);
        let (lr, kv) = self.login_step(Stage::OPERATIONAL, Stage::FULL_FEATURE, true, ops);
        assert_eq!(lr.status, LoginStatus::SUCCESS, "{kv:?}");
        assert!(lr.transit);
        assert_eq!(lr.nsg, Stage::FULL_FEATURE);
        assert_ne!(lr.tsih, 0);
        let get = |k: &str| kv.iter().find(|(kk, _)| kk == k).map(|(_, v)| v.as_str());
        self.hd = get("HeaderDigest") == Some("CRC32C");
        self.dd = get("DataDigest") == Some("CRC32C");
        kv
    }

    pub fn scsi_cmd(
        &mut self,
        cdb: &[u8],
        read: bool,
        write: bool,
        edtl: u32,
        imm: Vec<u8>,
        final_bit: bool,
    ) -> u32 {
        let itt = self.next_itt();
        let req = Request {
            header: RequestHeader::ScsiCommand(ScsiCommand {
                immediate: false,
                final_bit,
                read,
                write,
                attr: TaskAttribute::SIMPLE,
                lun: 0,
                itt,
                expected_data_len: edtl,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                cdb: cdb.to_vec(),
                bidi_read_len: None,
            }),
            data: imm,
        };
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send(&req);
        itt
    }

    pub fn data_out(
        &mut self,
        itt: u32,
        ttt: u32,
        data_sn: u32,
        offset: u32,
        data: &[u8],
        final_bit: bool,
    ) {
        let req = Request {
            header: RequestHeader::DataOut(DataOut {
                final_bit,
                lun: 0,
                itt,
                ttt,
                exp_stat_sn: self.exp_stat_sn,
                data_sn,
                buffer_offset: offset,
            }),
            data: data.to_vec(),
        };
        self.send(&req);
    }

    /// Run a READ(10) and return (status, data, sense).
    pub fn read10(&mut self, lba: u32, blocks: u16) -> (u8, Vec<u8>, Vec<u8>) {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x28;
        cdb[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
        let itt = self.scsi_cmd(&cdb, true, false, u32::from(blocks) * 512, vec![], true);
        self.collect_result(itt)
    }

    /// Gather Data-In and status for `itt` from the replies so far.
    pub fn collect_result(&mut self, itt: u32) -> (u8, Vec<u8>, Vec<u8>) {
        let mut data = Vec::new();
        let mut status = None;
        let mut sense = Vec::new();
        let mut next_sn = 0;
        for r in self.replies() {
            match r {
                Reply::DataIn(d) if d.itt == itt => {
                    assert_eq!(d.data_sn, next_sn, "DataSN sequence");
                    assert_eq!(d.buffer_offset as usize, data.len(), "Data-In offset");
                    next_sn += 1;
                    data.extend_from_slice(&d.data);
                    if d.has_status {
                        status = Some(d.status);
                    }
                }
                Reply::ScsiResponse(s) if s.itt == itt => {
                    status = Some(s.status);
                    sense = s.sense;
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
        (status.expect("a status for the command"), data, sense)
    }
}

pub fn stat_sn_of(r: &Reply) -> Option<u32> {
    match r {
        Reply::ScsiResponse(x) => Some(x.stat_sn),
        Reply::DataIn(x) if x.has_status => Some(x.stat_sn),
        Reply::LoginResponse(x) => Some(x.stat_sn),
        Reply::TextResponse(x) => Some(x.stat_sn),
        Reply::LogoutResponse(x) => Some(x.stat_sn),
        Reply::TaskMgmtResponse(x) => Some(x.stat_sn),
        Reply::Reject(x) => Some(x.stat_sn),
        Reply::NopIn(x) if x.itt != RESERVED_TAG => Some(x.stat_sn),
        _ => None,
    }
}

pub fn write10_cdb(lba: u32, blocks: u16) -> [u8; 10] {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2a;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    cdb
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
