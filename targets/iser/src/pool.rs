//! Fixed-size slots of one pre-registered region: which are free. Pure
//! bookkeeping; the region itself is registered once per connection, so
//! nothing is registered on the I/O path.

#![forbid(unsafe_code)]

/// Free-slot bookkeeping for `n` equal slots.
#[derive(Debug, Clone)]
pub struct SlotPool {
    free: Vec<u32>,
    in_use: Vec<bool>,
}

impl SlotPool {
    /// A pool of `n` slots, all free.
    pub fn new(n: u32) -> Self {
        SlotPool {
            // Lowest index first out.
            free: (0..n).rev().collect(),
            in_use: vec![false; n as usize],
        }
    }

    /// A free slot, if any.
    pub fn take(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        if let Some(u) = self.in_use.get_mut(i as usize) {
            *u = true;
        }
        Some(i)
    }

    /// Return a slot. False (and no change) for a slot that is not in use,
    /// so a stray completion can never free a slot twice.
    pub fn give_back(&mut self, i: u32) -> bool {
        match self.in_use.get_mut(i as usize) {
            Some(u) if *u => {
                *u = false;
                self.free.push(i);
                true
            }
            _ => false,
        }
    }

    /// Free slots.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Slots in all, free or in use.
    pub fn capacity(&self) -> usize {
        self.in_use.len()
    }

    /// No slot is in use.
    pub fn all_free(&self) -> bool {
        self.free.len() == self.in_use.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_and_given_back_once() {
        let mut p = SlotPool::new(3);
        assert_eq!(
            (p.take(), p.take(), p.take(), p.take()),
            (Some(0), Some(1), Some(2), None)
        );
        assert_eq!(p.available(), 0);
        assert!(p.give_back(1));
        assert!(!p.give_back(1), "double free refused");
        assert!(!p.give_back(7), "out of range refused");
        assert_eq!(p.take(), Some(1));
        for i in 0..3 {
            assert!(p.give_back(i));
        }
        assert!(p.all_free());
        assert_eq!(p.capacity(), 3);
    }

    #[test]
    fn empty_pool_has_nothing() {
        let mut p = SlotPool::new(0);
        assert_eq!(p.take(), None);
        assert!(p.all_free());
    }
}
