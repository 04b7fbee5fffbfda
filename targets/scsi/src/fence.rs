//! Ranges of a logical unit that another gateway fenced off while it runs
//! a COMPARE AND WRITE or ORWRITE of its own ([`crate::cluster`]): each is
//! an exclusive range of [`crate::lba_lock`] held on this gateway until
//! the other gateway lifts it, or until its lease ends (the other gateway
//! died or its word was lost).
//!
//! Bounded: at most [`MAX_FENCES`] at a time (another gateway holds at
//! most one per command it runs under the gateways' exclusion, so more
//! means lost words; a fence over the limit is refused and logged), each
//! for at most its lease.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Most fences held at once.
pub(crate) const MAX_FENCES: usize = 1024;

#[derive(Debug)]
struct Fence {
    token: String,
    /// The range lock ([`crate::lba_lock::LbaLocks::hold_until`]).
    id: Option<crate::lba_lock::Hold>,
    until: Instant,
}

#[derive(Debug, Default)]
struct List {
    fences: Vec<Fence>,
    /// Whether a reaper thread runs (it ends when the list is empty).
    reaper: bool,
}

/// The fences other gateways hold on one logical unit.
#[derive(Debug, Default)]
pub(crate) struct Fences {
    list: Mutex<List>,
    changed: Condvar,
}

/// What [`Fences::add`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Kept; a reaper already runs.
    Kept,
    /// Kept; the caller starts the reaper ([`Fences::reap`] in a loop).
    StartReaper,
    /// Refused (too many): the caller releases the range itself.
    Refused,
}

fn lock(m: &Mutex<List>) -> MutexGuard<'_, List> {
    // A poisoned lock only means a panic elsewhere; the list stays valid.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fences {
    /// Keeps range lock `id` for `token` until [`Self::take`] or `until`.
    pub(crate) fn add(
        &self,
        token: String,
        id: Option<crate::lba_lock::Hold>,
        until: Instant,
    ) -> Added {
        let mut list = lock(&self.list);
        if list.fences.len() >= MAX_FENCES {
            return Added::Refused;
        }
        list.fences.push(Fence { token, id, until });
        self.changed.notify_all();
        if list.reaper {
            Added::Kept
        } else {
            list.reaper = true;
            Added::StartReaper
        }
    }

    /// The range lock of `token`, no longer kept (the fence was lifted).
    pub(crate) fn take(&self, token: &str) -> Option<Option<crate::lba_lock::Hold>> {
        let mut list = lock(&self.list);
        let at = list.fences.iter().position(|f| f.token == token)?;
        let f = list.fences.swap_remove(at);
        self.changed.notify_all();
        Some(f.id)
    }

    /// For the reaper: waits until a fence's lease ends and returns the
    /// range locks whose leases ended (to release, with a warning), or
    /// `None` once no fence is left (the reaper ends; the next
    /// [`Self::add`] starts another).
    pub(crate) fn reap(&self) -> Option<Vec<(String, Option<crate::lba_lock::Hold>)>> {
        let mut list = lock(&self.list);
        loop {
            let Some(first) = list.fences.iter().map(|f| f.until).min() else {
                list.reaper = false;
                return None;
            };
            let now = Instant::now();
            if first <= now {
                let (ended, kept): (Vec<Fence>, Vec<Fence>) =
                    list.fences.drain(..).partition(|f| f.until <= now);
                list.fences = kept;
                return Some(ended.into_iter().map(|f| (f.token, f.id)).collect());
            }
            list = self
                .changed
                .wait_timeout(list, first - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lba_lock::Hold;
    use std::time::Duration;

    #[test]
    fn fences_are_lifted_or_expire() {
        let f = Fences::default();
        let far = Instant::now() + Duration::from_secs(600);
        assert_eq!(
            f.add("a".into(), Some(Hold::Range(1)), far),
            Added::StartReaper
        );
        assert_eq!(
            f.add("b".into(), Some(Hold::Range(2)), Instant::now()),
            Added::Kept
        );
        assert_eq!(f.take("a"), Some(Some(Hold::Range(1))));
        assert_eq!(f.take("a"), None);
        assert_eq!(f.reap(), Some(vec![("b".to_owned(), Some(Hold::Range(2)))]));
        assert_eq!(f.reap(), None);
        assert_eq!(f.add("c".into(), None, far), Added::StartReaper);
    }

    #[test]
    fn at_most_max_fences() {
        let f = Fences::default();
        let far = Instant::now() + Duration::from_secs(600);
        for i in 0..MAX_FENCES {
            assert_ne!(
                f.add(i.to_string(), Some(Hold::Range(i as u64)), far),
                Added::Refused
            );
        }
        assert_eq!(
            f.add("over".into(), Some(Hold::Range(0)), far),
            Added::Refused
        );
    }
}
