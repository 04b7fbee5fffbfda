//! A logical unit served by several gateways (daemons exporting the same
//! backing, [`rustgt_backstore::shared`]): the events they tell each other
//! and what a gateway does when it hears one.
//!
//! - A logical unit reset (or target reset) on one gateway is a reset on
//!   every gateway: tasks aborted, SPC-2 reservation released, mode
//!   defaults restored, the reset unit attention for every nexus;
//! - a PERSISTENT RESERVE OUT, RESERVE or RELEASE (or the loss of the
//!   nexus holding an SPC-2 reservation) that changed the shared state
//!   makes every
//!   other gateway re-read it before the command completes, establish the
//!   unit attentions it owes to that gateway's nexuses and, for PREEMPT
//!   AND ABORT, abort their tasks;
//! - a COMPARE AND WRITE or ORWRITE that cannot use the store's own atomic
//!   compare-and-write fences its blocks off on every other gateway for
//!   its read-compare-write ([`fence`]): each other gateway takes the
//!   exclusive range lock of those blocks ([`crate::lba_lock`]), after the
//!   commands it has in flight there completed and before any later one
//!   starts, and only then answers; the lock is held until the fence is
//!   lifted or its lease (the announcer's operation timeout) ends. Plain
//!   READs and WRITEs pay nothing for it: they take that range lock
//!   anyway.
//!
//! Events are lines of text: `reset ASC ASCQ`, `pr`, `ua ASC ASCQ
//! INITIATOR<TAB>TARGET`, `abort INITIATOR<TAB>TARGET` (iSCSI names hold
//! neither tabs nor newlines), `fence TOKEN LBA BLOCKS LEASE_MS`, `unfence
//! TOKEN`, `owner GROUP` or `owner none`. An event that does not parse
//! is logged and ignored.
//!
//! - under explicit ALUA, the gateway that took the backing's ownership
//!   (SET TARGET PORT GROUPS) tells the others (`owner`): each raises
//!   ASYMMETRIC ACCESS STATE CHANGED on its nexuses, once per change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rustgt_backstore::shared::{Exclusion, SharedState};

use crate::fence::Added;
use crate::lun::LogicalUnit;
use crate::pr_state::{Effects, ItNexus};
use crate::sense::{Asc, Sense};
use crate::target_state::TargetShared;

/// What one gateway tells the others.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A logical unit reset with this unit attention.
    Reset(Asc),
    /// The persistent reservation state changed: re-read it, establish
    /// `uas` and abort the tasks of the `abort` nexuses.
    Reservations {
        uas: Vec<(ItNexus, Asc)>,
        abort: Vec<ItNexus>,
    },
    /// Keep every command off `blocks` blocks from `lba` until `Unfence`
    /// with the same token, or for `lease` at most.
    Fence {
        token: String,
        lba: u64,
        blocks: u64,
        lease: Duration,
    },
    /// Lift the fence `token`.
    Unfence { token: String },
    /// Explicit ALUA: the gateway of this target port group owns the
    /// backing now (`None`: no gateway does); its group is
    /// active/optimized, every other standby.
    Owner(Option<u16>),
}

/// Shortest and longest lease a fence is held for, whatever the event says.
const LEASE_MIN: Duration = Duration::from_secs(1);
const LEASE_MAX: Duration = Duration::from_secs(3600);

/// A token names a fence: letters, digits, '.', '-' only, at most this long.
const TOKEN_MAX: usize = 64;

fn valid_token(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= TOKEN_MAX
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

fn nexus_text(it: &ItNexus) -> String {
    format!("{}\t{}", it.initiator_port, it.target_port)
}

fn parse_nexus(s: &str) -> Option<ItNexus> {
    let (i, t) = s.split_once('\t')?;
    Some(ItNexus {
        initiator_port: i.to_owned(),
        target_port: t.to_owned(),
    })
}

fn parse_asc(a: &str, q: &str) -> Option<Asc> {
    Some(Asc::new(
        u8::from_str_radix(a, 16).ok()?,
        u8::from_str_radix(q, 16).ok()?,
    ))
}

impl Event {
    pub(crate) fn reservations(effects: &Effects, abort: bool) -> Event {
        Event::Reservations {
            uas: effects.uas.clone(),
            abort: if abort {
                effects.preempted.clone()
            } else {
                Vec::new()
            },
        }
    }

    /// The reservation state changed with no unit attention or abort to
    /// pass on (SPC-2 RESERVE, RELEASE, nexus loss).
    pub(crate) fn reservations_changed() -> Event {
        Event::Reservations {
            uas: Vec::new(),
            abort: Vec::new(),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        match self {
            Event::Reset(asc) => s.push_str(&format!("reset {:02x} {:02x}\n", asc.asc, asc.ascq)),
            Event::Reservations { uas, abort } => {
                s.push_str("pr\n");
                for (it, asc) in uas {
                    s.push_str(&format!(
                        "ua {:02x} {:02x} {}\n",
                        asc.asc,
                        asc.ascq,
                        nexus_text(it)
                    ));
                }
                for it in abort {
                    s.push_str(&format!("abort {}\n", nexus_text(it)));
                }
            }
            Event::Fence {
                token,
                lba,
                blocks,
                lease,
            } => s.push_str(&format!(
                "fence {token} {lba} {blocks} {}\n",
                lease.as_millis()
            )),
            Event::Unfence { token } => s.push_str(&format!("unfence {token}\n")),
            Event::Owner(Some(g)) => s.push_str(&format!("owner {g}\n")),
            Event::Owner(None) => s.push_str("owner none\n"),
        }
        s.into_bytes()
    }

    pub(crate) fn decode(data: &[u8]) -> Option<Event> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.lines();
        let first = lines.next()?;
        if let Some(rest) = first.strip_prefix("reset ") {
            let (a, q) = rest.split_once(' ')?;
            return Some(Event::Reset(parse_asc(a, q)?));
        }
        if let Some(rest) = first.strip_prefix("fence ") {
            let mut f = rest.split(' ');
            let token = f.next().filter(|t| valid_token(t))?.to_owned();
            let lba = f.next()?.parse().ok()?;
            let blocks = f.next()?.parse().ok()?;
            let ms: u64 = f.next()?.parse().ok()?;
            if f.next().is_some() || lines.next().is_some() {
                return None;
            }
            let lease = Duration::from_millis(ms).clamp(LEASE_MIN, LEASE_MAX);
            return Some(Event::Fence {
                token,
                lba,
                blocks,
                lease,
            });
        }
        if let Some(group) = first.strip_prefix("owner ") {
            if lines.next().is_some() {
                return None;
            }
            if group == "none" {
                return Some(Event::Owner(None));
            }
            return Some(Event::Owner(Some(group.parse().ok()?)));
        }
        if let Some(token) = first.strip_prefix("unfence ") {
            if !valid_token(token) || lines.next().is_some() {
                return None;
            }
            return Some(Event::Unfence {
                token: token.to_owned(),
            });
        }
        if first != "pr" {
            return None;
        }
        let mut uas = Vec::new();
        let mut abort = Vec::new();
        for line in lines {
            if let Some(rest) = line.strip_prefix("ua ") {
                let (a, rest) = rest.split_once(' ')?;
                let (q, it) = rest.split_once(' ')?;
                uas.push((parse_nexus(it)?, parse_asc(a, q)?));
            } else if let Some(it) = line.strip_prefix("abort ") {
                abort.push(parse_nexus(it)?);
            } else {
                return None;
            }
        }
        Some(Event::Reservations { uas, abort })
    }
}

/// Tells the other gateways of `lu`, if it has any. Failures are logged:
/// the change itself is made (and stored) already.
pub(crate) fn announce(lu: &LogicalUnit, event: &Event) {
    let Some(sh) = lu.backstore.shared_state() else {
        return;
    };
    if let Err(e) = sh.announce(&event.encode()) {
        tracing::warn!(lun = lu.lun, error = %e, "cannot tell the other gateways");
    }
}

/// Runs an event another gateway announced, on the store's event thread.
pub(crate) fn on_event(target: &Weak<TargetShared>, lu: &Weak<LogicalUnit>, data: &[u8]) {
    let (Some(target), Some(lu)) = (target.upgrade(), lu.upgrade()) else {
        return;
    };
    let Some(event) = Event::decode(data) else {
        tracing::warn!(
            lun = lu.lun,
            "ignoring an event from another gateway that does not parse"
        );
        return;
    };
    match event {
        Event::Reset(asc) => {
            tracing::info!(lun = lu.lun, "logical unit reset through another gateway");
            target.reset_lu_here(&lu, asc);
        }
        Event::Reservations { uas, abort } => {
            if let Err(e) = lu.pr.refresh() {
                tracing::error!(lun = lu.lun, error = %e,
                    "cannot re-read the persistent reservations another gateway changed");
            }
            let known = target.nexus_list();
            let ids_of = |it: &ItNexus| -> Vec<u64> {
                known.iter().filter(|n| it.is(n)).map(|n| n.id).collect()
            };
            if !abort.is_empty() {
                let ids: Vec<u64> = abort.iter().flat_map(&ids_of).collect();
                let aborted = lu.tasks.abort_matching(|k| ids.contains(&k.nexus));
                lu.tasks.wait_gone(&aborted);
            }
            for (it, asc) in &uas {
                lu.establish_ua(ids_of(it), *asc, None);
            }
        }
        Event::Fence {
            token,
            lba,
            blocks,
            lease,
        } => hold_fence(&lu, token, lba, blocks, lease),
        Event::Unfence { token } => {
            if let Some(id) = lu.fences.take(&token) {
                lu.lba_locks.release_held(id);
            }
        }
        Event::Owner(owner) => {
            if lu.alua.gateway_explicit() {
                crate::alua::owner_seen(&target, &lu, owner, None, true);
            }
        }
    }
}

/// This gateway broke a dead owner's ownership (failover heartbeat):
/// under explicit ALUA the owner changed with nobody announcing it, so
/// this gateway's nexuses and the other gateways learn of it now.
pub(crate) fn on_owner_broken(target: &Weak<TargetShared>, lu: &Weak<LogicalUnit>) {
    let (Some(target), Some(lu)) = (target.upgrade(), lu.upgrade()) else {
        return;
    };
    if !lu.alua.gateway_explicit() {
        return;
    }
    let Some(sh) = lu.backstore.shared_state() else {
        return;
    };
    // The lock was just broken: nobody owns it unless a gateway's STPG
    // took it meanwhile (this gateway's, when the owner cannot be read).
    let owner = sh.owner().unwrap_or_else(|e| {
        tracing::warn!(lun = lu.lun, error = %e, "cannot tell which gateway owns the backing");
        sh.owns().then(|| sh.port_group())
    });
    crate::alua::owner_seen(&target, &lu, owner, None, true);
    announce_owner(&lu, owner, OWNER_EVENT_WAIT);
}

/// How long the gateway that saw the ownership move waits for the other
/// gateways to hear of it (a dead gateway does not answer).
pub(crate) const OWNER_EVENT_WAIT: Duration = Duration::from_secs(2);

/// Tells the other gateways of `lu` that `owner` owns the backing now,
/// waiting `within` at most for their answers (a dead gateway does not
/// answer). Failures are logged: the ownership moved already.
pub(crate) fn announce_owner(lu: &LogicalUnit, owner: Option<u16>, within: Duration) {
    let Some(sh) = lu.backstore.shared_state() else {
        return;
    };
    match sh.announce_within(&Event::Owner(owner).encode(), within) {
        Ok(0) => {}
        Ok(missing) => tracing::warn!(
            lun = lu.lun,
            missing,
            "gateways did not acknowledge the new active gateway in time"
        ),
        Err(e) => tracing::warn!(lun = lu.lun, error = %e,
            "cannot tell the other gateways of the new active gateway"),
    }
}

/// Another gateway's fence: the exclusive range lock, taken in turn
/// within half the lease (the announcer waits for this answer for the
/// whole lease), then kept until lifted or the lease ends.
fn hold_fence(lu: &Arc<LogicalUnit>, token: String, lba: u64, blocks: u64, lease: Duration) {
    let start = Instant::now();
    let Some(id) = lu.lba_locks.hold_until(lba, blocks, start + lease / 2) else {
        tracing::error!(
            lun = lu.lun,
            lba,
            blocks,
            "another gateway's COMPARE AND WRITE could not fence its blocks here in time: \
             commands in flight on them did not finish"
        );
        return;
    };
    match lu.fences.add(token, id, start + lease) {
        Added::Kept => {}
        Added::Refused => {
            lu.lba_locks.release_held(id);
            tracing::error!(
                lun = lu.lun,
                lba,
                blocks,
                "too many fences from other gateways; this one is not held"
            );
        }
        Added::StartReaper => {
            let reaper_lu = Arc::clone(lu);
            let spawned = std::thread::Builder::new()
                .name("fence-lease".into())
                .spawn(move || reap(&reaper_lu));
            if let Err(e) = spawned {
                // Without a reaper the fences end only when lifted.
                tracing::error!(lun = lu.lun, error = %e, "cannot start the fence lease thread");
            }
        }
    }
}

/// Releases fences whose lease ended, until none is left.
fn reap(lu: &LogicalUnit) {
    while let Some(ended) = lu.fences.reap() {
        for (token, id) in ended {
            tracing::warn!(lun = lu.lun, token = %token,
                "a fence of another gateway's COMPARE AND WRITE ended with its lease, not lifted");
            lu.lba_locks.release_held(id);
        }
    }
}

/// Numbers the fences this process announces.
static FENCE_SEQ: AtomicU64 = AtomicU64::new(0);

/// Blocks fenced off on every other gateway; dropping it lifts the fence.
#[must_use = "the fence is lifted when the guard is dropped"]
pub(crate) struct FenceGuard {
    shared: Arc<dyn SharedState>,
    token: String,
    lun: u64,
}

/// Fences `blocks` blocks from `lba` off on every other gateway of `lu`
/// (nothing when the unit has none; `exclusion` is the gateways'
/// exclusion the caller holds); returns once each gateway that is alive
/// holds it. A gateway that does not answer within the store's timeout is
/// taken for dead (its client can no longer write: librbd breaks a dead
/// client's lock and blocklists it); waiting that long may have outlived
/// the exclusion's lease, so the exclusion is then renewed, and the
/// command fails (retryable) if another gateway took it meanwhile.
pub(crate) fn fence(
    lu: &LogicalUnit,
    exclusion: Option<&Exclusion>,
    lba: u64,
    blocks: u64,
) -> Result<Option<FenceGuard>, Sense> {
    let Some(shared) = lu.backstore.shared_state() else {
        return Ok(None);
    };
    let token = format!(
        "{}.{}.{}",
        shared.port_group(),
        std::process::id(),
        FENCE_SEQ.fetch_add(1, Ordering::Relaxed)
    );
    let event = Event::Fence {
        token: token.clone(),
        lba,
        blocks,
        lease: shared.timeout(),
    };
    let missing = shared.announce(&event.encode())?;
    let guard = FenceGuard {
        shared,
        token,
        lun: lu.lun,
    };
    if missing > 0 {
        tracing::warn!(
            lun = lu.lun,
            missing,
            "gateways did not answer a COMPARE AND WRITE fence in time; going on without them"
        );
        if let Some(ex) = exclusion {
            ex.renew()?;
        }
    }
    Ok(Some(guard))
}

impl Drop for FenceGuard {
    fn drop(&mut self) {
        let event = Event::Unfence {
            token: std::mem::take(&mut self.token),
        };
        if let Err(e) = self.shared.announce(&event.encode()) {
            tracing::warn!(lun = self.lun, error = %e,
                "cannot lift a COMPARE AND WRITE fence; it ends with its lease");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(i: &str, t: &str) -> ItNexus {
        ItNexus {
            initiator_port: i.into(),
            target_port: t.into(),
        }
    }

    #[test]
    fn events_round_trip() {
        let events = [
            Event::Reset(Asc::BUS_DEVICE_RESET_FUNCTION_OCCURRED),
            Event::Reservations {
                uas: vec![
                    (
                        it("iqn.a,i,0x800000000001", "iqn.t,t,0x0002"),
                        Asc::REGISTRATIONS_PREEMPTED,
                    ),
                    (
                        it("iqn.b,i,0x1", "iqn.t,t,0x0001"),
                        Asc::RESERVATIONS_RELEASED,
                    ),
                ],
                abort: vec![it("iqn.a,i,0x800000000001", "iqn.t,t,0x0002")],
            },
            Event::Reservations {
                uas: vec![],
                abort: vec![],
            },
            Event::Fence {
                token: "2.4242.17".into(),
                lba: u64::MAX,
                blocks: 255,
                lease: Duration::from_secs(30),
            },
            Event::Unfence {
                token: "1.7.0".into(),
            },
            Event::Owner(Some(2)),
            Event::Owner(None),
        ];
        for e in events {
            assert_eq!(Event::decode(&e.encode()), Some(e));
        }
    }

    #[test]
    fn fence_lease_is_clamped() {
        let lease = |ms: &str| match Event::decode(format!("fence t 0 1 {ms}").as_bytes()) {
            Some(Event::Fence { lease, .. }) => lease,
            other => panic!("{other:?}"),
        };
        assert_eq!(lease("0"), LEASE_MIN);
        assert_eq!(lease("18446744073709551615"), LEASE_MAX);
        assert_eq!(lease("5000"), Duration::from_secs(5));
    }

    #[test]
    fn garbage_is_refused() {
        for bad in [
            &b""[..],
            b"reset",
            b"reset zz 00",
            b"pr\nua 2a 05 no-tab",
            b"pr\nsomething",
            b"\xff\xfe",
            b"hello",
            b"fence",
            b"fence t 1 2",
            b"fence t 1 2 3 4",
            b"fence t x 2 3",
            b"fence t\t 1 2 3",
            b"fence t 1 2 3\nextra",
            b"unfence ",
            b"unfence a b",
        ] {
            assert_eq!(Event::decode(bad), None, "{bad:?}");
        }
    }
}
