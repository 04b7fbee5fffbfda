//! Test harness: an in-memory `Vec<u8>` backstore with a gate that can hold
//! I/O (for task management tests), and helpers to run commands through a
//! real `ScsiTarget` and wait for their single completion.

#![allow(dead_code, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustgt_backstore::{Backstore, BackstoreError, Geometry, Result as BsResult};
use rustgt_scsi::{Command, LunConfig, Nexus, Response, ScsiTarget, TaskAttr};

/// A `Vec<u8>` store. While the gate is closed, reads and writes block.
#[derive(Debug)]
pub struct MockStore {
    pub data: Mutex<Vec<u8>>,
    pub block_size: u32,
    pub read_only: bool,
    pub flushes: AtomicUsize,
    pub fua_writes: AtomicUsize,
    pub plain_writes: AtomicUsize,
    /// I/O calls currently blocked at the gate.
    pub waiting: AtomicUsize,
    gate: Mutex<bool>,
    gate_cv: Condvar,
    fail_reads: Mutex<bool>,
}

impl MockStore {
    pub fn new(blocks: u64, block_size: u32, read_only: bool) -> Arc<MockStore> {
        Arc::new(MockStore {
            data: Mutex::new(vec![0; (blocks * u64::from(block_size)) as usize]),
            block_size,
            read_only,
            flushes: AtomicUsize::new(0),
            fua_writes: AtomicUsize::new(0),
            plain_writes: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            gate: Mutex::new(true),
            gate_cv: Condvar::new(),
            fail_reads: Mutex::new(false),
        })
    }

    pub fn close_gate(&self) {
        *self.gate.lock().unwrap() = false;
    }

    pub fn open_gate(&self) {
        *self.gate.lock().unwrap() = true;
        self.gate_cv.notify_all();
    }

    pub fn fail_reads(&self, fail: bool) {
        *self.fail_reads.lock().unwrap() = fail;
    }

    /// Waits until `n` I/O calls are blocked at the gate.
    pub fn wait_blocked(&self, n: usize) {
        for _ in 0..500 {
            if self.waiting.load(Ordering::SeqCst) >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("I/O never reached the gate");
    }

    fn pass_gate(&self) {
        let mut open = self.gate.lock().unwrap();
        if !*open {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            while !*open {
                open = self.gate_cv.wait(open).unwrap();
            }
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn range(&self, offset: u64, len: usize) -> BsResult<std::ops::Range<usize>> {
        let size = self.data.lock().unwrap().len() as u64;
        let end = offset.checked_add(len as u64).filter(|&e| e <= size);
        match end {
            Some(end) => Ok(offset as usize..end as usize),
            None => Err(BackstoreError::OutOfRange {
                offset,
                len: len as u64,
            }),
        }
    }
}

impl Backstore for MockStore {
    fn kind(&self) -> &'static str {
        "mock"
    }

    fn geometry(&self) -> Geometry {
        let len = self.data.lock().unwrap().len() as u64;
        Geometry {
            block_size: self.block_size,
            num_blocks: len / u64::from(self.block_size),
            read_only: self.read_only,
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> BsResult<()> {
        self.pass_gate();
        if *self.fail_reads.lock().unwrap() {
            return Err(BackstoreError::Read(std::io::Error::other("injected")));
        }
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.data.lock().unwrap()[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> BsResult<()> {
        self.pass_gate();
        if self.read_only {
            return Err(BackstoreError::ReadOnly);
        }
        let r = self.range(offset, buf.len())?;
        self.data.lock().unwrap()[r].copy_from_slice(buf);
        if fua {
            self.fua_writes.fetch_add(1, Ordering::SeqCst);
        } else {
            self.plain_writes.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    fn flush(&self) -> BsResult<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

pub fn nexus(id: u64) -> Arc<Nexus> {
    Arc::new(Nexus {
        id,
        initiator_port: format!("iqn.2026-01.test:init{id},i,0x00023d000001"),
        target_port: "iqn.2026-11.org.rustgt:test,t,0x0001".to_string(),
        relative_port_id: 1,
        port_group: 1,
        lun_map: None,
    })
}

/// A target with one LUN backed by a `MockStore`.
pub struct Harness {
    pub target: Arc<ScsiTarget>,
    pub store: Arc<MockStore>,
    pub nexus: Arc<Nexus>,
    next_tag: AtomicUsize,
}

pub const BLOCKS: u64 = 64;
pub const BS: u32 = 512;

impl Harness {
    pub fn new() -> Harness {
        Harness::with(BLOCKS, BS, false, 2)
    }

    pub fn with(blocks: u64, bs: u32, read_only: bool, workers: usize) -> Harness {
        let store = MockStore::new(blocks, bs, read_only);
        let target = ScsiTarget::new("test");
        let mut cfg = LunConfig::new(store.clone());
        cfg.workers = workers;
        cfg.serial = "SN0001".into();
        cfg.naa_id = 0xABCD;
        target.add_lun(0, cfg).unwrap();
        Harness {
            target,
            store,
            nexus: nexus(1),
            next_tag: AtomicUsize::new(1),
        }
    }

    pub fn cmd(&self, cdb: &[u8], data_in_len: u32, data_out: Vec<u8>) -> Command {
        self.cmd_on(&self.nexus, 0, cdb, data_in_len, data_out)
    }

    pub fn cmd_on(
        &self,
        nexus: &Arc<Nexus>,
        lun: u64,
        cdb: &[u8],
        data_in_len: u32,
        data_out: Vec<u8>,
    ) -> Command {
        Command {
            nexus: nexus.clone(),
            lun,
            tag: self.next_tag.fetch_add(1, Ordering::SeqCst) as u64,
            cdb: cdb.to_vec().into(),
            attr: TaskAttr::Simple,
            data_in_len,
            data_out: data_out.into(),
        }
    }

    /// Submits and waits for the completion.
    pub fn exec(&self, cmd: Command) -> Response {
        submit_wait(&self.target, cmd)
    }

    pub fn run(&self, cdb: &[u8], data_in_len: u32, data_out: Vec<u8>) -> Response {
        self.exec(self.cmd(cdb, data_in_len, data_out))
    }

    pub fn run_on(&self, nexus: &Arc<Nexus>, lun: u64, cdb: &[u8], data_in_len: u32) -> Response {
        self.exec(self.cmd_on(nexus, lun, cdb, data_in_len, Vec::new()))
    }
}

/// Submits and waits (bounded) for exactly one completion.
pub fn submit_wait(target: &ScsiTarget, cmd: Command) -> Response {
    let rx = submit(target, cmd);
    let resp = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no completion");
    assert!(rx.try_recv().is_err(), "second completion");
    resp
}

/// Submits and returns the channel the completion arrives on.
pub fn submit(target: &ScsiTarget, cmd: Command) -> mpsc::Receiver<Response> {
    let (tx, rx) = mpsc::channel();
    target.submit(
        cmd,
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx
}

/// (sense key, ASC, ASCQ) of fixed or descriptor sense data.
pub fn sense_of(r: &Response) -> (u8, u8, u8) {
    let s = &r.sense;
    match s.first().map(|b| b & 0x7F) {
        Some(0x70) => (s[2] & 0x0F, s[12], s[13]),
        Some(0x72) => (s[1] & 0x0F, s[2], s[3]),
        _ => panic!("no sense data: {r:?}"),
    }
}

pub fn cdb10(op: u8, flags: u8, lba: u32, blocks: u16) -> Vec<u8> {
    let mut c = vec![0u8; 10];
    c[0] = op;
    c[1] = flags;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[7..9].copy_from_slice(&blocks.to_be_bytes());
    c
}

pub fn cdb12(op: u8, flags: u8, lba: u32, blocks: u32) -> Vec<u8> {
    let mut c = vec![0u8; 12];
    c[0] = op;
    c[1] = flags;
    c[2..6].copy_from_slice(&lba.to_be_bytes());
    c[6..10].copy_from_slice(&blocks.to_be_bytes());
    c
}

pub fn cdb16(op: u8, flags: u8, lba: u64, blocks: u32) -> Vec<u8> {
    let mut c = vec![0u8; 16];
    c[0] = op;
    c[1] = flags;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

pub const CHECK: u8 = 0x02;
pub const ILLEGAL: u8 = 0x05;
pub const UNIT_ATTENTION: u8 = 0x06;
