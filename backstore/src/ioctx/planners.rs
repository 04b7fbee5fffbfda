//! The policy factory: a fresh readahead state machine for each
//! [`ReadaheadPolicy`], from the policies' modules (so that those import
//! only the traits of [`policy`](super::policy), never each other).

use super::linux::LinuxReadahead;
use super::policy::{NoReadahead, PolicyParams, Readahead, ReadaheadPolicy, KERNEL_MAX_PAGES};
use super::streams::{StreamParams, Streams};

/// Makes a fresh state machine for `policy`.
pub fn new_policy(policy: ReadaheadPolicy, p: &PolicyParams) -> Box<dyn Readahead> {
    match policy {
        ReadaheadPolicy::None => Box::new(NoReadahead),
        ReadaheadPolicy::Kernel => Box::new(LinuxReadahead::modern(KERNEL_MAX_PAGES)),
        ReadaheadPolicy::Classic => Box::new(LinuxReadahead::classic(p.max_pages)),
        ReadaheadPolicy::Context => Box::new(LinuxReadahead::context(p.max_pages)),
        ReadaheadPolicy::Streams => Box::new(Streams::new(StreamParams::new(p))),
    }
}
