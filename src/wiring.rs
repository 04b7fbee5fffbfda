//! Config settings -> the lower layers' types: a LUN's store (engine, I/O
//! context, faults) and SCSI settings, the port's protocol configuration
//! and connection caps. Used at start-up and by every admin change
//! ([`crate::control::apply`]); no state of its own.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustgt_backstore::hddsim::ArrayParams;
use rustgt_backstore::image_lock::ImageLock;
use rustgt_backstore::{
    Backstore, BackstoreError, BackstoreSpec, EngineKind, FaultBackstore, Faults, HddSimOptions,
    IoContextOptions, LunStoreSpec, ReadaheadChoice, ReadaheadPolicy,
};
use rustgt_iscsi::chap::{ChapCredentials, ChapPolicy};
use rustgt_iscsi::{PortalConfig, TargetInfo};
use rustgt_scsi::LunConfig;

use crate::config::{ChapSettings, Config, LunSettings};
use crate::control::lunstore::Current;

/// Why a LUN's store could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Opening the engine or attaching its I/O context failed.
    #[error(transparent)]
    Backstore(#[from] BackstoreError),
    /// A setting that does not convert (never for a checked config).
    #[error("{0}")]
    Setting(String),
}

type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `e` and its sources joined by ": ", as error chains are shown to
/// admin callers.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        text.push_str(": ");
        text.push_str(&s.to_string());
        cur = s.source();
    }
    text
}

/// The SCSI core's settings of one LUN exported from `store`.
pub(crate) fn lun_config(
    cfg: &Config,
    iqn: &str,
    l: &LunSettings,
    store: Arc<dyn Backstore>,
) -> LunConfig {
    let mut lc = LunConfig::new(store);
    lc.workers = l.effective_workers(&cfg.iscsi).max(1);
    lc.write_cache = l.write_cache;
    lc.thin = l.thin;
    lc.removable = l.removable;
    lc.alua = l.alua.as_ref().map(|a| a.get()).unwrap_or_default();
    lc.physical_block_size = l.physical_block_size;
    lc.unmap_command = l.unmap_command;
    lc.sanitize_rate = l.sanitize_rate.as_ref().map(|r| r.bytes());
    lc.pr_state_path = Some(pr_state_path(cfg, iqn, l));
    lc.serial = lun_serial(iqn, l);
    lc.naa_id = stable_id(iqn, l.id);
    lc.naa = l.wwn.as_ref().map(|w| w.value().0);
    lc.qos = l.qos.as_ref().map(|q| q.lun_qos()).unwrap_or_default();
    lc
}

/// The unit serial number: configured (or generated once and saved, see
/// [`crate::identity`]), else derived from the target name and LUN (rbd
/// LUNs, whose gateways must all report the same).
pub(crate) fn lun_serial(iqn: &str, l: &LunSettings) -> String {
    l.serial
        .clone()
        .unwrap_or_else(|| format!("{:016x}", stable_id(iqn, l.id)))
}

/// Opens a LUN's engine and wraps it in its I/O context, keeping a handle
/// on the context for the admin path (policy switches, statistics).
///
/// Opens a LUN's engine and wraps it in its I/O context, by
/// `rustgt_backstore::open_engine` and `attach_context` (the rules of
/// `build`: hddsim device hints, kernel readahead off under a rustgt
/// policy, `kernel` a counting passthrough except on hddsim), keeping the
/// context's handle for stats and live policy changes.
pub(crate) fn open_lun_store(cfg: &Config, iqn: &str, l: &LunSettings) -> Result<Current> {
    let mut spec = lun_store_spec(cfg, l)?;
    // One user per image: locked before the engine opens (and may grow)
    // an existing image, right after it created a missing one.
    let image = locked_image(&spec.backstore).map(std::path::Path::to_path_buf);
    let mut lock = match &image {
        Some(p) if p.exists() => Some(lock_lun_image(iqn, l, p, &spec.backstore)?),
        _ => None,
    };
    let gateway = cfg
        .targets
        .iter()
        .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
        .and_then(|t| t.gateway());
    if let Some(rbd) = spec.backstore.rbd.as_mut() {
        rbd.gateway = gateway;
    }
    let engine = rustgt_backstore::open_engine(&spec)?;
    if let (None, Some(p)) = (&lock, &image) {
        lock = Some(lock_lun_image(iqn, l, p, &spec.backstore)?);
    }
    let mut cur = wrap_engine(&spec, engine, l, None)?;
    cur.image_lock = lock;
    Ok(cur)
}

/// The path of the image a LUN's engine serves, if it is one that takes
/// an image lock (file, mmap and block device; RBD keeps its own
/// exclusive lock).
pub(crate) fn locked_image(b: &BackstoreSpec) -> Option<&std::path::Path> {
    match b.kind {
        EngineKind::File | EngineKind::Mmap | EngineKind::BlockDev => b.path.as_deref(),
        _ => None,
    }
}

/// The name a LUN holds its image lock under (in messages about it;
/// IQNs compare without case).
pub(crate) fn lun_holder(iqn: &str, l: &LunSettings) -> String {
    format!("target {} LUN {}", iqn.to_ascii_lowercase(), l.id)
}

/// The engine part of a LUN's store settings (`None` if a setting does
/// not convert, which a checked config never has).
pub(crate) fn backstore_spec(cfg: &Config, l: &LunSettings) -> Option<BackstoreSpec> {
    lun_store_spec(cfg, l).ok().map(|s| s.backstore)
}

/// Locks the image of LUN `l` of `iqn` for it ([`rustgt_backstore::image_lock`]).
pub(crate) fn lock_lun_image(
    iqn: &str,
    l: &LunSettings,
    path: &std::path::Path,
    b: &BackstoreSpec,
) -> Result<Arc<ImageLock>> {
    let lock = rustgt_backstore::image_lock::lock_image(path, &lun_holder(iqn, l), !b.read_only)
        .map_err(BackstoreError::from)?;
    Ok(Arc::new(lock))
}

/// A new I/O context for `l` around an engine that is already open (a
/// readahead or fault setting changed: the data stays where it is). The
/// LUN's live faults, if it had any, carry over (set to `l`'s).
pub(crate) fn rewrap_lun_store(
    cfg: &Config,
    l: &LunSettings,
    engine: Arc<dyn Backstore>,
    faults: Option<Arc<Faults>>,
    image_lock: Option<Arc<ImageLock>>,
) -> Result<Current> {
    let mut cur = wrap_engine(&lun_store_spec(cfg, l)?, engine, l, faults)?;
    cur.image_lock = image_lock;
    Ok(cur)
}

fn wrap_engine(
    spec: &LunStoreSpec,
    engine: Arc<dyn Backstore>,
    l: &LunSettings,
    faults: Option<Arc<Faults>>,
) -> Result<Current> {
    let mut cur = match rustgt_backstore::attach_context(spec, Arc::clone(&engine))? {
        Some(ctx) => Current {
            store: ctx.clone(),
            io_context: Some(ctx),
            faults: None,
            image_lock: None,
        },
        None => Current {
            store: engine,
            io_context: None,
            faults: None,
            image_lock: None,
        },
    };
    if let Some(f) = &l.fault {
        // The config was validated at load: the faults convert.
        let wanted = f
            .spec()
            .map_err(|(k, sub, msg)| StoreError::Setting(format!("fault.{k}.{sub}: {msg}")))?;
        let faults = match faults {
            Some(live) => {
                live.set(wanted);
                live
            }
            None => Faults::new(wanted),
        };
        // Outermost, so the I/O context's readahead threads never meet a
        // fault and every command sees it on a worker.
        cur.store = Arc::new(FaultBackstore::new(cur.store, Arc::clone(&faults)));
        cur.faults = Some(faults);
    }
    Ok(cur)
}

/// Everything that makes one LUN's store: engine, hddsim placement and the
/// LUN's I/O context (readahead policy, mode, cache bound).
fn lun_store_spec(cfg: &Config, l: &LunSettings) -> Result<LunStoreSpec> {
    let backstore = BackstoreSpec {
        kind: l.backstore.value().clone(),
        path: l.resolved_path(&cfg.data_dir),
        size: l.size_bytes(),
        block_size: l.block_size,
        read_only: l.read_only,
        thin: l.thin,
        rbd: l.rbd.as_ref().map(|r| r.options()),
    };
    let defaults = HddSimOptions::default();
    let hddsim = HddSimOptions {
        device: l.hddsim_device.clone().unwrap_or(defaults.device),
        offset: l
            .hddsim_offset
            .as_ref()
            .map_or(defaults.offset, |o| o.bytes()),
        array: ArrayParams {
            disks: l.hddsim_disks.unwrap_or(defaults.array.disks),
            ..defaults.array
        },
        time_scale: l
            .hddsim_speedup
            .map_or(defaults.time_scale, |x| 1.0 / f64::from(x.max(1))),
    };
    let defaults_ctx = IoContextOptions::default();
    let choice = l.readahead.get();
    let io_context = IoContextOptions {
        // `auto` is resolved on the open engine (attach_context).
        policy: match choice {
            ReadaheadChoice::Fixed(p) => p,
            ReadaheadChoice::Auto => ReadaheadPolicy::Kernel,
        },
        mode: l.io_context.get(),
        cache_bytes: l.readahead_cache.bytes(),
        max_readahead: l.readahead_max.bytes(),
        io_threads: l
            .readahead_io_threads
            .map_or(defaults_ctx.io_threads, |t| t as usize),
        max_io: l
            .readahead_io_max
            .as_ref()
            .map_or(defaults_ctx.max_io, |m| m.bytes()),
        device_slice: l
            .device_slice
            .as_ref()
            .map_or(defaults_ctx.device_slice, |d| d.get()),
        ..defaults_ctx
    };
    Ok(LunStoreSpec {
        backstore,
        hddsim,
        io_context: Some(io_context),
        readahead_auto: choice == ReadaheadChoice::Auto,
    })
}

/// Where a LUN's persistent reservations live (SPC-4 APTPL).
fn pr_state_path(cfg: &Config, iqn: &str, l: &LunSettings) -> PathBuf {
    match &l.pr_state {
        Some(p) => cfg.data_dir.join(p),
        None => cfg.data_dir.join("pr").join(format!("{iqn}-{}.toml", l.id)),
    }
}

/// A stable 64-bit id for the serial numbers and NAA designators of LUNs
/// without a configured `serial` / `wwn` (rbd LUNs): FNV-1a of the target
/// name and LUN, the same on every gateway and across restarts.
fn stable_id(iqn: &str, lun: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in iqn.bytes().chain(lun.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn chap_policy(c: Option<&ChapSettings>) -> ChapPolicy {
    let Some(c) = c else {
        return ChapPolicy::default();
    };
    ChapPolicy {
        initiator: Some(ChapCredentials {
            user: c.user.clone(),
            secret: c.secret.clone().into_bytes(),
        }),
        target: match (&c.mutual_user, &c.mutual_secret) {
            (Some(u), Some(s)) => Some(ChapCredentials {
                user: u.clone(),
                secret: s.clone().into_bytes(),
            }),
            _ => None,
        },
    }
}

/// The iSCSI protocol configuration of `cfg` (whose portals are bound
/// addresses).
pub(crate) fn portal_config(cfg: &Config) -> PortalConfig {
    let targets = cfg
        .targets
        .iter()
        .map(|t| TargetInfo {
            name: t.iqn.clone(),
            alias: t.alias.clone(),
            tpgt: t.tpgt,
            portals: t.portals.iter().map(SocketAddr::to_string).collect(),
            iser_portals: t.iser_portals.iter().map(SocketAddr::to_string).collect(),
            acl: t.acl.clone(),
            chap: chap_policy(t.chap.as_ref()),
            groups: crate::config::initiator_groups(&t.groups, |c| chap_policy(Some(c))),
            redirect: t
                .redirect
                .as_ref()
                .map(|r: &crate::config::RedirectSettings| {
                    rustgt_iscsi::Redirect::new(
                        r.to.clone(),
                        r.from.iter().map(SocketAddr::to_string).collect(),
                        r.permanent,
                    )
                    .by_sessions(r.metrics.clone())
                }),
        })
        .collect();
    let nop = cfg.iscsi.nop_in_interval_secs;
    PortalConfig {
        targets,
        discovery_chap: chap_policy(cfg.discovery.chap.as_ref()),
        discovery_groups: crate::config::initiator_groups(&cfg.discovery.groups, |c| {
            chap_policy(Some(c))
        }),
        limits: cfg.iscsi.limits(),
        queue_depth: cfg.iscsi.queue_depth.max(1),
        nop_interval: (nop > 0).then(|| Duration::from_secs(nop)),
        nop_timeout: Duration::from_secs(cfg.iscsi.nop_in_timeout_secs.max(1)),
        login_timeout: Duration::from_secs(cfg.limits.login_timeout_secs.max(1)),
        max_sessions_per_initiator: cfg.limits.max_sessions_per_initiator.max(1),
        // A port keeps its one budget and takes only this size from it.
        data_budget: std::sync::Arc::new(rustgt_iscsi::DataBudget::new(
            cfg.limits.data_buffer_bytes(),
        )),
        data_out_timeout: Duration::from_secs(cfg.limits.data_out_timeout_secs.max(1)),
        ..PortalConfig::default()
    }
}

/// The port's connection caps of `cfg` (`[limits]`).
pub(crate) fn conn_limits(cfg: &Config) -> rustgt_port::ConnLimits {
    let l = &cfg.limits;
    rustgt_port::ConnLimits {
        max_connections: l.max_connections.max(1),
        max_per_address: l.max_connections_per_address.max(1),
        max_in_login: l.max_login_connections.max(1),
        max_in_login_per_address: l.max_login_connections_per_address.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_id_is_stable_and_distinct() {
        assert_eq!(stable_id("iqn.a", 0), stable_id("iqn.a", 0));
        assert_ne!(stable_id("iqn.a", 0), stable_id("iqn.a", 1));
        assert_ne!(stable_id("iqn.a", 0), stable_id("iqn.b", 0));
    }
}
