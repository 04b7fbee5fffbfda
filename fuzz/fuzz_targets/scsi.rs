//! CDB decoding through every SCSI handler: commands on RAM LUNs (LUN 0
//! thick, LUN 1 thin with 4K physical blocks and removable medium, LUN 2
//! absent), with arbitrary CDBs, buffer sizes, Data-Out, task attributes
//! and nexuses, some of them task management functions. Each input is a
//! sequence of up to 8 commands; the target is kept between inputs (like a
//! long-running daemon), so a crash may need the inputs before it.
#![no_main]

use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rustgt_backstore::{open, BackstoreSpec, EngineKind};
use rustgt_scsi::{Command, LunConfig, Nexus, ScsiTarget, Status, TaskAttr, TmfFunction};

const BLOCKS: u64 = 256;

fn ram(thin: bool) -> LunConfig {
    let store = open(&BackstoreSpec {
        kind: EngineKind::Ram,
        path: None,
        size: Some(BLOCKS * 512),
        block_size: 512,
        read_only: false,
        thin,
        rbd: None,
    })
    .expect("ram backstore");
    let mut c = LunConfig::new(store);
    c.workers = 1;
    c.thin = thin;
    c
}

fn target() -> &'static Arc<ScsiTarget> {
    static T: OnceLock<Arc<ScsiTarget>> = OnceLock::new();
    T.get_or_init(|| {
        let t = ScsiTarget::new("iqn.2026-11.org.rustgt:fuzz");
        t.add_lun(0, ram(false)).expect("lun 0");
        let mut thin = ram(true);
        thin.physical_block_size = Some(4096);
        thin.removable = true;
        t.add_lun(1, thin).expect("lun 1");
        t
    })
}

fn nexus(id: u64) -> Arc<Nexus> {
    Arc::new(Nexus {
        id,
        initiator_port: format!("iqn.2026-11.org.rustgt:fuzz{id},i,0x00023d000001"),
        target_port: "iqn.2026-11.org.rustgt:fuzz,t,0x0001".into(),
        relative_port_id: 1,
        port_group: 1,
        lun_map: None,
    })
}

fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(data.len());
    let (head, tail) = data.split_at(n);
    *data = tail;
    head
}

fuzz_target!(|input: &[u8]| {
    let t = target();
    let mut data = input;
    for _ in 0..8 {
        let head = take(&mut data, 5);
        let [sel, cdb_len, dil_hi, dil_lo, dout_len] =
            <[u8; 5]>::try_from(head).unwrap_or_default();
        if head.len() < 5 {
            return;
        }
        let lun = u64::from(sel & 3).min(2);
        let nexus = nexus(1 + u64::from((sel >> 2) & 1));
        let attr = match (sel >> 3) & 3 {
            0 => TaskAttr::Simple,
            1 => TaskAttr::Ordered,
            2 => TaskAttr::HeadOfQueue,
            _ => TaskAttr::Aca,
        };
        if sel & 0x80 != 0 && sel & 0x40 != 0 {
            let f = match cdb_len % 7 {
                0 => TmfFunction::AbortTaskSet,
                1 => TmfFunction::ClearTaskSet,
                2 => TmfFunction::LogicalUnitReset,
                3 => TmfFunction::TargetWarmReset,
                4 => TmfFunction::ClearAca,
                5 => TmfFunction::AbortTask {
                    tag: u64::from(dil_lo),
                },
                _ => TmfFunction::QueryTask {
                    tag: u64::from(dil_lo),
                },
            };
            let _ = t.task_management(&nexus, lun, f);
            continue;
        }
        let cdb = take(&mut data, usize::from(cdb_len % 33));
        // Buffer sizes up to 64 KiB, scaled by 512 when bit 5 says so.
        let mut data_in_len = u32::from(u16::from_be_bytes([dil_hi, dil_lo]));
        if sel & 0x20 != 0 {
            data_in_len = data_in_len.saturating_mul(512).min(1 << 20);
        }
        let data_out = take(&mut data, usize::from(dout_len) * 8).to_vec();
        let tag = u64::from(sel) << 32 | data.len() as u64;
        let cmd = Command {
            nexus,
            lun,
            tag,
            cdb: cdb.into(),
            attr,
            data_in_len,
            data_out: data_out.into(),
        };
        let r = match t.run_inline(cmd, None) {
            Ok(r) => r,
            Err(cmd) => {
                let (tx, rx) = mpsc::channel();
                t.submit(
                    cmd,
                    Box::new(move |r| {
                        let _ = tx.send(r);
                    }),
                );
                rx.recv_timeout(Duration::from_secs(30))
                    .expect("a submitted command completes")
            }
        };
        assert_eq!(r.tag, tag);
        assert!(r.data_in.len() as u64 <= u64::from(data_in_len));
        if r.status == Status::CHECK_CONDITION {
            assert!(
                matches!(r.sense.first(), Some(0x70 | 0x72 | 0xF0)),
                "sense {:02x?}",
                r.sense
            );
        } else if !r.aborted {
            assert!(r.sense.is_empty());
        }
    }
});
