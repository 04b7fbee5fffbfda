//! The difference between two configurations, as a [`Plan`] of changes.
//!
//! Pure: no I/O, no running state. Every admin change is expressed as a
//! wanted configuration and goes through [`plan`], so `config apply`,
//! SIGHUP and single commands share one notion of "what changes".
//!
//! What can change live and how:
//! - target settings seen at login and discovery (alias, TPGT, ACL, CHAP,
//!   initiator groups, redirect, portals), `[iscsi]` and `[discovery]`: a new portal configuration,
//!   which new logins see; sessions already running keep what they
//!   negotiated;
//! - `[limits]`: new connections and logins meet the new caps and login
//!   timeout; connections already open stay;
//! - a LUN's size and readahead settings: its store is reopened or its
//!   policy switched in place, the LUN stays exported; its `alua` setting
//!   is set on the running LUN;
//! - any other LUN setting (engine, path, block size, workers, ...): the
//!   LUN is replaced (removed, then added again);
//! - `data_dir`, `admin_socket`, `admin_socket_group`, `metrics_listen` and `[reactor]`
//!   (`threads`, `run_to_completion`, `io_uring`, `busy_poll_us`,
//!   `slice_us`, `inline_writes`): only
//!   after a restart.

use std::collections::BTreeMap;

use crate::config::{Config, LunSettings, TargetSettings};

/// How one LUN changes without being replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LunUpdate {
    /// The LUN as wanted.
    pub lun: LunSettings,
    /// Its size differs: reopen the store and raise CAPACITY DATA HAS CHANGED.
    pub resized: bool,
    /// Only the readahead policy differs: switch it in place if possible.
    pub policy_only: bool,
    /// Only the faults differ, and the LUN takes faults before and after:
    /// set them on the running store.
    pub faults_only: bool,
    /// Only the `alua` setting differs: set it on the running LUN.
    pub alua_only: bool,
}

/// Changes to one target that exists before and after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPlan {
    pub iqn: String,
    /// Changed login/discovery settings: "alias", "tpgt", "acl", "chap",
    /// "groups", "redirect", "portals", "iser_portals".
    pub settings: Vec<&'static str>,
    pub added_luns: Vec<LunSettings>,
    pub removed_luns: Vec<u64>,
    /// LUNs whose fixed settings changed: removed, then added as given.
    pub replaced_luns: Vec<LunSettings>,
    pub updated_luns: Vec<LunUpdate>,
}

impl TargetPlan {
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
            && self.added_luns.is_empty()
            && self.removed_luns.is_empty()
            && self.replaced_luns.is_empty()
            && self.updated_luns.is_empty()
    }
}

/// Everything that differs between a running and a wanted configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub removed_targets: Vec<String>,
    pub added_targets: Vec<TargetSettings>,
    pub changed_targets: Vec<TargetPlan>,
    /// `[iscsi]` differs (new sessions negotiate with the new values).
    pub iscsi_changed: bool,
    /// `[discovery]` differs.
    pub discovery_changed: bool,
    /// `[limits]` differs (caps and login timeout for new connections).
    pub limits_changed: bool,
    /// Global settings that differ but need a restart, by key.
    pub restart_needed: Vec<String>,
    /// QoS limits changed on existing targets and LUNs, one line each
    /// (set in place: `crate::control::qos`).
    pub qos: Vec<String>,
}

impl Plan {
    /// Nothing to do now (restart-only differences aside).
    pub fn is_empty(&self) -> bool {
        self.removed_targets.is_empty()
            && self.added_targets.is_empty()
            && self.changed_targets.is_empty()
            && !self.iscsi_changed
            && !self.discovery_changed
            && !self.limits_changed
            && self.qos.is_empty()
    }

    /// Whether the portal configuration (what logins and SendTargets see)
    /// must be rebuilt.
    pub fn portal_config_changed(&self) -> bool {
        !self.removed_targets.is_empty()
            || !self.added_targets.is_empty()
            || self.iscsi_changed
            || self.discovery_changed
            || self.limits_changed
            || self.changed_targets.iter().any(|t| !t.settings.is_empty())
    }

    /// Targets that lose LUNs (removed or replaced), with those LUNs.
    pub fn lun_removals(&self) -> Vec<(&str, Vec<u64>)> {
        self.changed_targets
            .iter()
            .map(|t| {
                let ids = t
                    .removed_luns
                    .iter()
                    .copied()
                    .chain(t.replaced_luns.iter().map(|l| l.id))
                    .collect::<Vec<_>>();
                (t.iqn.as_str(), ids)
            })
            .filter(|(_, ids)| !ids.is_empty())
            .collect()
    }

    /// One human-readable line per change.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for iqn in &self.removed_targets {
            out.push(format!("target {iqn}: removed"));
        }
        for t in &self.added_targets {
            let luns: Vec<String> = t.luns.iter().map(|l| l.id.to_string()).collect();
            out.push(format!(
                "target {}: added with LUNs [{}]",
                t.iqn,
                luns.join(", ")
            ));
        }
        for t in &self.changed_targets {
            let iqn = &t.iqn;
            for s in &t.settings {
                out.push(format!("target {iqn}: {s} changed"));
            }
            for id in &t.removed_luns {
                out.push(format!("target {iqn}: LUN {id} removed"));
            }
            for l in &t.replaced_luns {
                out.push(format!("target {iqn}: LUN {} replaced", l.id));
            }
            for l in &t.added_luns {
                out.push(format!("target {iqn}: LUN {} added", l.id));
            }
            for u in &t.updated_luns {
                let what = match (u.resized, u.policy_only, u.faults_only) {
                    _ if u.alua_only => format!(
                        "alua set to {}",
                        u.lun.alua.as_ref().map_or("implicit", |a| a.text())
                    ),
                    (true, _, _) => format!(
                        "resized to {}",
                        u.lun.size.as_ref().map_or("its backing size", |s| s.text())
                    ),
                    (false, true, _) => format!("readahead set to {}", u.lun.readahead),
                    (false, false, true) => "faults changed".to_owned(),
                    (false, false, false) => "readahead or fault settings changed".to_owned(),
                };
                out.push(format!("target {iqn}: LUN {} {what}", u.lun.id));
            }
        }
        if self.iscsi_changed {
            out.push("[iscsi] settings changed (new sessions only)".to_owned());
        }
        if self.discovery_changed {
            out.push("[discovery] settings changed".to_owned());
        }
        if self.limits_changed {
            out.push("[limits] changed (new connections and logins)".to_owned());
        }
        out.extend(self.qos.iter().cloned());
        out
    }
}

/// The plan that turns `running` into `wanted`. Both must be valid
/// configurations; targets match by name (case-insensitively) and LUNs by
/// id. Order follows `wanted` for additions and `running` for removals.
pub fn plan(running: &Config, wanted: &Config) -> Plan {
    let mut p = Plan::default();
    let old: BTreeMap<String, &TargetSettings> = running
        .targets
        .iter()
        .map(|t| (t.iqn.to_ascii_lowercase(), t))
        .collect();
    let new: BTreeMap<String, &TargetSettings> = wanted
        .targets
        .iter()
        .map(|t| (t.iqn.to_ascii_lowercase(), t))
        .collect();
    for t in &running.targets {
        if !new.contains_key(&t.iqn.to_ascii_lowercase()) {
            p.removed_targets.push(t.iqn.clone());
        }
    }
    for t in &wanted.targets {
        match old.get(&t.iqn.to_ascii_lowercase()) {
            None => p.added_targets.push(t.clone()),
            Some(before) => {
                let tp = target_plan(before, t, running, wanted);
                if !tp.is_empty() {
                    p.changed_targets.push(tp);
                }
            }
        }
    }
    p.iscsi_changed = running.iscsi != wanted.iscsi;
    p.discovery_changed = running.discovery != wanted.discovery;
    p.limits_changed = running.limits != wanted.limits;
    p.restart_needed = restart_only(running, wanted);
    p.qos = super::qos::qos_changes(running, wanted);
    p
}

fn target_plan(a: &TargetSettings, b: &TargetSettings, ca: &Config, cb: &Config) -> TargetPlan {
    let mut tp = TargetPlan {
        iqn: a.iqn.clone(),
        ..TargetPlan::default()
    };
    if a.alias != b.alias {
        tp.settings.push("alias");
    }
    if a.tpgt != b.tpgt {
        tp.settings.push("tpgt");
    }
    if !same_names(&a.acl, &b.acl) {
        tp.settings.push("acl");
    }
    if a.chap != b.chap {
        tp.settings.push("chap");
    }
    if a.groups != b.groups {
        tp.settings.push("groups");
    }
    if a.redirect != b.redirect {
        tp.settings.push("redirect");
    }
    let mut pa = a.portals.clone();
    let mut pb = b.portals.clone();
    pa.sort();
    pb.sort();
    if pa != pb {
        tp.settings.push("portals");
    }
    // Where the target is served (the portal fence) changes at once; an
    // iSER listener for a new address still needs a restart.
    let mut ia = a.iser_portals.clone();
    let mut ib = b.iser_portals.clone();
    ia.sort();
    ib.sort();
    if ia != ib {
        tp.settings.push("iser_portals");
    }
    let old: BTreeMap<u64, &LunSettings> = a.luns.iter().map(|l| (l.id, l)).collect();
    let new: BTreeMap<u64, &LunSettings> = b.luns.iter().map(|l| (l.id, l)).collect();
    for l in &a.luns {
        if !new.contains_key(&l.id) {
            tp.removed_luns.push(l.id);
        }
    }
    for l in &b.luns {
        match old.get(&l.id) {
            None => tp.added_luns.push(l.clone()),
            Some(before) => match lun_change(before, l, ca, cb) {
                LunChange::None => {}
                LunChange::Replace => tp.replaced_luns.push(l.clone()),
                LunChange::Update(u) => tp.updated_luns.push(*u),
            },
        }
    }
    tp
}

/// ACLs compare as sets of case-insensitive names.
fn same_names(a: &[String], b: &[String]) -> bool {
    let norm = |v: &[String]| {
        let mut v: Vec<String> = v.iter().map(|s| s.to_ascii_lowercase()).collect();
        v.sort();
        v
    };
    norm(a) == norm(b)
}

enum LunChange {
    None,
    Replace,
    Update(Box<LunUpdate>),
}

fn lun_change(a: &LunSettings, b: &LunSettings, ca: &Config, cb: &Config) -> LunChange {
    // Workers compare by their effective value, so a changed
    // `iscsi.workers_per_lun` touches only LUNs that inherit it.
    let mut a = a.clone();
    let mut b2 = b.clone();
    // QoS limits change in place, apart from the rest (`Plan::qos`).
    a.qos = None;
    b2.qos = None;
    a.workers = Some(a.effective_workers(&ca.iscsi));
    b2.workers = Some(b2.effective_workers(&cb.iscsi));
    if a == b2 {
        return LunChange::None;
    }
    // Equalize the live settings; anything still different is fixed.
    let mut fixed = b2.clone();
    fixed.size = a.size.clone();
    fixed.readahead = a.readahead.clone();
    fixed.io_context = a.io_context.clone();
    fixed.readahead_cache = a.readahead_cache.clone();
    fixed.readahead_max = a.readahead_max.clone();
    fixed.readahead_io_threads = a.readahead_io_threads;
    fixed.readahead_io_max = a.readahead_io_max.clone();
    fixed.device_slice = a.device_slice.clone();
    // Faults change live: set in place, or the store rewrapped around the
    // same engine when the `fault` table comes or goes.
    fixed.fault = a.fault.clone();
    // ALUA: set on the running LUN.
    fixed.alua = a.alua.clone();
    if fixed != a {
        return LunChange::Replace;
    }
    let mut same_but_alua = b2.clone();
    same_but_alua.alua = a.alua.clone();
    let alua_only = same_but_alua == a;
    let resized = a.size != b2.size;
    let context_same = !resized
        && a.io_context == b2.io_context
        && a.readahead_cache == b2.readahead_cache
        && a.readahead_max == b2.readahead_max
        && a.readahead_io_threads == b2.readahead_io_threads
        && a.readahead_io_max == b2.readahead_io_max
        && a.device_slice == b2.device_slice;
    let policy_only = context_same && a.fault == b2.fault;
    let faults_only =
        context_same && a.readahead == b2.readahead && a.fault.is_some() && b2.fault.is_some();
    LunChange::Update(Box::new(LunUpdate {
        lun: b.clone(),
        resized,
        policy_only,
        faults_only,
        alua_only,
    }))
}

fn restart_only(a: &Config, b: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if a.data_dir != b.data_dir {
        out.push("data_dir".to_owned());
    }
    if a.admin_socket != b.admin_socket {
        out.push("admin_socket".to_owned());
    }
    if a.admin_socket_group != b.admin_socket_group {
        out.push("admin_socket_group".to_owned());
    }
    if a.metrics_listen != b.metrics_listen {
        out.push("metrics_listen".to_owned());
    }
    if a.reactor != b.reactor {
        out.push("reactor".to_owned());
    }
    // A LUN's gateway mode is chosen when its image is opened.
    for (i, t) in b.targets.iter().enumerate() {
        let was = a
            .targets
            .iter()
            .find(|x| x.iqn.eq_ignore_ascii_case(&t.iqn));
        if was.is_some_and(|w| w.port_groups != t.port_groups) {
            out.push(format!("targets[{i}].port_groups"));
        }
    }
    // Keys added to Config later are caught here rather than ignored.
    let mut rest = b.clone();
    rest.data_dir = a.data_dir.clone();
    rest.admin_socket = a.admin_socket.clone();
    rest.admin_socket_group = a.admin_socket_group.clone();
    rest.metrics_listen = a.metrics_listen;
    rest.reactor = a.reactor.clone();
    rest.iscsi = a.iscsi.clone();
    rest.discovery = a.discovery.clone();
    rest.limits = a.limits.clone();
    rest.targets = a.targets.clone();
    if &rest != a {
        out.push("other global settings".to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ChapSettings;

    fn lun(id: u64) -> LunSettings {
        let mut l = Config::default_target()
            .luns
            .into_iter()
            .next()
            .expect("default LUN");
        l.id = id;
        l.backstore = "ram".parse().expect("backstore");
        l.path = None;
        l.size = Some("16M".parse().expect("size"));
        l
    }

    fn target(name: &str, luns: &[u64]) -> TargetSettings {
        let mut t = Config::default_target();
        t.iqn = format!("iqn.2026-11.org.rustgt:{name}");
        t.luns = luns.iter().map(|&id| lun(id)).collect();
        t
    }

    fn config(targets: Vec<TargetSettings>) -> Config {
        Config {
            targets,
            ..Config::default()
        }
    }

    #[test]
    fn identical_configs_plan_nothing() {
        let c = config(vec![target("a", &[0, 1]), target("b", &[0])]);
        let p = plan(&c, &c.clone());
        assert!(p.is_empty(), "{p:?}");
        assert!(p.describe().is_empty());
        assert!(p.restart_needed.is_empty());
    }

    #[test]
    fn targets_added_removed_and_matched_case_insensitively() {
        let a = config(vec![target("a", &[0]), target("b", &[0])]);
        let mut b = config(vec![target("b", &[0]), target("c", &[0])]);
        if let Some(t) = b.targets.first_mut() {
            t.iqn = t.iqn.to_ascii_uppercase().replacen("IQN", "iqn", 1);
        }
        let p = plan(&a, &b);
        assert_eq!(p.removed_targets, vec!["iqn.2026-11.org.rustgt:a"]);
        assert_eq!(p.added_targets.len(), 1);
        assert!(p.changed_targets.is_empty(), "{:?}", p.changed_targets);
        assert!(p.portal_config_changed());
    }

    #[test]
    fn one_changed_target_leaves_the_other_alone() {
        let a = config(vec![target("a", &[0]), target("b", &[0])]);
        let mut b = a.clone();
        if let Some(t) = b.targets.first_mut() {
            t.acl = vec!["iqn.2026-11.org.example:host".into()];
            t.chap = Some(ChapSettings {
                user: "u".into(),
                secret: "0123456789abcdef".into(),
                mutual_user: None,
                mutual_secret: None,
            });
            t.luns.push(lun(5));
            t.redirect = Some(crate::config::RedirectSettings {
                to: vec!["192.0.2.1:3260,1".into()],
                from: Vec::new(),
                permanent: false,
                metrics: Vec::new(),
            });
        }
        let p = plan(&a, &b);
        assert_eq!(p.changed_targets.len(), 1);
        let t = &p.changed_targets[0];
        assert_eq!(t.iqn, "iqn.2026-11.org.rustgt:a");
        assert_eq!(t.settings, vec!["acl", "chap", "redirect"]);
        assert_eq!(t.added_luns.iter().map(|l| l.id).collect::<Vec<_>>(), [5]);
        assert!(p.lun_removals().is_empty());
        assert_eq!(
            p.describe(),
            vec![
                "target iqn.2026-11.org.rustgt:a: acl changed",
                "target iqn.2026-11.org.rustgt:a: chap changed",
                "target iqn.2026-11.org.rustgt:a: redirect changed",
                "target iqn.2026-11.org.rustgt:a: LUN 5 added",
            ]
        );
    }

    #[test]
    fn lun_changes_are_classified() {
        let a = config(vec![target("a", &[0, 1, 2, 3, 4])]);
        let mut b = a.clone();
        let luns = &mut b.targets[0].luns;
        luns[0].size = Some("32M".parse().expect("size"));
        luns[1].readahead = "streams".parse().expect("policy");
        luns[2].readahead_max = "8M".parse().expect("size");
        luns[3].block_size = 4096;
        luns.remove(4);
        let p = plan(&a, &b);
        let t = &p.changed_targets[0];
        assert_eq!(t.removed_luns, vec![4]);
        assert_eq!(
            t.replaced_luns.iter().map(|l| l.id).collect::<Vec<_>>(),
            [3]
        );
        let u: Vec<(u64, bool, bool)> = t
            .updated_luns
            .iter()
            .map(|u| (u.lun.id, u.resized, u.policy_only))
            .collect();
        assert_eq!(
            u,
            vec![(0, true, false), (1, false, true), (2, false, false)]
        );
        assert_eq!(
            p.lun_removals(),
            vec![("iqn.2026-11.org.rustgt:a", vec![4, 3])]
        );
    }

    #[test]
    fn fault_changes_are_live() {
        use crate::config::{FaultSettings, TriggerSettings};
        let mut a = config(vec![target("a", &[0, 1, 2])]);
        a.targets[0].luns[1].fault = Some(Box::default());
        a.targets[0].luns[2].fault = Some(Box::default());
        let mut b = a.clone();
        // 0 gains a fault table, 1 changes its faults, 2 loses its table.
        let hang = FaultSettings {
            hang: Some(TriggerSettings::default()),
            ..FaultSettings::default()
        };
        b.targets[0].luns[0].fault = Some(Box::new(hang.clone()));
        b.targets[0].luns[1].fault = Some(Box::new(hang));
        b.targets[0].luns[2].fault = None;
        let p = plan(&a, &b);
        let t = &p.changed_targets[0];
        assert!(t.replaced_luns.is_empty(), "{t:?}");
        let u: Vec<(u64, bool, bool, bool)> = t
            .updated_luns
            .iter()
            .map(|u| (u.lun.id, u.resized, u.policy_only, u.faults_only))
            .collect();
        assert_eq!(
            u,
            vec![
                (0, false, false, false),
                (1, false, false, true),
                (2, false, false, false)
            ]
        );
    }

    #[test]
    fn alua_changes_are_live() {
        let a = config(vec![target("a", &[0, 1])]);
        let mut b = a.clone();
        b.targets[0].luns[0].alua = Some("explicit".parse().expect("alua"));
        // LUN 1: alua and a fixed setting: replaced.
        b.targets[0].luns[1].alua = Some("both".parse().expect("alua"));
        b.targets[0].luns[1].thin = !a.targets[0].luns[1].thin;
        let p = plan(&a, &b);
        let t = &p.changed_targets[0];
        let replaced: Vec<u64> = t.replaced_luns.iter().map(|l| l.id).collect();
        assert_eq!(replaced, vec![1]);
        let u: Vec<(u64, bool)> = t
            .updated_luns
            .iter()
            .map(|u| (u.lun.id, u.alua_only))
            .collect();
        assert_eq!(u, vec![(0, true)]);
        assert!(p
            .describe()
            .contains(&"target iqn.2026-11.org.rustgt:a: LUN 0 alua set to explicit".to_owned()));
        // Writing the default out is a live no-op, never a replacement.
        let mut c = a.clone();
        c.targets[0].luns[0].alua = Some("implicit".parse().expect("alua"));
        let p = plan(&a, &c);
        assert!(
            p.changed_targets.iter().all(|t| t.replaced_luns.is_empty()),
            "{p:?}"
        );
    }

    #[test]
    fn workers_compare_by_effective_value() {
        let a = config(vec![target("a", &[0, 1])]);
        let mut b = a.clone();
        // LUN 1 pins the old default explicitly: no change for it.
        b.targets[0].luns[1].workers = Some(a.iscsi.workers_per_lun);
        let p = plan(&a, &b);
        assert!(p.is_empty(), "{p:?}");
        b.iscsi.workers_per_lun = 2;
        let p = plan(&a, &b);
        assert!(p.iscsi_changed);
        let t = &p.changed_targets[0];
        assert_eq!(
            t.replaced_luns.iter().map(|l| l.id).collect::<Vec<_>>(),
            [0]
        );
    }

    #[test]
    fn limits_change_live() {
        let a = config(vec![target("a", &[0])]);
        let mut b = a.clone();
        b.limits.max_connections = 10;
        b.limits.login_timeout_secs = 3;
        let p = plan(&a, &b);
        assert!(p.limits_changed);
        assert!(!p.is_empty());
        assert!(p.portal_config_changed(), "the login timeout is the core's");
        assert!(p.restart_needed.is_empty(), "{:?}", p.restart_needed);
        assert_eq!(
            p.describe(),
            ["[limits] changed (new connections and logins)"]
        );
    }

    #[test]
    fn restart_only_settings_are_reported_not_planned() {
        let a = config(vec![target("a", &[0])]);
        let mut b = a.clone();
        b.data_dir = "/elsewhere".into();
        b.metrics_listen = Some("127.0.0.1:9464".parse().expect("addr"));
        let p = plan(&a, &b);
        assert!(p.is_empty());
        assert_eq!(p.restart_needed, vec!["data_dir", "metrics_listen"]);
        // Reactors create their io_uring at start only.
        let mut c = a.clone();
        c.reactor.io_uring = "off".parse().expect("mode");
        let p = plan(&a, &c);
        assert!(p.is_empty());
        assert_eq!(p.restart_needed, vec!["reactor"]);
    }

    #[test]
    fn saved_configs_with_admin_keys_load_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut c = config(vec![target("a", &[0, 1])]);
        c.data_dir = dir.path().to_owned();
        c.admin_socket = Some("ctl.sock".into());
        c.metrics_listen = Some("127.0.0.1:9464".parse().expect("addr"));
        let text = c.to_toml().expect("serializes");
        let path = dir.path().join("saved.toml");
        std::fs::write(&path, &text).expect("write");
        let back = crate::config::load(Some(&path), &crate::config::Overrides::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back.admin_socket_path(), dir.path().join("ctl.sock"));
        assert!(plan(&c, &back).is_empty(), "{text}");
        assert!(plan(&c, &back).restart_needed.is_empty());
    }

    #[test]
    fn portal_order_does_not_matter() {
        let mut a = config(vec![target("a", &[0])]);
        a.targets[0].portals = vec![
            "127.0.0.1:3260".parse().expect("addr"),
            "127.0.0.2:3260".parse().expect("addr"),
        ];
        let mut b = a.clone();
        b.targets[0].portals.reverse();
        assert!(plan(&a, &b).is_empty());
        b.targets[0].portals.pop();
        assert_eq!(plan(&a, &b).changed_targets[0].settings, vec!["portals"]);
    }
}
