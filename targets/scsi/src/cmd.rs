//! The interface between front ends and the SCSI core (SAM-5 §5 "Execute
//! Command" and §7 task management, in Rust types).

use std::sync::Arc;

pub use rustgt_backstore::{BufStorage, IoBuf};

/// The bytes of a CDB. Up to 16 bytes (every CDB without an extended-CDB
/// AHS) live inline, so handing a command over allocates nothing.
#[derive(Clone, Default)]
pub struct CdbBytes {
    inline: [u8; 16],
    len: usize,
    /// A longer CDB (iSCSI extended CDB AHS); `inline` is then unused.
    long: Vec<u8>,
}

impl CdbBytes {
    pub fn new(bytes: &[u8]) -> CdbBytes {
        let mut c = CdbBytes {
            len: bytes.len(),
            ..CdbBytes::default()
        };
        match c.inline.get_mut(..bytes.len()) {
            Some(dst) => dst.copy_from_slice(bytes),
            None => c.long = bytes.to_vec(),
        }
        c
    }

    /// The first 16 bytes followed by `extension` (an extended CDB AHS).
    pub fn with_extension(first: &[u8], extension: &[u8]) -> CdbBytes {
        if extension.is_empty() {
            return CdbBytes::new(first);
        }
        let mut long = Vec::with_capacity(first.len() + extension.len());
        long.extend_from_slice(first);
        long.extend_from_slice(extension);
        CdbBytes {
            len: long.len(),
            long,
            ..CdbBytes::default()
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        if self.long.is_empty() {
            self.inline.get(..self.len).unwrap_or_default()
        } else {
            &self.long
        }
    }
}

impl std::ops::Deref for CdbBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for CdbBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x?}", self.as_slice())
    }
}

impl PartialEq for CdbBytes {
    fn eq(&self, other: &CdbBytes) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for CdbBytes {}

impl PartialEq<Vec<u8>> for CdbBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl From<Vec<u8>> for CdbBytes {
    fn from(v: Vec<u8>) -> CdbBytes {
        CdbBytes::new(&v)
    }
}

impl From<&[u8]> for CdbBytes {
    fn from(v: &[u8]) -> CdbBytes {
        CdbBytes::new(v)
    }
}

impl<const N: usize> From<[u8; N]> for CdbBytes {
    fn from(v: [u8; N]) -> CdbBytes {
        CdbBytes::new(&v)
    }
}

/// One I_T nexus: an initiator port talking to a target port (SAM-5 §4.7).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Nexus {
    /// Unique for the life of the process; keys unit attentions and reservations.
    pub id: u64,
    /// SCSI initiator port name, e.g. `iqn.1994-05.com.redhat:x,i,0x00023d000001`.
    pub initiator_port: String,
    /// SCSI target port name, e.g. `iqn.2026-11.org.rustgt:default,t,0x0001`.
    pub target_port: String,
    /// Relative target port identifier (VPD 0x83), 1-based.
    pub relative_port_id: u16,
    /// Target port group (ALUA), one per iSCSI portal group.
    pub port_group: u16,
}

/// SAM task attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskAttr {
    #[default]
    Simple,
    Ordered,
    HeadOfQueue,
    Aca,
}

/// A SCSI command as a front end hands it over.
#[derive(Debug)]
pub struct Command {
    pub nexus: Arc<Nexus>,
    /// Logical unit number (the 64-bit SAM LUN decoded to a flat number).
    pub lun: u64,
    /// Front end's task tag (iSCSI ITT), unique per nexus while in flight.
    pub tag: u64,
    /// The CDB, 6 to 16 bytes (longer with AHS).
    pub cdb: CdbBytes,
    pub attr: TaskAttr,
    /// Data-In buffer size: the most bytes the initiator will accept.
    pub data_in_len: u32,
    /// Data-Out buffer: all the data the initiator sent (its length is the
    /// Data-Out buffer size), usually a pooled buffer.
    pub data_out: IoBuf,
}

/// SCSI status byte (SAM-5 §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub u8);

impl Status {
    pub const GOOD: Status = Status(0x00);
    pub const CHECK_CONDITION: Status = Status(0x02);
    pub const CONDITION_MET: Status = Status(0x04);
    pub const BUSY: Status = Status(0x08);
    pub const RESERVATION_CONFLICT: Status = Status(0x18);
    pub const TASK_SET_FULL: Status = Status(0x28);
    pub const ACA_ACTIVE: Status = Status(0x30);
    pub const TASK_ABORTED: Status = Status(0x40);
}

/// Residual per SAM-5: the difference between the buffer size the initiator
/// gave and the bytes the command wanted to transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Residual {
    #[default]
    None,
    /// The command transferred fewer bytes than the buffer held.
    Underflow(u32),
    /// The command wanted more bytes than the buffer held.
    Overflow(u32),
}

/// The outcome of a [`Command`].
#[derive(Debug, Default)]
pub struct Response {
    pub tag: u64,
    pub status: Status,
    /// Sense data, already formatted (fixed or descriptor); empty when none.
    pub sense: Vec<u8>,
    /// Data-In, at most `data_in_len` bytes (medium reads come from the
    /// buffer pool and go back to it when the front end drops them).
    pub data_in: IoBuf,
    pub residual: Residual,
    /// The task was aborted by task management: the front end sends no
    /// response for it (SAM-5 §7.2, TAS=0).
    pub aborted: bool,
}

impl Default for Status {
    fn default() -> Self {
        Status::GOOD
    }
}

/// Called once, from a worker thread, when a command completes.
pub type Completion = Box<dyn FnOnce(Response) + Send + 'static>;

/// A front end's receiver of responses, shared by all its commands: the
/// allocation-free alternative to a boxed [`Completion`] per command (a
/// [`Done::Sink`] is an `Arc` clone and a [`Ticket`]). Called once per
/// command, from whatever thread completes it.
pub trait ResponseSink: Send + Sync + 'static {
    fn deliver(&self, ticket: Ticket, response: Response);
}

/// What a [`ResponseSink`] gets back with a response: when the command
/// was handed over and a number of the front end's choosing.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub started: std::time::Instant,
    pub token: u64,
}

/// Where a command's response goes: a boxed closure, or a front end's
/// shared [`ResponseSink`] (no allocation per command).
pub enum Done {
    Boxed(Completion),
    Sink(Arc<dyn ResponseSink>, Ticket),
}

impl Done {
    /// Delivers `response` (exactly once: it consumes `self`).
    pub fn call(self, response: Response) {
        match self {
            Done::Boxed(f) => f(response),
            Done::Sink(sink, ticket) => sink.deliver(ticket, response),
        }
    }
}

impl From<Completion> for Done {
    fn from(f: Completion) -> Done {
        Done::Boxed(f)
    }
}

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Done::Boxed(_) => f.write_str("Done::Boxed"),
            Done::Sink(_, t) => f.debug_tuple("Done::Sink").field(t).finish(),
        }
    }
}

/// Task management functions (SAM-5 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfFunction {
    AbortTask { tag: u64 },
    AbortTaskSet,
    ClearTaskSet,
    ClearAca,
    LogicalUnitReset,
    TargetWarmReset,
    TargetColdReset,
    QueryTask { tag: u64 },
}

/// Task management service responses (SAM-5 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfResponse {
    FunctionComplete,
    FunctionSucceeded,
    FunctionRejected,
    IncorrectLun,
    TaskNotFound,
    NotSupported,
}

#[cfg(test)]
mod cdb_bytes_tests {
    use super::CdbBytes;

    #[test]
    fn short_cdbs_live_inline_and_long_ones_keep_every_byte() {
        let six = CdbBytes::new(&[0x28, 1, 2, 3, 4, 5]);
        assert_eq!(&*six, &[0x28, 1, 2, 3, 4, 5]);
        assert!(six.long.is_empty());
        let sixteen: Vec<u8> = (0..16).collect();
        let c = CdbBytes::from(sixteen.clone());
        assert_eq!(c, sixteen);
        assert!(c.long.is_empty());
        let ext: Vec<u8> = (16..40).collect();
        let long = CdbBytes::with_extension(&sixteen, &ext);
        assert_eq!(long.len(), 40);
        assert_eq!(long, (0..40).collect::<Vec<u8>>());
        assert_eq!(CdbBytes::with_extension(&sixteen, &[]), c);
        assert_eq!(CdbBytes::new(&(0..20).collect::<Vec<u8>>()).len(), 20);
        assert!(CdbBytes::default().is_empty());
    }
}
