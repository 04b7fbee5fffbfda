//! Asymmetric logical unit access (SPC-4 §5.16): one target port group
//! per iSCSI portal group; implicit ALUA, and explicit ALUA (SET TARGET
//! PORT GROUPS) on LUNs whose `alua` setting ([`AluaMode`]) allows it.
//!
//! A logical unit this daemon alone serves is active/optimized in every
//! group. One that several gateways serve (each gateway a group of its
//! own, all of them configured with [`crate::ScsiTarget::set_port_groups`])
//! is active/optimized in the group of the gateway that owns the backing
//! now (for RBD, the holder of the image's exclusive lock: its writes need
//! no hand-over) and active/non-optimized in the others; with no owner,
//! every group is active/non-optimized. Both states take every command, so
//! an initiator that moves to another path needs no explicit transition:
//! the ownership moves with its writes.
//!
//! The SCSI core learns target ports from the nexuses that use it
//! ([`Nexus::port_group`] and [`Nexus::relative_port_id`]), so REPORT
//! TARGET PORT GROUPS lists the groups and ports seen so far, always
//! including the one the command came through. Standard INQUIRY reports
//! TPGS from the LUN's `alua` setting (01b implicit, 10b explicit, 11b
//! both) and VPD page 83h carries the group number in its target port
//! group designator.
//!
//! Explicit ALUA on a unit several gateways serve: the owner's group is
//! active/optimized, every other group standby (none owning: all
//! standby); SET TARGET PORT GROUPS through a gateway asking its own group
//! active/optimized makes it take the ownership
//! ([`rustgt_backstore::shared::SharedState::take_ownership`]), its own
//! group standby gives it up; anything else is refused. Each owner change
//! raises ASYMMETRIC ACCESS STATE CHANGED once on every nexus of every
//! gateway but the sender's ([`owner_seen`], the `owner` event).
//!
//! Explicit ALUA, on a logical unit this daemon alone serves: SET TARGET
//! PORT GROUPS moves the groups it names to active/optimized, active/non-
//! optimized, standby or unavailable (never transitioning, so T_SUP is
//! 0; no offline or LBA dependent state either), held in the daemon
//! ([`AluaStates`]; a group never named is active/optimized; the states
//! end with the daemon or when the LUN goes back to implicit).
//! A change raises ASYMMETRIC ACCESS STATE CHANGED on every other I_T
//! nexus; REPORT TARGET PORT GROUPS then shows STATUS CODE 01h. Through a
//! standby or unavailable group only the commands SPC-4 §5.16.2.4.4 and
//! §5.16.2.4.5 list run (checked in `exec::admit` after unit attentions);
//! the others get NOT READY, 04h/0Bh or 04h/0Ch. No group is reported as
//! preferred (PREF 0).

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::OWNER_EVENT_WAIT;
use crate::cmd::Nexus;
use crate::ctx::Ctx;
use crate::outcome::Outcome;
use crate::sense::{Asc, Sense, SenseKey};

/// ASYMMETRIC ACCESS STATE active/optimized (SPC-4 table 279).
const STATE_ACTIVE_OPTIMIZED: u8 = 0x0;
/// ASYMMETRIC ACCESS STATE active/non-optimized.
const STATE_ACTIVE_NON_OPTIMIZED: u8 = 0x1;
/// Supported states: AO_SUP (SPC-4 §6.36, byte 1 of a descriptor).
const AO_SUP: u8 = 0x01;
/// Supported states: AN_SUP.
const AN_SUP: u8 = 0x02;

/// Which group is active/optimized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Optimized {
    /// Every group (a unit only this daemon serves, implicit ALUA).
    All,
    /// Only this group, or none; the others are active/non-optimized.
    Only(Option<u16>),
    /// A unit this daemon serves with explicit ALUA: the states SET TARGET
    /// PORT GROUPS gave (a group not listed is active/optimized).
    Set(BTreeMap<u16, u8>),
    /// A unit several gateways serve with explicit ALUA: the owner's group
    /// (if any gateway owns the backing) is active/optimized, every other
    /// group standby.
    Owner(Option<u16>),
}
/// STATUS CODE: no status available.
const STATUS_NONE: u8 = 0x00;
/// FORMAT TYPE of the extended header (SPC-4 table 277).
const EXTENDED_HEADER: u8 = 0b001 << 4;

/// Target port groups and their relative target port identifiers.
fn groups<'a>(nexuses: impl IntoIterator<Item = &'a Nexus>) -> BTreeMap<u16, BTreeSet<u16>> {
    let mut groups: BTreeMap<u16, BTreeSet<u16>> = BTreeMap::new();
    for n in nexuses {
        groups
            .entry(n.port_group)
            .or_default()
            .insert(n.relative_port_id);
    }
    groups
}

/// Target port group descriptors (SPC-4 table 278).
fn descriptors(groups: &BTreeMap<u16, BTreeSet<u16>>, optimized: &Optimized) -> Vec<u8> {
    let mut d = Vec::new();
    for (group, ports) in groups {
        // TARGET PORT COUNT is one byte: list at most 255 ports per group.
        let count = ports.len().min(255);
        let (state, supported, status) = match optimized {
            Optimized::All => (STATE_ACTIVE_OPTIMIZED, AO_SUP, STATUS_NONE),
            Optimized::Only(g) if *g == Some(*group) => {
                (STATE_ACTIVE_OPTIMIZED, AO_SUP | AN_SUP, STATUS_NONE)
            }
            Optimized::Only(_) => (STATE_ACTIVE_NON_OPTIMIZED, AO_SUP | AN_SUP, STATUS_NONE),
            Optimized::Owner(g) if *g == Some(*group) => {
                (STATE_ACTIVE_OPTIMIZED, AO_SUP | S_SUP, STATUS_NONE)
            }
            Optimized::Owner(_) => (STATE_STANDBY, AO_SUP | S_SUP, STATUS_NONE),
            Optimized::Set(states) => {
                let (state, status) = match states.get(group) {
                    Some(s) => (*s, STATUS_ALTERED_BY_STPG),
                    None => (STATE_ACTIVE_OPTIMIZED, STATUS_NONE),
                };
                (state, AO_SUP | AN_SUP | S_SUP | U_SUP, status)
            }
        };
        // PREF stays 0: no group is configured as preferred.
        d.push(state);
        d.push(supported);
        d.extend_from_slice(&group.to_be_bytes());
        d.extend_from_slice(&[0, status, 0, count as u8]);
        for port in ports.iter().take(count) {
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(&port.to_be_bytes());
        }
    }
    d
}

/// REPORT TARGET PORT GROUPS parameter data (SPC-4 §6.36) in the length
/// only (`extended` false) or extended header format.
pub(crate) fn report(
    groups: &BTreeMap<u16, BTreeSet<u16>>,
    optimized: &Optimized,
    extended: bool,
) -> Vec<u8> {
    let body = descriptors(groups, optimized);
    let header_extra = if extended { 4 } else { 0 };
    let len = u32::try_from(body.len() + header_extra).unwrap_or(u32::MAX);
    let mut d = Vec::with_capacity(4 + header_extra + body.len());
    d.extend_from_slice(&len.to_be_bytes());
    if extended {
        // IMPLICIT TRANSITION TIME 0: none, or a transition is a lock
        // hand-over of milliseconds.
        d.extend_from_slice(&[EXTENDED_HEADER, 0, 0, 0]);
    }
    d.extend(body);
    d
}

/// REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah).
pub(crate) fn report_target_port_groups(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let extended = match ctx.cdb.byte(1) >> 5 {
        0b000 => false,
        0b001 => true,
        _ => return Err(Sense::invalid_cdb_field(1, Some(7))),
    };
    let alloc_len = u64::from(ctx.cdb.be32(6));
    let known = ctx.target.nexus_list();
    let me: &Nexus = &ctx.cmd.nexus;
    let mut all = groups(known.iter().map(|n| n.as_ref()).chain(std::iter::once(me)));
    let configured = ctx.target.port_groups();
    for g in &configured {
        // A group no nexus used yet: its gateway's one port, whose
        // relative target port identifier is its portal group tag.
        all.entry(*g).or_insert_with(|| BTreeSet::from([*g]));
    }
    let optimized = match lu.backstore.shared_state() {
        None if lu.alua.mode().explicit() => Optimized::Set(lu.alua.states()),
        None => Optimized::All,
        Some(sh) => {
            let looked = sh.owner();
            let owner = match &looked {
                Ok(o) => *o,
                Err(e) => {
                    tracing::warn!(lun = lu.lun, error = %e, "cannot tell which gateway owns the backing");
                    None
                }
            };
            if lu.alua.mode().explicit() {
                // An owner change nobody announced (a lock broken while
                // its holder lived): the other nexuses learn of it now;
                // not when the owner could not be read.
                if looked.is_ok() {
                    owner_seen(ctx.target, lu, owner, Some(ctx.nexus_id()), false);
                }
                Optimized::Owner(owner)
            } else {
                Optimized::Only(owner)
            }
        }
    };
    Ok(Outcome::alloc(
        report(&all, &optimized, extended),
        alloc_len,
    ))
}

/// ASYMMETRIC ACCESS STATE standby.
const STATE_STANDBY: u8 = 0x2;
/// ASYMMETRIC ACCESS STATE unavailable.
const STATE_UNAVAILABLE: u8 = 0x3;
/// Supported states: S_SUP.
const S_SUP: u8 = 0x04;
/// Supported states: U_SUP.
const U_SUP: u8 = 0x08;
/// STATUS CODE: altered by SET TARGET PORT GROUPS.
const STATUS_ALTERED_BY_STPG: u8 = 0x01;
/// Standard INQUIRY byte 5 TPGS field (SPC-4 table 140).
const TPGS_IMPLICIT: u8 = 0b01 << 4;
const TPGS_EXPLICIT: u8 = 0b10 << 4;

/// Which ALUA transitions a logical unit supports (its `alua` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AluaMode {
    /// The device server alone changes access states (TPGS=01b); SET
    /// TARGET PORT GROUPS is refused. The default.
    #[default]
    Implicit,
    /// Only SET TARGET PORT GROUPS changes them (TPGS=10b).
    Explicit,
    /// Both (TPGS=11b).
    Both,
}

impl AluaMode {
    /// The TPGS bits of standard INQUIRY byte 5.
    pub(crate) fn tpgs(self) -> u8 {
        match self {
            AluaMode::Implicit => TPGS_IMPLICIT,
            AluaMode::Explicit => TPGS_EXPLICIT,
            AluaMode::Both => TPGS_IMPLICIT | TPGS_EXPLICIT,
        }
    }

    fn explicit(self) -> bool {
        self != AluaMode::Implicit
    }

    /// The setting's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AluaMode::Implicit => "implicit",
            AluaMode::Explicit => "explicit",
            AluaMode::Both => "both",
        }
    }
}

/// The access states SET TARGET PORT GROUPS gave to target port groups of
/// a logical unit this daemon alone serves; a group not listed is
/// active/optimized.
#[derive(Debug, Default)]
pub(crate) struct AluaStates {
    inner: std::sync::Mutex<AluaInner>,
    /// Some group is in a state that refuses commands (standby,
    /// unavailable) under explicit ALUA: only then does a command's
    /// check take the lock.
    gated: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct AluaInner {
    mode: AluaMode,
    /// The unit is served by several gateways: under explicit ALUA its
    /// access state here is the backing's ownership, not `states`.
    gateway: bool,
    /// Under explicit ALUA on gateways: the owner's group as last
    /// reported to this daemon's nexuses (outer `None`: not yet), so that
    /// each change raises ASYMMETRIC ACCESS STATE CHANGED once.
    seen_owner: Option<Option<u16>>,
    /// Group -> access state set by STPG.
    states: BTreeMap<u16, u8>,
}

/// What [`AluaStates::set_mode`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModeChange {
    /// TPGS in standard INQUIRY data.
    pub tpgs: bool,
    /// The access state of a group (back to active/optimized).
    pub states: bool,
}

impl AluaStates {
    pub(crate) fn new(mode: AluaMode, gateway: bool) -> Self {
        let a = AluaStates {
            inner: std::sync::Mutex::new(AluaInner {
                mode,
                gateway,
                seen_owner: None,
                states: BTreeMap::new(),
            }),
            gated: std::sync::atomic::AtomicBool::new(false),
        };
        a.regate(&a.lock());
        a
    }

    /// Explicit ALUA on a unit several gateways serve.
    pub(crate) fn gateway_explicit(&self) -> bool {
        let g = self.lock();
        g.gateway && g.mode.explicit()
    }

    /// Records `owner` as the owner's group reported here; true when it
    /// differs from the one last recorded (a change to announce). With
    /// nothing recorded yet, `known_change` tells (an owner taken or
    /// announced is a change; one merely looked at is not).
    fn see_owner(&self, owner: Option<u16>, known_change: bool) -> bool {
        let mut g = self.lock();
        let changed = match g.seen_owner {
            Some(seen) => seen != owner,
            None => known_change,
        };
        g.seen_owner = Some(owner);
        changed
    }

    /// Recomputes [`AluaStates::gated`] from the states under the lock.
    fn regate(&self, g: &AluaInner) {
        let gated = g.mode.explicit()
            && (g.gateway
                || g.states
                    .values()
                    .any(|&s| s == STATE_STANDBY || s == STATE_UNAVAILABLE));
        self.gated
            .store(gated, std::sync::atomic::Ordering::Release);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AluaInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn mode(&self) -> AluaMode {
        self.lock().mode
    }

    /// A new `alua` setting; leaving explicit ALUA puts every group back
    /// to active/optimized.
    pub(crate) fn set_mode(&self, mode: AluaMode) -> ModeChange {
        let mut g = self.lock();
        let tpgs = g.mode != mode;
        g.mode = mode;
        let states = !mode.explicit() && !g.states.is_empty();
        if states {
            g.states.clear();
        }
        if !mode.explicit() {
            g.seen_owner = None;
        }
        self.regate(&g);
        ModeChange { tpgs, states }
    }

    /// The states STPG set, by group.
    fn states(&self) -> BTreeMap<u16, u8> {
        self.lock().states.clone()
    }

    /// The access state of `group` as a name, for the admin interface.
    pub(crate) fn state_name(&self, group: u16) -> &'static str {
        match self.lock().states.get(&group).copied() {
            None | Some(STATE_ACTIVE_OPTIMIZED) => "active/optimized",
            Some(STATE_ACTIVE_NON_OPTIMIZED) => "active/non-optimized",
            Some(STATE_STANDBY) => "standby",
            Some(_) => "unavailable",
        }
    }

    /// Whether a command with this CDB may run through a port of `group`
    /// (SPC-4 §5.16.2.4.4 standby, §5.16.2.4.5 unavailable): `Err` carries
    /// NOT READY with the state's additional sense code. On gateways under
    /// explicit ALUA the port is active/optimized while `owns_here` (this
    /// gateway owns the backing), else standby.
    pub(crate) fn check(
        &self,
        group: u16,
        cdb: &[u8],
        owns_here: impl FnOnce() -> bool,
    ) -> Result<(), Sense> {
        if !self.gated.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let (state, gateway) = {
            let g = self.lock();
            if !g.mode.explicit() {
                return Ok(());
            }
            let state = g
                .states
                .get(&group)
                .copied()
                .unwrap_or(STATE_ACTIVE_OPTIMIZED);
            (state, g.gateway)
        };
        let state = match gateway {
            true if owns_here() => STATE_ACTIVE_OPTIMIZED,
            true => STATE_STANDBY,
            false => state,
        };
        let allowed = match state {
            STATE_STANDBY => allowed_in_standby(cdb),
            STATE_UNAVAILABLE => allowed_in_unavailable(cdb),
            _ => true,
        };
        if allowed {
            return Ok(());
        }
        let asc = if state == STATE_STANDBY {
            Asc::TARGET_PORT_IN_STANDBY_STATE
        } else {
            Asc::TARGET_PORT_IN_UNAVAILABLE_STATE
        };
        Err(Sense::new(SenseKey::NOT_READY, asc))
    }
}

/// Commands a standby port accepts (SPC-4 §5.16.2.4.4), and READ
/// CAPACITY (10) and (16), as SCST accepts them: an initiator that finds
/// every path standby (explicit ALUA before the first SET TARGET PORT
/// GROUPS) must still learn the device's size to build a multipath map
/// and send that STPG; Linux sizes such a disk 0 otherwise.
fn allowed_in_standby(cdb: &[u8]) -> bool {
    let op = cdb.first().copied().unwrap_or(0);
    let read_capacity_16 = op == 0x9E && cdb.get(1).map(|b| b & 0x1F) == Some(0x10);
    read_capacity_16
        || matches!(
            op,
            0x25 // READ CAPACITY (10)
            | 0x12 // INQUIRY
            | 0x4C | 0x4D // LOG SELECT / LOG SENSE
            | 0x15 | 0x55 | 0x1A | 0x5A // MODE SELECT / SENSE (6, 10)
            | 0xA0 // REPORT LUNS
            | 0x1C | 0x1D // RECEIVE / SEND DIAGNOSTIC
            | 0x03 // REQUEST SENSE
            | 0x5E | 0x5F // PERSISTENT RESERVE IN / OUT
            | 0x3B | 0x3C // WRITE / READ BUFFER
        )
        || is_rtpg_or_stpg(cdb)
}

/// Commands an unavailable port accepts (SPC-4 §5.16.2.4.5).
fn allowed_in_unavailable(cdb: &[u8]) -> bool {
    let op = cdb.first().copied().unwrap_or(0);
    matches!(op, 0x12 | 0xA0 | 0x03 | 0x3B | 0x3C) || is_rtpg_or_stpg(cdb)
}

fn is_rtpg_or_stpg(cdb: &[u8]) -> bool {
    let sa = cdb.get(1).map(|b| b & 0x1F);
    matches!(cdb.first(), Some(0xA3 | 0xA4)) && sa == Some(0x0A)
}

/// Whether SET TARGET PORT GROUPS is offered: explicit ALUA.
pub(crate) fn explicit_supported(lu: &crate::lun::LogicalUnit) -> bool {
    lu.alua.mode().explicit()
}

/// How long SET TARGET PORT GROUPS on a gateway waits for the backing's
/// ownership: a live owner gives it up within a second or so; a dead one
/// loses it when the failover heartbeat breaks its lock (about 3 s).
const TAKE_OVER_WAIT: std::time::Duration = std::time::Duration::from_secs(8);

/// The owner's group as seen now on a gateway under explicit ALUA: a
/// change from what this daemon's nexuses were last told raises
/// ASYMMETRIC ACCESS STATE CHANGED on each of them but `except`, once.
/// `known_change`: the owner was just taken or announced (a change even
/// when nothing was reported here before).
pub(crate) fn owner_seen(
    target: &crate::target_state::TargetShared,
    lu: &crate::lun::LogicalUnit,
    owner: Option<u16>,
    except: Option<u64>,
    known_change: bool,
) {
    if lu.alua.see_owner(owner, known_change) {
        tracing::info!(lun = lu.lun, owner = ?owner, "explicit ALUA: the active gateway changed");
        lu.establish_ua(
            target.known_nexuses(),
            Asc::ASYMMETRIC_ACCESS_STATE_CHANGED,
            except,
        );
    }
}

/// What a SET TARGET PORT GROUPS parameter list asks of a gateway
/// (`me`) under explicit ALUA, where one group at most is active/
/// optimized and every other standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GatewayAsk {
    /// Nothing to change (an empty list, or only other groups standby).
    Nothing,
    /// Make this gateway's group active/optimized: own the backing.
    Own,
    /// Make this gateway's group standby: give the backing up.
    GiveUp,
}

/// Checks `changes` (group, state, descriptor offset) against the
/// gateways' model: this gateway's group may be asked active/optimized
/// or standby, another group only standby (making another gateway active
/// is asked of that gateway). `Err`: INVALID FIELD IN PARAMETER LIST at
/// the offending descriptor's state or group.
fn gateway_ask(changes: &[(u16, u8)], me: u16) -> Result<GatewayAsk, Sense> {
    let mut ask = GatewayAsk::Nothing;
    for (i, &(group, state)) in changes.iter().enumerate() {
        let at = 4 + 4 * i;
        ask = match (group == me, state) {
            (true, STATE_ACTIVE_OPTIMIZED) if ask != GatewayAsk::GiveUp => GatewayAsk::Own,
            (true, STATE_STANDBY) if ask != GatewayAsk::Own => GatewayAsk::GiveUp,
            (false, STATE_STANDBY) => ask,
            (false, STATE_ACTIVE_OPTIMIZED) => {
                return Err(Sense::invalid_param_field(at + 2, None))
            }
            _ => return Err(Sense::invalid_param_field(at, Some(3))),
        };
    }
    Ok(ask)
}

/// SET TARGET PORT GROUPS on a gateway under explicit ALUA.
fn set_gateway_groups(
    ctx: &Ctx<'_>,
    lu: &crate::lun::LogicalUnit,
    sh: &dyn rustgt_backstore::shared::SharedState,
    changes: &[(u16, u8)],
) -> Result<(), Sense> {
    let me = sh.port_group();
    match gateway_ask(changes, me)? {
        GatewayAsk::Nothing => Ok(()),
        GatewayAsk::GiveUp => {
            if sh.owns() {
                sh.give_up_ownership()?;
                owner_seen(ctx.target, lu, None, Some(ctx.nexus_id()), true);
                crate::cluster::announce_owner(lu, None, OWNER_EVENT_WAIT);
            }
            Ok(())
        }
        GatewayAsk::Own => {
            if sh.owns() {
                // Already active/optimized: nothing changes.
                lu.alua.see_owner(Some(me), false);
                return Ok(());
            }
            let deadline = std::time::Instant::now() + TAKE_OVER_WAIT;
            if !sh.take_ownership(deadline)? {
                tracing::warn!(
                    lun = lu.lun,
                    "SET TARGET PORT GROUPS: the backing's ownership did not come in time"
                );
                return Err(Sense::new(
                    SenseKey::NOT_READY,
                    Asc::ASYMMETRIC_ACCESS_STATE_TRANSITION,
                ));
            }
            owner_seen(ctx.target, lu, Some(me), Some(ctx.nexus_id()), true);
            crate::cluster::announce_owner(lu, Some(me), OWNER_EVENT_WAIT);
            Ok(())
        }
    }
}

/// SET TARGET PORT GROUPS (MAINTENANCE OUT, service action 0Ah, SPC-4
/// §6.42): each descriptor names a group and the state asked for it.
pub(crate) fn set_target_port_groups(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    if !explicit_supported(lu) {
        // Implicit only: the command is not supported (TPGS says so).
        return Err(Sense::invalid_cdb_field(1, Some(4)));
    }
    let param_len = ctx.cdb.be32(6);
    let data = ctx
        .cmd
        .data_out
        .get(..usize::try_from(param_len).unwrap_or(usize::MAX))
        .unwrap_or(&ctx.cmd.data_out);
    let mut known = groups(ctx.target.nexus_list().iter().map(|n| n.as_ref()))
        .into_keys()
        .collect::<BTreeSet<u16>>();
    known.insert(ctx.cmd.nexus.port_group);
    known.extend(ctx.target.port_groups());
    let changes = parse_stpg(data, &known)?;
    if let Some(sh) = lu.backstore.shared_state() {
        set_gateway_groups(ctx, lu, sh.as_ref(), &changes)?;
        return Ok(Outcome::data_out(u64::from(param_len)));
    }
    let mut changed = false;
    {
        let mut g = lu.alua.lock();
        for (group, state) in changes {
            let was = g
                .states
                .insert(group, state)
                .unwrap_or(STATE_ACTIVE_OPTIMIZED);
            changed |= was != state;
        }
        lu.alua.regate(&g);
    }
    if changed {
        lu.establish_ua(
            ctx.target.known_nexuses(),
            Asc::ASYMMETRIC_ACCESS_STATE_CHANGED,
            Some(ctx.nexus_id()),
        );
    }
    Ok(Outcome::data_out(u64::from(param_len)))
}

/// The SET TARGET PORT GROUPS parameter list: a 4-byte reserved header,
/// then 4-byte descriptors (state in byte 0 bits 3..0, group in bytes
/// 2..3). Every descriptor is checked before any state changes.
fn parse_stpg(data: &[u8], known: &BTreeSet<u16>) -> Result<Vec<(u16, u8)>, Sense> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let body = data
        .get(4..)
        .filter(|b| b.len() % 4 == 0)
        .ok_or(Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR))?;
    let mut out = Vec::with_capacity(body.len() / 4);
    for (i, d) in body.chunks_exact(4).enumerate() {
        let at = 4 + 4 * i;
        let Ok([b0, _, g0, g1]) = <[u8; 4]>::try_from(d) else {
            return Err(Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR));
        };
        let state = b0 & 0x0F;
        let group = u16::from_be_bytes([g0, g1]);
        if !matches!(
            state,
            STATE_ACTIVE_OPTIMIZED | STATE_ACTIVE_NON_OPTIMIZED | STATE_STANDBY | STATE_UNAVAILABLE
        ) {
            return Err(Sense::invalid_param_field(at, Some(3)));
        }
        if !known.contains(&group) {
            return Err(Sense::invalid_param_field(at + 2, None));
        }
        out.push((group, state));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nexus(group: u16, rel: u16) -> Nexus {
        Nexus {
            id: u64::from(rel),
            initiator_port: "i".into(),
            target_port: "t".into(),
            relative_port_id: rel,
            port_group: group,
            lun_map: None,
        }
    }

    #[test]
    fn one_group_per_portal_group() {
        let ns = [nexus(1, 1), nexus(2, 2), nexus(1, 1), nexus(1, 3)];
        let g = groups(ns.iter());
        let d = report(&g, &Optimized::All, false);
        assert_eq!(&d[..4], &(d.len() as u32 - 4).to_be_bytes());
        // Group 1: two ports (1 and 3).
        assert_eq!(&d[4..12], &[0x00, 0x01, 0, 1, 0, 0, 0, 2]);
        assert_eq!(&d[12..20], &[0, 0, 0, 1, 0, 0, 0, 3]);
        // Group 2: one port.
        assert_eq!(&d[20..28], &[0x00, 0x01, 0, 2, 0, 0, 0, 1]);
        assert_eq!(&d[28..32], &[0, 0, 0, 2]);
        assert_eq!(d.len(), 32);
    }

    #[test]
    fn gateways_one_optimized() {
        let g = groups([nexus(1, 1), nexus(2, 2)].iter());
        let d = report(&g, &Optimized::Only(Some(2)), false);
        assert_eq!(&d[4..8], &[0x01, 0x03, 0, 1]);
        assert_eq!(&d[16..20], &[0x00, 0x03, 0, 2]);
        let d = report(&g, &Optimized::Only(None), false);
        assert_eq!(&d[4..8], &[0x01, 0x03, 0, 1]);
        assert_eq!(&d[16..20], &[0x01, 0x03, 0, 2]);
    }

    #[test]
    fn extended_header() {
        let g = groups([nexus(5, 9)].iter());
        let d = report(&g, &Optimized::All, true);
        assert_eq!(&d[..8], &[0, 0, 0, 16, 0x10, 0, 0, 0]);
        assert_eq!(&d[8..12], &[0x00, 0x01, 0, 5]);
        assert_eq!(d.len(), 20);
    }

    #[test]
    fn explicit_states_reported() {
        let g = groups([nexus(1, 1), nexus(2, 2)].iter());
        let d = report(
            &g,
            &Optimized::Set(BTreeMap::from([(2, STATE_STANDBY)])),
            false,
        );
        // Group 1 untouched: active/optimized, status none; AO/AN/S/U
        // supported, T_SUP/O_SUP/LBD_SUP not.
        assert_eq!(&d[4..12], &[0x00, 0x0F, 0, 1, 0, 0x00, 0, 1]);
        // Group 2: standby, altered by STPG.
        assert_eq!(&d[16..24], &[0x02, 0x0F, 0, 2, 0, 0x01, 0, 1]);
    }

    #[test]
    fn tpgs_bits() {
        assert_eq!(AluaMode::Implicit.tpgs(), 0x10);
        assert_eq!(AluaMode::Explicit.tpgs(), 0x20);
        assert_eq!(AluaMode::Both.tpgs(), 0x30);
    }

    #[test]
    fn stpg_parameter_list() {
        let known = BTreeSet::from([1u16, 2]);
        // Header, then group 2 -> standby, group 1 -> active/non-optimized.
        let data = [0, 0, 0, 0, 0x02, 0, 0, 2, 0x01, 0, 0, 1];
        assert_eq!(
            parse_stpg(&data, &known).expect("valid"),
            vec![(2, STATE_STANDBY), (1, STATE_ACTIVE_NON_OPTIMIZED)]
        );
        assert_eq!(parse_stpg(&[], &known).expect("empty"), vec![]);
        // Unknown group 7: INVALID FIELD IN PARAMETER LIST at byte 6.
        let e = parse_stpg(&[0, 0, 0, 0, 0x00, 0, 0, 7], &known).expect_err("group");
        assert_eq!(e.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        // Transitioning (Fh) and LBA dependent (4h) cannot be asked for.
        for state in [0x0F, 0x04, 0x0E] {
            let e = parse_stpg(&[0, 0, 0, 0, state, 0, 0, 1], &known).expect_err("state");
            assert_eq!(e.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        }
        // A torn descriptor.
        let e = parse_stpg(&[0, 0, 0, 0, 0x00, 0, 0], &known).expect_err("length");
        assert_eq!(e.asc, Asc::PARAMETER_LIST_LENGTH_ERROR);
    }

    #[test]
    fn standby_and_unavailable_gate_commands() {
        let a = AluaStates::new(AluaMode::Explicit, false);
        {
            let mut g = a.lock();
            g.states.insert(1, STATE_STANDBY);
            g.states.insert(2, STATE_UNAVAILABLE);
            a.regate(&g);
        }
        let read10 = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        let tur = [0x00, 0, 0, 0, 0, 0];
        let rtpg = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
        let stpg = [0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let pr_in = [0x5E, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        let e = a.check(1, &read10, || true).expect_err("standby read");
        assert_eq!((e.key, e.asc), (SenseKey::NOT_READY, Asc::new(0x04, 0x0B)));
        assert!(a.check(1, &tur, || true).is_err());
        let read_capacity_10 = [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let read_capacity_16 = [0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
        let get_lba_status = [0x9E, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
        assert!(a.check(1, &read_capacity_10, || true).is_ok());
        assert!(a.check(1, &read_capacity_16, || true).is_ok());
        assert!(a.check(1, &get_lba_status, || true).is_err());
        assert!(a.check(2, &read_capacity_16, || true).is_err());
        for ok in [&rtpg[..], &stpg, &pr_in, &[0x12, 0, 0, 0, 96, 0]] {
            assert!(a.check(1, ok, || true).is_ok(), "{ok:02x?}");
        }
        let e = a.check(2, &read10, || true).expect_err("unavailable read");
        assert_eq!((e.key, e.asc), (SenseKey::NOT_READY, Asc::new(0x04, 0x0C)));
        assert!(
            a.check(2, &pr_in, || true).is_err(),
            "PR IN is refused when unavailable"
        );
        assert!(a.check(2, &rtpg, || true).is_ok() && a.check(2, &stpg, || true).is_ok());
        // Group 3 was never set: active/optimized.
        assert!(a.check(3, &read10, || true).is_ok());
        // Back to implicit: states cleared, nothing gated.
        let c = a.set_mode(AluaMode::Implicit);
        assert_eq!(
            c,
            ModeChange {
                tpgs: true,
                states: true
            }
        );
        assert!(a.check(1, &read10, || true).is_ok());
        assert_eq!(a.state_name(1), "active/optimized");
    }

    #[test]
    fn gateways_explicit_owner_optimized_others_standby() {
        let g = groups([nexus(1, 1), nexus(2, 2)].iter());
        let d = report(&g, &Optimized::Owner(Some(2)), false);
        // Group 1 standby, group 2 active/optimized; AO and S supported.
        assert_eq!(&d[4..8], &[0x02, 0x05, 0, 1]);
        assert_eq!(&d[16..20], &[0x00, 0x05, 0, 2]);
        let d = report(&g, &Optimized::Owner(None), false);
        assert_eq!(&d[4..8], &[0x02, 0x05, 0, 1]);
        assert_eq!(&d[16..20], &[0x02, 0x05, 0, 2]);
    }

    #[test]
    fn gateway_stpg_model() {
        let ao = STATE_ACTIVE_OPTIMIZED;
        let sb = STATE_STANDBY;
        assert_eq!(gateway_ask(&[], 2), Ok(GatewayAsk::Nothing));
        assert_eq!(gateway_ask(&[(2, ao)], 2), Ok(GatewayAsk::Own));
        assert_eq!(gateway_ask(&[(1, sb), (2, ao)], 2), Ok(GatewayAsk::Own));
        assert_eq!(gateway_ask(&[(2, sb)], 2), Ok(GatewayAsk::GiveUp));
        assert_eq!(gateway_ask(&[(1, sb)], 2), Ok(GatewayAsk::Nothing));
        // Another gateway's group active/optimized: the group field of
        // the second descriptor (byte 10).
        let e = gateway_ask(&[(2, sb), (1, ao)], 2).expect_err("other AO");
        assert_eq!(e.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        assert_eq!(e, Sense::invalid_param_field(10, None));
        // States the model cannot give: the state field.
        for state in [STATE_ACTIVE_NON_OPTIMIZED, STATE_UNAVAILABLE] {
            let e = gateway_ask(&[(2, state)], 2).expect_err("state");
            assert_eq!(e, Sense::invalid_param_field(4, Some(3)));
            let e = gateway_ask(&[(1, state)], 2).expect_err("state");
            assert_eq!(e, Sense::invalid_param_field(4, Some(3)));
        }
        // Own group both active/optimized and standby.
        let e = gateway_ask(&[(2, ao), (2, sb)], 2).expect_err("both");
        assert_eq!(e, Sense::invalid_param_field(8, Some(3)));
    }

    #[test]
    fn gateway_explicit_gates_on_ownership() {
        let a = AluaStates::new(AluaMode::Explicit, true);
        let write10 = [0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        let sync = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(a.check(1, &write10, || true).is_ok());
        let e = a.check(1, &write10, || false).expect_err("standby");
        assert_eq!((e.key, e.asc), (SenseKey::NOT_READY, Asc::new(0x04, 0x0B)));
        assert!(a.check(1, &sync, || false).is_err());
        assert!(a.check(1, &[0x12, 0, 0, 0, 96, 0], || false).is_ok());
        // Implicit on gateways: never gated (the ownership follows writes).
        let i = AluaStates::new(AluaMode::Implicit, true);
        assert!(i.check(1, &write10, || false).is_ok());
        assert!(!i.gateway_explicit() && a.gateway_explicit());
    }

    #[test]
    fn owner_change_seen_once() {
        let a = AluaStates::new(AluaMode::Explicit, true);
        // A first look is no change (nothing was reported before); an
        // owner taken or announced is.
        assert!(!a.see_owner(Some(1), false));
        assert!(!a.see_owner(Some(1), true));
        assert!(a.see_owner(Some(2), true));
        assert!(!a.see_owner(Some(2), true));
        assert!(!a.see_owner(Some(2), false));
        assert!(a.see_owner(None, false));
        assert!(!a.see_owner(None, false));
        assert!(a.see_owner(Some(1), false));
        let b = AluaStates::new(AluaMode::Explicit, true);
        assert!(b.see_owner(Some(2), true));
    }
}
