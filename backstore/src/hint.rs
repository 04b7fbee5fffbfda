//! What a reader tells a store about the read it asks for
//! ([`StreamHint`]): passed down as an argument with the read, so a store
//! that wraps another (the I/O context, fault injection, the daemon's
//! counting store) hands it on, and nothing depends on which thread calls.

/// Who reads, and why, as far as the stores below care.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamHint {
    /// The SCSI core's worker serving the command; per-worker readahead
    /// keys its state on it. `None` (the inline path, tools) counts as
    /// worker 0.
    pub worker: Option<usize>,
    /// The read is readahead that nobody waits for yet (Linux's
    /// REQ_RAHEAD), as an I/O context's I/O thread issues it; a demand
    /// read otherwise.
    pub readahead: bool,
}

impl StreamHint {
    /// A demand read by the SCSI core's worker `index`.
    pub fn worker(index: usize) -> Self {
        StreamHint {
            worker: Some(index),
            readahead: false,
        }
    }
}
