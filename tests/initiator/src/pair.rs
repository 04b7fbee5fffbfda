//! An in-memory initiator driving a real [`Connection`] over a real SCSI
//! core with a RAM backstore, with simulated time, over either transport:
//!
//! - [`Mode::Tcp`]: bytes go straight from the initiator's encoder into
//!   `handle_input`, and segments from `poll_transmit` back;
//! - [`Mode::Iser`]: each PDU goes into `handle_message` behind an iSER
//!   header; the target's Sends are decoded as PDUs, and its RDMA Writes
//!   and Reads act on the initiator's registered regions here, checked
//!   against their STags and bounds as a real HCA would.
//!
//! The same test bodies run in both modes (see rustgt-iscsi's
//! `tests/pair.rs`).

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustgt_backstore::{open, BackstoreSpec, EngineKind};
use rustgt_iscsi::chap::ChapPolicy;
use rustgt_iscsi::iser::{ControlHeader, HelloReply, IserMessage, RemoteBuffer};
use rustgt_iscsi::negotiate::{Limits, Transport};
use rustgt_iscsi::pdu::*;
use rustgt_iscsi::text::parse_text;
use rustgt_iscsi::{
    Connection, ConnectionSetup, Event, IserOp, IserParams, PortalConfig, RdmaRead, SessionTable,
    TargetInfo,
};
use rustgt_scsi::{LunConfig, Response, ScsiTarget};

use crate::pdu::{login_request, scsi_command, CommandIds, LoginIds};

pub const TARGET: &str = "iqn.2026-11.org.rustgt:test";
pub const INITIATOR: &str = "iqn.2026-11.org.rustgt:initiator";

pub fn portal_config(limits: Limits, chap: ChapPolicy) -> PortalConfig {
    PortalConfig {
        targets: vec![TargetInfo {
            name: TARGET.into(),
            alias: Some("test".into()),
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            iser_portals: vec![],
            acl: vec![],
            chap,
            groups: vec![],
            redirect: None,
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
        rbd: None,
    })
    .expect("ram backstore");
    let mut lc = LunConfig::new(store);
    lc.workers = 2;
    t.add_lun(0, lc).expect("add lun");
    t
}

/// Which driver the pair imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tcp,
    Iser,
}

/// The RDMA parameters iSER pairs use unless a test picks its own: small
/// RDMA operations so that multi-operation transfers are exercised.
pub fn iser_params() -> IserParams {
    IserParams {
        read_depth: 4,
        max_rdma_len: 4096,
        remote_invalidate: true,
    }
}

/// A buffer the simulated iSER initiator registered.
#[derive(Debug, Clone)]
pub struct Region {
    /// The address its first byte has.
    pub base: u64,
    pub bytes: Vec<u8>,
    /// High-water mark of RDMA Writes into it.
    pub written: usize,
    /// Retired by a Send with Invalidate.
    pub invalidated: bool,
}

/// What the target posted on an iSER connection, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted {
    /// A Send: the PDU opcode (or None for a HelloReply) and the STag it
    /// invalidated.
    Send(Option<Opcode>, Option<u32>),
    Write {
        itt: u32,
        len: usize,
    },
    Read {
        itt: u32,
        len: u32,
    },
}

/// Initiator side state plus the target connection under test.
pub struct Pair {
    pub mode: Mode,
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
    /// iSER: registered regions by STag.
    pub regions: HashMap<u32, Region>,
    next_stag: u32,
    /// iSER: the regions of each command, by ITT: (read, write).
    pub task_regions: HashMap<u32, (Option<u32>, Option<u32>)>,
    /// iSER: data for the next write command and how much of it the test
    /// sends unsolicited (immediate data and unsolicited Data-Out).
    staged_write: Option<(Vec<u8>, usize)>,
    /// iSER: keep RDMA Reads instead of answering them at once.
    pub hold_reads: bool,
    pub held_reads: Vec<RdmaRead>,
    /// iSER: place RDMA Reads straight in their destination when they
    /// have one (what a driver that registered it does) and answer with
    /// `read_done`; otherwise drop it and answer with the bytes.
    pub zero_copy_reads: bool,
    /// iSER: Reads answered by placing / by copying.
    pub reads_placed: u32,
    pub reads_copied: u32,
    /// iSER: every operation the target posted.
    pub posted: Vec<Posted>,
    /// iSER: Send messages not yet decoded by `replies`.
    rx_msgs: Vec<Vec<u8>>,
    pub hello_replies: Vec<HelloReply>,
}

impl std::fmt::Debug for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pair")
            .field("mode", &self.mode)
            .field("cmd_sn", &self.cmd_sn)
            .field("exp_stat_sn", &self.exp_stat_sn)
            .field("itt", &self.itt)
            .field("isid", &self.isid)
            .finish_non_exhaustive()
    }
}

impl Pair {
    pub fn new(cfg: PortalConfig) -> Pair {
        Self::with_mode(cfg, Mode::Tcp)
    }

    pub fn with_mode(cfg: PortalConfig, mode: Mode) -> Pair {
        Self::with_table_mode(cfg, Arc::new(Mutex::new(SessionTable::new())), 1, mode)
    }

    pub fn iser(cfg: PortalConfig, params: IserParams) -> Pair {
        Self::build(
            cfg,
            Arc::new(Mutex::new(SessionTable::new())),
            1,
            Mode::Iser,
            params,
        )
    }

    pub fn with_table(cfg: PortalConfig, table: Arc<Mutex<SessionTable>>, conn_id: u64) -> Pair {
        Self::with_table_mode(cfg, table, conn_id, Mode::Tcp)
    }

    pub fn with_table_mode(
        cfg: PortalConfig,
        table: Arc<Mutex<SessionTable>>,
        conn_id: u64,
        mode: Mode,
    ) -> Pair {
        Self::build(cfg, table, conn_id, mode, iser_params())
    }

    /// A connection from `peer` (`host:port`) sharing `table`.
    pub fn with_peer(
        cfg: PortalConfig,
        table: Arc<Mutex<SessionTable>>,
        conn_id: u64,
        mode: Mode,
        peer: &str,
    ) -> Pair {
        Self::build_from(cfg, table, conn_id, mode, iser_params(), peer)
    }

    fn build(
        cfg: PortalConfig,
        table: Arc<Mutex<SessionTable>>,
        conn_id: u64,
        mode: Mode,
        params: IserParams,
    ) -> Pair {
        Self::build_from(cfg, table, conn_id, mode, params, "127.0.0.1:50000")
    }

    fn build_from(
        cfg: PortalConfig,
        table: Arc<Mutex<SessionTable>>,
        conn_id: u64,
        mode: Mode,
        params: IserParams,
        peer: &str,
    ) -> Pair {
        let now = Instant::now();
        let setup = ConnectionSetup {
            conn_id,
            transport: match mode {
                Mode::Tcp => Transport::Tcp,
                Mode::Iser => Transport::Iser,
            },
            local_addr: "127.0.0.1:3260".into(),
            peer_addr: peer.into(),
            random: [7u8; 32],
        };
        let (done_tx, done_rx) = mpsc::channel();
        let conn = match mode {
            Mode::Tcp => Connection::new(Arc::new(cfg), table, setup, now),
            Mode::Iser => Connection::new_iser(Arc::new(cfg), table, setup, params, now),
        };
        Pair {
            mode,
            conn,
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
            regions: HashMap::new(),
            next_stag: 0x1000,
            task_regions: HashMap::new(),
            staged_write: None,
            hold_reads: false,
            held_reads: Vec::new(),
            zero_copy_reads: mode == Mode::Iser,
            reads_placed: 0,
            reads_copied: 0,
            posted: Vec::new(),
            rx_msgs: Vec::new(),
            hello_replies: Vec::new(),
        }
    }

    pub fn next_itt(&mut self) -> u32 {
        self.itt += 1;
        self.itt
    }

    /// Feed raw input to the target (stream bytes, or one whole iSER
    /// message) and run whatever it asks for.
    pub fn feed(&mut self, bytes: &[u8]) {
        match self.mode {
            Mode::Tcp => self.conn.handle_input(bytes, self.now),
            Mode::Iser => self.conn.handle_message(bytes, self.now),
        }
        self.pump();
    }

    pub fn send(&mut self, req: &Request) {
        self.send_with(req, ControlHeader::default());
    }

    /// Send a PDU; on iSER behind `remote` as its iSER header.
    pub fn send_with(&mut self, req: &Request, remote: ControlHeader) {
        let bytes = match self.mode {
            Mode::Tcp => req.encode(self.hd, self.dd),
            Mode::Iser => {
                let mut msg = remote.encode().to_vec();
                msg.extend_from_slice(&req.encode(false, false));
                msg
            }
        };
        self.feed(&bytes);
    }

    /// iSER: register `bytes` as a new region; returns its STag and base.
    pub fn register(&mut self, bytes: Vec<u8>) -> RemoteBuffer {
        self.next_stag += 0x100;
        let stag = self.next_stag;
        // Distinct, non-zero, unaligned-looking addresses per region.
        let base = 0x7f00_0000_0000 + u64::from(stag) * 0x10_0000 + 0x40;
        self.regions.insert(
            stag,
            Region {
                base,
                bytes,
                written: 0,
                invalidated: false,
            },
        );
        RemoteBuffer { stag, base }
    }

    /// iSER: the data of the next write command, of which the first
    /// `unsolicited` bytes go as immediate data and unsolicited Data-Out.
    pub fn stage_write(&mut self, data: Vec<u8>, unsolicited: usize) {
        self.staged_write = Some((data, unsolicited));
    }

    fn region_mut(&mut self, stag: u32, addr: u64, len: usize) -> (&mut Region, usize) {
        let r = self
            .regions
            .get_mut(&stag)
            .unwrap_or_else(|| panic!("RDMA with unknown STag {stag:#x}"));
        assert!(!r.invalidated, "RDMA with invalidated STag {stag:#x}");
        let off = addr
            .checked_sub(r.base)
            .unwrap_or_else(|| panic!("RDMA below region {stag:#x}")) as usize;
        assert!(
            off + len <= r.bytes.len(),
            "RDMA beyond region {stag:#x}: {off}+{len} > {}",
            r.bytes.len()
        );
        (r, off)
    }

    /// What an RDMA Read of the target returns.
    pub fn rdma_read(&mut self, r: &RdmaRead) -> Vec<u8> {
        let (region, off) = self.region_mut(r.stag, r.remote_addr, r.len as usize);
        region.bytes[off..off + r.len as usize].to_vec()
    }

    /// iSER: answer one RDMA Read: into its destination if it kept one
    /// (`placed` bytes of it, all by default), else with the bytes.
    pub fn answer_read(&mut self, r: RdmaRead, placed: Option<u32>) {
        let data = self.rdma_read(&r);
        match &r.dest {
            Some(dest) => {
                let n = placed.map_or(data.len(), |n| (n as usize).min(data.len()));
                assert!(n <= dest.len(), "a Read writes at most its destination");
                assert!(
                    dest.storage()
                        .is_some_and(|st| st.contains(dest.addr(), dest.len())),
                    "a Read's destination lies in the storage it names"
                );
                // SAFETY: this stands for the device's DMA of an RDMA Read:
                // `dest` keeps the write buffer's storage alive, and its
                // `len` bytes at `addr` belong to this Read alone (the core
                // neither reads nor writes them, nor moves the storage, while
                // a destination is out), so nothing else aliases them.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), dest.addr() as *mut u8, n);
                }
                self.reads_placed += 1;
                self.conn.read_done(r, n as u32);
            }
            None => {
                self.reads_copied += 1;
                self.conn.data_arrived(r.itt, r.ttt, &data);
            }
        }
    }

    /// iSER: answer the held RDMA Reads, oldest first.
    pub fn release_reads(&mut self) {
        let held = std::mem::take(&mut self.held_reads);
        for r in held {
            self.answer_read(r, None);
        }
        self.pump();
    }

    /// iSER: answer the oldest held RDMA Read; false if none is held.
    pub fn release_one(&mut self) -> bool {
        if self.held_reads.is_empty() {
            return false;
        }
        let r = self.held_reads.remove(0);
        self.answer_read(r, None);
        self.pump();
        true
    }

    fn run_iser_op(&mut self, op: IserOp) {
        match op {
            IserOp::Send(s) => {
                let opcode = match IserMessage::parse(&s.msg) {
                    Ok(IserMessage::Control { header, pdu }) => {
                        assert_eq!(
                            header,
                            ControlHeader::default(),
                            "target Sends carry no STags"
                        );
                        pdu.first().map(|b| Opcode(b & 0x3f))
                    }
                    Ok(IserMessage::HelloReply(r)) => {
                        self.hello_replies.push(r);
                        None
                    }
                    other => panic!("target sent {other:?}"),
                };
                if let Some(stag) = s.invalidate {
                    let r = self
                        .regions
                        .get_mut(&stag)
                        .unwrap_or_else(|| panic!("invalidate of unknown STag {stag:#x}"));
                    r.invalidated = true;
                }
                self.posted.push(Posted::Send(opcode, s.invalidate));
                if opcode.is_some() {
                    self.rx_msgs.push(s.msg.to_vec());
                }
            }
            IserOp::Write(w) => {
                if let Some(st) = w.storage {
                    assert!(
                        st.contains(w.data.as_ptr() as usize, w.data.len()),
                        "an RDMA Write's data lies in the storage it names"
                    );
                }
                self.posted.push(Posted::Write {
                    itt: w.itt,
                    len: w.data.len(),
                });
                let (region, off) = self.region_mut(w.stag, w.remote_addr, w.data.len());
                region.bytes[off..off + w.data.len()].copy_from_slice(&w.data);
                region.written = region.written.max(off + w.data.len());
            }
            IserOp::Read(mut r) => {
                self.posted.push(Posted::Read {
                    itt: r.itt,
                    len: r.len,
                });
                if let Some(dest) = &r.dest {
                    assert_eq!(dest.len(), r.len as usize, "a destination fits its Read");
                }
                if !self.zero_copy_reads {
                    // The copy path: the destination goes before the Read.
                    r.dest = None;
                }
                if self.hold_reads {
                    self.held_reads.push(r);
                } else {
                    self.answer_read(r, None);
                }
            }
        }
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
            while let Some(op) = self.conn.poll_op() {
                self.run_iser_op(op);
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
    }

    /// Decode every reply the target sent so far.
    pub fn replies(&mut self) -> Vec<Reply> {
        if self.mode == Mode::Iser {
            return self.iser_replies();
        }
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

    /// One PDU per Send, exactly framed, no digests.
    fn iser_replies(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        for msg in std::mem::take(&mut self.rx_msgs) {
            let pdu = &msg[rustgt_iscsi::iser::ISER_HEADER_LEN..];
            let (r, n) = Reply::decode(pdu, false, false)
                .unwrap_or_else(|e| panic!("target sent an undecodable PDU: {e}"));
            assert_eq!(n, pdu.len(), "one PDU per Send");
            if let Some(sn) = stat_sn_of(&r) {
                self.exp_stat_sn = sn.wrapping_add(1);
            }
            out.push(r);
        }
        out
    }

    pub fn login_request(
        &mut self,
        csg: Stage,
        nsg: Stage,
        transit: bool,
        keys: &[(&str, &str)],
    ) -> Request {
        let ids = LoginIds {
            isid: self.isid,
            tsih: 0,
            itt: 1,
            cid: 1,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        };
        login_request(ids, csg, nsg, transit, keys)
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

    /// Log in to the test target with no authentication, offering `ops`
    /// (and RDMAExtensions=Yes on iSER, as iSER initiators do).
    pub fn login(&mut self, ops: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut ops = ops.to_vec();
        if self.mode == Mode::Iser && !ops.iter().any(|(k, _)| *k == "RDMAExtensions") {
            ops.push(("RDMAExtensions", "Yes"));
        }
        let ops = &ops[..];
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
        let remote = self.command_buffers(itt, read, write, edtl, imm.len());
        let ids = CommandIds {
            lun: 0,
            itt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            read,
            write,
            final_bit,
            expected_data_len: edtl,
        };
        let req = scsi_command(ids, cdb, imm);
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.send_with(&req, remote);
        itt
    }

    /// iSER: register what a command needs, as Linux's initiator does: a
    /// read buffer of the expected length, and a write buffer advertised
    /// from its first solicited byte (when any data is solicited).
    fn command_buffers(
        &mut self,
        itt: u32,
        read: bool,
        write: bool,
        edtl: u32,
        immediate: usize,
    ) -> ControlHeader {
        if self.mode != Mode::Iser {
            return ControlHeader::default();
        }
        let mut h = ControlHeader::default();
        let mut ids = (None, None);
        if read && edtl > 0 {
            let b = self.register(vec![0u8; edtl as usize]);
            ids.0 = Some(b.stag);
            h.read = Some(b);
        }
        if write && edtl > 0 {
            let (data, unsolicited) = self
                .staged_write
                .take()
                .unwrap_or_else(|| (vec![0u8; edtl as usize], immediate));
            if unsolicited < data.len() {
                let b = self.register(data);
                ids.1 = Some(b.stag);
                h.write = Some(RemoteBuffer {
                    stag: b.stag,
                    base: b.base + unsolicited as u64,
                });
            }
        }
        self.task_regions.insert(itt, ids);
        h
    }

    /// WRITE(10) of `data` at `lba`, `immediate` bytes as immediate data,
    /// the rest as the transport solicits it: R2Ts answered with Data-Out
    /// PDUs of at most `max_pdu` bytes on TCP, RDMA Reads on iSER. Returns
    /// the SCSI status.
    pub fn write10(&mut self, lba: u32, data: &[u8], immediate: usize, max_pdu: usize) -> u8 {
        let blocks = (data.len() / 512) as u16;
        let imm = data[..immediate].to_vec();
        if self.mode == Mode::Iser {
            self.stage_write(data.to_vec(), immediate);
        }
        let itt = self.scsi_cmd(
            &write10_cdb(lba, blocks),
            false,
            true,
            data.len() as u32,
            imm,
            true,
        );
        let mut status = None;
        for _round in 0..10_000 {
            let replies = self.replies();
            if replies.is_empty() {
                break;
            }
            for r in replies {
                match r {
                    Reply::R2t(r2t) => {
                        assert_eq!(self.mode, Mode::Tcp, "no R2T PDU on iSER");
                        assert_eq!(r2t.itt, itt);
                        let mut off = r2t.buffer_offset as usize;
                        let end = off + r2t.desired_len as usize;
                        let mut sn = 0;
                        while off < end {
                            let n = max_pdu.min(end - off);
                            self.data_out(
                                itt,
                                r2t.ttt,
                                sn,
                                off as u32,
                                &data[off..off + n],
                                off + n == end,
                            );
                            sn += 1;
                            off += n;
                        }
                    }
                    Reply::ScsiResponse(s) => {
                        assert_eq!(s.itt, itt);
                        status = Some(s.status);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            if status.is_some() {
                break;
            }
        }
        status.expect("write status")
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
        let header = DataOut {
            final_bit,
            lun: 0,
            itt,
            ttt,
            exp_stat_sn: self.exp_stat_sn,
            data_sn,
            buffer_offset: offset,
        };
        let req = crate::pdu::data_out(header, data.to_vec());
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

    /// Gather Data-In and status for `itt` from the replies so far (on
    /// iSER the data is what RDMA Writes put in the command's read buffer).
    pub fn collect_result(&mut self, itt: u32) -> (u8, Vec<u8>, Vec<u8>) {
        let mut data = Vec::new();
        if self.mode == Mode::Iser {
            if let Some(r) = self
                .task_regions
                .get(&itt)
                .and_then(|(r, _)| *r)
                .and_then(|stag| self.regions.get(&stag))
            {
                data = r.bytes[..r.written].to_vec();
            }
        }
        let mut status = None;
        let mut sense = Vec::new();
        let mut next_sn = 0;
        for r in self.replies() {
            match r {
                Reply::DataIn(d) if d.itt == itt => {
                    assert_eq!(self.mode, Mode::Tcp, "no Data-In PDU on iSER");
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
