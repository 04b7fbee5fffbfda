//! Applying a [`Plan`] to the running state, as a transaction.
//!
//! 1. **Check**: refuse removals that would cut off sessions (unless
//!    forced) and resizes an engine cannot do, before touching anything.
//! 2. **Prepare** (invisible to initiators): bind new portals, build new
//!    targets with their LUNs, open the stores of added, replaced and
//!    updated LUNs. A failure here drops what was prepared (and deletes
//!    backing files it created) and changes nothing.
//! 3. **Commit**: the only fallible step, adding LUNs to existing targets,
//!    goes first and is undone if it fails; then targets are attached,
//!    stores swapped, the portal configuration replaced (new logins see
//!    it), new portals served, and last removals made and unused portals
//!    closed. Sessions of untouched targets see nothing of it.
//!
//! Blocking work (opening files, joining LUN workers, flushing) runs in
//! `block_in_place`, so the runtime's other tasks keep being served.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustgt_backstore::{Backstore, EngineKind, ReadaheadPolicy};
use rustgt_scsi::ScsiTarget;
use tokio::net::TcpListener;

use super::diff::{plan, Plan, TargetPlan};
use super::lunstore::{Current, LunStore};
use super::runtime::{AdminError, FencedTx, Runtime, TargetRt};
use crate::api::proto::ChangeReport;
use crate::config::{ByteSize, Config, LunSettings, TargetSettings};

/// What the prepare step built; dropped (with its files) if anything fails.
#[derive(Debug, Default)]
struct Prepared {
    /// (configured address, bound listener)
    listeners: Vec<(SocketAddr, TcpListener)>,
    targets: Vec<(TargetSettings, TargetRt)>,
    /// Stores for LUNs of existing targets, by (lowercase iqn, LUN).
    stores: HashMap<(String, u64), Current>,
    /// Backing files this request created.
    created: Vec<PathBuf>,
}

impl Prepared {
    /// Undoes the prepare step: stops new targets, closes stores and
    /// listeners, deletes created files.
    fn discard(self) {
        tokio::task::block_in_place(|| {
            for (_, t) in self.targets {
                t.scsi.shutdown();
            }
            drop(self.stores);
            drop(self.listeners);
            for f in self.created {
                if let Err(e) = std::fs::remove_file(&f) {
                    tracing::warn!(file = %f.display(), error = %e, "cannot remove a backing file created by a failed request");
                }
            }
        });
    }
}

fn key(iqn: &str) -> String {
    iqn.to_ascii_lowercase()
}

impl Runtime {
    /// Makes the running state match `wanted` (a validated configuration).
    /// With `dry_run` only the plan is reported.
    pub async fn apply(
        &mut self,
        mut wanted: Config,
        force: bool,
        dry_run: bool,
    ) -> Result<ChangeReport, AdminError> {
        let plan = plan(&self.cfg, &wanted);
        self.check(&plan, &wanted, force)?;
        let mut report = ChangeReport {
            dry_run,
            changes: plan.describe(),
            restart_needed: plan.restart_needed.clone(),
            ..ChangeReport::default()
        };
        if dry_run || (plan.is_empty() && self.unbound(&wanted).is_empty()) {
            return Ok(report);
        }
        // Restart-only settings keep their running values.
        wanted.data_dir = self.cfg.data_dir.clone();
        wanted.admin_socket = self.cfg.admin_socket.clone();
        wanted.admin_socket_group = self.cfg.admin_socket_group.clone();
        wanted.metrics_listen = self.cfg.metrics_listen;

        let mut prepared = Prepared::default();
        if let Err(e) = self.prepare(&plan, &mut wanted, &mut prepared).await {
            prepared.discard();
            return Err(e);
        }
        for (configured, l) in &prepared.listeners {
            if let Ok(bound) = l.local_addr() {
                report.changes.push(if configured.port() == 0 {
                    format!("portal {bound} listening (asked for {configured})")
                } else {
                    format!("portal {bound} listening")
                });
            }
        }
        self.commit(&plan, wanted, prepared)?;
        for line in &report.changes {
            tracing::info!("{line}");
        }
        Ok(report)
    }

    /// Applies a configuration file: as [`Self::apply`], but port-0
    /// portals name the listener already bound for the same configured
    /// address, so re-applying a file with `:0` (or `--listen ADDR:0`)
    /// does not open a new port each time.
    pub async fn apply_file(
        &mut self,
        mut wanted: Config,
        force: bool,
        dry_run: bool,
    ) -> Result<ChangeReport, AdminError> {
        self.resolve_ports(&mut wanted);
        self.apply(wanted, force, dry_run).await
    }

    pub(super) fn resolve_ports(&self, wanted: &mut Config) {
        for t in &mut wanted.targets {
            let running: Vec<SocketAddr> = self
                .cfg
                .targets
                .iter()
                .find(|r| r.iqn.eq_ignore_ascii_case(&t.iqn))
                .map(|r| r.portals.clone())
                .unwrap_or_default();
            for p in &mut t.portals {
                if p.port() != 0 {
                    continue;
                }
                let same: Vec<SocketAddr> = self.portals.tcp_bound_for(*p);
                if let Some(b) = same
                    .iter()
                    .find(|b| running.contains(b))
                    .or_else(|| same.first())
                {
                    *p = *b;
                }
            }
            let mut seen = BTreeSet::new();
            t.portals.retain(|p| seen.insert(*p));
        }
    }

    /// Configured addresses of `wanted` that no listener serves yet.
    fn unbound(&self, wanted: &Config) -> BTreeSet<SocketAddr> {
        wanted
            .targets
            .iter()
            .flat_map(|t| t.portals.iter().copied())
            .filter(|p| p.port() == 0 || !self.portals.serves_tcp(p))
            .collect()
    }

    /// Step 1: refusals that need no I/O.
    fn check(&self, plan: &Plan, wanted: &Config, force: bool) -> Result<(), AdminError> {
        if !force {
            for iqn in &plan.removed_targets {
                let sessions = self.sessions_on(iqn);
                if !sessions.is_empty() {
                    return Err(AdminError::Busy {
                        action: format!("removing target {iqn}"),
                        target: iqn.clone(),
                        sessions,
                    });
                }
            }
            for (iqn, luns) in plan.lun_removals() {
                let sessions = self.sessions_on(iqn);
                if !sessions.is_empty() {
                    let ids: Vec<String> = luns.iter().map(u64::to_string).collect();
                    return Err(AdminError::Busy {
                        action: format!(
                            "removing or replacing LUN {} of target {iqn}",
                            ids.join(", ")
                        ),
                        target: iqn.to_owned(),
                        sessions,
                    });
                }
            }
        }
        for t in &plan.changed_targets {
            let rt = self.rt_of(&t.iqn)?;
            for u in &t.updated_luns {
                let gateway = rt
                    .luns
                    .get(&u.lun.id)
                    .is_some_and(|s| s.shared_state().is_some());
                let want = u.lun.alua.as_ref().map(|a| a.get()).unwrap_or_default();
                let now = rt.scsi.lun_alua(u.lun.id, 0).map(|(m, _)| m);
                if gateway && now.is_some_and(|m| m != want) {
                    return Err(AdminError::Refused(format!(
                        "target {}: LUN {}: `alua` cannot change live on a LUN served by several \
                         gateways (port_groups): every gateway must use the same mode, and \
                         librbd keeps an image's lock policy once explicit ALUA took the lock; \
                         change it in every gateway's configuration and restart them",
                        t.iqn, u.lun.id
                    )));
                }
            }
            for u in t.updated_luns.iter().filter(|u| u.resized) {
                check_resizable(&t.iqn, &u.lun)?;
                let rt = self.rt_of(&t.iqn)?;
                let now = rt
                    .luns
                    .get(&u.lun.id)
                    .map(|s| s.geometry().size_bytes())
                    .unwrap_or(0);
                let want = u.lun.size_bytes().unwrap_or(0);
                if want < now {
                    return Err(AdminError::Refused(format!(
                        "target {}: LUN {}: shrinking from {now} to {want} bytes is not supported \
                         (initiators may hold data there); only growing is",
                        t.iqn, u.lun.id
                    )));
                }
            }
        }
        let _ = wanted;
        Ok(())
    }

    /// Step 2: everything fallible that initiators cannot see yet.
    async fn prepare(
        &self,
        plan: &Plan,
        wanted: &mut Config,
        out: &mut Prepared,
    ) -> Result<(), AdminError> {
        // Portals: one listener per distinct unbound address.
        let mut bound_as: BTreeMap<SocketAddr, SocketAddr> = BTreeMap::new();
        for addr in self.unbound(wanted) {
            let l = super::portals::Portals::bind_tcp(addr)
                .await
                .map_err(|e| AdminError::Failed(format!("portal {addr}: cannot listen: {e}")))?;
            let real = l
                .local_addr()
                .map_err(|e| AdminError::Failed(format!("portal {addr}: {e}")))?;
            bound_as.insert(addr, real);
            out.listeners.push((addr, l));
        }
        for t in &mut wanted.targets {
            for p in &mut t.portals {
                if let Some(real) = bound_as.get(p) {
                    *p = *real;
                }
            }
        }
        let cfg: &Config = wanted;
        tokio::task::block_in_place(|| {
            for t in &plan.added_targets {
                let rt = self.build_target(cfg, t, out)?;
                out.targets.push((t.clone(), rt));
            }
            for tp in &plan.changed_targets {
                self.prepare_luns(cfg, tp, out)?;
            }
            Ok(())
        })
    }

    /// A new target with all its LUNs exported (not yet reachable).
    fn build_target(
        &self,
        cfg: &Config,
        t: &TargetSettings,
        out: &mut Prepared,
    ) -> Result<TargetRt, AdminError> {
        let scsi = ScsiTarget::with_registry(&t.iqn, self.registry.clone());
        scsi.set_port_groups(&t.port_groups);
        scsi.set_qos(&t.qos.as_ref().map(|q| q.limits()).unwrap_or_default());
        let mut rt = TargetRt {
            scsi,
            luns: BTreeMap::new(),
        };
        for l in &t.luns {
            let store = match open_store(cfg, &t.iqn, l, &mut out.created) {
                Ok(s) => LunStore::new(s),
                Err(e) => {
                    rt.scsi.shutdown();
                    return Err(e);
                }
            };
            if let Err(e) = add_lun(&rt.scsi, cfg, &t.iqn, l, &store, &self.fenced) {
                rt.scsi.shutdown();
                return Err(e);
            }
            rt.luns.insert(l.id, store);
        }
        Ok(rt)
    }

    fn prepare_luns(
        &self,
        cfg: &Config,
        tp: &TargetPlan,
        out: &mut Prepared,
    ) -> Result<(), AdminError> {
        let k = key(&tp.iqn);
        for l in tp.added_luns.iter().chain(&tp.replaced_luns) {
            let s = open_store(cfg, &tp.iqn, l, &mut out.created)?;
            out.stores.insert((k.clone(), l.id), s);
        }
        let rt = self.rt_of(&tp.iqn)?;
        for u in &tp.updated_luns {
            let running = rt.luns.get(&u.lun.id);
            if u.alua_only {
                continue;
            }
            let in_place = (u.policy_only
                && running.is_some_and(|s| can_switch_in_place(s, &u.lun)))
                || (u.faults_only && running.is_some_and(|s| s.faults().is_some()));
            if in_place {
                continue;
            }
            let s = if u.resized {
                open_store(cfg, &tp.iqn, &u.lun, &mut out.created)?
            } else {
                // Readahead settings only: a new context around the same
                // engine, so a RAM LUN keeps its data.
                let store = rt.luns.get(&u.lun.id).ok_or(AdminError::UnknownLun {
                    target: tp.iqn.clone(),
                    lun: u.lun.id,
                })?;
                let cur = store.current();
                let engine = match (&cur.io_context, &cur.faults) {
                    (Some(ctx), _) => Arc::clone(ctx.inner()),
                    (None, None) => cur.store,
                    (None, Some(_)) => {
                        return Err(AdminError::Failed(format!(
                            "target {}: LUN {}: has no I/O context to rebuild",
                            tp.iqn, u.lun.id
                        )))
                    }
                };
                crate::wiring::rewrap_lun_store(cfg, &u.lun, engine, cur.faults, cur.image_lock)
                    .map_err(|e| {
                        AdminError::Failed(format!(
                            "target {}: LUN {}: cannot set up its I/O context: {}",
                            tp.iqn,
                            u.lun.id,
                            crate::wiring::error_chain(&e)
                        ))
                    })?
            };
            out.stores.insert((k.clone(), u.lun.id), s);
        }
        Ok(())
    }

    /// Step 3 (see the module docs).
    fn commit(
        &mut self,
        plan: &Plan,
        wanted: Config,
        mut prepared: Prepared,
    ) -> Result<(), AdminError> {
        // (a) New LUNs of existing targets: the one fallible step.
        let mut added: Vec<(String, u64)> = Vec::new();
        let result = tokio::task::block_in_place(|| {
            for tp in &plan.changed_targets {
                let k = key(&tp.iqn);
                for l in &tp.added_luns {
                    let Some(cur) = prepared.stores.remove(&(k.clone(), l.id)) else {
                        continue;
                    };
                    let store = LunStore::new(cur);
                    let rt = self.rt_of(&tp.iqn)?;
                    add_lun(&rt.scsi, &wanted, &tp.iqn, l, &store, &self.fenced)?;
                    added.push((k.clone(), l.id));
                    if let Some(rt) = self.targets.get_mut(&k) {
                        rt.luns.insert(l.id, store);
                    }
                }
            }
            Ok::<(), AdminError>(())
        });
        if let Err(e) = result {
            tokio::task::block_in_place(|| {
                for (k, id) in &added {
                    if let Some(rt) = self.targets.get_mut(k) {
                        let _ = rt.scsi.remove_lun(*id);
                        rt.luns.remove(id);
                    }
                }
            });
            prepared.discard();
            return Err(e);
        }

        // (b) New targets become reachable.
        for (t, rt) in std::mem::take(&mut prepared.targets) {
            self.port.add_target(&t.iqn, rt.scsi.clone());
            self.targets.insert(key(&t.iqn), rt);
        }

        // (c) Updated and replaced LUNs.
        let old_cfg = std::mem::replace(&mut self.cfg, wanted);
        tokio::task::block_in_place(|| {
            for tp in &plan.changed_targets {
                self.update_luns(tp, &mut prepared);
                self.replace_luns(tp, &old_cfg, &mut prepared);
            }
        });

        // QoS limits of existing targets and LUNs, in place.
        if !plan.qos.is_empty() {
            self.sync_qos();
        }

        // (d) Logins and discovery see the new configuration.
        if plan.portal_config_changed() {
            self.port
                .set_config(crate::wiring::portal_config(&self.cfg));
            self.load_watch.ensure(&self.port);
            self.relogin_remapped(plan);
        }
        if plan.limits_changed {
            self.port.set_limits(crate::wiring::conn_limits(&self.cfg));
        }

        // (e) Serve new portals.
        for (configured, l) in std::mem::take(&mut prepared.listeners) {
            self.portals.serve_tcp(&self.port, configured, l);
        }

        // (f) Removals, then portals nobody lists any more.
        tokio::task::block_in_place(|| {
            for tp in &plan.changed_targets {
                if let Some(rt) = self.targets.get_mut(&key(&tp.iqn)) {
                    for id in &tp.removed_luns {
                        if let Err(e) = rt.scsi.remove_lun(*id) {
                            tracing::warn!(target = %tp.iqn, lun = id, error = %e, "LUN removal");
                        }
                        rt.luns.remove(id);
                    }
                }
            }
            for iqn in &plan.removed_targets {
                for conn in self.connections_on(iqn) {
                    self.port.kill(conn);
                }
                self.port.remove_target(iqn);
                if let Some(rt) = self.targets.remove(&key(iqn)) {
                    rt.scsi.shutdown();
                }
            }
        });
        let in_use: BTreeSet<SocketAddr> = self
            .cfg
            .targets
            .iter()
            .flat_map(|t| t.portals.iter().copied())
            .collect();
        self.portals.close_tcp_unused(&in_use);
        drop(prepared);
        Ok(())
    }

    /// Swaps in reopened stores or switches policies in place.
    fn update_luns(&mut self, tp: &TargetPlan, prepared: &mut Prepared) {
        let k = key(&tp.iqn);
        let Some(rt) = self.targets.get(&k) else {
            return;
        };
        for u in &tp.updated_luns {
            let alua = u.lun.alua.as_ref().map(|a| a.get()).unwrap_or_default();
            if let Err(e) = rt.scsi.set_lun_alua(u.lun.id, alua) {
                tracing::warn!(target = %tp.iqn, lun = u.lun.id, error = %e, "alua");
            }
            if u.alua_only {
                continue;
            }
            let Some(store) = rt.luns.get(&u.lun.id) else {
                continue;
            };
            match prepared.stores.remove(&(k.clone(), u.lun.id)) {
                Some(next) => {
                    let before = store.geometry().size_bytes();
                    // Faults the new store does not carry over end now, so
                    // that an I/O they hang goes on and `replace` need not
                    // wait for it.
                    if let Some(old) = store.faults() {
                        if !next.faults.as_ref().is_some_and(|f| Arc::ptr_eq(f, &old)) {
                            old.set(rustgt_backstore::FaultSpec::default());
                        }
                    }
                    let old = store.replace(next);
                    drop(old);
                    if store.geometry().size_bytes() != before {
                        if let Err(e) = rt.scsi.capacity_changed(u.lun.id) {
                            tracing::warn!(target = %tp.iqn, lun = u.lun.id, error = %e, "capacity UA");
                        }
                    }
                }
                None if u.faults_only => {
                    let spec = u.lun.fault.as_ref().map(|f| f.spec());
                    if let (Some(faults), Some(Ok(spec))) = (store.faults(), spec) {
                        faults.set(spec);
                        tracing::info!(target = %tp.iqn, lun = u.lun.id, ?spec, "faults set");
                    }
                }
                None => {
                    if let (Some(ctx), Some(policy)) = (store.io_context(), u.lun.fixed_policy()) {
                        ctx.set_policy(policy);
                    }
                }
            }
        }
    }

    /// Removes and re-adds LUNs whose fixed settings changed; if the new
    /// one cannot start, the old one is put back.
    fn replace_luns(&mut self, tp: &TargetPlan, old_cfg: &Config, prepared: &mut Prepared) {
        let k = key(&tp.iqn);
        let Some(rt) = self.targets.get_mut(&k) else {
            return;
        };
        for l in &tp.replaced_luns {
            let Some(cur) = prepared.stores.remove(&(k.clone(), l.id)) else {
                continue;
            };
            let (result, old_store) = swap_lun(rt, &self.cfg, &tp.iqn, l, cur, &self.fenced);
            if let Err(e) = result {
                tracing::error!(target = %tp.iqn, lun = l.id, error = %e, "replacement LUN failed; restoring the old one");
                let old_settings = old_cfg
                    .targets
                    .iter()
                    .find(|t| t.iqn.eq_ignore_ascii_case(&tp.iqn))
                    .and_then(|t| t.luns.iter().find(|x| x.id == l.id));
                if let (Some(s), Some(old)) = (old_store, old_settings) {
                    if add_lun(&rt.scsi, old_cfg, &tp.iqn, old, &s, &self.fenced).is_ok() {
                        rt.luns.insert(l.id, s);
                        replace_lun_settings(&mut self.cfg, &tp.iqn, old.clone());
                    }
                }
            }
        }
    }

    /// `resize_lun` without a size: reopen the store with the same settings
    /// so a grown backing file or device shows.
    pub(super) async fn refresh_capacity(
        &mut self,
        iqn: &str,
        l: &LunSettings,
    ) -> Result<ChangeReport, AdminError> {
        check_resizable(iqn, l)?;
        // Open at the backing file's own size (a configured size would
        // refuse a file grown behind our back).
        let mut l = l.clone();
        if l.kind() == Some(EngineKind::File) {
            l.size = None;
        }
        let l = &l;
        let rt = self.rt_of(iqn)?;
        let store = rt.luns.get(&l.id).cloned().ok_or(AdminError::UnknownLun {
            target: iqn.to_owned(),
            lun: l.id,
        })?;
        let scsi = rt.scsi.clone();
        let before = store.geometry().size_bytes();
        let mut created = Vec::new();
        let cfg = self.cfg.clone();
        let next = tokio::task::block_in_place(|| open_store(&cfg, iqn, l, &mut created))?;
        let after = next.store.geometry().size_bytes();
        if after < before {
            return Err(AdminError::Refused(format!(
                "target {iqn}: LUN {}: the backing store is now {after} bytes, smaller than the \
                 {before} bytes exported; shrinking is not supported",
                l.id
            )));
        }
        tokio::task::block_in_place(|| drop(store.replace(next)));
        let mut report = ChangeReport::default();
        if l.kind() == Some(EngineKind::File) {
            // Saved configs must reopen the file at the size exported now.
            let mut sized = l.clone();
            sized.size = Some(ByteSize::from_bytes(after));
            replace_lun_settings(&mut self.cfg, iqn, sized);
        }
        if after != before {
            scsi.capacity_changed(l.id)
                .map_err(|e| AdminError::Failed(format!("target {iqn}: {e}")))?;
            report.changes.push(format!(
                "target {iqn}: LUN {} capacity {before} -> {after} bytes",
                l.id
            ));
        }
        Ok(report)
    }
}

fn replace_lun_settings(cfg: &mut Config, iqn: &str, lun: LunSettings) {
    if let Some(t) = cfg
        .targets
        .iter_mut()
        .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
    {
        if let Some(slot) = t.luns.iter_mut().find(|l| l.id == lun.id) {
            *slot = lun;
        }
    }
}

/// Engines whose capacity can change without losing data.
fn check_resizable(iqn: &str, l: &LunSettings) -> Result<(), AdminError> {
    match l.kind() {
        Some(EngineKind::File | EngineKind::BlockDev | EngineKind::Null) => Ok(()),
        _ => Err(AdminError::Refused(format!(
            "target {iqn}: LUN {}: a {} backstore cannot be resized without losing its data; \
             only file, blockdev and null LUNs can",
            l.id, l.backstore
        ))),
    }
}

/// Whether a policy change can be made on the running context: it must
/// exist, do its own readahead, and the new policy must not be `kernel`
/// (which needs a passthrough context).
fn can_switch_in_place(store: &LunStore, l: &LunSettings) -> bool {
    let Some(ctx) = store.io_context() else {
        return false;
    };
    let Some(policy) = l.fixed_policy() else {
        return false;
    };
    !ctx.is_passthrough() && policy != ReadaheadPolicy::Kernel
}

/// Opens a LUN's store, remembering a backing file it creates.
fn open_store(
    cfg: &Config,
    iqn: &str,
    l: &LunSettings,
    created: &mut Vec<PathBuf>,
) -> Result<Current, AdminError> {
    let file = match l.kind() {
        Some(EngineKind::File) => l.resolved_path(&cfg.data_dir),
        _ => None,
    };
    let existed = file.as_ref().is_some_and(|p| p.exists());
    let cur = crate::wiring::open_lun_store(cfg, iqn, l).map_err(|e| {
        AdminError::Failed(format!(
            "target {iqn}: LUN {}: cannot open its {} backstore: {}",
            l.id,
            l.backstore,
            crate::wiring::error_chain(&e)
        ))
    })?;
    if let (Some(p), false) = (file, existed) {
        created.push(p);
    }
    Ok(cur)
}

/// Replaces LUN `l.id` of `rt` by one on `next` (its sessions see
/// REPORTED LUNS DATA HAS CHANGED). Returns how adding the new one went
/// and the old store, which the caller puts back if that failed.
fn swap_lun(
    rt: &mut TargetRt,
    cfg: &Config,
    iqn: &str,
    l: &LunSettings,
    next: Current,
    fenced: &FencedTx,
) -> (Result<(), AdminError>, Option<Arc<LunStore>>) {
    if let Err(e) = rt.scsi.remove_lun(l.id) {
        tracing::warn!(target = %iqn, lun = l.id, error = %e, "LUN removal");
    }
    let old = rt.luns.remove(&l.id);
    let store = LunStore::new(next);
    let result = add_lun(&rt.scsi, cfg, iqn, l, &store, fenced);
    if result.is_ok() {
        rt.luns.insert(l.id, store);
    }
    (result, old)
}

/// Exports `store` as LUN `l.id` of `scsi` (raises REPORTED LUNS DATA HAS
/// CHANGED for the target's sessions).
fn add_lun(
    scsi: &Arc<ScsiTarget>,
    cfg: &Config,
    iqn: &str,
    l: &LunSettings,
    store: &Arc<LunStore>,
    fenced: &FencedTx,
) -> Result<(), AdminError> {
    let backstore: Arc<dyn Backstore> = store.clone();
    let lc = crate::wiring::lun_config(cfg, iqn, l, backstore);
    scsi.add_lun(l.id, lc)
        .map_err(|e| AdminError::Failed(format!("target {iqn}: {e}")))?;
    // A store resized from elsewhere (an RBD image) tells the initiators;
    // weak, so a removed LUN or target is not kept alive by its store.
    let weak = Arc::downgrade(scsi);
    let (lun, name) = (l.id, iqn.to_owned());
    store.watch_capacity(Box::new(move |_blocks| {
        if let Some(t) = weak.upgrade() {
            if let Err(e) = t.capacity_changed(lun) {
                tracing::warn!(target = %name, lun, error = %e, "capacity change not reported");
            }
        }
    }));
    // An RBD image's client fenced by another gateway's lock break
    // stays fenced: the LUN is reopened with a new client.
    if l.kind() == Some(EngineKind::Rbd) {
        let (tx, name) = (fenced.clone(), iqn.to_owned());
        store.on_fenced(Box::new(move || {
            let _ = tx.send((name.clone(), lun));
        }));
    }
    tracing::info!(target = %iqn, lun = l.id, backstore = %l.backstore, "LUN ready");
    Ok(())
}

impl Runtime {
    /// Reopens LUN `lun` of `iqn` whose RADOS client was blocklisted (a
    /// gateway that took it for dead broke its lock): a new store with a
    /// new client replaces the LUN, whose sessions see REPORTED LUNS DATA
    /// HAS CHANGED. If the store cannot be opened, the LUN stays as it is
    /// and its next fenced op asks again (at most every
    /// [`super::lunstore::FENCED_EVERY`]).
    pub async fn reopen_fenced(&mut self, iqn: &str, lun: u64) {
        let Some(l) = self
            .cfg
            .targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .and_then(|t| t.luns.iter().find(|x| x.id == lun))
            .cloned()
        else {
            return;
        };
        tracing::warn!(target = %iqn, lun, "the LUN's RADOS client was blocklisted (another gateway broke its lock): reopening the LUN with a new client");
        let cfg = self.cfg.clone();
        let mut created = Vec::new();
        let next = match tokio::task::block_in_place(|| open_store(&cfg, iqn, &l, &mut created)) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(target = %iqn, lun, error = %e, "blocklisted LUN not reopened; its next fenced I/O asks again");
                return;
            }
        };
        let k = key(iqn);
        let Some(rt) = self.targets.get_mut(&k) else {
            return;
        };
        let (result, old) = swap_lun(rt, &self.cfg, iqn, &l, next, &self.fenced);
        match result {
            Ok(()) => {
                tracing::info!(target = %iqn, lun, "LUN reopened with a new RADOS client");
            }
            Err(e) => {
                tracing::error!(target = %iqn, lun, error = %e, "reopened LUN failed to start; the old one is put back");
                if let Some(s) = &old {
                    if add_lun(&rt.scsi, &self.cfg, iqn, &l, s, &self.fenced).is_ok() {
                        rt.luns.insert(lun, Arc::clone(s));
                    }
                }
                return;
            }
        }
        // Closing a fenced client waits for its timeouts: not here.
        if let Some(old) = old {
            let _ = std::thread::Builder::new()
                .name("rustgt-close".into())
                .spawn(move || drop(old));
        }
    }
}
