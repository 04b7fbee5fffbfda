//! Initiator groups of a target (LUN masking and per-initiator CHAP, as
//! LIO's per-ACL `mapped_luns`/`auth` and SCST's `ini_groups`): which
//! group an initiator belongs to, what it may see and how it must
//! authenticate.
//!
//! Matching rule: a group that lists the initiator's exact name wins over
//! any wildcard pattern; among wildcard matches, the first group in
//! configuration order wins. Names and patterns compare without ASCII
//! case (iSCSI names are lower case after stringprep, RFC 3722).

use std::sync::Arc;

use rustgt_scsi::LunMap;

use crate::chap::ChapPolicy;
use crate::config::TargetInfo;

/// One initiator group of a target.
#[derive(Debug, Clone, Default)]
pub struct InitiatorGroup {
    /// The group's name (admin commands, logs).
    pub name: String,
    /// Initiator names or patterns (`*` any run of characters, `?` one).
    pub initiators: Vec<String>,
    /// CHAP for its members, instead of the target's.
    pub chap: Option<ChapPolicy>,
    /// The LUNs its members see; `None`: the target's own numbering.
    pub lun_map: Option<Arc<LunMap>>,
}

impl InitiatorGroup {
    /// Whether `initiator` is listed by its exact name.
    fn lists(&self, initiator: &str) -> bool {
        self.initiators
            .iter()
            .any(|p| !is_pattern(p) && p.eq_ignore_ascii_case(initiator))
    }

    /// Whether a wildcard pattern of the group matches `initiator`.
    fn matches_pattern(&self, initiator: &str) -> bool {
        self.initiators
            .iter()
            .any(|p| is_pattern(p) && glob(p.as_bytes(), initiator.as_bytes()))
    }
}

/// Whether `p` has a wildcard (`*` or `?`).
pub fn is_pattern(p: &str) -> bool {
    p.contains(['*', '?'])
}

/// Whether `name` matches `pattern` (`*`, `?`), ignoring ASCII case.
/// Iterative, with one backtrack point: linear in practice, never worse
/// than the product of the two lengths.
pub fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || name.get(n).is_some_and(|x| x.eq_ignore_ascii_case(&c)) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == b'*'))
}

/// The group of `groups` that `initiator` belongs to (see the module's
/// matching rule).
pub fn group_of<'a>(groups: &'a [InitiatorGroup], initiator: &str) -> Option<&'a InitiatorGroup> {
    groups
        .iter()
        .find(|g| g.lists(initiator))
        .or_else(|| groups.iter().find(|g| g.matches_pattern(initiator)))
}

impl crate::config::PortalConfig {
    /// The CHAP a discovery session of `initiator` must pass: its
    /// discovery group's, else `discovery_chap`.
    pub fn discovery_chap_for(&self, initiator: &str) -> ChapPolicy {
        group_of(&self.discovery_groups, initiator)
            .and_then(|g| g.chap.clone())
            .unwrap_or_else(|| self.discovery_chap.clone())
    }
}

impl TargetInfo {
    /// The group `initiator` belongs to (see the module's matching rule).
    pub fn group_of(&self, initiator: &str) -> Option<&InitiatorGroup> {
        group_of(&self.groups, initiator)
    }

    /// The CHAP `initiator` must pass: its group's, else the target's.
    pub fn chap_for(&self, initiator: &str) -> ChapPolicy {
        self.group_of(initiator)
            .and_then(|g| g.chap.clone())
            .unwrap_or_else(|| self.chap.clone())
    }

    /// The LUN map of `initiator`'s nexus (`None`: the target's own).
    pub fn lun_map_for(&self, initiator: &str) -> Option<Arc<LunMap>> {
        self.group_of(initiator).and_then(|g| g.lun_map.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_stars_and_marks() {
        let m = |p: &str, n: &str| glob(p.as_bytes(), n.as_bytes());
        assert!(m(
            "iqn.2026-11.org.example:*",
            "iqn.2026-11.org.example:db1"
        ));
        assert!(m("*db?", "iqn.x:DB1"));
        assert!(!m("*db?", "iqn.x:db12"));
        assert!(m("*", ""));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(!m("abc", "abcd"));
    }

    fn group(name: &str, initiators: &[&str]) -> InitiatorGroup {
        InitiatorGroup {
            name: name.into(),
            initiators: initiators.iter().map(|s| s.to_string()).collect(),
            ..InitiatorGroup::default()
        }
    }

    #[test]
    fn exact_name_wins_over_an_earlier_wildcard() {
        let t = TargetInfo {
            groups: vec![
                group("all", &["iqn.2026-11.org.example:*"]),
                group("db", &["iqn.2026-11.org.example:db"]),
                group("later", &["iqn.2026-11.org.example:d*"]),
            ],
            name: "iqn.2026-11.org.rustgt:t".into(),
            alias: None,
            tpgt: 1,
            portals: vec!["127.0.0.1:3260".into()],
            iser_portals: Vec::new(),
            acl: Vec::new(),
            chap: ChapPolicy::default(),
            redirect: None,
        };
        let of = |n: &str| t.group_of(n).map(|g| g.name.as_str());
        assert_eq!(of("iqn.2026-11.org.example:DB"), Some("db"));
        assert_eq!(of("iqn.2026-11.org.example:dx"), Some("all"));
        assert_eq!(of("iqn.2026-11.org.other:x"), None);
    }
}
