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
    /// A copy of `bytes`: inline when 16 bytes or fewer, else on the heap.
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

    /// The CDB, exactly as many bytes as were given (also through `Deref`).
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
    /// The LUNs this nexus sees, when its initiator has a map of its own
    /// ([`crate::LunMap`]); `None`: every LUN under its own number. The
    /// front end resolves command LUNs through it.
    pub lun_map: Option<std::sync::Arc<crate::LunMap>>,
}

impl Nexus {
    /// The target's LUN that this nexus's `lun` addresses (the same
    /// without a map).
    pub fn resolve_lun(&self, lun: u64) -> u64 {
        self.lun_map.as_ref().map_or(lun, |m| m.resolve(lun))
    }

    /// Whether this nexus sees the target's LUN `lun` read-only.
    pub fn maps_read_only(&self, lun: u64) -> bool {
        self.lun_map.as_ref().is_some_and(|m| m.read_only(lun))
    }
}

/// SAM task attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskAttr {
    /// SIMPLE: runs once no older ORDERED task of the LU waits or runs.
    #[default]
    Simple,
    /// ORDERED: runs once every older task of the LU has completed; younger
    /// SIMPLE tasks wait for it.
    Ordered,
    /// HEAD OF QUEUE: runs at once, ahead of every queued task.
    HeadOfQueue,
    /// ACA: accepted, and scheduled like SIMPLE (this core never establishes
    /// an ACA condition, since NACA is not supported).
    Aca,
}

/// A SCSI command as a front end hands it over.
#[derive(Debug)]
pub struct Command {
    /// The I_T nexus that sent it (shared by every command of the session).
    pub nexus: Arc<Nexus>,
    /// Logical unit number (the 64-bit SAM LUN decoded to a flat number).
    pub lun: u64,
    /// Front end's task tag (iSCSI ITT), unique per nexus while in flight.
    pub tag: u64,
    /// The CDB, 6 to 16 bytes (longer with AHS).
    pub cdb: CdbBytes,
    /// Task attribute: how it is ordered against the LU's other tasks.
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
    /// 00h: the command completed successfully.
    pub const GOOD: Status = Status(0x00);
    /// 02h: the command failed; [`Response::sense`] says why.
    pub const CHECK_CONDITION: Status = Status(0x02);
    /// 04h: CONDITION MET (PRE-FETCH); this core never returns it.
    pub const CONDITION_MET: Status = Status(0x04);
    /// 08h: the LU cannot take the command now: its workers are stopping
    /// (the LUN is being removed or the target shut down).
    pub const BUSY: Status = Status(0x08);
    /// 18h: the command conflicts with a reservation (SPC-2 RESERVE or a
    /// persistent reservation) another nexus holds.
    pub const RESERVATION_CONFLICT: Status = Status(0x18);
    /// 28h: the LU already holds
    /// [`MAX_TASKS_PER_LUN`](crate::MAX_TASKS_PER_LUN) tasks; the initiator
    /// retries with fewer in flight.
    pub const TASK_SET_FULL: Status = Status(0x28);
    /// 30h: ACA ACTIVE; this core never returns it (no ACA conditions).
    pub const ACA_ACTIVE: Status = Status(0x30);
    /// 40h: TASK ABORTED: the status of a task aborted by task management;
    /// its [`Response::aborted`] is set and, as TAS=0, the front end sends
    /// no response for it.
    pub const TASK_ABORTED: Status = Status(0x40);
}

/// Residual per SAM-5: the difference between the buffer size the initiator
/// gave and the bytes the command wanted to transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Residual {
    /// The command transferred exactly the buffer's size.
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
    /// The [`Command::tag`] it answers.
    pub tag: u64,
    /// SCSI status; [`Status::CHECK_CONDITION`] comes with `sense`.
    pub status: Status,
    /// Sense data, already formatted (fixed or descriptor); empty when none.
    pub sense: Vec<u8>,
    /// Data-In, at most `data_in_len` bytes (medium reads come from the
    /// buffer pool and go back to it when the front end drops them).
    pub data_in: IoBuf,
    /// Residual against [`Command::data_in_len`] (Data-In) or the Data-Out
    /// buffer size (Data-Out), for the front end's residual count.
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
    /// Takes the response of the command handed over with `ticket`, on the
    /// thread that completed it (a LUN worker, the target's control thread
    /// or a reactor), so it should pass the response on rather than block.
    fn deliver(&self, ticket: Ticket, response: Response);
}

/// What a [`ResponseSink`] gets back with a response: when the command
/// was handed over and a number of the front end's choosing.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    /// When the front end handed the command over (its statistics time the
    /// command from here).
    pub started: std::time::Instant,
    /// The front end's own number for the command (e.g. a slot or tag); the
    /// core only carries it.
    pub token: u64,
}

/// Where a command's response goes: a boxed closure, or a front end's
/// shared [`ResponseSink`] (no allocation per command).
pub enum Done {
    /// A closure of its own, allocated per command.
    Boxed(Completion),
    /// A shared sink and the ticket it gets back: nothing allocated.
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
    /// ABORT TASK: aborts the nexus's task with [`Command::tag`] `tag` on
    /// the LUN, and waits until it has left the backstore.
    AbortTask {
        /// The task's tag (iSCSI Referenced Task Tag).
        tag: u64,
    },
    /// ABORT TASK SET: aborts every task of this nexus on the LUN.
    AbortTaskSet,
    /// CLEAR TASK SET: aborts every task of every nexus on the LUN; the
    /// other nexuses get COMMANDS CLEARED BY ANOTHER INITIATOR.
    ClearTaskSet,
    /// CLEAR ACA: answered [`TmfResponse::NotSupported`] (no ACA conditions).
    ClearAca,
    /// LOGICAL UNIT RESET: aborts every task, restores the default mode
    /// pages, ends SPC-2 reservations and medium removal prevention, and
    /// gives every known nexus BUS DEVICE RESET FUNCTION OCCURRED.
    LogicalUnitReset,
    /// TARGET WARM RESET: a logical unit reset of every LUN, with SCSI BUS
    /// RESET OCCURRED.
    TargetWarmReset,
    /// TARGET COLD RESET: as a warm reset, with POWER ON OCCURRED.
    TargetColdReset,
    /// QUERY TASK: whether the nexus's task `tag` is still in the task set.
    QueryTask {
        /// The task's tag (iSCSI Referenced Task Tag).
        tag: u64,
    },
}

/// Task management service responses (SAM-5 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfResponse {
    /// FUNCTION COMPLETE: done (for QUERY TASK: the task is not there).
    FunctionComplete,
    /// FUNCTION SUCCEEDED: QUERY TASK found the task in the task set.
    FunctionSucceeded,
    /// FUNCTION REJECTED: the front end could not run the function (no
    /// target or nexus yet, its task-management pool full, or the function
    /// panicked); the core itself never answers it.
    FunctionRejected,
    /// INCORRECT LOGICAL UNIT NUMBER: the LUN is not configured.
    IncorrectLun,
    /// ABORT TASK found no task with that tag for this nexus on the LUN
    /// (it has completed already, or never arrived).
    TaskNotFound,
    /// The function is not supported (CLEAR ACA).
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
