//! Asymmetric logical unit access (SPC-4 §5.16): implicit ALUA with one
//! target port group per iSCSI portal group.
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
//! TPGS=01b (implicit only) and VPD page 83h carries the same group number
//! in its target port group designator. SET TARGET PORT GROUPS (explicit
//! ALUA) is not supported.

use std::collections::{BTreeMap, BTreeSet};

use crate::cmd::Nexus;
use crate::ctx::Ctx;
use crate::outcome::Outcome;
use crate::sense::Sense;

/// ASYMMETRIC ACCESS STATE active/optimized (SPC-4 table 279).
const STATE_ACTIVE_OPTIMIZED: u8 = 0x0;
/// ASYMMETRIC ACCESS STATE active/non-optimized.
const STATE_ACTIVE_NON_OPTIMIZED: u8 = 0x1;
/// Supported states: AO_SUP (SPC-4 §6.36, byte 1 of a descriptor).
const AO_SUP: u8 = 0x01;
/// Supported states: AN_SUP.
const AN_SUP: u8 = 0x02;

/// Which group is active/optimized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Optimized {
    /// Every group (a unit only this daemon serves).
    All,
    /// Only this group, or none; the others are active/non-optimized.
    Only(Option<u16>),
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
fn descriptors(groups: &BTreeMap<u16, BTreeSet<u16>>, optimized: Optimized) -> Vec<u8> {
    let mut d = Vec::new();
    for (group, ports) in groups {
        // TARGET PORT COUNT is one byte: list at most 255 ports per group.
        let count = ports.len().min(255);
        let (state, supported) = match optimized {
            Optimized::All => (STATE_ACTIVE_OPTIMIZED, AO_SUP),
            Optimized::Only(g) if g == Some(*group) => (STATE_ACTIVE_OPTIMIZED, AO_SUP | AN_SUP),
            Optimized::Only(_) => (STATE_ACTIVE_NON_OPTIMIZED, AO_SUP | AN_SUP),
        };
        d.push(state);
        d.push(supported);
        d.extend_from_slice(&group.to_be_bytes());
        d.extend_from_slice(&[0, STATUS_NONE, 0, count as u8]);
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
    optimized: Optimized,
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
        None => Optimized::All,
        Some(sh) => Optimized::Only(sh.owner().unwrap_or_else(|e| {
            tracing::warn!(lun = lu.lun, error = %e, "cannot tell which gateway owns the backing");
            None
        })),
    };
    Ok(Outcome::alloc(report(&all, optimized, extended), alloc_len))
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
        let d = report(&g, Optimized::All, false);
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
        let d = report(&g, Optimized::Only(Some(2)), false);
        assert_eq!(&d[4..8], &[0x01, 0x03, 0, 1]);
        assert_eq!(&d[16..20], &[0x00, 0x03, 0, 2]);
        let d = report(&g, Optimized::Only(None), false);
        assert_eq!(&d[4..8], &[0x01, 0x03, 0, 1]);
        assert_eq!(&d[16..20], &[0x01, 0x03, 0, 2]);
    }

    #[test]
    fn extended_header() {
        let g = groups([nexus(5, 9)].iter());
        let d = report(&g, Optimized::All, true);
        assert_eq!(&d[..8], &[0, 0, 0, 16, 0x10, 0, 0, 0]);
        assert_eq!(&d[8..12], &[0x00, 0x01, 0, 5]);
        assert_eq!(d.len(), 20);
    }
}
