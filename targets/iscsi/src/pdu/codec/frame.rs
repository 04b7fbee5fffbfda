//! Framing of one PDU on a byte stream: padding, wire lengths of a BHS,
//! splitting a PDU off a buffer (with digest checks) and appending one
//! (with digests), and the [`Framing`] around a payload sent in place.

use crate::pdu::bhs::{Bhs, BHS_LEN};
use crate::pdu::error::PduError;

use super::digest::{digest_wire_bytes, verify_digest, DIGEST_LEN};

/// Largest DataSegmentLength the 24-bit field can express (§11.2.1.5).
pub const MAX_DATA_SEGMENT_LEN: usize = 0x00ff_ffff;
/// Largest total AHS length: 255 four-byte words (§11.2.1.4).
pub const MAX_AHS_LEN: usize = 255 * 4;

/// Rounds `n` up to a multiple of 4 (PDU segments are padded to 4-byte words,
/// §11.2.3). Saturates near `usize::MAX`.
pub fn padded_len(n: usize) -> usize {
    n.checked_next_multiple_of(4).unwrap_or(usize::MAX)
}

/// The bytes around a payload sent as its own segment: the header (with
/// its digest) and the trailer (pad and data digest), on the stack.
#[derive(Debug, Clone, Copy)]
pub struct Framing {
    head: [u8; BHS_LEN + DIGEST_LEN],
    head_len: usize,
    tail: [u8; 3 + DIGEST_LEN],
    tail_len: usize,
}

impl Default for Framing {
    fn default() -> Framing {
        Framing {
            head: [0; BHS_LEN + DIGEST_LEN],
            head_len: 0,
            tail: [0; 3 + DIGEST_LEN],
            tail_len: 0,
        }
    }
}

impl Framing {
    /// The framing of one PDU whose `header` (BHS with lengths set, no AHS)
    /// is followed by `payload`: the header and its digest if
    /// `header_digest`; the pad bytes and, if `data_digest` and the payload
    /// is not empty, the data digest over payload and pad.
    pub(super) fn around(
        header: &[u8; BHS_LEN],
        payload: &[u8],
        header_digest: bool,
        data_digest: bool,
    ) -> Framing {
        let len = payload.len();
        let mut f = Framing::default();
        f.head[..BHS_LEN].copy_from_slice(header);
        f.head_len = BHS_LEN;
        if header_digest {
            f.head[BHS_LEN..].copy_from_slice(&digest_wire_bytes(header));
            f.head_len += DIGEST_LEN;
        }
        let pad_len = padded_len(len) - len;
        // The pad bytes are the zeros the trailer starts with.
        f.tail_len = pad_len;
        if data_digest && len > 0 {
            let pad = [0u8; 3];
            let pad = pad.get(..pad_len).unwrap_or_default();
            let crc = crc32c::crc32c_append(crc32c::crc32c(payload), pad);
            if let Some(t) = f.tail.get_mut(pad_len..pad_len + DIGEST_LEN) {
                t.copy_from_slice(&crc.to_le_bytes());
                f.tail_len += DIGEST_LEN;
            }
        }
        f
    }

    /// The header and header digest.
    pub fn head(&self) -> &[u8] {
        self.head.get(..self.head_len).unwrap_or_default()
    }

    /// The pad bytes and data digest.
    pub fn tail(&self) -> &[u8] {
        self.tail.get(..self.tail_len).unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// Wire lengths.
// ---------------------------------------------------------------------------

impl<T: AsRef<[u8]>> Bhs<T> {
    /// Bytes from the start of the PDU to the data segment: BHS, AHS and the
    /// header digest if `header_digest`.
    pub fn header_wire_len(&self, header_digest: bool) -> usize {
        BHS_LEN + self.total_ahs_len_bytes() + if header_digest { DIGEST_LEN } else { 0 }
    }

    /// Bytes of the data segment on the wire: data, padding, and the data
    /// digest if `data_digest` and the segment is not empty.
    pub fn data_wire_len(&self, data_digest: bool) -> usize {
        let len = self.data_segment_len() as usize;
        let digest = if data_digest && len > 0 {
            DIGEST_LEN
        } else {
            0
        };
        padded_len(len) + digest
    }

    /// Total bytes this PDU occupies on the wire.
    pub fn pdu_wire_len(&self, header_digest: bool, data_digest: bool) -> usize {
        self.header_wire_len(header_digest) + self.data_wire_len(data_digest)
    }
}

// ---------------------------------------------------------------------------
// Framing shared by Request::decode and Reply::decode.
// ---------------------------------------------------------------------------

/// Splits one PDU off the front of `buf`: checks the header digest, runs
/// `parse` on BHS + AHS (before the data segment is needed, so a bad header
/// fails early), then checks the data digest. Returns the parsed header, the
/// data segment without padding, and the bytes consumed.
pub(super) fn decode_frame<H>(
    buf: &[u8],
    header_digest: bool,
    data_digest: bool,
    parse: impl FnOnce(&[u8; BHS_LEN], &[u8]) -> Result<H, PduError>,
) -> Result<(H, &[u8], usize), PduError> {
    let bhs_bytes: &[u8; BHS_LEN] = match buf.first_chunk() {
        Some(b) => b,
        None => return Err(PduError::Incomplete(BHS_LEN - buf.len())),
    };
    let bhs = Bhs::from_array(bhs_bytes);
    let total = bhs.pdu_wire_len(header_digest, data_digest);
    let missing = || PduError::Incomplete(total.saturating_sub(buf.len()));

    let ahs_end = BHS_LEN + bhs.total_ahs_len_bytes();
    let header_end = bhs.header_wire_len(header_digest);
    let ahs = buf.get(BHS_LEN..ahs_end).ok_or_else(missing)?;
    if header_digest {
        let covered = buf.get(..ahs_end).ok_or_else(missing)?;
        let digest = buf.get(ahs_end..header_end).ok_or_else(missing)?;
        verify_digest(covered, digest)?;
    }
    let header = parse(bhs_bytes, ahs)?;

    let len = bhs.data_segment_len() as usize;
    let padded_end = header_end + padded_len(len);
    let padded = buf.get(header_end..padded_end).ok_or_else(missing)?;
    if data_digest && len > 0 {
        let digest = buf.get(padded_end..total).ok_or_else(missing)?;
        verify_digest(padded, digest)?;
    }
    let data = padded.get(..len).unwrap_or_default();
    Ok((header, data, total))
}

/// Where encoded PDUs are appended: a `Vec` or a `BytesMut` (whose written
/// part a driver can take as `Bytes` while keeping the allocation).
pub trait PduSink: bytes::BufMut + std::ops::Deref<Target = [u8]> {}

impl<B: bytes::BufMut + std::ops::Deref<Target = [u8]>> PduSink for B {}

/// Appends one PDU: BHS (with TotalAHSLength and DataSegmentLength filled
/// in), AHS, header digest, data, padding, data digest.
pub(super) fn write_pdu<B: PduSink>(
    out: &mut B,
    mut bhs: Bhs<[u8; BHS_LEN]>,
    ahs: &[u8],
    data: &[u8],
    header_digest: bool,
    data_digest: bool,
) {
    debug_assert!(ahs.len() <= MAX_AHS_LEN && ahs.len() % 4 == 0);
    debug_assert!(data.len() <= MAX_DATA_SEGMENT_LEN);
    let data = data.get(..MAX_DATA_SEGMENT_LEN).unwrap_or(data);
    bhs.set_total_ahs_len_bytes(ahs.len());
    bhs.set_data_segment_len(data.len() as u32);

    let start = out.len();
    out.put_slice(&bhs.into_array());
    out.put_slice(ahs);
    if header_digest {
        let digest = digest_wire_bytes(out.get(start..).unwrap_or_default());
        out.put_slice(&digest);
    }
    if !data.is_empty() {
        let data_start = out.len();
        out.put_slice(data);
        out.put_bytes(0, padded_len(data.len()) - data.len());
        if data_digest {
            let digest = digest_wire_bytes(out.get(data_start..).unwrap_or_default());
            out.put_slice(&digest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding() {
        let cases = [(0, 0), (1, 4), (3, 4), (4, 4), (5, 8), (8191, 8192)];
        for (n, want) in cases {
            assert_eq!(padded_len(n), want, "padded_len({n})");
        }
        assert_eq!(padded_len(usize::MAX), usize::MAX);
    }

    #[test]
    fn wire_lengths() {
        let mut b = Bhs::zeroed();
        b.set_total_ahs_len_bytes(8);
        b.set_data_segment_len(5);
        assert_eq!(b.header_wire_len(false), 56);
        assert_eq!(b.header_wire_len(true), 60);
        assert_eq!(b.data_wire_len(false), 8);
        assert_eq!(b.data_wire_len(true), 12);
        assert_eq!(b.pdu_wire_len(true, true), 72);
        b.set_data_segment_len(0);
        assert_eq!(b.data_wire_len(true), 0);
    }
}
