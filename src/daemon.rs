//! Runtime wiring: config -> backstores -> SCSI targets -> iSCSI/TCP server,
//! plus signal handling. No protocol logic lives here.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use rustgt_backstore::hddsim::ArrayParams;
use rustgt_backstore::{BackstoreSpec, EngineKind, HddSimOptions, IoContextOptions, LunStoreSpec};
use rustgt_iscsi::chap::{ChapCredentials, ChapPolicy};
use rustgt_iscsi::negotiate::{Digest, Limits};
use rustgt_iscsi::{PortalConfig, TargetInfo};
use rustgt_iscsi_tcp::Server;
use rustgt_scsi::{LunConfig, LunRegistry, ScsiTarget};

use crate::config::{ChapSettings, Config, IscsiSettings, LunSettings, TargetSettings};

/// How long initiators get to log out after the Async logout request.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Build everything from `cfg`, serve until SIGINT/SIGTERM, shut down cleanly.
pub async fn run(cfg: Config) -> Result<()> {
    std::fs::create_dir_all(&cfg.data_dir)
        .with_context(|| format!("creating data directory {}", cfg.data_dir.display()))?;

    // Bind every distinct portal first, so port 0 resolves to a real port
    // before SendTargets answers are built.
    let wanted: BTreeSet<SocketAddr> = cfg
        .targets
        .iter()
        .flat_map(|t| t.portals.iter().copied())
        .collect();
    let mut listeners = Vec::new();
    let mut bound = std::collections::HashMap::new();
    for addr in wanted {
        let l = rustgt_iscsi_tcp::bind(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?;
        let real = l.local_addr()?;
        bound.insert(addr, real);
        listeners.push((real, l));
    }

    let server = Server::new(portal_config(&cfg, &bound));
    // One registry for the whole process, so EXTENDED COPY works across targets.
    let registry = LunRegistry::new();
    for t in &cfg.targets {
        let scsi = build_target(&cfg, t, &registry)?;
        server.add_target(&t.iqn, scsi);
    }

    let mut stdout = std::io::stdout().lock();
    for (addr, _) in &listeners {
        writeln!(stdout, "rustgt: listening on {addr}")?;
    }
    for t in &cfg.targets {
        if let Some(p) = t.portals.first().and_then(|p| bound.get(p)) {
            let lun = t.luns.first().map(|l| l.id).unwrap_or(0);
            writeln!(stdout, "rustgt: iscsi://{p}/{}/{lun}", t.iqn)?;
            writeln!(
                stdout,
                "rustgt: iscsiadm -m discovery -t st -p {p} && iscsiadm -m node -T {} -p {p} --login",
                t.iqn
            )?;
        }
    }
    stdout.flush()?;
    drop(stdout);

    for (addr, l) in listeners {
        tracing::info!(%addr, "portal up");
        tokio::spawn(server.clone().serve(l));
    }

    wait_for_signal().await?;
    tracing::info!("shutting down: asking initiators to log out");
    server.shutdown(SHUTDOWN_GRACE).await;
    tracing::info!("shutdown complete");
    Ok(())
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
    Ok(())
}

fn build_target(
    cfg: &Config,
    t: &TargetSettings,
    registry: &Arc<LunRegistry>,
) -> Result<Arc<ScsiTarget>> {
    let scsi = ScsiTarget::with_registry(&t.iqn, registry.clone());
    for l in &t.luns {
        let spec = lun_store_spec(cfg, l)?;
        let store = rustgt_backstore::build(&spec)
            .with_context(|| format!("target {} LUN {}: opening backstore", t.iqn, l.id))?;
        let mut lc = LunConfig::new(store);
        lc.workers = l.effective_workers(&cfg.iscsi).max(1);
        lc.write_cache = l.write_cache;
        lc.thin = l.thin;
        lc.removable = l.removable;
        lc.physical_block_size = l.physical_block_size;
        lc.unmap_command = l.unmap_command;
        lc.sanitize_rate = l
            .sanitize_rate
            .as_deref()
            .and_then(rustgt_backstore::parse_size);
        lc.pr_state_path = Some(pr_state_path(cfg, &t.iqn, l));
        let id = stable_id(&t.iqn, l.id);
        lc.serial = l.serial.clone().unwrap_or_else(|| format!("{id:016x}"));
        lc.naa_id = id;
        scsi.add_lun(l.id, lc)
            .with_context(|| format!("target {} LUN {}", t.iqn, l.id))?;
        tracing::info!(target = %t.iqn, lun = l.id, backstore = %l.backstore, "LUN ready");
    }
    Ok(scsi)
}

/// Everything that makes one LUN's store: engine, hddsim placement and the
/// LUN's I/O context (readahead policy, mode, cache bound).
fn lun_store_spec(cfg: &Config, l: &LunSettings) -> Result<LunStoreSpec> {
    // The config was validated at load: names and sizes parse.
    let kind: EngineKind = l
        .backstore
        .parse()
        .map_err(|_| anyhow::anyhow!("unknown backstore {:?}", l.backstore))?;
    let size =
        |s: &str| rustgt_backstore::parse_size(s).ok_or_else(|| anyhow::anyhow!("bad size {s:?}"));
    let backstore = BackstoreSpec {
        kind,
        path: l.resolved_path(&cfg.data_dir),
        size: l.size_bytes(),
        block_size: l.block_size,
        read_only: l.read_only,
        thin: l.thin,
    };
    let defaults = HddSimOptions::default();
    let hddsim = HddSimOptions {
        device: l.hddsim_device.clone().unwrap_or(defaults.device),
        offset: match &l.hddsim_offset {
            Some(o) => size(o)?,
            None => defaults.offset,
        },
        array: ArrayParams {
            disks: l.hddsim_disks.unwrap_or(defaults.array.disks),
            ..defaults.array
        },
        time_scale: l
            .hddsim_speedup
            .map_or(defaults.time_scale, |x| 1.0 / f64::from(x.max(1))),
    };
    let io_context = IoContextOptions {
        policy: l
            .readahead
            .parse()
            .map_err(|_| anyhow::anyhow!("readahead {:?}", l.readahead))?,
        mode: l
            .io_context
            .parse()
            .map_err(|_| anyhow::anyhow!("io_context {:?}", l.io_context))?,
        cache_bytes: size(&l.readahead_cache)?,
        max_readahead: size(&l.readahead_max)?,
        ..IoContextOptions::default()
    };
    Ok(LunStoreSpec {
        backstore,
        hddsim,
        io_context: Some(io_context),
    })
}

/// Where a LUN's persistent reservations live (SPC-4 APTPL).
fn pr_state_path(cfg: &Config, iqn: &str, l: &LunSettings) -> PathBuf {
    match &l.pr_state {
        Some(p) => cfg.data_dir.join(p),
        None => cfg.data_dir.join("pr").join(format!("{iqn}-{}.toml", l.id)),
    }
}

/// A stable 64-bit id for serial numbers and NAA designators: FNV-1a of
/// the target name and LUN, so they survive restarts.
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

fn digests(names: &[String]) -> Vec<Digest> {
    names.iter().filter_map(|n| Digest::from_name(n)).collect()
}

fn limits(s: &IscsiSettings) -> Limits {
    Limits {
        max_recv_data_segment_length: s.max_recv_data_segment_length,
        max_burst_length: s.max_burst_length,
        first_burst_length: s.first_burst_length,
        initial_r2t: s.initial_r2t,
        immediate_data: s.immediate_data,
        max_outstanding_r2t: s.max_outstanding_r2t,
        header_digest: digests(&s.header_digest),
        data_digest: digests(&s.data_digest),
        default_time2wait: s.default_time2wait,
        default_time2retain: s.default_time2retain,
        ..Limits::default()
    }
}

fn portal_config(
    cfg: &Config,
    bound: &std::collections::HashMap<SocketAddr, SocketAddr>,
) -> PortalConfig {
    let targets = cfg
        .targets
        .iter()
        .map(|t| TargetInfo {
            name: t.iqn.clone(),
            alias: t.alias.clone(),
            tpgt: t.tpgt,
            portals: t
                .portals
                .iter()
                .map(|p| bound.get(p).unwrap_or(p).to_string())
                .collect(),
            acl: t.acl.clone(),
            chap: chap_policy(t.chap.as_ref()),
        })
        .collect();
    let nop = cfg.iscsi.nop_in_interval_secs;
    PortalConfig {
        targets,
        discovery_chap: chap_policy(cfg.discovery.chap.as_ref()),
        limits: limits(&cfg.iscsi),
        queue_depth: cfg.iscsi.queue_depth.max(1),
        nop_interval: (nop > 0).then(|| Duration::from_secs(nop)),
        nop_timeout: Duration::from_secs(cfg.iscsi.nop_in_timeout_secs.max(1)),
        ..PortalConfig::default()
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
