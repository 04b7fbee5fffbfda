//! The byte-stream wire state (iSCSI over TCP, RFC 7143): received bytes
//! not yet parsed, the bytes of a rejected PDU still to skip, and the
//! output segments, whose large Data-In payloads stay slices of the
//! response buffer. The connection's stream operations (framing, R2T,
//! Data-In PDUs) are in `conn/tcp_ops.rs`; this module knows nothing of
//! the connection.

use bytes::{Bytes, BytesMut};

use crate::pdu::Reply;

/// Payloads up to this size are copied next to their header; larger ones
/// go out as their own segment, uncopied.
pub(super) const SMALL_PAYLOAD: usize = 4096;

/// Input and output buffers of a byte-stream connection.
#[derive(Debug, Default)]
pub(super) struct StreamWire {
    /// Received bytes not yet parsed.
    inbuf: Vec<u8>,
    /// Bytes of a rejected PDU still to skip without buffering.
    discard: usize,
    /// Encoded PDUs not yet queued as a segment. Its written part leaves as
    /// `Bytes`; once the driver has sent and dropped those, the allocation
    /// is reused.
    out_buf: BytesMut,
    /// Segments to send, in order; read payloads are slices of the
    /// response buffer, never copied here.
    out: Vec<Bytes>,
}

/// The output buffer grows in chunks of this size when the sent parts of
/// the last chunk are still queued (and so cannot be reclaimed), so a read
/// split into many Data-In PDUs does not allocate per PDU.
const OUT_CHUNK: usize = 16 * 1024;

impl StreamWire {
    pub(super) fn encode(&mut self, reply: &Reply, hd: bool, dd: bool) {
        self.room();
        reply.encode_into(&mut self.out_buf, hd, dd);
    }

    /// Room for at least a header and a small payload.
    fn room(&mut self) {
        if self.out_buf.capacity() - self.out_buf.len() < SMALL_PAYLOAD + 512 {
            self.out_buf.reserve(OUT_CHUNK);
        }
    }

    fn flush_out_buf(&mut self) {
        if !self.out_buf.is_empty() {
            self.out.push(self.out_buf.split().freeze());
        }
    }

    /// Moves every queued segment to the end of `queue`; the wire keeps its
    /// own list's allocation.
    pub(super) fn drain_output(&mut self, queue: &mut impl Extend<Bytes>) {
        self.flush_out_buf();
        queue.extend(self.out.drain(..));
    }

    pub(super) fn take_output(&mut self) -> Option<Vec<Bytes>> {
        self.flush_out_buf();
        if self.out.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.out))
        }
    }

    /// Takes newly received `data` in: what a rejected PDU still had is
    /// skipped, the rest joins the unparsed bytes, which are handed out
    /// (give them back with [`StreamWire::keep_input`]).
    /// Whether no received bytes wait to be parsed or skipped.
    pub(super) fn input_idle(&self) -> bool {
        self.inbuf.is_empty() && self.discard == 0
    }

    /// Keeps `rest`, the unparsed tail of a read parsed in place (see
    /// [`Self::input_idle`]), and `discard` more bytes to skip.
    pub(super) fn keep_tail(&mut self, rest: &[u8], discard: usize) {
        self.inbuf.clear();
        self.inbuf.extend_from_slice(rest);
        self.discard += discard;
    }

    pub(super) fn take_input(&mut self, mut data: &[u8]) -> Vec<u8> {
        if self.discard > 0 {
            let n = self.discard.min(data.len());
            self.discard -= n;
            data = data.get(n..).unwrap_or_default();
        }
        self.inbuf.extend_from_slice(data);
        std::mem::take(&mut self.inbuf)
    }

    /// Keeps the unparsed tail `rest`, and `discard` more bytes of a
    /// rejected PDU to skip on arrival.
    pub(super) fn keep_input(&mut self, rest: Vec<u8>, discard: usize) {
        self.inbuf = rest;
        self.discard += discard;
    }

    /// Queues one Data-In PDU: its framing head, payload and tail. A large
    /// payload that is a slice of `shared` goes out as its own segment,
    /// uncopied; a small one is copied next to its header.
    pub(super) fn push_data_in(
        &mut self,
        head: &[u8],
        payload: &[u8],
        shared: Option<Bytes>,
        tail: &[u8],
    ) {
        self.room();
        self.out_buf.extend_from_slice(head);
        match shared {
            Some(shared) if payload.len() > SMALL_PAYLOAD => {
                self.flush_out_buf();
                self.out.push(shared);
            }
            _ => self.out_buf.extend_from_slice(payload),
        }
        self.out_buf.extend_from_slice(tail);
    }
}
