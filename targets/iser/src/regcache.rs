//! Bookkeeping of the registration cache: which pooled buffer storages
//! (`rustgt_backstore::BufStorage`) are registered with which protection
//! domain, and how many bytes that pins. Pure; the verbs calls are the
//! caller's (`verbs`), generic over the handle `M` of one registration.
//!
//! Rules the caller keeps:
//! - an entry exists only for storage that is alive: the buffer pool's
//!   release hook removes (and the caller deregisters) every entry of a
//!   storage before the pool frees it, so an address the allocator hands
//!   out again is never found registered;
//! - a connection's PD removes its entries when it goes (after its QP);
//! - the bytes pinned by all entries never exceed the limit: a storage that
//!   does not fit is not registered and its data takes the copy path.

#![forbid(unsafe_code)]

use std::collections::HashMap;

/// Bytes of registered pooled storage, over all connections. Storage
/// registered once per PD it is used with counts once per PD.
pub const PINNED_LIMIT: usize = 256 << 20;

/// One storage's registration with one PD.
#[derive(Debug)]
struct Entry<M> {
    pd: usize,
    len: usize,
    mr: M,
}

/// What [`RegCache::lookup`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a, M> {
    /// Registered with this PD.
    Hit(&'a M),
    /// Not registered with this PD, and it fits under the limit.
    Register,
    /// Not registered, and registering it would pass the limit (or the
    /// address is known with another length, which the rules exclude).
    Refuse,
}

/// Registrations by storage address.
#[derive(Debug)]
pub struct RegCache<M> {
    by_addr: HashMap<usize, Vec<Entry<M>>>,
    pinned: usize,
    limit: usize,
}

impl<M> RegCache<M> {
    /// An empty cache that pins at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        RegCache {
            by_addr: HashMap::new(),
            pinned: 0,
            limit,
        }
    }

    /// Bytes registered now.
    pub fn pinned(&self) -> usize {
        self.pinned
    }

    /// The most bytes it may have registered at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Registrations held.
    pub fn len(&self) -> usize {
        self.by_addr.values().map(Vec::len).sum()
    }

    /// No registration is held.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// The registration of storage `addr`..`addr + len` with `pd`, or
    /// whether one may be made.
    pub fn lookup(&self, pd: usize, addr: usize, len: usize) -> Lookup<'_, M> {
        let entries = self.by_addr.get(&addr);
        if let Some(e) = entries.and_then(|es| es.iter().find(|e| e.pd == pd)) {
            return if e.len == len {
                Lookup::Hit(&e.mr)
            } else {
                Lookup::Refuse
            };
        }
        if entries.is_some_and(|es| es.iter().any(|e| e.len != len)) {
            return Lookup::Refuse;
        }
        if self.pinned.saturating_add(len) > self.limit {
            return Lookup::Refuse;
        }
        Lookup::Register
    }

    /// Records a registration [`lookup`](Self::lookup) allowed. Gives `mr`
    /// back if it would break the rules (already registered with `pd`, or
    /// over the limit); the caller deregisters it then.
    pub fn insert(&mut self, pd: usize, addr: usize, len: usize, mr: M) -> Result<(), M> {
        if !matches!(self.lookup(pd, addr, len), Lookup::Register) {
            return Err(mr);
        }
        self.pinned += len;
        self.by_addr
            .entry(addr)
            .or_default()
            .push(Entry { pd, len, mr });
        Ok(())
    }

    /// The storage at `addr` is about to be freed: every registration of
    /// it, with any PD, to deregister now.
    pub fn remove_storage(&mut self, addr: usize) -> Vec<M> {
        let entries = self.by_addr.remove(&addr).unwrap_or_default();
        entries
            .into_iter()
            .map(|e| {
                self.pinned = self.pinned.saturating_sub(e.len);
                e.mr
            })
            .collect()
    }

    /// The PD `pd` goes: its registrations, to deregister now.
    pub fn remove_pd(&mut self, pd: usize) -> Vec<M> {
        let mut out = Vec::new();
        let mut pinned = self.pinned;
        self.by_addr.retain(|_, es| {
            let mut i = 0;
            while i < es.len() {
                if es.get(i).is_some_and(|e| e.pd == pd) {
                    let e = es.swap_remove(i);
                    pinned = pinned.saturating_sub(e.len);
                    out.push(e.mr);
                } else {
                    i += 1;
                }
            }
            !es.is_empty()
        });
        self.pinned = pinned;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PD1: usize = 0x1000;
    const PD2: usize = 0x2000;

    #[test]
    fn a_storage_is_registered_once_per_pd_and_found_again() {
        let mut c = RegCache::new(1 << 20);
        assert_eq!(c.lookup(PD1, 0xa000, 8192), Lookup::Register);
        assert!(c.insert(PD1, 0xa000, 8192, "mr1").is_ok());
        assert_eq!(c.lookup(PD1, 0xa000, 8192), Lookup::Hit(&"mr1"));
        assert_eq!(
            c.insert(PD1, 0xa000, 8192, "dup"),
            Err("dup"),
            "no second MR"
        );
        // Another connection's PD needs its own registration.
        assert_eq!(c.lookup(PD2, 0xa000, 8192), Lookup::Register);
        assert!(c.insert(PD2, 0xa000, 8192, "mr2").is_ok());
        assert_eq!(c.pinned(), 2 * 8192);
        assert_eq!(c.len(), 2);
        // The same address with another length cannot be live storage.
        assert_eq!(c.lookup(PD1, 0xa000, 4096), Lookup::Refuse);
        assert_eq!(c.lookup(3, 0xa000, 4096), Lookup::Refuse);
    }

    #[test]
    fn pinned_bytes_stay_under_the_limit() {
        let mut c = RegCache::new(3 * 4096);
        assert!(c.insert(PD1, 0x1_0000, 8192, 1).is_ok());
        assert_eq!(
            c.lookup(PD1, 0x2_0000, 8192),
            Lookup::Refuse,
            "over the limit"
        );
        assert_eq!(c.insert(PD1, 0x2_0000, 8192, 2), Err(2));
        assert_eq!(
            c.lookup(PD1, 0x2_0000, 4096),
            Lookup::Register,
            "exactly fits"
        );
        assert!(c.insert(PD1, 0x2_0000, 4096, 3).is_ok());
        assert_eq!(c.pinned(), c.limit());
        assert_eq!(c.remove_storage(0x1_0000), vec![1]);
        assert_eq!(c.pinned(), 4096, "freed storage gives its bytes back");
        assert_eq!(c.lookup(PD1, 0x3_0000, 8192), Lookup::Register);
    }

    #[test]
    fn freeing_a_storage_drops_it_from_every_pd() {
        let mut c = RegCache::new(1 << 20);
        for (pd, mr) in [(PD1, 11), (PD2, 12)] {
            assert!(c.insert(pd, 0xb000, 4096, mr).is_ok());
        }
        assert!(c.insert(PD1, 0xc000, 4096, 13).is_ok());
        let mut gone = c.remove_storage(0xb000);
        gone.sort_unstable();
        assert_eq!(gone, vec![11, 12]);
        assert_eq!(
            c.lookup(PD1, 0xb000, 4096),
            Lookup::Register,
            "not found stale"
        );
        assert!(c.remove_storage(0xb000).is_empty(), "only once");
        assert_eq!((c.len(), c.pinned()), (1, 4096));
    }

    #[test]
    fn a_pd_that_goes_takes_only_its_registrations() {
        let mut c = RegCache::new(1 << 20);
        assert!(c.insert(PD1, 0xb000, 4096, 1).is_ok());
        assert!(c.insert(PD2, 0xb000, 4096, 2).is_ok());
        assert!(c.insert(PD1, 0xc000, 8192, 3).is_ok());
        let mut gone = c.remove_pd(PD1);
        gone.sort_unstable();
        assert_eq!(gone, vec![1, 3]);
        assert_eq!((c.len(), c.pinned()), (1, 4096));
        assert_eq!(c.lookup(PD2, 0xb000, 4096), Lookup::Hit(&2));
        assert_eq!(c.remove_pd(PD2), vec![2]);
        assert!(c.is_empty());
        assert_eq!(c.pinned(), 0);
    }
}
