//! A logical unit served by several gateways (daemons exporting the same
//! backing, [`rustgt_backstore::shared`]): the events they tell each other
//! and what a gateway does when it hears one.
//!
//! - A logical unit reset (or target reset) on one gateway is a reset on
//!   every gateway: tasks aborted, SPC-2 reservation released, mode
//!   defaults restored, the reset unit attention for every nexus;
//! - a PERSISTENT RESERVE OUT that changed the shared state makes every
//!   other gateway re-read it before the command completes, establish the
//!   unit attentions it owes to that gateway's nexuses and, for PREEMPT
//!   AND ABORT, abort their tasks.
//!
//! Events are lines of text: `reset ASC ASCQ`, `pr`, `ua ASC ASCQ
//! INITIATOR<TAB>TARGET`, `abort INITIATOR<TAB>TARGET` (iSCSI names hold
//! neither tabs nor newlines). An event that does not parse is logged and
//! ignored.

use std::sync::Weak;

use crate::lun::LogicalUnit;
use crate::pr_state::{Effects, ItNexus};
use crate::sense::Asc;
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
        ];
        for e in events {
            assert_eq!(Event::decode(&e.encode()), Some(e));
        }
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
        ] {
            assert_eq!(Event::decode(bad), None, "{bad:?}");
        }
    }
}
