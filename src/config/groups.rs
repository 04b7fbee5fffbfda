//! `[[targets.groups]]`: initiator groups of a target, each with its own
//! LUN map and CHAP (LUN masking as LIO's per-ACL `mapped_luns` and
//! SCST's `ini_groups`), and their checks.
//!
//! An initiator belongs to the group that lists its exact name, else to
//! the first group (in file order) with a wildcard pattern (`*`, `?`)
//! that matches it; an exact name may be listed by one group only.
//! Initiators in no group see the target's LUNs under their own numbers
//! (and log in as `acl` says).

use std::collections::HashMap;
use std::sync::Arc;

use rustgt_iscsi::groups::{is_pattern, InitiatorGroup};
use rustgt_iscsi::IscsiName;
use rustgt_scsi::{LunMap, MAX_LUN};
use serde::{Deserialize, Serialize};

use super::auth::{check_chap, ChapSettings};
use super::keypath::{Checker, KeyPath};
use super::targets::TargetSettings;

/// One initiator group of a target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSettings {
    /// The group's name, unique within the target.
    pub name: String,
    /// Initiator names, or patterns with `*` and `?`.
    pub initiators: Vec<String>,
    /// CHAP its members must pass instead of the target's `chap`
    /// (`mutual_user`/`mutual_secret` for mutual CHAP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chap: Option<ChapSettings>,
    /// The LUNs its members see; absent: all of the target's, under their
    /// own numbers; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub luns: Option<Vec<LunMapping>>,
}

/// One entry of a group's LUN map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LunMapping {
    /// The LUN number the group's members see.
    pub lun: u64,
    /// The target's LUN (`targets.luns.id`) it shows.
    pub source: u64,
    /// Writes through this mapping are refused (DATA PROTECT).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

const MAX_GROUPS: usize = 256;
const MAX_NAME_LEN: usize = 64;

pub(super) fn check_groups(c: &mut Checker, key: &KeyPath, t: &TargetSettings) {
    check_group_list(c, &key.key("groups"), &t.groups, Some(t));
}

/// `[[discovery.groups]]`: per-initiator CHAP of discovery sessions; no
/// LUN maps (discovery sees no LUN), and `chap` required.
pub(super) fn check_discovery_groups(c: &mut Checker, key: &KeyPath, groups: &[GroupSettings]) {
    check_group_list(c, &key.key("groups"), groups, None);
}

/// The groups of a target (`Some`), or of discovery (`None`).
fn check_group_list(
    c: &mut Checker,
    gkey: &KeyPath,
    groups: &[GroupSettings],
    target: Option<&TargetSettings>,
) {
    if groups.len() > MAX_GROUPS {
        c.fail(gkey.clone(), format!("lists more than {MAX_GROUPS} groups"));
    }
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut exact: HashMap<String, usize> = HashMap::new();
    for (i, g) in groups.iter().enumerate() {
        let at = gkey.index(i);
        check_group_name(c, at.key("name"), &g.name);
        if let Some(first) = names.insert(g.name.to_ascii_lowercase(), i) {
            c.fail(
                at.key("name"),
                format!("group {:?} is already defined by groups[{first}]", g.name),
            );
        }
        if g.initiators.is_empty() {
            c.fail(
                at.key("initiators"),
                "must list at least one initiator name or pattern",
            );
        }
        for (j, name) in g.initiators.iter().enumerate() {
            let ikey = at.key("initiators").index(j);
            if is_pattern(name) {
                if name.is_empty()
                    || name.len() > 223
                    || name.chars().any(|ch| ch.is_control() || ch.is_whitespace())
                {
                    c.fail(
                        ikey,
                        "a pattern must be 1..=223 bytes without spaces or control characters",
                    );
                }
            } else if let Err(msg) = IscsiName::parse(name) {
                c.fail(ikey, msg.to_string());
            } else if let Some(first) = exact.insert(name.to_ascii_lowercase(), i) {
                c.fail(
                    ikey,
                    if first == i {
                        format!("{name} is listed twice")
                    } else {
                        format!(
                            "{name} is already listed by groups[{first}]; an initiator belongs to one group"
                        )
                    },
                );
            }
        }
        match &g.chap {
            Some(chap) => check_chap(c, &at.key("chap"), chap),
            None if target.is_none() => c.fail(
                at.key("chap"),
                "is required: a discovery group only says which CHAP its members pass",
            ),
            None => {}
        }
        match (&g.luns, target) {
            (Some(luns), Some(t)) => check_map(c, &at.key("luns"), t, luns),
            (Some(_), None) => c.fail(
                at.key("luns"),
                "discovery sessions see no LUNs; map LUNs in a target's groups",
            ),
            (None, _) => {}
        }
    }
}

fn check_group_name(c: &mut Checker, key: KeyPath, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '_' | '.'));
    if !ok {
        c.fail(
            key,
            format!("must be 1..={MAX_NAME_LEN} characters of A-Z, a-z, 0-9, '-', '_', '.'"),
        );
    }
}

fn check_map(c: &mut Checker, key: &KeyPath, t: &TargetSettings, luns: &[LunMapping]) {
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut sources: HashMap<u64, usize> = HashMap::new();
    for (k, m) in luns.iter().enumerate() {
        let at = key.index(k);
        if m.lun > MAX_LUN {
            c.fail(
                at.key("lun"),
                format!("{} is out of range (0..={MAX_LUN})", m.lun),
            );
        } else if let Some(first) = seen.insert(m.lun, k) {
            c.fail(
                at.key("lun"),
                format!("LUN {} is already mapped by luns[{first}]", m.lun),
            );
        }
        if !t.luns.iter().any(|l| l.id == m.source) {
            c.fail(
                at.key("source"),
                format!("the target has no LUN {} (targets.luns.id)", m.source),
            );
        } else if let Some(first) = sources.insert(m.source, k) {
            c.fail(
                at.key("source"),
                format!(
                    "target LUN {} is already mapped by luns[{first}]; map a LUN once per group",
                    m.source
                ),
            );
        }
    }
}

/// The group's LUN map for the SCSI core (`None`: the target's own).
fn lun_map(g: &GroupSettings) -> Option<Arc<LunMap>> {
    let luns = g.luns.as_ref()?;
    let mut map = LunMap::new();
    for m in luns {
        // Checked at load: no entry is refused.
        if let Err(e) = map.insert(m.lun, m.source, m.read_only) {
            tracing::warn!(group = %g.name, error = %e, "LUN mapping skipped");
        }
    }
    Some(Arc::new(map))
}

/// Groups (a target's or discovery's) as login sees them, with `chap`
/// turning CHAP settings into a policy.
pub(crate) fn initiator_groups(
    groups: &[GroupSettings],
    chap: impl Fn(&ChapSettings) -> rustgt_iscsi::chap::ChapPolicy,
) -> Vec<InitiatorGroup> {
    groups
        .iter()
        .map(|g| InitiatorGroup {
            name: g.name.clone(),
            initiators: g.initiators.clone(),
            chap: g.chap.as_ref().map(&chap),
            lun_map: lun_map(g),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{load_text, Overrides};

    fn load(groups: &str) -> Result<super::super::Config, String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "data_dir = {:?}\n\
             [[targets]]\n\
             iqn = \"iqn.2026-11.org.rustgt:t\"\n\
             [[targets.luns]]\n\
             id = 0\n\
             backstore = \"ram\"\n\
             size = \"16M\"\n\
             [[targets.luns]]\n\
             id = 1\n\
             backstore = \"ram\"\n\
             size = \"16M\"\n\
             {groups}",
            dir.path().display().to_string()
        );
        jailed(|| {
            load_text(Path::new("test.toml"), text, &Overrides::default())
                .map_err(|e| e.to_string())
        })
    }

    /// Like every test that loads a configuration, in a figment `Jail`:
    /// no other test's `RUSTGT_*` variables leak into the load.
    #[allow(clippy::result_large_err)] // the closure type is figment's
    fn jailed<T>(f: impl FnOnce() -> T) -> T {
        let mut out = None;
        figment::Jail::expect_with(|_| {
            out = Some(f());
            Ok(())
        });
        out.expect("ran in the jail")
    }

    #[test]
    fn a_group_with_a_map_and_chap_loads() {
        let cfg = load(
            "[[targets.groups]]\n\
             name = \"db\"\n\
             initiators = [\"iqn.2026-11.org.example:db\", \"iqn.2026-11.org.example:web*\"]\n\
             luns = [{ lun = 0, source = 1, read_only = true }, { lun = 7, source = 0 }]\n\
             chap = { user = \"db\", secret = \"0123456789abcdef\", mutual_user = \"t\", mutual_secret = \"fedcba9876543210\" }\n",
        )
        .expect("valid");
        let g = &cfg.targets[0].groups[0];
        assert_eq!(g.luns.as_ref().map(Vec::len), Some(2));
        assert!(g.chap.is_some());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\nluns = [{ lun = 0, source = 0 }, { lun = 0, source = 1 }]\n",
                "targets[0].groups[0].luns[1].lun",
                "already mapped by luns[0]",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\nluns = [{ lun = 0, source = 9 }]\n",
                "targets[0].groups[0].luns[0].source",
                "no LUN 9",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\nluns = [{ lun = 0, source = 1 }, { lun = 1, source = 1 }]\n",
                "targets[0].groups[0].luns[1].source",
                "already mapped",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\n\
                 [[targets.groups]]\nname = \"b\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\n",
                "targets[0].groups[1].initiators[0]",
                "already listed by groups[0]",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\n\
                 [[targets.groups]]\nname = \"A\"\ninitiators = [\"iqn.2026-11.org.example:*\"]\n",
                "targets[0].groups[1].name",
                "already defined by groups[0]",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = []\n",
                "targets[0].groups[0].initiators",
                "at least one",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"not a name\"]\n",
                "targets[0].groups[0].initiators[0]",
                "",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\nchap = { user = \"u\", secret = \"short\" }\n",
                "targets[0].groups[0].chap.secret",
                "at least 12 bytes",
            ),
            (
                "[[targets.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\nluns = [{ lun = 16384, source = 0 }]\n",
                "targets[0].groups[0].luns[0].lun",
                "out of range",
            ),
        ];
        for (groups, key, text) in cases {
            let err = load(groups).expect_err(key);
            assert!(
                err.contains(key) && err.contains(text),
                "{key} / {text}: {err}"
            );
        }
    }

    #[test]
    fn discovery_groups_need_chap_and_map_no_luns() {
        let cases = [
            (
                "[[discovery.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\n",
                "discovery.groups[0].chap",
                "is required",
            ),
            (
                "[[discovery.groups]]\nname = \"a\"\ninitiators = [\"iqn.2026-11.org.example:a\"]\n\
                 chap = { user = \"u\", secret = \"0123456789abcdef\" }\nluns = []\n",
                "discovery.groups[0].luns",
                "see no LUNs",
            ),
        ];
        for (groups, key, text) in cases {
            let err = load(groups).expect_err(key);
            assert!(
                err.contains(key) && err.contains(text),
                "{key} / {text}: {err}"
            );
        }
    }
}
