//! What the readahead benchmark's discrete-event simulation (the
//! `rustgt-rabench` crate) drives in virtual time: the I/O context's core
//! and the device's turn-taking rules, with no threads or clocks, exactly
//! the code that serves LUNs. Served LUNs never need these; only the
//! methods the simulation calls are public.

pub use super::core::Ticket;
pub use super::gate::TurnState;
pub use super::queue::Batch;

use super::core::Core;
use super::IoContextOptions;

/// A context core whose cache pages carry no data: the simulation only
/// needs to know which pages are present.
pub type SimCore = Core<()>;

impl Core<()> {
    /// The core a context with `opts` builds for a LUN of `size` bytes.
    pub fn for_simulation(opts: &IoContextOptions, size: u64) -> Self {
        Core::new(opts.core_config(size))
    }
}
