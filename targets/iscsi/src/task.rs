//! Per-command state inside a connection: Data-Out collection with R2T
//! sequencing for writes (RFC 7143 §4.2.4, §11.7, §11.8; on iSER the R2Ts
//! are virtual and become RDMA Reads, RFC 7145 §7.3.6), and Data-In
//! sequencing for reads (§11.7).

use std::collections::VecDeque;
use std::sync::Arc;

use rustgt_scsi::{BufStorage, IoBuf, Residual, MAX_POOLED};

use crate::budget::Grant;
use crate::iser::ControlHeader;
use crate::pdu::{DataIn, ScsiCommand};

/// An R2T the target has sent and not yet seen all data for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenR2t {
    pub ttt: u32,
    pub offset: u32,
    pub len: u32,
    pub received: u32,
    pub next_data_sn: u32,
}

/// The Data-Out of one write as it arrives, in a pooled buffer. It holds
/// room for what arrived and for what was solicited (R2T, RDMA Read), never
/// for the whole Expected Data Transfer Length on the initiator's word
/// alone; it grows by doubling, up to that length, inside its storage when
/// the pool's size class leaves room.
///
/// On iSER the storage may be lent to RDMA Reads ([`ReadDest`]): then it
/// is shared by the task and every Read posted into it, neither moves nor
/// grows, and nobody reads or writes its bytes; the task takes it back
/// when it holds the only reference again (every such Read returned, or
/// was copied instead). Dropping the task while Reads hold it only drops
/// the task's reference: the storage goes back to the pool with the last
/// Read's.
#[derive(Debug, Default)]
pub(crate) struct WriteBuf {
    store: Store,
    /// Bytes received in order from offset 0: in the storage, or stashed.
    filled: usize,
    /// Copied data that arrived while the storage was lent to later Reads
    /// (offset, bytes), written in when it comes back. Only solicited Read
    /// data or in-order unsolicited data, so bounded like them.
    stash: Vec<(usize, Vec<u8>)>,
}

#[derive(Debug)]
enum Store {
    Own(IoBuf),
    Lent(Arc<Lent>),
}

impl Default for Store {
    fn default() -> Self {
        Store::Own(IoBuf::default())
    }
}

/// A write's storage while RDMA Reads may land in it. Its bytes are never
/// borrowed while it is shared: only its address and storage are read.
#[derive(Debug)]
struct Lent(IoBuf);

/// Where one RDMA Read of Data-Out may land: `len` bytes at [`addr`]
/// inside a pooled write buffer, which this value keeps alive. The range
/// belongs to this Read alone (the task's other Reads have disjoint ones,
/// and the task touches none of it) until the value is dropped or handed
/// back with [`crate::Connection::read_done`].
///
/// A driver either posts the Read into it and holds it until the Read's
/// completion (or the flush of its queue pair, or the queue pair's
/// destruction), or drops it and copies: then the data goes back with
/// [`crate::Connection::data_arrived`].
///
/// [`addr`]: ReadDest::addr
#[derive(Debug, Clone)]
pub struct ReadDest {
    buf: Arc<Lent>,
    offset: usize,
    len: usize,
}

impl ReadDest {
    /// Address of the first byte the Read may write.
    pub fn addr(&self) -> usize {
        self.buf.0.data_addr().saturating_add(self.offset)
    }

    /// Bytes the Read may write: exactly the `len` of its [`crate::RdmaRead`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pooled storage the range lies in (what a driver registers).
    pub fn storage(&self) -> Option<BufStorage> {
        self.buf.0.storage()
    }
}

impl PartialEq for ReadDest {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf) && self.offset == other.offset && self.len == other.len
    }
}

impl Eq for ReadDest {}

impl WriteBuf {
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Bytes the storage has room for now.
    #[cfg(test)]
    fn room(&self) -> usize {
        match &self.store {
            Store::Own(b) => b.len(),
            Store::Lent(l) => l.0.len(),
        }
    }

    /// Bytes the storage can hold without moving: its length, or more up
    /// to the end of its pooled storage (the pool's size class).
    fn capacity(&self) -> usize {
        match &self.store {
            Store::Own(b) => b.capacity_in_place(),
            Store::Lent(l) => l.0.capacity_in_place(),
        }
    }

    /// The storage is lent to Reads that have not come back.
    pub fn lent(&self) -> bool {
        matches!(&self.store, Store::Lent(l) if Arc::strong_count(l) > 1)
    }

    /// Owns the storage again if no Read holds it any more, and writes the
    /// stashed data in. False while some Read still holds it.
    pub fn take_back(&mut self) -> bool {
        if let Store::Lent(_) = self.store {
            let Store::Lent(l) = std::mem::take(&mut self.store) else {
                return false;
            };
            match Arc::try_unwrap(l) {
                Ok(Lent(b)) => self.store = Store::Own(b),
                Err(l) => {
                    self.store = Store::Lent(l);
                    return false;
                }
            }
        }
        for (at, data) in std::mem::take(&mut self.stash) {
            let end = at.saturating_add(data.len());
            self.grow_owned(end, end);
            if let Store::Own(b) = &mut self.store {
                if let Some(dst) = b.get_mut(at..end) {
                    dst.copy_from_slice(&data);
                }
            }
        }
        true
    }

    /// Room for `end` bytes in an owned storage: in place when the storage
    /// allows, else in a bigger one that gets what was filled.
    fn grow_owned(&mut self, end: usize, limit: usize) {
        let Store::Own(buf) = &mut self.store else {
            return;
        };
        // Reads may have placed data past the length, inside the storage.
        let _ = buf.grow_in_place(self.filled);
        if end <= buf.len() || buf.grow_in_place(end) {
            return;
        }
        // Pooled storage comes in power-of-two classes, so growth to `end`
        // doubles by itself; past the pool, double explicitly.
        let want = if end <= MAX_POOLED {
            end
        } else {
            end.max(buf.len().saturating_mul(2)).min(limit.max(end))
        };
        let mut bigger = IoBuf::for_overwrite(want);
        let keep = self.filled.min(buf.len());
        if let (Some(dst), Some(src)) = (bigger.get_mut(..keep), buf.get(..keep)) {
            dst.copy_from_slice(src);
        }
        *buf = bigger;
    }

    /// Room for `end` bytes in all (at most `limit`, the EDTL). False when
    /// it needs growing while Reads hold the storage: it cannot move then.
    pub fn reserve_to(&mut self, end: usize, limit: usize) -> bool {
        let end = end.min(limit);
        if end <= self.capacity() {
            // In place: no move, so fine even while Reads hold it.
            self.grow_owned(end, limit);
            return true;
        }
        if !self.take_back() {
            return false;
        }
        self.grow_owned(end, limit);
        true
    }

    /// Appends `data` (the caller checked that it fits within `limit`);
    /// stashed if Reads hold the storage.
    pub fn append(&mut self, data: &[u8], limit: usize) {
        let at = self.filled;
        let end = at.saturating_add(data.len());
        if self.take_back() && self.reserve_to(end, limit.max(end)) {
            if let Store::Own(b) = &mut self.store {
                if let Some(dst) = b.get_mut(at..end) {
                    dst.copy_from_slice(data);
                    self.filled = end;
                    return;
                }
            }
        }
        self.stash.push((at, data.to_vec()));
        self.filled = end;
    }

    /// A Read destination for bytes `offset..offset + len`, if the storage
    /// already has room for them and is pooled (the only kind a driver
    /// can register). The storage is lent from now on.
    pub fn dest(&mut self, offset: usize, len: usize) -> Option<ReadDest> {
        let end = offset.checked_add(len)?;
        if len == 0 || end > self.capacity() {
            return None;
        }
        if let Store::Own(b) = &self.store {
            b.storage()?;
            let Store::Own(b) = std::mem::take(&mut self.store) else {
                return None;
            };
            self.store = Store::Lent(Arc::new(Lent(b)));
        }
        let Store::Lent(l) = &self.store else {
            return None;
        };
        l.0.storage()?;
        Some(ReadDest {
            buf: Arc::clone(l),
            offset,
            len,
        })
    }

    /// A Read into this buffer placed `len` more bytes in order.
    pub fn placed(&mut self, len: usize) {
        self.filled = self.filled.saturating_add(len);
    }

    /// The data received, for the SCSI core; None (and the buffer dropped)
    /// if some Read still holds the storage, which a driver keeping its
    /// rules never lets happen once all data has arrived.
    pub fn into_data(mut self) -> Option<IoBuf> {
        if !self.take_back() {
            return None;
        }
        let filled = self.filled;
        self.grow_owned(filled, filled);
        match std::mem::take(&mut self.store) {
            Store::Own(mut b) => {
                b.truncate(self.filled);
                Some(b)
            }
            Store::Lent(_) => None,
        }
    }
}

/// A command still collecting its Data-Out buffer.
#[derive(Debug)]
pub(crate) struct WriteTask {
    pub cmd: ScsiCommand,
    pub lun: u64,
    /// Data received so far, in order (we negotiate DataPDUInOrder=Yes and
    /// DataSequenceInOrder=Yes, so offsets must arrive ascending).
    pub buf: WriteBuf,
    /// Unsolicited Data-Out may still arrive (F bit not yet seen).
    pub unsolicited_open: bool,
    pub unsolicited_data_sn: u32,
    /// Next offset to ask for with an R2T.
    pub next_r2t_offset: u32,
    pub r2ts: VecDeque<OpenR2t>,
    /// R2T PDUs sent (TCP; iSER sends none).
    pub r2t_sn: u32,
    /// The command's iSER buffers (none on TCP).
    pub remote: ControlHeader,
    /// iSER: the buffer offset the write buffer's first byte stands for
    /// (the first solicited byte), fixed by the first RDMA Read.
    pub solicited_base: Option<u32>,
    /// Its part of the data buffer budget ([`crate::budget`]).
    pub grant: Grant,
    /// The budget admitted its whole length: it may be solicited.
    pub admitted: bool,
    /// Since when R2Ts of it are out with no Data-Out for them (TCP).
    pub stalled_since: Option<std::time::Instant>,
}

impl WriteTask {
    pub fn edtl(&self) -> u32 {
        self.cmd.expected_data_len
    }

    pub fn received(&self) -> u32 {
        u32::try_from(self.buf.filled()).unwrap_or(u32::MAX)
    }

    pub fn complete(&self) -> bool {
        self.received() >= self.edtl()
    }
}

/// State kept for a command handed to the SCSI core, until its response.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub lun: u64,
    pub immediate: bool,
    /// Number of R2Ts sent for it (part of ExpDataSN in the response).
    pub r2t_count: u32,
    /// The command's iSER buffers (none on TCP).
    pub remote: ControlHeader,
    /// A write's part of the data buffer budget, held until the SCSI core
    /// has answered (its buffer lives that long).
    pub grant: Option<Grant>,
}

/// Residual fields as iSCSI carries them: (overflow, underflow, count).
pub(crate) fn residual_bits(r: Residual) -> (bool, bool, u32) {
    match r {
        Residual::None => (false, false, 0),
        Residual::Underflow(n) => (false, true, n),
        Residual::Overflow(n) => (true, false, n),
    }
}

/// One Data-In PDU of a read: header fields plus the byte range of the
/// response buffer it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DataInSlice {
    pub pdu: DataIn,
    pub range: std::ops::Range<usize>,
}

/// Split `len` bytes of Data-In into PDUs of at most `max_pdu` bytes, with
/// the F bit at each `max_burst` boundary and on the last PDU (RFC 7143
/// §11.7.1). Status fields are left for the caller to set on the last PDU.
/// An iterator, so a read's PDUs cost no allocation.
pub(crate) fn data_in_pdus(
    itt: u32,
    lun_raw: u64,
    len: usize,
    max_pdu: u32,
    max_burst: u32,
) -> DataInPdus {
    DataInPdus {
        itt,
        lun_raw,
        len,
        max_pdu: max_pdu.max(512) as usize,
        max_burst: max_burst.max(512) as usize,
        offset: 0,
        data_sn: 0,
    }
}

/// The Data-In PDUs of one read, in order; see [`data_in_pdus`].
#[derive(Debug, Clone)]
pub(crate) struct DataInPdus {
    itt: u32,
    lun_raw: u64,
    len: usize,
    max_pdu: usize,
    max_burst: usize,
    offset: usize,
    data_sn: u32,
}

impl Iterator for DataInPdus {
    type Item = DataInSlice;

    fn next(&mut self) -> Option<DataInSlice> {
        if self.offset >= self.len {
            return None;
        }
        let offset = self.offset;
        // Never let a PDU cross a burst boundary.
        let burst_left = self.max_burst - (offset % self.max_burst);
        let end = offset + self.max_pdu.min(burst_left).min(self.len - offset);
        let slice = DataInSlice {
            pdu: DataIn {
                final_bit: end == self.len || end % self.max_burst == 0,
                ack: false,
                overflow: false,
                underflow: false,
                has_status: false,
                status: 0,
                lun: self.lun_raw,
                itt: self.itt,
                ttt: crate::pdu::RESERVED_TAG,
                stat_sn: 0,
                exp_cmd_sn: 0,
                max_cmd_sn: 0,
                data_sn: self.data_sn,
                buffer_offset: u32::try_from(offset).unwrap_or(u32::MAX),
                residual: 0,
                data: Vec::new(),
            },
            range: offset..end,
        };
        self.data_sn = self.data_sn.wrapping_add(1);
        self.offset = end;
        Some(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_buffer_grows_with_data_and_solicitation_never_past_the_edtl() {
        let edtl = 1 << 20;
        let mut w = WriteBuf::default();
        // Immediate data: room for what came, not for the whole EDTL.
        w.append(&[7u8; 8192], edtl);
        assert_eq!(w.filled(), 8192);
        assert!(w.room() < edtl, "{}", w.room());
        // An R2T for the next 256 KiB makes room for it at once.
        assert!(w.reserve_to(8192 + 256 * 1024, edtl));
        assert!(w.room() >= 8192 + 256 * 1024);
        let before = own(&w).as_ptr();
        w.append(&[8u8; 256 * 1024], edtl);
        assert_eq!(
            own(&w).as_ptr(),
            before,
            "solicited data lands without a copy"
        );
        // Growth stops at the EDTL, whatever is asked.
        assert!(w.reserve_to(usize::MAX, edtl));
        assert_eq!(w.room(), edtl);
        let data = w.into_data().expect("owned");
        assert_eq!(data.len(), 8192 + 256 * 1024);
        assert!(data.get(..8192).is_some_and(|d| d.iter().all(|&b| b == 7)));
        assert!(data.get(8192..).is_some_and(|d| d.iter().all(|&b| b == 8)));
        // A 4 KiB write with immediate data: one buffer of exactly 4 KiB.
        let mut small = WriteBuf::default();
        small.append(&[1u8; 4096], 4096);
        assert_eq!(small.into_data().map(|d| d.len()), Some(4096));
    }

    fn own(w: &WriteBuf) -> &IoBuf {
        match &w.store {
            Store::Own(b) => b,
            Store::Lent(_) => panic!("lent"),
        }
    }

    fn lent_storage(w: &WriteBuf) -> Option<BufStorage> {
        match &w.store {
            Store::Own(_) => None,
            Store::Lent(l) => l.0.storage(),
        }
    }

    #[test]
    fn reads_get_disjoint_ranges_of_storage_that_neither_moves_nor_grows() {
        let edtl = 1 << 20;
        let mut w = WriteBuf::default();
        w.append(&[1u8; 4096], edtl);
        assert!(w.reserve_to(4096 + 2 * 65536, edtl));
        let a = w.dest(4096, 65536).expect("room and pooled");
        let b = w.dest(4096 + 65536, 65536).expect("room and pooled");
        assert!(w.lent());
        assert_eq!(a.storage(), b.storage());
        let st = a.storage().expect("pooled");
        assert_eq!(b.addr(), a.addr() + 65536, "disjoint, in order");
        assert!(st.contains(a.addr(), a.len()) && st.contains(b.addr(), b.len()));
        // Past what the storage holds: no destination (copy path), and no
        // growth while the Reads hold it.
        let cap = w.capacity();
        assert!(cap < edtl);
        assert!(w.dest(cap, 4096).is_none());
        assert!(!w.reserve_to(cap + 1, edtl), "cannot move while lent");
        // Inside it, but past the length asked for: in place, no move.
        assert!(w.dest(cap - 4096, 4096).is_some());
        assert_eq!(lent_storage(&w), Some(st));
        assert!(!w.take_back());
        drop(a);
        assert!(!w.take_back(), "one Read still holds it");
        w.placed(65536);
        w.placed(65536);
        drop(b);
        assert!(w.take_back());
        assert_eq!(own(&w).storage(), Some(st), "the same storage comes back");
        assert!(w.reserve_to(cap + 1, edtl), "and grows again");
        let data = w.into_data().expect("owned");
        assert_eq!(data.len(), 4096 + 2 * 65536);
        assert!(data.get(..4096).is_some_and(|d| d.iter().all(|&b| b == 1)));
    }

    #[test]
    fn dropping_a_task_with_reads_out_leaves_its_storage_to_them() {
        let mut w = WriteBuf::default();
        assert!(w.reserve_to(65536, 65536));
        let d = w.dest(0, 65536).expect("pooled");
        let st = d.storage();
        // The task is aborted: its reference goes, the Read's keeps the
        // storage (the pool cannot hand it out again yet).
        drop(w);
        assert_eq!(Arc::strong_count(&d.buf), 1);
        assert_eq!(d.storage(), st);
        assert!(d.buf.0.storage().is_some());
    }

    #[test]
    fn copied_data_that_arrives_while_lent_is_stashed_then_written_in() {
        let edtl = 3 * 4096;
        let mut w = WriteBuf::default();
        assert!(w.reserve_to(edtl, edtl));
        // First Read's dest dropped (the driver copies), second one lent.
        drop(w.dest(0, 4096));
        let second = w.dest(4096, 4096).expect("pooled");
        w.append(&[5u8; 4096], edtl);
        assert_eq!(w.filled(), 4096);
        assert_eq!(w.stash.len(), 1, "the storage is lent: stashed");
        w.placed(4096);
        drop(second);
        // A Read that never had a destination: storage is back, so the
        // stash is written in and this lands directly.
        w.append(&[6u8; 4096], edtl);
        assert!(w.stash.is_empty());
        let data = w.into_data().expect("owned");
        assert_eq!(data.len(), edtl);
        assert!(data.get(..4096).is_some_and(|d| d.iter().all(|&b| b == 5)));
        assert!(data.get(8192..).is_some_and(|d| d.iter().all(|&b| b == 6)));
    }

    #[test]
    fn unpooled_storage_gets_no_destination_and_a_held_one_keeps_the_data() {
        // Past the pool's largest class: a plain vector, nothing to register.
        let big = rustgt_scsi::IoBuf::for_overwrite(0).len() + (32 << 20);
        let mut w = WriteBuf::default();
        assert!(w.reserve_to(big, big));
        assert!(w.dest(0, 4096).is_none());
        assert!(!w.lent());
        // A destination still held when the data is wanted: none is given.
        let mut w = WriteBuf::default();
        assert!(w.reserve_to(4096, 4096));
        let d = w.dest(0, 4096);
        w.placed(4096);
        assert!(w.into_data().is_none());
        drop(d);
    }

    #[test]
    fn data_in_respects_pdu_and_burst_limits() {
        let len = 10_000;
        let pdus: Vec<DataInSlice> = data_in_pdus(7, 0, len, 1024, 4096).collect();
        assert_eq!(pdus.len(), 10);
        let mut off = 0;
        for (i, p) in pdus.iter().enumerate() {
            assert_eq!(p.pdu.data_sn, i as u32);
            assert_eq!(p.pdu.buffer_offset as usize, off);
            assert_eq!(p.range.start, off);
            assert!(p.range.len() <= 1024);
            let end = p.range.end;
            assert_eq!(p.pdu.final_bit, end % 4096 == 0 || end == len);
            off = end;
        }
        assert_eq!(off, len);
        assert_eq!(data_in_pdus(1, 0, 0, 1024, 4096).count(), 0);
    }
}
