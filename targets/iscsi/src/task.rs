//! Per-command state inside a connection: Data-Out collection with R2T
//! sequencing for writes (RFC 7143 §4.2.4, §11.7, §11.8; on iSER the R2Ts
//! are virtual and become RDMA Reads, RFC 7145 §7.3.6), and Data-In
//! sequencing for reads (§11.7).

use std::collections::VecDeque;

use rustgt_scsi::{IoBuf, Residual};

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
/// alone; it grows by doubling, up to that length.
#[derive(Debug, Default)]
pub(crate) struct WriteBuf {
    buf: IoBuf,
    filled: usize,
}

impl WriteBuf {
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Room for `end` bytes in all (at most `limit`, the EDTL).
    pub fn reserve_to(&mut self, end: usize, limit: usize) {
        let end = end.min(limit);
        if end <= self.buf.len() {
            return;
        }
        let want = end.max(self.buf.len().saturating_mul(2)).min(limit);
        let mut bigger = IoBuf::for_overwrite(want);
        if let (Some(dst), Some(src)) = (bigger.get_mut(..self.filled), self.buf.get(..self.filled))
        {
            dst.copy_from_slice(src);
        }
        self.buf = bigger;
    }

    /// Appends `data` (the caller checked that it fits within `limit`).
    pub fn append(&mut self, data: &[u8], limit: usize) {
        let end = self.filled.saturating_add(data.len());
        self.reserve_to(end, limit.max(end));
        if let Some(dst) = self.buf.get_mut(self.filled..end) {
            dst.copy_from_slice(data);
            self.filled = end;
        }
    }

    /// The data received, for the SCSI core.
    pub fn into_data(mut self) -> IoBuf {
        self.buf.truncate(self.filled);
        self.buf
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
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    pub lun: u64,
    pub immediate: bool,
    /// Number of R2Ts sent for it (part of ExpDataSN in the response).
    pub r2t_count: u32,
    /// The command's iSER buffers (none on TCP).
    pub remote: ControlHeader,
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
        assert!(w.buf.len() < edtl, "{}", w.buf.len());
        // An R2T for the next 256 KiB makes room for it at once.
        w.reserve_to(8192 + 256 * 1024, edtl);
        assert!(w.buf.len() >= 8192 + 256 * 1024);
        let before = w.buf.as_ptr();
        w.append(&[8u8; 256 * 1024], edtl);
        assert_eq!(
            w.buf.as_ptr(),
            before,
            "solicited data lands without a copy"
        );
        // Growth stops at the EDTL, whatever is asked.
        w.reserve_to(usize::MAX, edtl);
        assert_eq!(w.buf.len(), edtl);
        let data = w.into_data();
        assert_eq!(data.len(), 8192 + 256 * 1024);
        assert!(data.get(..8192).is_some_and(|d| d.iter().all(|&b| b == 7)));
        assert!(data.get(8192..).is_some_and(|d| d.iter().all(|&b| b == 8)));
        // A 4 KiB write with immediate data: one buffer of exactly 4 KiB.
        let mut small = WriteBuf::default();
        small.append(&[1u8; 4096], 4096);
        assert_eq!(small.into_data().len(), 4096);
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
