//! QoS limits over the admin socket: the `set_qos` change (merged into
//! the wanted configuration, so it is diffed, applied and saved like any
//! other change), `show_qos`, the limits pushed to the SCSI core in place
//! ([`Runtime::sync_qos`]), and the throttling counters of LUNs and
//! sessions.

use std::collections::BTreeMap;

use super::runtime::{AdminError, Runtime};
pub use crate::api::proto::{QosStatsView, QosView};
use crate::config::{Config, QosSettings, TargetSettings};

impl From<rustgt_scsi::QosStats> for QosStatsView {
    fn from(s: rustgt_scsi::QosStats) -> Self {
        QosStatsView {
            commands: s.commands,
            bytes: s.bytes,
            delayed: s.delayed,
            throttled_us: s.throttled_us,
            waiting: s.waiting,
        }
    }
}

/// A `qos` table's keys, without `initiator` and `initiators`.
fn keys_of(q: &QosSettings) -> BTreeMap<String, serde_json::Value> {
    let mut flat = q.clone();
    flat.initiator = None;
    flat.initiators.clear();
    match serde_json::to_value(flat) {
        Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

/// One line per target or LUN whose limits differ (both exist before and
/// after; new ones get theirs when built).
pub fn qos_changes(running: &Config, wanted: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for t in &wanted.targets {
        let Some(before) = running
            .targets
            .iter()
            .find(|r| r.iqn.eq_ignore_ascii_case(&t.iqn))
        else {
            continue;
        };
        if before.qos != t.qos {
            out.push(format!("target {}: qos limits changed", t.iqn));
        }
        for l in &t.luns {
            if let Some(b) = before.luns.iter().find(|b| b.id == l.id) {
                if b.qos != l.qos {
                    out.push(format!("target {}: LUN {} qos limits changed", t.iqn, l.id));
                }
            }
        }
    }
    out
}

/// The table a `set_qos` addresses, created if missing.
fn table_mut<'a>(
    t: &'a mut TargetSettings,
    lun: Option<u64>,
    initiator: Option<&str>,
) -> Result<&'a mut QosSettings, AdminError> {
    let iqn = t.iqn.clone();
    let slot = match lun {
        None => {
            if initiator.is_some() {
                return Err(AdminError::Refused(format!(
                    "target {iqn}: initiator limits are set on a LUN; name one"
                )));
            }
            &mut t.qos
        }
        Some(id) => {
            &mut t
                .luns
                .iter_mut()
                .find(|l| l.id == id)
                .ok_or(AdminError::UnknownLun {
                    target: iqn.clone(),
                    lun: id,
                })?
                .qos
        }
    };
    let q = slot.get_or_insert_with(Box::default);
    match initiator {
        None => Ok(q),
        Some(name) => {
            let i = match q.initiators.iter().position(|e| {
                e.initiator
                    .as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
            }) {
                Some(i) => i,
                None => {
                    q.initiators.push(QosSettings {
                        initiator: Some(name.to_owned()),
                        ..QosSettings::default()
                    });
                    q.initiators.len() - 1
                }
            };
            q.initiators
                .get_mut(i)
                .ok_or_else(|| AdminError::Failed("internal error: initiator entry".into()))
        }
    }
}

/// Drops empty tables and entries left by a `set_qos` that cleared keys.
fn tidy(slot: &mut Option<Box<QosSettings>>) {
    if let Some(q) = slot {
        q.initiators.retain(|e| !e.no_limits());
        if q.no_limits() && q.initiators.is_empty() {
            *slot = None;
        }
    }
}

/// The wanted configuration for a `set_qos`: `set` keys given values
/// (Cinder's key names, values as text), `clear` keys removed, or with
/// `clear_all` the whole scope's limits.
pub fn wanted_set_qos(
    w: &mut Config,
    target: &str,
    lun: Option<u64>,
    initiator: Option<&str>,
    set: &BTreeMap<String, String>,
    clear: &[String],
    clear_all: bool,
) -> Result<(), AdminError> {
    let t = w
        .targets
        .iter_mut()
        .find(|t| t.iqn.eq_ignore_ascii_case(target))
        .ok_or_else(|| AdminError::UnknownTarget(target.to_owned()))?;
    let q = table_mut(t, lun, initiator)?;
    if clear_all {
        let keep_initiators = std::mem::take(&mut q.initiators);
        let name = q.initiator.take();
        *q = QosSettings::default();
        if initiator.is_none() {
            q.initiators = keep_initiators;
        }
        q.initiator = name;
    }
    for k in clear {
        // Setting a key checks its name; then it is taken away.
        q.set_key(k, "1")
            .map_err(|m| crate::config::invalid("admin request", "clear", m))?;
        let mut v = serde_json::to_value(&*q)
            .map_err(|e| AdminError::Failed(format!("internal error: {e}")))?;
        if let Some(m) = v.as_object_mut() {
            m.remove(k);
        }
        *q = serde_json::from_value(v)
            .map_err(|e| AdminError::Failed(format!("internal error: {e}")))?;
    }
    for (k, v) in set {
        q.set_key(k, v)
            .map_err(|m| crate::config::invalid("admin request", "set", m))?;
    }
    match lun {
        None => tidy(&mut t.qos),
        Some(id) => {
            if let Some(l) = t.luns.iter_mut().find(|l| l.id == id) {
                tidy(&mut l.qos);
            }
        }
    }
    Ok(())
}

impl Runtime {
    /// Pushes every target's and LUN's limits to the SCSI core, in place
    /// (unchanged limits keep their buckets).
    pub(super) fn sync_qos(&self) {
        for t in &self.cfg.targets {
            let Ok(rt) = self.rt_of(&t.iqn) else { continue };
            rt.scsi
                .set_qos(&t.qos.as_ref().map(|q| q.limits()).unwrap_or_default());
            for l in &t.luns {
                let q = l.qos.as_ref().map(|q| q.lun_qos()).unwrap_or_default();
                if let Err(e) = rt.scsi.set_lun_qos(l.id, &q) {
                    tracing::warn!(target = %t.iqn, lun = l.id, error = %e, "qos limits not set");
                }
            }
        }
    }

    /// `show_qos`: every limited scope (of one target) with its counters.
    pub(super) fn qos_views(&self, target: Option<&str>) -> Result<Vec<QosView>, AdminError> {
        let targets: Vec<&TargetSettings> = match target {
            Some(t) => vec![self.find(t)?],
            None => self.cfg.targets.iter().collect(),
        };
        let mut out = Vec::new();
        for t in targets {
            let rt = self.rt_of(&t.iqn)?;
            if let Some(q) = &t.qos {
                out.push(QosView {
                    target: t.iqn.clone(),
                    lun: None,
                    initiator: None,
                    limits: keys_of(q),
                    stats: rt.scsi.target_qos_stats().unwrap_or_default().into(),
                });
            }
            for l in &t.luns {
                let Some(q) = &l.qos else { continue };
                let stats = rt.scsi.lun_qos_stats(l.id).unwrap_or_default();
                out.push(QosView {
                    target: t.iqn.clone(),
                    lun: Some(l.id),
                    initiator: None,
                    limits: keys_of(q),
                    stats: stats.lun.into(),
                });
                for e in &q.initiators {
                    let name = e.initiator.clone().unwrap_or_default();
                    let st = stats
                        .initiators
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                        .map(|(_, s)| *s)
                        .unwrap_or_default();
                    out.push(QosView {
                        target: t.iqn.clone(),
                        lun: Some(l.id),
                        initiator: Some(name),
                        limits: keys_of(e),
                        stats: st.into(),
                    });
                }
            }
        }
        Ok(out)
    }

    /// A LUN's counters, when any limit covers it (its own or its
    /// target's).
    pub(super) fn lun_qos(&self, t: &TargetSettings, lun: u64) -> Option<QosStatsView> {
        let covered = t.qos.is_some() || t.luns.iter().any(|l| l.id == lun && l.qos.is_some());
        if !covered {
            return None;
        }
        let rt = self.rt_of(&t.iqn).ok()?;
        rt.scsi.lun_qos_stats(lun).map(|s| s.lun.into())
    }

    /// A session's counters over its target's LUNs, when the target or
    /// one of its LUNs has limits.
    pub(super) fn session_qos(&self, target: &str, nexus: u64) -> Option<QosStatsView> {
        let t = self.find(target).ok()?;
        if t.qos.is_none() && t.luns.iter().all(|l| l.qos.is_none()) {
            return None;
        }
        let rt = self.rt_of(&t.iqn).ok()?;
        Some(rt.scsi.nexus_qos_stats(nexus).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Config {
        let mut c = Config::default();
        let mut t = Config::default_target();
        t.luns[0].backstore = "ram".parse().expect("ram");
        t.luns[0].path = None;
        c.targets = vec![t];
        c
    }

    #[test]
    fn a_qos_change_is_planned_in_place_not_as_a_lun_replacement() {
        let before = cfg();
        let mut after = before.clone();
        let iqn = after.targets[0].iqn.clone();
        let set: BTreeMap<String, String> =
            [("total_iops_sec".to_owned(), "100".to_owned())].into();
        wanted_set_qos(&mut after, &iqn, Some(0), None, &set, &[], false).expect("lun");
        wanted_set_qos(&mut after, &iqn, None, None, &set, &[], false).expect("target");
        let p = crate::control::diff::plan(&before, &after);
        assert!(!p.is_empty());
        assert!(p.changed_targets.is_empty(), "{p:?}");
        assert_eq!(p.qos.len(), 2, "{:?}", p.qos);
        assert!(p
            .describe()
            .iter()
            .any(|l| l.contains("LUN 0 qos limits changed")));
        assert!(!p.portal_config_changed());
    }

    #[test]
    fn qos_changes_are_written_into_the_file_and_read_back() {
        let text = "# my target\n[[targets]]\niqn = \"iqn.2026-11.org.rustgt:p\"\n\
                    [[targets.luns]]\nid = 0 # the disk\nbackstore = \"ram\"\nsize = \"64M\"\n";
        let path = std::path::Path::new("p.toml");
        let old = crate::config::load_text_jailed(path, text.to_owned(), &Default::default())
            .expect("loads");
        let mut new = old.clone();
        let set: BTreeMap<String, String> = [
            ("total_iops_sec".to_owned(), "2000".to_owned()),
            ("read_bytes_sec".to_owned(), "50M".to_owned()),
        ]
        .into();
        let iqn = "iqn.2026-11.org.rustgt:p";
        wanted_set_qos(&mut new, iqn, Some(0), None, &set, &[], false).expect("lun");
        wanted_set_qos(
            &mut new,
            iqn,
            Some(0),
            Some("iqn.2026-01.x:a"),
            &set,
            &[],
            false,
        )
        .expect("initiator");
        wanted_set_qos(&mut new, iqn, None, None, &set, &[], false).expect("target");
        let written = crate::persist::edit::update(text, &old, &new).expect("edit");
        assert!(written.contains("# the disk"), "{written}");
        let back = crate::config::load_text_jailed(path, written.clone(), &Default::default())
            .expect("reloads");
        assert_eq!(back.targets[0].qos, new.targets[0].qos, "{written}");
        assert_eq!(
            back.targets[0].luns[0].qos, new.targets[0].luns[0].qos,
            "{written}"
        );
        // And cleared again.
        let mut cleared = new.clone();
        wanted_set_qos(
            &mut cleared,
            iqn,
            Some(0),
            None,
            &BTreeMap::new(),
            &[],
            true,
        )
        .expect("c");
        let again = crate::persist::edit::update(&written, &new, &cleared).expect("edit");
        let back =
            crate::config::load_text(path, again.clone(), &Default::default()).expect("reloads");
        assert_eq!(
            back.targets[0].luns[0].qos, cleared.targets[0].luns[0].qos,
            "{again}"
        );
    }

    #[test]
    fn set_qos_merges_keys_and_clear_takes_them_away() {
        let mut c = cfg();
        let iqn = c.targets[0].iqn.clone();
        let set: BTreeMap<String, String> = [
            ("total_iops_sec".to_owned(), "2000".to_owned()),
            ("read_bytes_sec".to_owned(), "50M".to_owned()),
        ]
        .into();
        wanted_set_qos(&mut c, &iqn, Some(0), None, &set, &[], false).expect("set");
        let q = c.targets[0].luns[0].qos.clone().expect("table");
        assert_eq!(q.total_iops_sec, Some(2000));
        assert_eq!(q.read_bytes_sec.as_ref().map(|b| b.bytes()), Some(50 << 20));
        let one: BTreeMap<String, String> = [("write_iops_sec".to_owned(), "10".to_owned())].into();
        wanted_set_qos(
            &mut c,
            &iqn,
            Some(0),
            Some("iqn.2026-01.x:a"),
            &one,
            &[],
            false,
        )
        .expect("initiator");
        let q = c.targets[0].luns[0].qos.clone().expect("table");
        assert_eq!(q.initiators.len(), 1);
        assert_eq!(q.initiators[0].write_iops_sec, Some(10));
        wanted_set_qos(
            &mut c,
            &iqn,
            Some(0),
            None,
            &BTreeMap::new(),
            &["read_bytes_sec".to_owned()],
            false,
        )
        .expect("clear");
        let q = c.targets[0].luns[0].qos.clone().expect("table");
        assert!(q.read_bytes_sec.is_none());
        assert_eq!(q.total_iops_sec, Some(2000));
        wanted_set_qos(&mut c, &iqn, Some(0), None, &BTreeMap::new(), &[], true).expect("all");
        let q = c.targets[0].luns[0].qos.clone().expect("initiators stay");
        assert!(q.no_limits() && q.initiators.len() == 1);
        wanted_set_qos(
            &mut c,
            &iqn,
            Some(0),
            Some("iqn.2026-01.x:a"),
            &BTreeMap::new(),
            &[],
            true,
        )
        .expect("all of the initiator");
        assert!(c.targets[0].luns[0].qos.is_none(), "empty tables go");
        let bad: BTreeMap<String, String> = [("iops".to_owned(), "1".to_owned())].into();
        let e =
            wanted_set_qos(&mut c, &iqn, Some(0), None, &bad, &[], false).expect_err("unknown key");
        assert!(e.to_string().contains("unknown QoS key"), "{e}");
    }
}
