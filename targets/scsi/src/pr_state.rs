//! The persistent reservation model of one logical unit (SPC-4 §5.13):
//! [`PrState`] holds the registrations, the persistent reservation and
//! PRgeneration and applies PERSISTENT RESERVE OUT service actions,
//! returning the unit attentions each change owes ([`Effects`]). Pure
//! state, no locking and no I/O: the live, locked and persisted state is
//! `pr::Reservations`, the APTPL file format `pr_store`; both build on the
//! types here.
//!
//! Guarantees:
//! - registrations are keyed by I_T nexus *names* ([`ItNexus`]: initiator
//!   port + target port), never by connection, so they survive reconnects;
//! - PRgeneration counts the successful REGISTER, REGISTER AND IGNORE
//!   EXISTING KEY, CLEAR, PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE
//!   service actions that changed something (SPC-4 §6.16.2).

use crate::cmd::Nexus;
use crate::sense::{Asc, Sense};

/// Most registrations one logical unit keeps; more get INSUFFICIENT
/// REGISTRATION RESOURCES.
pub(crate) const MAX_REGISTRATIONS: usize = 256;

/// Persistent reservation TYPE (SPC-4 §6.16.3.3, table 212). Open type: an
/// unsupported value is representable and refused by [`PrType::is_supported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PrType(pub u8);

impl PrType {
    pub const WRITE_EXCLUSIVE: PrType = PrType(0x1);
    pub const EXCLUSIVE_ACCESS: PrType = PrType(0x3);
    pub const WRITE_EXCLUSIVE_RO: PrType = PrType(0x5);
    pub const EXCLUSIVE_ACCESS_RO: PrType = PrType(0x6);
    pub const WRITE_EXCLUSIVE_AR: PrType = PrType(0x7);
    pub const EXCLUSIVE_ACCESS_AR: PrType = PrType(0x8);

    pub(crate) fn is_supported(self) -> bool {
        self.registrants_share()
            || self == PrType::WRITE_EXCLUSIVE
            || self == PrType::EXCLUSIVE_ACCESS
    }

    /// Every registered I_T nexus is a reservation holder (SPC-4 §5.13.10).
    pub(crate) fn all_registrants(self) -> bool {
        self == PrType::WRITE_EXCLUSIVE_AR || self == PrType::EXCLUSIVE_ACCESS_AR
    }

    pub(crate) fn registrants_only(self) -> bool {
        self == PrType::WRITE_EXCLUSIVE_RO || self == PrType::EXCLUSIVE_ACCESS_RO
    }

    /// Registered I_T nexuses get full access (registrants only and all
    /// registrants types).
    pub(crate) fn registrants_share(self) -> bool {
        self.registrants_only() || self.all_registrants()
    }

    /// Reads conflict for I_T nexuses without access (exclusive access family).
    pub(crate) fn exclusive_access(self) -> bool {
        self == PrType::EXCLUSIVE_ACCESS
            || self == PrType::EXCLUSIVE_ACCESS_RO
            || self == PrType::EXCLUSIVE_ACCESS_AR
    }
}

/// The identity of an I_T nexus (SAM-5 §4.7): its port names. Unlike
/// [`Nexus::id`] it stays the same across sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ItNexus {
    pub initiator_port: String,
    pub target_port: String,
}

impl ItNexus {
    pub(crate) fn of(nexus: &Nexus) -> ItNexus {
        ItNexus {
            initiator_port: nexus.initiator_port.clone(),
            target_port: nexus.target_port.clone(),
        }
    }

    pub(crate) fn is(&self, nexus: &Nexus) -> bool {
        self.initiator_port == nexus.initiator_port && self.target_port == nexus.target_port
    }
}

/// One registered I_T nexus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    pub key: u64,
    pub it: ItNexus,
    /// Relative target port identifier of the target port (READ FULL STATUS).
    pub relative_port_id: u16,
}

/// The persistent reservation (scope is always LU_SCOPE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub pr_type: PrType,
    /// The I_T nexus that holds it; for all registrants types, the one that
    /// established it (every registrant holds it).
    pub holder: ItNexus,
}

/// Why a reservation command is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// RESERVATION CONFLICT status.
    Conflict,
    /// CHECK CONDITION with this sense data.
    Sense(Sense),
}

impl From<Sense> for Refusal {
    fn from(sense: Sense) -> Refusal {
        Refusal::Sense(sense)
    }
}

/// What a change owes other I_T nexuses.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Effects {
    /// Unit attentions to establish, per I_T nexus.
    pub uas: Vec<(ItNexus, Asc)>,
    /// I_T nexuses whose registrations a PREEMPT removed (their tasks are
    /// aborted by PREEMPT AND ABORT).
    pub preempted: Vec<ItNexus>,
}

impl Effects {
    fn ua(&mut self, it: &ItNexus, asc: Asc) {
        self.uas.push((it.clone(), asc));
    }

    fn preempt(&mut self, it: ItNexus) {
        self.ua(&it, Asc::REGISTRATIONS_PREEMPTED);
        self.preempted.push(it);
    }
}

/// Registrations, the persistent reservation and PRgeneration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PrState {
    pub generation: u32,
    /// The last valid APTPL bit received (SPC-4 §5.13.5).
    pub aptpl: bool,
    pub registrations: Vec<Registration>,
    pub reservation: Option<Reservation>,
}

impl PrState {
    pub(crate) fn registration(&self, it: &Nexus) -> Option<&Registration> {
        self.registrations.iter().find(|r| r.it.is(it))
    }

    fn index_of(&self, it: &ItNexus) -> Option<usize> {
        self.registrations.iter().position(|r| r.it == *it)
    }

    pub(crate) fn is_registered(&self, it: &Nexus) -> bool {
        self.registration(it).is_some()
    }

    /// Whether `it` holds the persistent reservation (SPC-4 §5.13.10).
    pub(crate) fn is_holder(&self, it: &Nexus) -> bool {
        match &self.reservation {
            Some(res) if res.pr_type.all_registrants() => self.is_registered(it),
            Some(res) => res.holder.is(it),
            None => false,
        }
    }

    /// Whether the registration of `reg` makes it a reservation holder.
    pub(crate) fn holds(&self, reg: &Registration) -> bool {
        match &self.reservation {
            Some(res) => res.pr_type.all_registrants() || res.holder == reg.it,
            None => false,
        }
    }

    /// The RESERVATION KEY that READ RESERVATION reports: zero for all
    /// registrants types (SPC-4 §6.15.3.3), else the holder's key.
    pub(crate) fn reservation_key(&self) -> u64 {
        match &self.reservation {
            Some(res) if !res.pr_type.all_registrants() => self
                .index_of(&res.holder)
                .and_then(|i| self.registrations.get(i))
                .map_or(0, |r| r.key),
            _ => 0,
        }
    }

    /// The issuing I_T nexus must be registered with key `rk`.
    fn check_key(&self, me: &Nexus, rk: u64) -> Result<(), Refusal> {
        match self.registration(me) {
            Some(reg) if reg.key == rk => Ok(()),
            _ => Err(Refusal::Conflict),
        }
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// Adds a registration, or says there is no room for it.
    fn add(&mut self, reg: Registration) -> Result<(), Refusal> {
        if self.registrations.len() >= MAX_REGISTRATIONS {
            return Err(Sense::illegal(Asc::INSUFFICIENT_REGISTRATION_RESOURCES).into());
        }
        self.registrations.push(reg);
        Ok(())
    }

    /// Removes registration `idx`; releases the reservation its holder
    /// loses (SPC-4 §5.13.11.2.2): a registrants only reservation then owes
    /// RESERVATIONS RELEASED to the remaining registrants.
    fn unregister(&mut self, idx: usize, fx: &mut Effects) {
        if idx >= self.registrations.len() {
            return;
        }
        let gone = self.registrations.remove(idx);
        let released = match &self.reservation {
            Some(res) if res.pr_type.all_registrants() => self.registrations.is_empty(),
            Some(res) => res.holder == gone.it,
            None => false,
        };
        if released {
            let was = self.reservation.take().map(|r| r.pr_type);
            if was.is_some_and(PrType::registrants_only) {
                for reg in &self.registrations {
                    fx.ua(&reg.it, Asc::RESERVATIONS_RELEASED);
                }
            }
        }
    }

    /// Removes the registrations `remove` selects, except the issuer's,
    /// and returns their I_T nexuses.
    fn remove_others(
        &mut self,
        me: &Nexus,
        remove: impl Fn(&Registration) -> bool,
    ) -> Vec<ItNexus> {
        let mut gone = Vec::new();
        self.registrations.retain(|r| {
            let drop = !r.it.is(me) && remove(r);
            if drop {
                gone.push(r.it.clone());
            }
            !drop
        });
        gone
    }

    /// REGISTER and REGISTER AND IGNORE EXISTING KEY (SPC-4 §5.13.7,
    /// table 51). `ignore` skips the RESERVATION KEY check.
    pub(crate) fn register(
        &mut self,
        me: &Nexus,
        rk: u64,
        sark: u64,
        ignore: bool,
        aptpl: bool,
    ) -> Result<Effects, Refusal> {
        let mut fx = Effects::default();
        match self.index_of(&ItNexus::of(me)) {
            None => {
                if !ignore && rk != 0 {
                    return Err(Refusal::Conflict);
                }
                if sark == 0 {
                    // Unregistering an unregistered I_T nexus: nothing to do.
                    return Ok(fx);
                }
                self.add(Registration {
                    key: sark,
                    it: ItNexus::of(me),
                    relative_port_id: me.relative_port_id,
                })?;
            }
            Some(idx) => {
                let current = self.registrations.get(idx).map(|r| r.key);
                if !ignore && current != Some(rk) {
                    return Err(Refusal::Conflict);
                }
                if sark == 0 {
                    self.unregister(idx, &mut fx);
                } else if let Some(reg) = self.registrations.get_mut(idx) {
                    reg.key = sark;
                }
            }
        }
        self.aptpl = aptpl;
        self.bump();
        Ok(fx)
    }

    /// RESERVE (SPC-4 §5.13.9): the holder may repeat it with the same type.
    pub(crate) fn reserve(&mut self, me: &Nexus, rk: u64, pr_type: PrType) -> Result<(), Refusal> {
        self.check_key(me, rk)?;
        match &self.reservation {
            None => {
                self.reservation = Some(Reservation {
                    pr_type,
                    holder: ItNexus::of(me),
                });
                Ok(())
            }
            Some(res) if res.pr_type == pr_type && self.is_holder(me) => Ok(()),
            Some(_) => Err(Refusal::Conflict),
        }
    }

    /// RELEASE (SPC-4 §5.13.11.2): a non-holder's RELEASE does nothing;
    /// the holder must name the reservation's type.
    pub(crate) fn release(
        &mut self,
        me: &Nexus,
        rk: u64,
        pr_type: PrType,
    ) -> Result<Effects, Refusal> {
        self.check_key(me, rk)?;
        let mut fx = Effects::default();
        let Some(res) = &self.reservation else {
            return Ok(fx);
        };
        if !self.is_holder(me) {
            return Ok(fx);
        }
        if res.pr_type != pr_type {
            return Err(Sense::illegal(Asc::INVALID_RELEASE_OF_PERSISTENT_RESERVATION).into());
        }
        let released = res.pr_type;
        self.reservation = None;
        if released.registrants_share() {
            for reg in self.registrations.iter().filter(|r| !r.it.is(me)) {
                fx.ua(&reg.it, Asc::RESERVATIONS_RELEASED);
            }
        }
        Ok(fx)
    }

    /// CLEAR (SPC-4 §5.13.11.2.3): every registration and the reservation go.
    pub(crate) fn clear(&mut self, me: &Nexus, rk: u64) -> Result<Effects, Refusal> {
        self.check_key(me, rk)?;
        let mut fx = Effects::default();
        for reg in self.registrations.iter().filter(|r| !r.it.is(me)) {
            fx.ua(&reg.it, Asc::RESERVATIONS_PREEMPTED);
        }
        self.registrations.clear();
        self.reservation = None;
        self.bump();
        Ok(fx)
    }

    /// PREEMPT and PREEMPT AND ABORT (SPC-4 §5.13.11.4). The issuer's own
    /// registration is never removed.
    pub(crate) fn preempt(
        &mut self,
        me: &Nexus,
        rk: u64,
        sark: u64,
        pr_type: PrType,
    ) -> Result<Effects, Refusal> {
        self.check_key(me, rk)?;
        let mut fx = Effects::default();
        let current = self.reservation.clone();
        let holder_key = self.reservation_key();
        match current {
            // All registrants, SARK zero: everyone else is preempted and
            // the issuer takes a new reservation.
            Some(res) if res.pr_type.all_registrants() && sark == 0 => {
                for it in self.remove_others(me, |_| true) {
                    fx.preempt(it);
                }
                self.reservation = Some(Reservation {
                    pr_type,
                    holder: ItNexus::of(me),
                });
            }
            // SARK names the holder: its reservation passes to the issuer.
            Some(res) if !res.pr_type.all_registrants() && holder_key == sark => {
                let gone = self.remove_others(me, |r| r.key == sark);
                self.reservation = Some(Reservation {
                    pr_type,
                    holder: ItNexus::of(me),
                });
                if res.pr_type != pr_type {
                    for reg in self.registrations.iter().filter(|r| !r.it.is(me)) {
                        fx.ua(&reg.it, Asc::RESERVATIONS_RELEASED);
                    }
                }
                for it in gone {
                    fx.preempt(it);
                }
            }
            // Otherwise only registrations are removed.
            _ => {
                if sark == 0 {
                    return Err(Sense::invalid_param_field(8, None).into());
                }
                let gone = self.remove_others(me, |r| r.key == sark);
                if gone.is_empty() {
                    return Err(Refusal::Conflict);
                }
                for it in gone {
                    fx.preempt(it);
                }
            }
        }
        self.bump();
        Ok(fx)
    }

    /// REGISTER AND MOVE (SPC-4 §5.13.8): the holder hands its reservation
    /// to `dest`, registering `dest` with `sark`.
    pub(crate) fn register_and_move(
        &mut self,
        me: &Nexus,
        rk: u64,
        sark: u64,
        dest: Registration,
        unreg: bool,
        aptpl: bool,
    ) -> Result<Effects, Refusal> {
        self.check_key(me, rk)?;
        let Some(res) = self.reservation.clone() else {
            return Err(Refusal::Conflict);
        };
        if res.pr_type.all_registrants() || !res.holder.is(me) {
            return Err(Refusal::Conflict);
        }
        if sark == 0 {
            return Err(Sense::invalid_param_field(8, None).into());
        }
        if dest.it.is(me) {
            return Err(Sense::invalid_param_field(24, None).into());
        }
        let mut fx = Effects::default();
        match self.index_of(&dest.it) {
            Some(idx) => {
                if let Some(reg) = self.registrations.get_mut(idx) {
                    reg.key = sark;
                }
            }
            None => self.add(Registration {
                key: sark,
                ..dest.clone()
            })?,
        }
        self.reservation = Some(Reservation {
            pr_type: res.pr_type,
            holder: dest.it,
        });
        if unreg {
            if let Some(idx) = self.index_of(&ItNexus::of(me)) {
                self.unregister(idx, &mut fx);
            }
        }
        self.aptpl = aptpl;
        self.bump();
        Ok(fx)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn nexus(id: u64, rel: u16) -> Nexus {
        Nexus {
            id,
            initiator_port: format!("iqn.i{id},i,0x000000000001"),
            target_port: format!("iqn.t,t,0x{rel:04x}"),
            relative_port_id: rel,
            port_group: rel,
            lun_map: None,
        }
    }

    pub(crate) fn registered(keys: &[(u64, u64)]) -> PrState {
        let mut s = PrState::default();
        for &(id, key) in keys {
            s.register(&nexus(id, 1), 0, key, false, false)
                .expect("register");
        }
        s
    }

    #[test]
    fn register_table_51() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let mut s = PrState::default();
        // Unregistered: a non-zero RESERVATION KEY conflicts.
        assert_eq!(s.register(&a, 5, 7, false, false), Err(Refusal::Conflict));
        // Unregistered, SARK zero: GOOD, nothing changes.
        assert_eq!(s.register(&a, 0, 0, false, false), Ok(Effects::default()));
        assert_eq!(s.generation, 0);
        s.register(&a, 0, 7, false, false).expect("register");
        assert_eq!(s.generation, 1);
        // Registered: the key must match, unless ignored.
        assert_eq!(s.register(&a, 8, 9, false, false), Err(Refusal::Conflict));
        s.register(&a, 7, 9, false, false).expect("change key");
        s.register(&a, 1234, 10, true, false)
            .expect("ignore existing key");
        assert_eq!(s.registration(&a).map(|r| r.key), Some(10));
        s.register(&b, 0, 10, true, true)
            .expect("second registrant");
        assert!(s.aptpl);
        s.register(&a, 10, 0, false, false).expect("unregister");
        assert!(!s.is_registered(&a));
        assert_eq!(s.generation, 5);
    }

    #[test]
    fn reserve_and_release() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        assert_eq!(
            s.reserve(&a, 0xB, PrType::EXCLUSIVE_ACCESS),
            Err(Refusal::Conflict)
        );
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS)
            .expect("reserve");
        let gen = s.generation;
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS)
            .expect("same again");
        assert_eq!(
            s.reserve(&a, 0xA, PrType::WRITE_EXCLUSIVE),
            Err(Refusal::Conflict)
        );
        assert_eq!(
            s.reserve(&b, 0xB, PrType::EXCLUSIVE_ACCESS),
            Err(Refusal::Conflict)
        );
        assert_eq!(s.reservation_key(), 0xA);
        // A non-holder's release does nothing; a wrong type is refused.
        assert_eq!(
            s.release(&b, 0xB, PrType::EXCLUSIVE_ACCESS),
            Ok(Effects::default())
        );
        assert!(s.reservation.is_some());
        let err = s.release(&a, 0xA, PrType::WRITE_EXCLUSIVE);
        assert!(
            matches!(err, Err(Refusal::Sense(s)) if s.asc == Asc::INVALID_RELEASE_OF_PERSISTENT_RESERVATION)
        );
        assert_eq!(
            s.release(&a, 0xA, PrType::EXCLUSIVE_ACCESS),
            Ok(Effects::default())
        );
        assert!(s.reservation.is_none());
        assert_eq!(s.generation, gen, "RESERVE/RELEASE do not count");
    }

    #[test]
    fn releasing_a_shared_reservation_tells_the_registrants() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        s.reserve(&a, 0xA, PrType::WRITE_EXCLUSIVE_AR)
            .expect("reserve");
        assert!(s.is_holder(&b), "all registrants hold it");
        assert_eq!(s.reservation_key(), 0);
        let fx = s
            .release(&b, 0xB, PrType::WRITE_EXCLUSIVE_AR)
            .expect("release");
        assert_eq!(fx.uas, vec![(ItNexus::of(&a), Asc::RESERVATIONS_RELEASED)]);
    }

    #[test]
    fn unregistering_the_holder() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        // Registrants only: released, the others are told.
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS_RO)
            .expect("reserve");
        let fx = s.register(&a, 0xA, 0, false, false).expect("unregister");
        assert!(s.reservation.is_none());
        assert_eq!(fx.uas, vec![(ItNexus::of(&b), Asc::RESERVATIONS_RELEASED)]);
        // Exclusive access: released silently.
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS)
            .expect("reserve");
        let fx = s.register(&a, 0xA, 0, false, false).expect("unregister");
        assert!(s.reservation.is_none() && fx.uas.is_empty());
        // All registrants: kept until the last registrant goes.
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS_AR)
            .expect("reserve");
        s.register(&a, 0xA, 0, false, false).expect("unregister a");
        assert!(s.reservation.is_some());
        s.register(&b, 0xB, 0, false, false).expect("unregister b");
        assert!(s.reservation.is_none());
    }

    #[test]
    fn clear_removes_everything() {
        let (a, b) = (nexus(1, 1), nexus(2, 1));
        let mut s = registered(&[(1, 0xA), (2, 0xB)]);
        s.reserve(&b, 0xB, PrType::WRITE_EXCLUSIVE)
            .expect("reserve");
        assert_eq!(s.clear(&a, 0xB), Err(Refusal::Conflict));
        let gen = s.generation;
        let fx = s.clear(&a, 0xA).expect("clear");
        assert_eq!(fx.uas, vec![(ItNexus::of(&b), Asc::RESERVATIONS_PREEMPTED)]);
        assert!(s.registrations.is_empty() && s.reservation.is_none());
        assert_eq!(s.generation, gen + 1);
    }

    #[test]
    fn preempt_registrations_only() {
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        // Same key for the issuer and another registrant (libiscsi's
        // rand_key() gives both sessions the same key): only the other goes.
        let mut s = registered(&[(1, 0xA), (2, 0xA), (3, 0xC)]);
        let gen = s.generation;
        let fx = s
            .preempt(&b, 0xA, 0xA, PrType::EXCLUSIVE_ACCESS)
            .expect("preempt");
        assert_eq!(fx.preempted, vec![ItNexus::of(&a)]);
        assert_eq!(
            fx.uas,
            vec![(ItNexus::of(&a), Asc::REGISTRATIONS_PREEMPTED)]
        );
        assert!(s.is_registered(&b) && s.is_registered(&c) && !s.is_registered(&a));
        assert!(s.reservation.is_none());
        assert_eq!(s.generation, gen + 1);
        // Nothing to preempt: conflict. SARK zero without reservation: invalid.
        assert_eq!(
            s.preempt(&b, 0xA, 0x99, PrType::EXCLUSIVE_ACCESS),
            Err(Refusal::Conflict)
        );
        let err = s.preempt(&b, 0xA, 0, PrType::EXCLUSIVE_ACCESS);
        assert!(
            matches!(err, Err(Refusal::Sense(s)) if s.asc == Asc::INVALID_FIELD_IN_PARAMETER_LIST)
        );
    }

    #[test]
    fn preempt_the_holder() {
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        let mut s = registered(&[(1, 0xA), (2, 0xB), (3, 0xC)]);
        s.reserve(&a, 0xA, PrType::WRITE_EXCLUSIVE)
            .expect("reserve");
        let fx = s
            .preempt(&b, 0xB, 0xA, PrType::EXCLUSIVE_ACCESS)
            .expect("preempt");
        assert_eq!(
            s.reservation,
            Some(Reservation {
                pr_type: PrType::EXCLUSIVE_ACCESS,
                holder: ItNexus::of(&b)
            })
        );
        // The type changed: the remaining registrant hears of it.
        assert!(fx
            .uas
            .contains(&(ItNexus::of(&c), Asc::RESERVATIONS_RELEASED)));
        assert!(fx
            .uas
            .contains(&(ItNexus::of(&a), Asc::REGISTRATIONS_PREEMPTED)));
        assert_eq!(fx.preempted, vec![ItNexus::of(&a)]);
    }

    #[test]
    fn preempt_all_registrants() {
        let (a, b, c) = (nexus(1, 1), nexus(2, 1), nexus(3, 1));
        let mut s = registered(&[(1, 0xA), (2, 0xB), (3, 0xC)]);
        s.reserve(&a, 0xA, PrType::EXCLUSIVE_ACCESS_AR)
            .expect("reserve");
        // SARK names one registrant: only it goes, the reservation stays.
        s.preempt(&b, 0xB, 0xC, PrType::EXCLUSIVE_ACCESS_AR)
            .expect("preempt c");
        assert!(!s.is_registered(&c) && s.reservation.is_some());
        // SARK zero: everyone else goes and the issuer reserves anew.
        let fx = s
            .preempt(&b, 0xB, 0, PrType::WRITE_EXCLUSIVE)
            .expect("preempt all");
        assert_eq!(fx.preempted, vec![ItNexus::of(&a)]);
        assert_eq!(s.registrations.len(), 1);
        assert!(s.is_holder(&b));
        assert_eq!(s.reservation_key(), 0xB);
    }

    #[test]
    fn register_and_move() {
        let (a, b) = (nexus(1, 1), nexus(2, 2));
        let mut s = registered(&[(1, 0xA)]);
        let dest = Registration {
            key: 0,
            it: ItNexus::of(&b),
            relative_port_id: 2,
        };
        // No reservation yet: conflict.
        assert_eq!(
            s.register_and_move(&a, 0xA, 0xB, dest.clone(), false, false),
            Err(Refusal::Conflict)
        );
        s.reserve(&a, 0xA, PrType::WRITE_EXCLUSIVE)
            .expect("reserve");
        let to_self = Registration {
            it: ItNexus::of(&a),
            ..dest.clone()
        };
        assert!(matches!(
            s.register_and_move(&a, 0xA, 0xB, to_self, false, false),
            Err(Refusal::Sense(_))
        ));
        s.register_and_move(&a, 0xA, 0xB, dest, true, false)
            .expect("move");
        assert!(s.is_holder(&b));
        assert!(!s.is_registered(&a), "UNREG");
        assert_eq!(
            s.registration(&b).map(|r| (r.key, r.relative_port_id)),
            Some((0xB, 2))
        );
    }

    #[test]
    fn registration_limit() {
        let mut s = PrState::default();
        for id in 0..MAX_REGISTRATIONS as u64 {
            s.register(&nexus(id, 1), 0, id + 1, false, false)
                .expect("fits");
        }
        let err = s.register(&nexus(9999, 1), 0, 1, false, false);
        assert!(
            matches!(err, Err(Refusal::Sense(s)) if s.asc == Asc::INSUFFICIENT_REGISTRATION_RESOURCES)
        );
    }
}
