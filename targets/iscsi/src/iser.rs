//! iSER wire formats: the headers RFC 7145 puts in front of every RDMA Send
//! Message, and the private data of the InfiniBand/RoCE connection
//! manager's REQ and REP that an iSER connection starts with.
//!
//! Layer: sans-I/O codec, below [`crate::conn`]; no verbs, no allocation.
//!
//! Guarantees:
//! - no parser panics on any input; a short buffer gives
//!   [`IserError::Truncated`] with the length it needs;
//! - open values: an unknown iSER opcode is an error value, reserved bits are
//!   ignored on input and written as zero;
//! - every encoder output parses back to the same value (for the canonical
//!   forms: a buffer whose valid bit is clear has zero STag and offset).
//!
//! iSER header of an iSCSI control-type PDU (RFC 7145 §9.2), 28 bytes, all
//! fields big-endian:
//!
//! | byte  | field                                                |
//! |-------|------------------------------------------------------|
//! | 0     | opcode (high nibble, 0x1), W 0x08, R 0x04, reserved   |
//! | 1..4  | reserved                                             |
//! | 4..8  | Write STag (valid with W)                            |
//! | 8..16 | Write Base Offset                                    |
//! | 16..20| Read STag (valid with R)                             |
//! | 20..28| Read Base Offset                                     |
//!
//! Hello (RFC 7145 §9.3) and HelloReply (§9.4), 12 bytes each:
//!
//! | byte | Hello                      | HelloReply                          |
//! |------|----------------------------|-------------------------------------|
//! | 0    | opcode 0x2 (high nibble)   | opcode 0x3 (high nibble), F 0x01     |
//! | 1    | MaxVer (high), MinVer (low)| MaxVer (high), CurVer (low)         |
//! | 2..4 | iSER-IRD                   | iSER-ORD                            |
//! | 4..12| reserved                   | reserved                            |
//!
//! CM REQ / REP private data (InfiniBand Annex A12, the form Linux's iSER
//! initiator and target exchange; RFC 7145 §5.1 leaves the connection
//! set-up message to the RDMA fabric), 4 meaningful bytes: byte 0 holds the
//! flags, bytes 1..4 are reserved. The connection manager may hand over a
//! longer, zero-padded buffer; the rest is ignored.
//!
//! | bit  | in the REQ (initiator)                   | in the REP (target)                 |
//! |------|------------------------------------------|-------------------------------------|
//! | 0x80 | zero-based virtual addresses unsupported | zero-based virtual addresses unused |
//! | 0x40 | Send with Invalidate unsupported         | Send with Invalidate unused         |

use crate::pdu::open_enum::open_enum;

/// Length of the iSER header of an iSCSI control-type PDU (RFC 7145 §9.2).
pub const ISER_HEADER_LEN: usize = 28;
/// Length of a Hello or HelloReply message (RFC 7145 §9.3, §9.4).
pub const HELLO_LEN: usize = 12;
/// Length of the CM REQ/REP private data this codec writes.
pub const CM_PRIVATE_DATA_LEN: usize = 4;
/// The iSER protocol version this implementation speaks.
pub const ISER_VERSION: u8 = 1;

/// W bit: the Write STag and Write Base Offset are valid.
const WRITE_VALID: u8 = 0x08;
/// R bit: the Read STag and Read Base Offset are valid.
const READ_VALID: u8 = 0x04;
/// HelloReply F bit: the target refuses the connection (no common version).
const REJECT_BIT: u8 = 0x01;

/// Why an iSER message or private data could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IserError {
    /// The buffer is shorter than the message's fixed part.
    #[error("iSER message truncated: {have} bytes, need {need}")]
    Truncated {
        /// Bytes the message needs.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// The high nibble of byte 0 is no iSER opcode this codec knows (the value).
    #[error("unknown iSER opcode {0:#x}")]
    UnknownOpcode(u8),
}

open_enum! {
    /// iSER opcode, the high nibble of byte 0 (RFC 7145 §9.1). Open: unknown
    /// values are representable.
    pub struct IserOpcode(u8) {
        /// 0x1: an iSCSI control-type PDU follows the 28-byte header.
        CONTROL = 0x1,
        /// 0x2: Hello, the initiator's versions and IRD.
        HELLO = 0x2,
        /// 0x3: HelloReply, the target's version and ORD, or a rejection.
        HELLO_REPLY = 0x3,
    }
}

impl IserOpcode {
    fn of(first_byte: u8) -> IserOpcode {
        IserOpcode(first_byte >> 4)
    }
}

/// A buffer the initiator registered and advertised: its STag (the remote
/// key) and the address of its first byte as the STag sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct RemoteBuffer {
    /// The STag (remote key) the initiator registered the buffer under.
    pub stag: u32,
    /// The Base Offset: the buffer's first byte as the STag addresses it (a
    /// virtual address; this target never agrees to zero-based ones).
    pub base: u64,
}

/// The iSER header of an iSCSI control-type PDU (RFC 7145 §9.2): the
/// initiator's buffers for a command's solicited Data-Out (write) and for
/// its Data-In (read). Every other PDU carries neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct ControlHeader {
    /// The buffer the target RDMA Reads a write's solicited Data-Out from
    /// (W bit); it starts at the first solicited byte.
    pub write: Option<RemoteBuffer>,
    /// The buffer the target RDMA Writes a read's Data-In into (R bit).
    pub read: Option<RemoteBuffer>,
}

impl ControlHeader {
    /// The 28 header bytes: CONTROL opcode, W and R bits for the buffers
    /// present, absent buffers as zeros.
    pub fn encode(&self) -> [u8; ISER_HEADER_LEN] {
        let mut out = [0u8; ISER_HEADER_LEN];
        let w = self.write.unwrap_or_default();
        let r = self.read.unwrap_or_default();
        out[0] = (IserOpcode::CONTROL.0 << 4)
            | if self.write.is_some() { WRITE_VALID } else { 0 }
            | if self.read.is_some() { READ_VALID } else { 0 };
        out[4..8].copy_from_slice(&w.stag.to_be_bytes());
        out[8..16].copy_from_slice(&w.base.to_be_bytes());
        out[16..20].copy_from_slice(&r.stag.to_be_bytes());
        out[20..28].copy_from_slice(&r.base.to_be_bytes());
        out
    }

    /// Reads the 28 header bytes at the front of `buf` (the opcode is not
    /// checked here; see [`IserMessage::parse`]).
    pub fn parse(buf: &[u8]) -> Result<ControlHeader, IserError> {
        let h = fixed::<ISER_HEADER_LEN>(buf)?;
        let flags = h[0];
        let buffer = |valid: u8, at: usize| {
            (flags & valid != 0).then(|| RemoteBuffer {
                stag: be_u32(&h, at),
                base: be_u64(&h, at + 4),
            })
        };
        Ok(ControlHeader {
            write: buffer(WRITE_VALID, 4),
            read: buffer(READ_VALID, 16),
        })
    }

    /// The STag a Send with Invalidate may retire along with the command's
    /// SCSI Response: the one buffer the command advertised. None when it
    /// advertised none or both, since the initiator then expects to
    /// invalidate for itself (Linux checks the key against each direction).
    pub fn invalidate_stag(&self) -> Option<u32> {
        match (self.read, self.write) {
            (Some(r), None) => Some(r.stag),
            (None, Some(w)) => Some(w.stag),
            _ => None,
        }
    }
}

/// iSER Hello (RFC 7145 §9.3): the initiator's versions and the RDMA Read
/// requests it can have outstanding as responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// 4 bits.
    pub max_ver: u8,
    /// 4 bits.
    pub min_ver: u8,
    /// iSER-IRD: RDMA Read requests the initiator can serve at once, as
    /// responder (bounds the target's ORD).
    pub ird: u16,
}

impl Hello {
    /// The 12 bytes of the message (versions truncated to 4 bits).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0] = IserOpcode::HELLO.0 << 4;
        out[1] = nibbles(self.max_ver, self.min_ver);
        out[2..4].copy_from_slice(&self.ird.to_be_bytes());
        out
    }

    fn parse(buf: &[u8]) -> Result<Hello, IserError> {
        let h = fixed::<HELLO_LEN>(buf)?;
        Ok(Hello {
            max_ver: h[1] >> 4,
            min_ver: h[1] & 0x0f,
            ird: u16::from_be_bytes([h[2], h[3]]),
        })
    }

    /// The target's answer: the highest common version, or a rejection
    /// when there is none; the ORD never exceeds what the initiator offers
    /// nor `max_ord`.
    pub fn reply(&self, max_ord: u16) -> HelloReply {
        let common = self.max_ver.min(ISER_VERSION);
        HelloReply {
            reject: common < self.min_ver || common == 0,
            max_ver: ISER_VERSION,
            cur_ver: common,
            ord: self.ird.min(max_ord),
        }
    }
}

/// iSER HelloReply (RFC 7145 §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloReply {
    /// F bit: the target refuses the connection.
    pub reject: bool,
    /// 4 bits.
    pub max_ver: u8,
    /// 4 bits.
    pub cur_ver: u8,
    /// iSER-ORD: RDMA Read requests the target will have outstanding at once;
    /// at most the initiator's IRD.
    pub ord: u16,
}

impl HelloReply {
    /// The 12 bytes of the message (versions truncated to 4 bits).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[0] = (IserOpcode::HELLO_REPLY.0 << 4) | if self.reject { REJECT_BIT } else { 0 };
        out[1] = nibbles(self.max_ver, self.cur_ver);
        out[2..4].copy_from_slice(&self.ord.to_be_bytes());
        out
    }

    fn parse(buf: &[u8]) -> Result<HelloReply, IserError> {
        let h = fixed::<HELLO_LEN>(buf)?;
        Ok(HelloReply {
            reject: h[0] & REJECT_BIT != 0,
            max_ver: h[1] >> 4,
            cur_ver: h[1] & 0x0f,
            ord: u16::from_be_bytes([h[2], h[3]]),
        })
    }
}

/// One received RDMA Send Message, split at its iSER header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IserMessage<'a> {
    /// An iSCSI control-type PDU: BHS, AHS and data segment follow the
    /// header, without digests (RFC 7145 §7.2).
    Control {
        /// The initiator's advertised buffers.
        header: ControlHeader,
        /// The PDU after the 28-byte header, as received.
        pdu: &'a [u8],
    },
    /// A Hello: the initiator's first message on a new connection.
    Hello(Hello),
    /// A HelloReply: the target's answer to a Hello (a target that receives
    /// one closes the connection).
    HelloReply(HelloReply),
}

impl<'a> IserMessage<'a> {
    /// Splits a received Send Message by its opcode; an unknown opcode or a
    /// buffer too short for its fixed part is an error, never a panic.
    pub fn parse(buf: &'a [u8]) -> Result<IserMessage<'a>, IserError> {
        let first = *buf
            .first()
            .ok_or(IserError::Truncated { need: 1, have: 0 })?;
        match IserOpcode::of(first) {
            IserOpcode::CONTROL => Ok(IserMessage::Control {
                header: ControlHeader::parse(buf)?,
                pdu: buf.get(ISER_HEADER_LEN..).unwrap_or_default(),
            }),
            IserOpcode::HELLO => Hello::parse(buf).map(IserMessage::Hello),
            IserOpcode::HELLO_REPLY => HelloReply::parse(buf).map(IserMessage::HelloReply),
            IserOpcode(other) => Err(IserError::UnknownOpcode(other)),
        }
    }
}

/// The flags byte of the CM REQ/REP private data (InfiniBand Annex A12).
/// Kept raw so that unknown bits survive; the accessors read the two known
/// ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct CmPrivateData {
    /// The raw flags byte (see the constants).
    pub flags: u8,
}

impl CmPrivateData {
    /// REQ: the initiator cannot use zero-based virtual addresses; REP: the
    /// target will not.
    pub const ZBVA_NOT_SUPPORTED: u8 = 0x80;
    /// REQ: the initiator does not accept Send with Invalidate; REP: the
    /// target will not use it.
    pub const SEND_WITH_INVALIDATE_NOT_SUPPORTED: u8 = 0x40;

    /// Reads the flags from private data of at least
    /// [`CM_PRIVATE_DATA_LEN`] bytes (the rest is ignored); shorter is
    /// [`IserError::Truncated`].
    pub fn parse(buf: &[u8]) -> Result<CmPrivateData, IserError> {
        let b = fixed::<CM_PRIVATE_DATA_LEN>(buf)?;
        Ok(CmPrivateData { flags: b[0] })
    }

    /// The private data to send: the flags byte and three zero bytes.
    pub fn encode(&self) -> [u8; CM_PRIVATE_DATA_LEN] {
        [self.flags, 0, 0, 0]
    }

    /// What an initiator says when it sends no private data at all (older
    /// initiators): nothing optional is supported.
    pub fn legacy_initiator() -> CmPrivateData {
        CmPrivateData {
            flags: Self::ZBVA_NOT_SUPPORTED | Self::SEND_WITH_INVALIDATE_NOT_SUPPORTED,
        }
    }

    /// REQ: whether the initiator can use zero-based virtual addresses; REP:
    /// whether the target will.
    pub fn zero_based_va(&self) -> bool {
        self.flags & Self::ZBVA_NOT_SUPPORTED == 0
    }

    /// REQ: whether the initiator accepts Send with Invalidate; REP: whether
    /// the target will use it.
    pub fn send_with_invalidate(&self) -> bool {
        self.flags & Self::SEND_WITH_INVALIDATE_NOT_SUPPORTED == 0
    }

    /// The target's REP for this REQ. The target always uses the expanded
    /// 28-byte header with absolute addresses (no ZBVA), and Send with
    /// Invalidate only when the initiator accepts it and the local device
    /// can do it.
    pub fn target_reply(&self, device_can_invalidate: bool) -> CmPrivateData {
        let mut flags = Self::ZBVA_NOT_SUPPORTED;
        if !(self.send_with_invalidate() && device_can_invalidate) {
            flags |= Self::SEND_WITH_INVALIDATE_NOT_SUPPORTED;
        }
        CmPrivateData { flags }
    }
}

fn nibbles(high: u8, low: u8) -> u8 {
    ((high & 0x0f) << 4) | (low & 0x0f)
}

/// The first `N` bytes of `buf`, or how many are missing.
fn fixed<const N: usize>(buf: &[u8]) -> Result<[u8; N], IserError> {
    buf.get(..N)
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or(IserError::Truncated {
            need: N,
            have: buf.len(),
        })
}

fn be_u32(h: &[u8; ISER_HEADER_LEN], at: usize) -> u32 {
    let mut b = [0u8; 4];
    if let Some(s) = h.get(at..at + 4) {
        b.copy_from_slice(s);
    }
    u32::from_be_bytes(b)
}

fn be_u64(h: &[u8; ISER_HEADER_LEN], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = h.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    u64::from_be_bytes(b)
}
