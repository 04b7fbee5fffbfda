//! The daemon's control path: [`Runtime`] owns the running state (the
//! running configuration, the port with the targets, sessions and
//! connections of both transports, the SCSI targets, every LUN's store and
//! every listening TCP portal) and applies admin requests to it one at a
//! time. Listings, kill/logout and metrics cover TCP and iSER connections
//! alike (each shows its transport).
//!
//! Every change is made the same way: the request is turned into the
//! configuration it wants (the running one with one thing changed, or a
//! file for `config apply`), validated like a config file, and handed to
//! [`Runtime::apply`] (see [`super::apply`]). Queries read the running
//! state and the live counters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rustgt_port::Port;
use rustgt_scsi::{LunRegistry, ScsiTarget};
use serde::Serialize;
use serde_json::Value;

use super::lunstore::LunStore;
use crate::api::proto::{
    set_key, settable, ConfigText, KeyRule, MetricsText, Reply, Request, SettableKey, LUN_KEYS,
    TARGET_KEYS,
};
use crate::config::{self, Config, ConfigError, LunSettings, Overrides, TargetSettings};

/// Where the running configuration came from, so SIGHUP and
/// `config_apply` load files the way the daemon's start did.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// The `--config` file, or `<data_dir>/rustgt.toml` without one;
    /// what SIGHUP and `config_reload` re-apply and changes are saved to.
    pub file: Option<PathBuf>,
    /// `--listen`, `--data-dir`, `--admin-socket`: they beat every file.
    pub overrides: Overrides,
    /// Changes are written to `file` (`persist` on and no `--no-persist`).
    pub persist: bool,
}

/// Errors of admin requests. Each names what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("unknown target {0:?}")]
    UnknownTarget(String),
    #[error("target {0:?} already exists")]
    TargetExists(String),
    #[error("target {target}: no LUN {lun}")]
    UnknownLun { target: String, lun: u64 },
    #[error("target {target}: LUN {lun} already exists")]
    LunExists { target: String, lun: u64 },
    #[error("no session with TSIH {0}")]
    UnknownSession(u16),
    #[error(
        "{action}: target {target} has {} active session(s) ({}); use --force to do it anyway",
        .sessions.len(),
        .sessions.join(", ")
    )]
    Busy {
        action: String,
        target: String,
        sessions: Vec<String>,
    },
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Failed(String),
}

/// One target's running parts.
#[derive(Debug)]
pub struct TargetRt {
    pub scsi: Arc<ScsiTarget>,
    pub luns: BTreeMap<u64, Arc<LunStore>>,
}

/// The running state (see the module docs).
#[derive(Debug)]
pub struct Runtime {
    /// The running configuration; portals hold bound addresses.
    pub(super) cfg: Config,
    pub(super) source: ConfigSource,
    /// Targets, sessions and connections of both transports.
    pub(super) port: Arc<Port>,
    pub(super) registry: Arc<LunRegistry>,
    /// By lowercase target name.
    pub(super) targets: BTreeMap<String, TargetRt>,
    /// The listening portals, TCP and iSER.
    pub(super) portals: super::portals::Portals,
    /// Reads the redirect gateways' loads while any redirect has `metrics`.
    pub(super) load_watch: crate::gateway_load::LoadWatch,
    pub(super) started: Instant,
    pub(super) admin_socket: Option<PathBuf>,
    pub(super) metrics: Option<SocketAddr>,
    /// The running state has changes `source.file` lacks.
    pub(super) unsaved: bool,
    /// Where RBD LUNs whose client was blocklisted ask to be reopened
    /// (target, LUN): the daemon's loop calls [`Runtime::reopen_fenced`].
    pub(super) fenced: FencedTx,
}

/// The sender of [`Runtime::fenced`]; unbounded, as each LUN sends at
/// most once per [`super::lunstore::FENCED_EVERY`].
pub type FencedTx = tokio::sync::mpsc::UnboundedSender<(String, u64)>;

fn json<T: Serialize>(v: T) -> Result<Value, AdminError> {
    serde_json::to_value(v)
        .map_err(|e| AdminError::Failed(format!("cannot encode the result: {e}")))
}

pub(super) fn key(iqn: &str) -> String {
    iqn.to_ascii_lowercase()
}

impl Runtime {
    /// Builds everything `cfg` describes: the running state starts empty
    /// and `cfg` is applied to it like any later change.
    pub async fn start(
        cfg: Config,
        source: ConfigSource,
        fenced: FencedTx,
    ) -> Result<Runtime, AdminError> {
        let mut empty = cfg.clone();
        empty.targets.clear();
        let port = Port::new(crate::wiring::portal_config(&empty));
        port.set_reactors(cfg.reactor.threads);
        port.set_limits(crate::wiring::conn_limits(&cfg));
        port.set_run_to_completion(cfg.reactor.run_to_completion);
        port.set_busy_poll(std::time::Duration::from_micros(cfg.reactor.busy_poll_us));
        let slice_us = cfg.reactor.slice_us;
        if slice_us != 0 {
            port.set_reactor_setup(std::sync::Arc::new(move || {
                match crate::sched::set_slice(slice_us) {
                    Ok(true) => tracing::debug!(slice_us, "reactor time slice set"),
                    Ok(false) => tracing::info!(
                        "reactor time slice left alone: the thread is not in the normal scheduling policy"
                    ),
                    Err(e) => tracing::warn!(error = %e, slice_us, "reactor time slice not set"),
                }
            }));
        }
        // Before any LUN or reactor starts: both read it.
        rustgt_backstore::uring::set_enabled(cfg.reactor.io_uring_enabled());
        rustgt_backstore::uring::set_inline_writes(cfg.reactor.inline_writes);
        match rustgt_backstore::uring::probe() {
            _ if !cfg.reactor.io_uring_enabled() => {
                tracing::info!("io_uring off ([reactor] io_uring = \"off\"): blocking I/O on the LUNs' workers");
            }
            Ok(()) => tracing::info!(
                "io_uring available: reactors drive file and block-device LUNs with it"
            ),
            Err(why) => {
                tracing::warn!(%why, "io_uring unavailable: blocking I/O on the LUNs' workers")
            }
        }
        let mut rt = Runtime {
            cfg: empty,
            source,
            port,
            // One registry for the whole process, so EXTENDED COPY works
            // across targets.
            registry: LunRegistry::new(),
            targets: BTreeMap::new(),
            portals: super::portals::Portals::default(),
            load_watch: crate::gateway_load::LoadWatch::default(),
            started: Instant::now(),
            admin_socket: None,
            metrics: None,
            unsaved: false,
            fenced,
        };
        // Every existing image a LUN will open is locked for it before
        // anything is bound: a second daemon, or two LUNs on one image,
        // fail here. The stores take their own share of the locks as
        // they open (same holder), after which these go.
        let preflight = lock_images(&cfg)?;
        rt.apply(cfg, true, false).await?;
        drop(preflight);
        Ok(rt)
    }

    /// The port every portal of both transports serves.
    pub fn port(&self) -> &Arc<Port> {
        &self.port
    }

    /// The running configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Bound addresses of every listening TCP portal.
    pub fn portals(&self) -> Vec<SocketAddr> {
        self.portals.tcp().collect()
    }

    /// Bound addresses of the iSER portals.
    pub fn iser_portals(&self) -> &[SocketAddr] {
        self.portals.iser()
    }

    /// Binds and serves the configuration's iSER portals (once, at start:
    /// a changed `iser_portals` list needs a restart); targets and settings
    /// changed later reach them at once, as they serve the same port.
    pub fn start_iser(&mut self) -> Result<(), super::portals::IserPortalError> {
        self.portals.start_iser(&self.cfg, &self.port)
    }

    /// Tells `status` where the admin socket and metrics endpoint are.
    pub fn set_endpoints(&mut self, admin_socket: Option<PathBuf>, metrics: Option<SocketAddr>) {
        self.admin_socket = admin_socket;
        self.metrics = metrics;
    }

    /// Stops accepting on every portal (shutdown).
    pub fn stop_listeners(&mut self) {
        self.portals.stop_tcp();
    }

    /// Answers one request.
    pub async fn handle(&mut self, req: Request) -> Reply {
        let name = req.name();
        match self.dispatch(req).await {
            Ok(v) => Reply::success(v),
            Err(e) => {
                tracing::info!(request = name, error = %e, "admin request refused");
                Reply::failure(e.to_string())
            }
        }
    }

    /// Re-applies the config file (SIGHUP, `config_reload`). Refused while
    /// the running state has changes the file lacks, unless `force`d:
    /// a reload never silently reverts what an admin changed live.
    pub async fn reload(
        &mut self,
        force: bool,
    ) -> Result<crate::api::proto::ChangeReport, AdminError> {
        let Some(file) = self.source.file.clone() else {
            return Err(AdminError::Refused(
                "the daemon runs the built-in default target and may write no file \
                 (persistence off): there is no file to re-apply"
                    .into(),
            ));
        };
        if self.unsaved && !force {
            return Err(AdminError::Refused(format!(
                "the running configuration has changes that {} lacks (persistence is off or \
                 a write failed); re-applying the file would revert them. Put them in the \
                 file, or use `rustgt admin config reload --force` to revert them",
                file.display()
            )));
        }
        let read = config::load(Some(&file), &self.source.overrides)?;
        let mut wanted = read.clone();
        // LUNs added to the file by hand get their identities now, kept
        // in the file when it may be written.
        let filled = self.fill_identities(&mut wanted)?;
        if !filled.is_empty() && self.source.persist {
            if let Err(e) = crate::persist::save(&file, &read, &wanted) {
                tracing::error!(error = %e, "identities of LUNs added to the file not saved");
            }
        }
        let report = self.apply_file(wanted, force, false).await?;
        self.unsaved = false;
        Ok(report)
    }

    /// Gives the LUNs of `wanted` that lack a serial or wwn the ones they
    /// run with, or new ones (random when they are saved, else derived
    /// from the data directory's machine id).
    fn fill_identities(&self, wanted: &mut Config) -> Result<Vec<String>, AdminError> {
        let source = if self.source.persist {
            crate::identity::Source::Random
        } else {
            let id = crate::identity::machine_id(&self.cfg.data_dir)
                .map_err(|e| AdminError::Failed(e.to_string()))?;
            crate::identity::Source::Derived(id)
        };
        crate::identity::fill(wanted, Some(&self.cfg), source)
            .map_err(|e| AdminError::Failed(e.to_string()))
    }

    /// Applies `wanted` like [`Self::apply`] (or [`Self::apply_file`] with
    /// `file`), after giving new LUNs their identities, and saves what
    /// changed to the configuration file.
    async fn change(
        &mut self,
        mut wanted: Config,
        force: bool,
        dry_run: bool,
        file: bool,
    ) -> Result<crate::api::proto::ChangeReport, AdminError> {
        if file {
            self.resolve_ports(&mut wanted);
        }
        self.fill_identities(&mut wanted)?;
        let before = self.cfg.clone();
        let asked = wanted.clone();
        let mut report = self.apply(wanted, force, dry_run).await?;
        if !dry_run && !report.changes.is_empty() {
            self.record(&before, &asked, &mut report);
        }
        Ok(report)
    }

    /// Writes the change from `before` to `after` into the configuration
    /// file, or notes that the running state now differs from it.
    pub(super) fn record(
        &mut self,
        before: &Config,
        after: &Config,
        report: &mut crate::api::proto::ChangeReport,
    ) {
        let file = self.source.file.clone();
        match file {
            Some(file) if self.source.persist => {
                let (before, after) = (self.as_configured(before), self.as_configured(after));
                let after = match self.source.overrides.listen {
                    Some(_) => keep_portals(&before, after),
                    None => after,
                };
                match tokio::task::block_in_place(|| crate::persist::save(&file, &before, &after)) {
                    Ok(()) => report.saved_to = Some(file.display().to_string()),
                    Err(e) => {
                        self.unsaved = true;
                        tracing::error!(error = %e, "change applied but not saved: the running configuration differs from the file");
                        report.not_saved = Some(e.to_string());
                    }
                }
            }
            file => {
                self.unsaved = true;
                let what = file.map_or_else(
                    || "the built-in defaults".to_owned(),
                    |f| f.display().to_string(),
                );
                let why = format!(
                    "persistence is off: the running configuration differs from {what}; \
                     a restart loses the change and SIGHUP refuses to revert it without --force"
                );
                tracing::warn!("{why}");
                report.not_saved = Some(why);
            }
        }
    }

    /// `cfg` with every portal bound for a configured port 0 written as
    /// configured, as the file has it.
    fn as_configured(&self, cfg: &Config) -> Config {
        let mut out = cfg.clone();
        for t in &mut out.targets {
            for p in &mut t.portals {
                if let Some(configured) = self.portals.tcp_configured(p) {
                    *p = configured;
                }
            }
            let mut seen = std::collections::BTreeSet::new();
            t.portals.retain(|p| seen.insert(*p));
        }
        out
    }

    async fn dispatch(&mut self, req: Request) -> Result<Value, AdminError> {
        match req {
            Request::Status => json(self.status()),
            Request::ListTargets => json(self.target_views()),
            Request::ShowTarget { target } => json(self.target_view(self.find(&target)?)),
            Request::ListPortals => json(self.portal_views()),
            Request::ListLuns { target } => json(self.lun_views(target.as_deref())?),
            Request::ListSessions { target } => {
                if let Some(t) = &target {
                    self.find(t)?;
                }
                json(self.session_views(target.as_deref()))
            }
            Request::ListConnections => json(self.conn_views()),
            Request::LogoutSession { tsih } => json(self.session_action(tsih, false)?),
            Request::KillSession { tsih } => json(self.session_action(tsih, true)?),
            Request::LunStats { target, lun } => json(self.lun_stats(target.as_deref(), lun)?),
            Request::SessionStats { tsih } => json(self.session_stats(tsih)?),
            Request::ShowQos { target } => json(self.qos_views(target.as_deref())?),
            Request::Metrics => json(MetricsText {
                text: self.metrics_text(),
            }),
            Request::ConfigSave => json(ConfigText {
                toml: self.cfg.to_toml()?,
            }),
            Request::ConfigApply {
                toml,
                origin,
                force,
                dry_run,
            } => {
                let origin = origin.unwrap_or_else(|| "config_apply request".to_owned());
                let wanted = config::load_text(Path::new(&origin), toml, &self.source.overrides)?;
                json(self.change(wanted, force, dry_run, true).await?)
            }
            Request::ConfigReload { force } => json(self.reload(force).await?),
            Request::ResizeLun { target, lun, size } => {
                json(self.resize(&target, lun, size).await?)
            }
            change => {
                let (mut wanted, force) = self.wanted_by(change)?;
                self.fill_identities(&mut wanted)?;
                config::check(&wanted, "admin request")?;
                json(self.change(wanted, force, false, false).await?)
            }
        }
    }

    /// The configuration a change request asks for, and whether it is forced.
    fn wanted_by(&self, req: Request) -> Result<(Config, bool), AdminError> {
        let mut w = self.cfg.clone();
        let mut force = false;
        match req {
            Request::AddTarget { target } => {
                if self.find(&target.iqn).is_ok() {
                    return Err(AdminError::TargetExists(target.iqn));
                }
                w.targets.push(target);
            }
            Request::RemoveTarget { target, force: f } => {
                let iqn = self.find(&target)?.iqn.clone();
                w.targets.retain(|t| !t.iqn.eq_ignore_ascii_case(&iqn));
                force = f;
            }
            Request::AddPortal { target, portal } => {
                let t = find_mut(&mut w, &target)?;
                if t.portals.contains(&portal) {
                    return Err(AdminError::Refused(format!(
                        "target {}: portal {portal} is already listed",
                        t.iqn
                    )));
                }
                t.portals.push(portal);
            }
            Request::RemovePortal { target, portal } => {
                let t = find_mut(&mut w, &target)?;
                if !t.portals.contains(&portal) {
                    return Err(AdminError::Refused(format!(
                        "target {}: portal {portal} is not one of its portals ({})",
                        t.iqn,
                        list(&t.portals)
                    )));
                }
                if t.portals.len() == 1 {
                    return Err(AdminError::Refused(format!(
                        "target {}: portal {portal} is its only portal; add another first or remove the target",
                        t.iqn
                    )));
                }
                t.portals.retain(|p| *p != portal);
            }
            Request::AddLun { target, lun } => {
                let t = find_mut(&mut w, &target)?;
                if t.luns.iter().any(|l| l.id == lun.id) {
                    return Err(AdminError::LunExists {
                        target: t.iqn.clone(),
                        lun: lun.id,
                    });
                }
                t.luns.push(lun);
            }
            Request::RemoveLun {
                target,
                lun,
                force: f,
            } => {
                let t = find_mut(&mut w, &target)?;
                lun_mut(t, lun)?;
                t.luns.retain(|l| l.id != lun);
                force = f;
            }
            Request::SetReadahead {
                target,
                lun,
                policy,
            } => {
                let t = find_mut(&mut w, &target)?;
                lun_mut(t, lun)?.readahead = policy
                    .parse()
                    .map_err(|m| config::invalid("admin request", "policy", m))?;
            }
            Request::SetFaults { target, lun, fault } => {
                let t = find_mut(&mut w, &target)?;
                lun_mut(t, lun)?.fault = fault;
            }
            Request::SetLun {
                target,
                lun,
                settings,
                force: f,
            } => {
                let t = find_mut(&mut w, &target)?;
                let what = format!("target {}: LUN {lun}", t.iqn);
                let l = lun_mut(t, lun)?;
                *l = set_keys(&*l, &what, LUN_KEYS, &settings)?;
                self.refuse_losing_data(&w, &target, lun, &settings)?;
                force = f;
            }
            Request::SetTarget { target, settings } => {
                let t = find_mut(&mut w, &target)?;
                let what = format!("target {}", t.iqn);
                *t = set_keys(&*t, &what, TARGET_KEYS, &settings)?;
            }
            Request::SetQos {
                target,
                lun,
                initiator,
                set,
                clear,
                clear_all,
            } => super::qos::wanted_set_qos(
                &mut w,
                &target,
                lun,
                initiator.as_deref(),
                &set,
                &clear,
                clear_all,
            )?,
            Request::SetAcl { target, acl } => find_mut(&mut w, &target)?.acl = acl,
            Request::AclAdd { target, initiator } => {
                let t = find_mut(&mut w, &target)?;
                if t.acl.iter().any(|a| a.eq_ignore_ascii_case(&initiator)) {
                    return Err(AdminError::Refused(format!(
                        "target {}: {initiator} is already in the ACL",
                        t.iqn
                    )));
                }
                t.acl.push(initiator);
            }
            Request::AclRemove { target, initiator } => {
                let t = find_mut(&mut w, &target)?;
                let before = t.acl.len();
                t.acl.retain(|a| !a.eq_ignore_ascii_case(&initiator));
                if t.acl.len() == before {
                    return Err(AdminError::Refused(format!(
                        "target {}: {initiator} is not in the ACL ({})",
                        t.iqn,
                        if t.acl.is_empty() {
                            "empty: any initiator may log in".to_owned()
                        } else {
                            t.acl.join(", ")
                        }
                    )));
                }
            }
            Request::GroupAdd { target, group } => {
                let t = find_mut(&mut w, &target)?;
                if t.groups
                    .iter()
                    .any(|g| g.name.eq_ignore_ascii_case(&group.name))
                {
                    return Err(AdminError::Refused(format!(
                        "target {}: group {} already exists; remove it first",
                        t.iqn, group.name
                    )));
                }
                t.groups.push(group);
            }
            Request::GroupRemove { target, name } => {
                let t = find_mut(&mut w, &target)?;
                let before = t.groups.len();
                t.groups.retain(|g| !g.name.eq_ignore_ascii_case(&name));
                if t.groups.len() == before {
                    let names: Vec<&str> = t.groups.iter().map(|g| g.name.as_str()).collect();
                    return Err(AdminError::Refused(format!(
                        "target {}: no group {name} (groups: {})",
                        t.iqn,
                        if names.is_empty() {
                            "none".to_owned()
                        } else {
                            names.join(", ")
                        }
                    )));
                }
            }
            Request::SetChap { target, chap } => match target {
                Some(target) => find_mut(&mut w, &target)?.chap = chap,
                None => w.discovery.chap = chap,
            },
            other => {
                return Err(AdminError::Failed(format!(
                    "internal error: {} is not a change request",
                    other.name()
                )))
            }
        }
        Ok((w, force))
    }

    /// Refuses a `set_lun` that would replace a LUN whose data lives only
    /// in its store (ram, hddsim without a file): replacing it would lose
    /// the data.
    fn refuse_losing_data(
        &self,
        wanted: &Config,
        target: &str,
        lun: u64,
        settings: &serde_json::Map<String, Value>,
    ) -> Result<(), AdminError> {
        let plan = super::diff::plan(&self.cfg, wanted);
        let Some(l) = plan
            .changed_targets
            .iter()
            .filter(|t| t.iqn.eq_ignore_ascii_case(target))
            .flat_map(|t| t.replaced_luns.iter())
            .find(|l| l.id == lun)
        else {
            return Ok(());
        };
        let kind = l.backstore.value().clone();
        let in_memory = match kind {
            rustgt_backstore::EngineKind::Ram => true,
            rustgt_backstore::EngineKind::HddSim => l.path.is_none(),
            _ => false,
        };
        if in_memory {
            let keys: Vec<&str> = settings.keys().map(String::as_str).collect();
            return Err(AdminError::Refused(format!(
                "target {target}: LUN {lun}: changing {} replaces the LUN, and a {} LUN's data \
                 would be lost; remove the LUN and add it anew if that is meant",
                keys.join(", "),
                kind.as_str()
            )));
        }
        Ok(())
    }

    /// Finds a running target by name (case-insensitively).
    pub(super) fn find(&self, iqn: &str) -> Result<&TargetSettings, AdminError> {
        self.cfg
            .targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
            .ok_or_else(|| AdminError::UnknownTarget(iqn.to_owned()))
    }

    pub(super) fn rt_of(&self, iqn: &str) -> Result<&TargetRt, AdminError> {
        self.targets
            .get(&key(iqn))
            .ok_or_else(|| AdminError::UnknownTarget(iqn.to_owned()))
    }

    /// Grows a LUN to `size`, or picks up its backing size when `None`.
    async fn resize(
        &mut self,
        target: &str,
        lun: u64,
        size: Option<String>,
    ) -> Result<crate::api::proto::ChangeReport, AdminError> {
        let mut w = self.cfg.clone();
        let t = find_mut(&mut w, target)?;
        let iqn = t.iqn.clone();
        let l = lun_mut(t, lun)?;
        match size {
            Some(s) => {
                l.size = Some(
                    s.parse()
                        .map_err(|m| config::invalid("admin request", "size", m))?,
                );
                config::check(&w, "admin request")?;
                let report = self.change(w, false, false, false).await?;
                if report.changes.is_empty() {
                    return Err(AdminError::Refused(format!(
                        "target {iqn}: LUN {lun} already has size {}",
                        self.find(&iqn)?
                            .luns
                            .iter()
                            .find(|l| l.id == lun)
                            .and_then(|l| l.size.as_ref())
                            .map(|s| s.text().to_owned())
                            .unwrap_or_default()
                    )));
                }
                Ok(report)
            }
            None => {
                let l = l.clone();
                let before = self.cfg.clone();
                let mut report = self.refresh_capacity(&iqn, &l).await?;
                if before != self.cfg {
                    let after = self.cfg.clone();
                    self.record(&before, &after, &mut report);
                }
                Ok(report)
            }
        }
    }

    // -----------------------------------------------------------------------
    // Queries
    // -----------------------------------------------------------------------
}

/// `current` with `settings` (key to value) changed, each key checked
/// against `keys`. A JSON string is read as the command line's
/// `KEY=VALUE` value: as a TOML value (`true`, `8`, `[1, 2]`) when that
/// fits the key, else as text, else as a comma-separated list; null or ""
/// restores the key's default. Errors name `what` and the key.
fn set_keys<T: Serialize + serde::de::DeserializeOwned>(
    current: &T,
    what: &str,
    keys: &[SettableKey],
    settings: &serde_json::Map<String, Value>,
) -> Result<T, AdminError> {
    let refused = |m: String| AdminError::Refused(format!("{what}: {m}"));
    if settings.is_empty() {
        return Err(refused("no KEY=VALUE given".into()));
    }
    let Value::Object(mut obj) = json(current)? else {
        return Err(AdminError::Failed(format!(
            "{what}: settings are not an object"
        )));
    };
    for (name, value) in settings {
        match settable(keys, name).map(|k| k.rule) {
            None => {
                let names: Vec<&str> = keys
                    .iter()
                    .filter(|k| !matches!(k.rule, KeyRule::Refused(_)))
                    .map(|k| k.name)
                    .collect();
                return Err(refused(format!(
                    "unknown key {name:?}; keys that can be set: {}",
                    names.join(", ")
                )));
            }
            Some(KeyRule::Refused(why)) => {
                return Err(refused(format!("{name} cannot be changed live: {why}")));
            }
            Some(KeyRule::Live | KeyRule::Replaces) => {}
        }
        set_key::<T>(&mut obj, name, value).map_err(refused)?;
    }
    serde_json::from_value(Value::Object(obj))
        .map_err(|e| AdminError::Failed(format!("{what}: {e}")))
}

fn find_mut<'a>(w: &'a mut Config, iqn: &str) -> Result<&'a mut TargetSettings, AdminError> {
    w.targets
        .iter_mut()
        .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
        .ok_or_else(|| AdminError::UnknownTarget(iqn.to_owned()))
}

fn lun_mut(t: &mut TargetSettings, lun: u64) -> Result<&mut LunSettings, AdminError> {
    let iqn = t.iqn.clone();
    t.luns
        .iter_mut()
        .find(|l| l.id == lun)
        .ok_or(AdminError::UnknownLun { target: iqn, lun })
}

/// `after` with the portals of the targets `before` has too taken from
/// `before`: under `--listen`, which replaces every portal list, portal
/// changes are not written to the file.
fn keep_portals(before: &Config, mut after: Config) -> Config {
    for t in &mut after.targets {
        if let Some(b) = before
            .targets
            .iter()
            .find(|b| b.iqn.eq_ignore_ascii_case(&t.iqn))
        {
            t.portals = b.portals.clone();
        }
    }
    after
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Locks the existing images of `cfg`'s file, mmap and block-device LUNs
/// for their LUNs (start-up's check before any portal is bound).
fn lock_images(
    cfg: &Config,
) -> Result<Vec<Arc<rustgt_backstore::image_lock::ImageLock>>, AdminError> {
    let mut held = Vec::new();
    for t in &cfg.targets {
        for l in &t.luns {
            let Some(spec) = crate::wiring::backstore_spec(cfg, l) else {
                continue;
            };
            let Some(path) = crate::wiring::locked_image(&spec) else {
                continue;
            };
            if !path.exists() {
                continue;
            }
            let lock = crate::wiring::lock_lun_image(&t.iqn, l, path, &spec).map_err(|e| {
                AdminError::Failed(format!(
                    "target {}: LUN {}: {}",
                    t.iqn,
                    l.id,
                    crate::wiring::error_chain(&e)
                ))
            })?;
            held.push(lock);
        }
    }
    Ok(held)
}
