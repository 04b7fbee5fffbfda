//! Daemon configuration: a TOML file (see `etc/rustgt.toml`) merged with
//! `RUSTGT_*` environment variables and command-line overrides.
//!
//! Layer: daemon only. Nothing here touches a socket; the only filesystem
//! access is reading the config file, checking whether a `file` LUN's
//! backing file already exists (to know whether `size` is required), and
//! looking `admin_socket_group` up in the group database.
//!
//! Guarantees:
//! - a misspelt key is an error (`deny_unknown_fields` everywhere);
//! - a [`Config`] returned by [`load`] has passed every semantic check below,
//!   so the daemon can build targets from it without re-validating;
//! - every error names the key path (`targets[0].luns[1].block_size`) and
//!   where the value came from: the file, the environment variable
//!   (`RUSTGT_ISCSI__QUEUE_DEPTH`) or the command-line option;
//! - CHAP secrets never appear in `Debug` output.
//!
//! Precedence, lowest first: built-in defaults, the file, the environment
//! (`RUSTGT_` prefix, `__` between nested keys; only `data_dir`,
//! `admin_socket`, `admin_socket_group`, `metrics_listen`, `iscsi.*` and `discovery.*` — arrays of
//! targets are file-only), then [`Overrides`].

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use rustgt_backstore::{ContextMode, DeviceSlice, EngineKind, ReadaheadChoice};
use serde::{Deserialize, Serialize};

/// Name of the target served when no config file is given.
pub const DEFAULT_TARGET_IQN: &str = "iqn.2026-11.org.rustgt:default";
/// Data directory when neither the file, the environment nor `--data-dir` set one.
pub const DEFAULT_DATA_DIR: &str = "./rustgt-data";
/// Prefix of environment overrides; nested keys are joined with `__`.
pub const ENV_PREFIX: &str = "RUSTGT_";

/// RFC 7143 §4.2.7.1: an iSCSI name is at most 223 bytes.
pub const MAX_ISCSI_NAME_LEN: usize = 223;
/// SAM-5 flat/peripheral LUN addressing used here: LUN ids 0..=16383.
pub const MAX_LUN_ID: u64 = 16383;
/// RFC 7143 §9.2.1: a CHAP secret of fewer than 96 bits needs IPsec, which
/// rustgt does not provide, so shorter secrets are refused.
pub const MIN_CHAP_SECRET_LEN: usize = 12;
/// Longest Unix socket path (`sun_path` less its NUL).
pub const MAX_SOCKET_PATH: usize = 107;
/// Longest CHAP name or secret accepted (a text-key value, RFC 7143 §6.1).
pub const MAX_CHAP_FIELD_LEN: usize = 255;

// ---------------------------------------------------------------------------
// Settings types
// ---------------------------------------------------------------------------

/// The whole daemon configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory for backing files given by relative paths (created at start).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Session defaults offered in login negotiation, shared by all targets.
    #[serde(default)]
    pub iscsi: IscsiSettings,
    /// Settings of discovery (SendTargets) sessions.
    #[serde(default)]
    pub discovery: DiscoverySettings,
    /// Served targets. Empty in a file means none; no file means the default target.
    #[serde(default)]
    pub targets: Vec<TargetSettings>,
    /// Admin socket (mode 0600); relative = under data_dir. Default
    /// `<data_dir>/admin.sock`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_socket: Option<PathBuf>,
    /// Group whose members may use the admin socket besides root and the
    /// daemon's own uid; the socket is then mode 0660 and owned by it.
    /// Looked up in the group database when the configuration is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_socket_group: Option<AdminGroup>,
    /// ADDR:PORT serving Prometheus metrics on `GET /metrics`; none by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<SocketAddr>,
    /// The threads that serve connections (read at start only).
    #[serde(default)]
    pub reactor: ReactorSettings,
    /// Caps on what peers can make the daemon hold: connections, logins
    /// in progress, sessions per initiator.
    #[serde(default)]
    pub limits: LimitSettings,
}

/// `admin_socket_group`: a group name, resolved to its gid once, when the
/// configuration is read (an unknown group is an error naming the key).
/// Written back as the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminGroup {
    pub name: String,
    pub gid: u32,
}

impl Serialize for AdminGroup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for AdminGroup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let name = String::deserialize(d)?;
        if name.is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        match crate::admin::peer::lookup_group(&name) {
            Ok(Some(gid)) => Ok(AdminGroup { name, gid }),
            Ok(None) => Err(D::Error::custom(format!(
                "no group {name:?} in the group database"
            ))),
            Err(e) => Err(D::Error::custom(format!("looking up group {name:?}: {e}"))),
        }
    }
}

/// Caps on connections and sessions and the login timeout: what bounds the
/// memory and descriptors peers can make the daemon hold before they have
/// logged in (docs/ARCHITECTURE.md, "Memory bounds"). All of them apply
/// live; connections already open are never closed by a lower cap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitSettings {
    /// Seconds from accept to full feature phase; a connection still
    /// logging in then (silent, or stopped halfway through a PDU) is
    /// closed. 1..=3600.
    pub login_timeout_secs: u64,
    /// Connections open at once over every portal and transport,
    /// 1..=1048576; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Connections open at once from one source address,
    /// 1..=max_connections.
    pub max_connections_per_address: usize,
    /// Connections open at once that have not reached full feature phase,
    /// 1..=max_connections.
    pub max_login_connections: usize,
    /// Normal sessions one initiator name may hold at once (all ISIDs and
    /// targets together), 1..=65535; the login of one more fails with
    /// Out of Resources.
    pub max_sessions_per_initiator: usize,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            login_timeout_secs: 15,
            max_connections: 4096,
            max_connections_per_address: 256,
            max_login_connections: 256,
            max_sessions_per_initiator: 64,
        }
    }
}

/// The data path's threads: reactors that own the connections and run
/// commands to completion where the LUN allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReactorSettings {
    /// Reactor threads serving TCP connections; 0 = one per core, 0..=256.
    pub threads: usize,
    /// Run a command on its connection's reactor when its LUN can complete
    /// it without blocking (memory and null stores, page-cache hits of
    /// buffered files). `false` sends every command to the LUN's workers.
    pub run_to_completion: bool,
    /// What a reactor does with a command on a file or block-device LUN
    /// that cannot complete at once (a read missing the page cache, a
    /// write, SYNCHRONIZE CACHE): "auto" submits it to the reactor's own
    /// io_uring when the kernel offers one; "off" sends it to the LUN's
    /// workers.
    pub io_uring: String,
    /// The longest a connection checks its socket without sleeping before
    /// its reactor parks, in microseconds, 0..=1000; 0 never polls. The
    /// window adapts: it grows while waits are shorter than this and
    /// shrinks to nothing on an idle connection.
    pub busy_poll_us: u64,
}

/// `[reactor] busy_poll_us` when not set.
pub const DEFAULT_BUSY_POLL_US: u64 = 200;

impl Default for ReactorSettings {
    fn default() -> Self {
        Self {
            threads: 0,
            run_to_completion: true,
            io_uring: "auto".into(),
            busy_poll_us: DEFAULT_BUSY_POLL_US,
        }
    }
}

impl ReactorSettings {
    /// `io_uring = "auto"` (checked by validation: "auto" or "off").
    pub fn io_uring_enabled(&self) -> bool {
        self.io_uring != "off"
    }
}

/// iSCSI operational parameters (RFC 7143 §13) and per-session limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IscsiSettings {
    /// Commands the target accepts ahead (MaxCmdSN - ExpCmdSN + 1), 1..=65535.
    pub queue_depth: u32,
    /// Seconds of silence before the target sends a NOP-In ping; 0 disables.
    pub nop_in_interval_secs: u64,
    /// Seconds to wait for the NOP-Out answer before dropping the connection.
    pub nop_in_timeout_secs: u64,
    /// MaxRecvDataSegmentLength declared by the target (§13.12), 512..=16777215.
    pub max_recv_data_segment_length: u32,
    /// MaxBurstLength (§13.13), 512..=16777215.
    pub max_burst_length: u32,
    /// FirstBurstLength (§13.14), 512..=16777215 and <= max_burst_length.
    pub first_burst_length: u32,
    /// InitialR2T (§13.10): true forbids unsolicited Data-Out.
    pub initial_r2t: bool,
    /// ImmediateData (§13.11): data allowed in the SCSI Command PDU.
    pub immediate_data: bool,
    /// MaxOutstandingR2T (§13.17), 1..=65535.
    pub max_outstanding_r2t: u32,
    /// HeaderDigest values the target accepts, in preference order (§13.1).
    pub header_digest: Vec<String>,
    /// DataDigest values the target accepts, in preference order (§13.1).
    pub data_digest: Vec<String>,
    /// DefaultTime2Wait seconds (§13.15), 0..=3600.
    pub default_time2wait: u16,
    /// DefaultTime2Retain seconds (§13.16), 0..=3600.
    pub default_time2retain: u16,
    /// Worker threads per LUN unless the LUN sets `workers`, 1..=1024.
    pub workers_per_lun: usize,
}

impl Default for IscsiSettings {
    fn default() -> Self {
        Self {
            queue_depth: 128,
            nop_in_interval_secs: 15,
            nop_in_timeout_secs: 30,
            max_recv_data_segment_length: 262_144,
            max_burst_length: 1_048_576,
            first_burst_length: 262_144,
            initial_r2t: false,
            immediate_data: true,
            max_outstanding_r2t: 16,
            header_digest: vec![DIGEST_NONE.to_owned(), DIGEST_CRC32C.to_owned()],
            data_digest: vec![DIGEST_NONE.to_owned(), DIGEST_CRC32C.to_owned()],
            default_time2wait: 2,
            default_time2retain: 20,
            workers_per_lun: 8,
        }
    }
}

/// The two digest names of RFC 7143 §13.1.
pub const DIGEST_NONE: &str = "None";
pub const DIGEST_CRC32C: &str = "CRC32C";

/// Discovery session settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscoverySettings {
    /// CHAP required for discovery sessions; none means open discovery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chap: Option<ChapSettings>,
}

/// CHAP credentials (RFC 7143 §12.1.3). `user`/`secret` authenticate the
/// initiator; `mutual_*`, when set, are what the target answers with when the
/// initiator asks it to authenticate itself.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChapSettings {
    pub user: String,
    pub secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutual_user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutual_secret: Option<String>,
}

impl fmt::Debug for ChapSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChapSettings")
            .field("user", &self.user)
            .field("secret", &"<redacted>")
            .field("mutual_user", &self.mutual_user)
            .field(
                "mutual_secret",
                &self.mutual_secret.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// One target: a name, where it listens, who may log in, and its LUNs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSettings {
    /// iSCSI name (iqn./eui./naa. form, RFC 7143 §4.2.7).
    pub iqn: String,
    /// TargetAlias sent at login (§13.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Network portals (ADDR:PORT); `--listen` replaces them.
    #[serde(default = "default_portals")]
    pub portals: Vec<SocketAddr>,
    /// iSER portals (RFC 7145): ADDR:PORT of an RDMA-capable interface,
    /// served by a build with `--features iser`. Discovery stays on
    /// `portals`; give an iSER portal the address of a TCP one so that
    /// discovered records can switch to iSER.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub iser_portals: Vec<SocketAddr>,
    /// Target portal group tag reported in SendTargets and at login.
    #[serde(default = "default_tpgt")]
    pub tpgt: u16,
    /// Gateways: the `tpgt` of every rustgt daemon that serves this target
    /// (same name, same LUNs, on the same RBD images), this one's
    /// included. Each is a target port group of its own in REPORT TARGET
    /// PORT GROUPS; with more than one, the target's LUNs (all rbd) keep
    /// their shared SCSI state in Ceph. Empty: this daemon alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_groups: Vec<u16>,
    /// Initiator names allowed to log in; empty allows any initiator.
    #[serde(default)]
    pub acl: Vec<String>,
    /// CHAP required for normal sessions to this target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chap: Option<ChapSettings>,
    /// Logical units.
    #[serde(default)]
    pub luns: Vec<LunSettings>,
}

/// One logical unit and its backing store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LunSettings {
    /// LUN number, 0..=16383.
    pub id: u64,
    /// Engine: "file", "mmap", "blockdev", "ram", "null", "hddsim" or
    /// "rbd".
    pub backstore: String,
    /// Backing file or device (file/mmap/blockdev only); relative = under data_dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Capacity such as "1G" or "512M" (binary units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Logical block size: 512 or 4096.
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// Refuse writes (write-protected LUN).
    #[serde(default)]
    pub read_only: bool,
    /// Thin provisioning: sparse backing, deallocation on UNMAP / WRITE SAME.
    #[serde(default = "default_true")]
    pub thin: bool,
    /// Volatile write cache reported (WCE); writes reach disk at SYNCHRONIZE CACHE/FUA.
    #[serde(default = "default_true")]
    pub write_cache: bool,
    /// Worker threads of this LUN; default `iscsi.workers_per_lun`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Unit serial number (VPD page 0x80); default derived by the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Removable medium: START STOP UNIT with LOEJ ejects and loads it.
    #[serde(default)]
    pub removable: bool,
    /// File keeping persistent reservations for APTPL; relative = under
    /// data_dir. Default: `pr/<target iqn>-<lun id>.toml` under data_dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr_state: Option<PathBuf>,
    /// Physical block size reported in READ CAPACITY(16) (and the unmap
    /// and atomic granularities derived from it): a power-of-two multiple
    /// of block_size. Default: equal to block_size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_block_size: Option<u32>,
    /// On a thin LUN, whether the UNMAP command is offered (LBPU); when
    /// false, deallocation is by WRITE SAME with UNMAP only. Default true.
    #[serde(default = "default_true")]
    pub unmap_command: bool,
    /// Pace of SANITIZE in bytes per second, e.g. "128M"; default: full speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sanitize_rate: Option<String>,
    /// Readahead policy of the LUN's I/O context: "auto" (the default:
    /// "streams" where the backing seeks, hddsim or a rotational disk under
    /// a file or block device; "kernel" elsewhere), "none", "kernel" (leave
    /// it to Linux's page cache), "classic", "context" or "streams".
    #[serde(default = "default_readahead")]
    pub readahead: String,
    /// "shared": all workers of the LUN share one I/O context (one stream
    /// table, one cache); "per-worker": each has its own (the pre-fix
    /// behaviour, for comparison).
    #[serde(default = "default_io_context")]
    pub io_context: String,
    /// Memory bound of the LUN's readahead cache, e.g. "64M".
    #[serde(default = "default_readahead_cache")]
    pub readahead_cache: String,
    /// Largest readahead window, e.g. "4M".
    #[serde(default = "default_readahead_max")]
    pub readahead_max: String,
    /// Threads issuing the context's backing reads (its I/O depth),
    /// 1..=256; default 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readahead_io_threads: Option<u32>,
    /// Largest backing read after coalescing, e.g. "1M" (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readahead_io_max: Option<String>,
    /// Turns at a device shared with other LUNs' I/O contexts: "auto"
    /// (the default: on a seeking device, four positioning times of
    /// transfer per turn), "off", or a size per turn such as "16M".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_slice: Option<String>,
    /// hddsim: name of the simulated device; LUNs naming the same device
    /// share its disks (default "md0").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_device: Option<String>,
    /// hddsim: byte offset of the LUN on the device, e.g. "90G".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_offset: Option<String>,
    /// hddsim: disks in the device's RAID-0 (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_disks: Option<u32>,
    /// hddsim: run the simulated disk this many times faster than real
    /// time (default 1: real time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_speedup: Option<u32>,
    /// `[targets.luns.fault]`: injected faults (see [`FaultSettings`]).
    /// Present, even empty, the LUN's store can take faults live (admin
    /// `lun fault`); absent, its I/O goes straight to the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Box<FaultSettings>>,
    /// `[targets.luns.rbd]`: the Ceph RBD image of an `rbd` LUN (see
    /// [`RbdSettings`]); required there, refused elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbd: Option<Box<RbdSettings>>,
}

/// Where an `rbd` LUN's image lives and how to reach its cluster. The
/// image must exist (`rbd create`); its size is the LUN's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RbdSettings {
    /// RADOS pool, e.g. "rbd".
    pub pool: String,
    /// Image name.
    pub image: String,
    /// RADOS namespace inside the pool; default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// ceph.conf to read; default: librados' own search ($CEPH_CONF,
    /// /etc/ceph/ceph.conf). CEPH_ARGS is honoured as by the ceph tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceph_conf: Option<PathBuf>,
    /// Cephx client id without "client.", default "admin".
    #[serde(default = "default_rbd_client")]
    pub client_id: String,
    /// Keyring file; default: the one ceph.conf names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<PathBuf>,
    /// Timeout of the connection and of each OSD or monitor operation, in
    /// seconds (1..=3600, default 30): past it the command fails instead of
    /// waiting on a lost cluster.
    #[serde(default = "default_rbd_timeout")]
    pub op_timeout_secs: u64,
}

fn default_rbd_client() -> String {
    "admin".into()
}

fn default_rbd_timeout() -> u64 {
    30
}

impl RbdSettings {
    /// The engine's options; block size and read-only come from the LUN.
    pub fn options(&self) -> rustgt_backstore::RbdOptions {
        rustgt_backstore::RbdOptions {
            pool: self.pool.clone(),
            image: self.image.clone(),
            namespace: self.namespace.clone(),
            ceph_conf: self.ceph_conf.clone(),
            client_id: self.client_id.clone(),
            keyring: self.keyring.clone(),
            op_timeout: std::time::Duration::from_secs(self.op_timeout_secs),
            ..rustgt_backstore::RbdOptions::new(&self.pool, &self.image)
        }
    }
}

fn default_readahead() -> String {
    "auto".into()
}

fn default_io_context() -> String {
    "shared".into()
}

fn default_readahead_cache() -> String {
    "64M".into()
}

fn default_readahead_max() -> String {
    "4M".into()
}

impl LunSettings {
    /// The engine, `None` only if `backstore` is unknown (never after [`load`]).
    pub fn kind(&self) -> Option<EngineKind> {
        self.backstore.parse().ok()
    }

    /// The backing path with a relative path placed under `data_dir`.
    pub fn resolved_path(&self, data_dir: &Path) -> Option<PathBuf> {
        self.path.as_ref().map(|p| data_dir.join(p))
    }

    /// The size in bytes, `None` when unset (or unparsable, never after [`load`]).
    pub fn size_bytes(&self) -> Option<u64> {
        self.size.as_deref().and_then(parse_size)
    }

    /// Worker threads for this LUN.
    pub fn effective_workers(&self, iscsi: &IscsiSettings) -> usize {
        self.workers.unwrap_or(iscsi.workers_per_lun)
    }
}

// ---------------------------------------------------------------------------
// Fault injection (`[targets.luns.fault]`)
// ---------------------------------------------------------------------------

/// Faults injected into one LUN's reads and writes, for tests and failure
/// rehearsals (`rustgt_backstore::fault`). Each key is a fault; its table
/// says when it fires ([`TriggerSettings`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSettings {
    /// Reads fail: MEDIUM ERROR, UNRECOVERED READ ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_error: Option<TriggerSettings>,
    /// Writes fail: MEDIUM ERROR, WRITE ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_error: Option<TriggerSettings>,
    /// Writes find no space (ENOSPC): DATA PROTECT, SPACE ALLOCATION
    /// FAILED WRITE PROTECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_nospace: Option<TriggerSettings>,
    /// Reads and writes wait `time` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelaySettings>,
    /// Reads and writes never complete, until the task is aborted (ABORT
    /// TASK, LOGICAL UNIT RESET, session loss) or the fault is cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<TriggerSettings>,
}

// `probability` is a float; NaN is refused when the config is checked,
// so equality is an equivalence on every config that loads.
impl Eq for FaultSettings {}

/// When a fault fires: every key given must hold; none fires always.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSettings {
    /// The I/O touches these logical blocks: "100", "100-199" (inclusive)
    /// or "100-" (to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lba: Option<String>,
    /// Every Nth I/O (among those `lba` lets through), N >= 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// With this probability, 0.0..=1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
}

/// A delay: `time` ("5ms", "2s", "100us"; at most 60 s) and when.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelaySettings {
    pub time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lba: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
}

/// A problem in a fault table: the fault's key, the key inside it, what.
pub type FaultProblem = (&'static str, &'static str, String);

fn trigger_of(
    fault: &'static str,
    lba: Option<&String>,
    every: Option<u64>,
    probability: Option<f64>,
) -> Result<rustgt_backstore::fault::Trigger, FaultProblem> {
    let t = rustgt_backstore::fault::Trigger {
        lba: lba
            .map(|r| r.parse())
            .transpose()
            .map_err(|msg| (fault, "lba", msg))?,
        every,
        probability,
    };
    t.validate().map_err(|(k, msg)| (fault, k, msg))?;
    Ok(t)
}

impl TriggerSettings {
    fn trigger(
        &self,
        fault: &'static str,
    ) -> Result<rustgt_backstore::fault::Trigger, FaultProblem> {
        trigger_of(fault, self.lba.as_ref(), self.every, self.probability)
    }
}

impl FaultSettings {
    /// The typed faults, or the first problem (checked at load, so a
    /// loaded config always converts).
    pub fn spec(&self) -> Result<rustgt_backstore::FaultSpec, FaultProblem> {
        use rustgt_backstore::fault::{parse_duration, Delay, MAX_DELAY};
        let delay = match &self.delay {
            None => None,
            Some(d) => {
                let time = parse_duration(&d.time)
                    .ok_or_else(|| {
                        (
                            "delay",
                            "time",
                            format!("{:?} is not a duration such as \"5ms\"", d.time),
                        )
                    })
                    .and_then(|t| {
                        if t > MAX_DELAY {
                            Err(("delay", "time", format!("{:?} is longer than 60s", d.time)))
                        } else {
                            Ok(t)
                        }
                    })?;
                let when = trigger_of("delay", d.lba.as_ref(), d.every, d.probability)?;
                Some(Delay { time, when })
            }
        };
        Ok(rustgt_backstore::FaultSpec {
            read_error: self
                .read_error
                .as_ref()
                .map(|t| t.trigger("read_error"))
                .transpose()?,
            write_error: self
                .write_error
                .as_ref()
                .map(|t| t.trigger("write_error"))
                .transpose()?,
            write_nospace: self
                .write_nospace
                .as_ref()
                .map(|t| t.trigger("write_nospace"))
                .transpose()?,
            delay,
            hang: self.hang.as_ref().map(|t| t.trigger("hang")).transpose()?,
        })
    }
}

/// Command-line values that beat the file and the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Replaces the portal list of every target.
    pub listen: Option<SocketAddr>,
    /// Replaces `data_dir`.
    pub data_dir: Option<PathBuf>,
    /// Replaces `admin_socket`.
    pub admin_socket: Option<PathBuf>,
}

fn default_data_dir() -> PathBuf {
    PathBuf::from(DEFAULT_DATA_DIR)
}

fn default_portals() -> Vec<SocketAddr> {
    vec![SocketAddr::from(([127, 0, 0, 1], 3260))]
}

fn default_tpgt() -> u16 {
    1
}

fn default_block_size() -> u32 {
    512
}

fn default_true() -> bool {
    true
}

fn parse_size(s: &str) -> Option<u64> {
    rustgt_backstore::parse_size(s)
}

impl Config {
    /// The target served when no config file is given: LUN 0 is a 1 GiB
    /// sparse file `lun0.img` under the data directory.
    pub fn default_target() -> TargetSettings {
        TargetSettings {
            iqn: DEFAULT_TARGET_IQN.to_owned(),
            alias: None,
            portals: default_portals(),
            iser_portals: Vec::new(),
            tpgt: default_tpgt(),
            port_groups: Vec::new(),
            acl: Vec::new(),
            chap: None,
            luns: vec![LunSettings {
                id: 0,
                backstore: EngineKind::File.as_str().to_owned(),
                path: Some(PathBuf::from("lun0.img")),
                size: Some("1G".to_owned()),
                block_size: default_block_size(),
                read_only: false,
                thin: true,
                write_cache: true,
                workers: None,
                serial: None,
                removable: false,
                pr_state: None,
                physical_block_size: None,
                unmap_command: true,
                sanitize_rate: None,
                // The quick-start LUN is a sparse file in the data dir:
                // the kernel's readahead keeps it on the reactor's and
                // io_uring's data path on any disk.
                readahead: "kernel".to_owned(),
                io_context: default_io_context(),
                readahead_cache: default_readahead_cache(),
                readahead_max: default_readahead_max(),
                hddsim_device: None,
                hddsim_offset: None,
                hddsim_disks: None,
                hddsim_speedup: None,
                readahead_io_threads: None,
                readahead_io_max: None,
                device_slice: None,
                fault: None,
                rbd: None,
            }],
        }
    }

    /// Where the admin socket is: `admin_socket` (relative to `data_dir`)
    /// or `<data_dir>/admin.sock`.
    pub fn admin_socket_path(&self) -> PathBuf {
        let name = self
            .admin_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(crate::admin::DEFAULT_SOCKET_NAME));
        self.data_dir.join(name)
    }

    /// The configuration as TOML, loadable again with [`load`]. Secrets are
    /// included: the output is for a root-only config file.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string_pretty(self)?)
    }
}

impl Default for Config {
    /// What [`load`] returns with no file, no environment and no overrides.
    fn default() -> Self {
        Self {
            data_dir: default_data_dir(),
            iscsi: IscsiSettings::default(),
            discovery: DiscoverySettings::default(),
            targets: vec![Self::default_target()],
            admin_socket: None,
            admin_socket_group: None,
            metrics_listen: None,
            reactor: ReactorSettings::default(),
            limits: LimitSettings::default(),
        }
    }
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the value came from: a file path, an environment variable, a
    /// command-line option or "built-in defaults".
    pub origin: String,
    /// Key path such as `targets[0].luns[1].block_size`; empty for a whole-file error.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(f, "{}: {}: {}", self.origin, self.key, self.message)
        }
    }
}

/// Errors of configuration loading.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", ProblemList(.0))]
    Invalid(Vec<Problem>),
    #[error("cannot write the configuration as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
}

impl ConfigError {
    /// The individual problems (empty for read/serialize errors).
    #[allow(dead_code)] // API for callers that report problems one by one
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid(p) => p,
            _ => &[],
        }
    }
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "invalid configuration: {one}"),
            many => {
                write!(f, "invalid configuration ({} problems):", many.len())?;
                for p in many {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

/// Loads, merges and validates the configuration. With `file == None` the
/// default target is served (environment and overrides still apply).
pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
    match file {
        Some(path) => {
            let contents = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            load_text(path, contents, overrides)
        }
        None => load_figment(Figment::new(), None, overrides),
    }
}

/// Like [`load`] with the file's `contents` already read; errors name
/// `path` (the admin `config apply` sends a file's text).
pub fn load_text(
    path: &Path,
    contents: String,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    let figment = Figment::new().merge(TomlFile {
        path: path.to_owned(),
        contents,
    });
    load_figment(figment, Some(path), overrides)
}

/// Validates a configuration built in memory (an admin change); problems
/// are attributed to `origin`.
pub fn check(config: &Config, origin: &str) -> Result<(), ConfigError> {
    let problems = validate(config);
    if problems.is_empty() {
        return Ok(());
    }
    Err(ConfigError::Invalid(
        problems
            .into_iter()
            .map(|(key, message)| Problem {
                origin: origin.to_owned(),
                key: key.to_string(),
                message,
            })
            .collect(),
    ))
}

/// Where the admin socket of the daemon that `file`, the environment and
/// `overrides` describe is, for `rustgt admin`. Lenient: only `data_dir`
/// and `admin_socket` are read, so a config with other mistakes still
/// leads to its daemon.
pub fn admin_socket_of(file: Option<&Path>, overrides: &Overrides) -> Result<PathBuf, ConfigError> {
    #[derive(Deserialize)]
    struct Just {
        #[serde(default = "default_data_dir")]
        data_dir: PathBuf,
        #[serde(default)]
        admin_socket: Option<PathBuf>,
    }
    let mut figment = Figment::new();
    if let Some(path) = file {
        let contents = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        figment = figment.merge(TomlFile {
            path: path.to_owned(),
            contents,
        });
    }
    figment = figment.merge(env_provider());
    let origins = Origins::new(&figment, file, overrides);
    let just: Just = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(origins.problems_from_figment(e)))?;
    let cfg = Config {
        data_dir: overrides.data_dir.clone().unwrap_or(just.data_dir),
        admin_socket: overrides.admin_socket.clone().or(just.admin_socket),
        ..Config::default()
    };
    Ok(cfg.admin_socket_path())
}

fn load_figment(
    mut figment: Figment,
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    figment = figment.merge(env_provider());

    let origins = Origins::new(&figment, file, overrides);
    let mut config: Config = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(origins.problems_from_figment(e)))?;

    if file.is_none() {
        config.targets = vec![Config::default_target()];
    }
    if let Some(dir) = &overrides.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(sock) = &overrides.admin_socket {
        config.admin_socket = Some(sock.clone());
    }
    if let Some(listen) = overrides.listen {
        for target in &mut config.targets {
            target.portals = vec![listen];
        }
    }

    let problems = validate(&config);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid(
            problems
                .into_iter()
                .map(|(key, message)| Problem {
                    origin: origins.of(&key),
                    key: key.to_string(),
                    message,
                })
                .collect(),
        ))
    }
}

/// `RUSTGT_*` variables for the keys the environment may set.
fn env_provider() -> Env {
    Env::prefixed(ENV_PREFIX)
        .filter(|k| {
            let k = k.as_str().to_ascii_lowercase();
            k == "data_dir"
                || k == "admin_socket"
                || k == "admin_socket_group"
                || k == "metrics_listen"
                || k.starts_with("iscsi__")
                || k.starts_with("discovery__")
                || k.starts_with("reactor__")
                || k.starts_with("limits__")
        })
        .split("__")
}

/// The config file, parsed by figment's TOML provider but carrying the real
/// file path in its metadata (so errors can name it) without reading it twice.
struct TomlFile {
    path: PathBuf,
    contents: String,
}

impl Provider for TomlFile {
    fn metadata(&self) -> Metadata {
        Metadata::from("TOML file", Source::File(self.path.clone()))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.contents).data()
    }
}

/// Works out where a key's value came from.
struct Origins<'a> {
    figment: &'a Figment,
    merged: Option<Value>,
    file: Option<&'a Path>,
    overrides: &'a Overrides,
}

impl<'a> Origins<'a> {
    fn new(figment: &'a Figment, file: Option<&'a Path>, overrides: &'a Overrides) -> Self {
        Self {
            figment,
            merged: figment.find_value("").ok(),
            file,
            overrides,
        }
    }

    fn fallback(&self) -> String {
        match self.file {
            Some(path) => path.display().to_string(),
            None => "built-in defaults".to_owned(),
        }
    }

    /// Origin of a validated key of the final config.
    fn of(&self, key: &KeyPath) -> String {
        if let Some(opt) = self.override_option(key) {
            return opt.to_owned();
        }
        let Some(root) = &self.merged else {
            return self.fallback();
        };
        // The deepest value that exists on the path tells the provider.
        let mut value = root;
        let mut exact = true;
        for seg in &key.0 {
            let next = match (seg, value) {
                (Seg::Key(k), Value::Dict(_, d)) => d.get(*k),
                (Seg::Index(i), Value::Array(_, a)) => a.get(*i),
                _ => None,
            };
            match next {
                Some(v) => value = v,
                None => {
                    exact = false;
                    break;
                }
            }
        }
        match self.figment.get_metadata(value.tag()) {
            Some(md) if is_env(md) => {
                if exact {
                    env_var_name(key.0.iter().map(Seg::to_string))
                } else {
                    self.fallback()
                }
            }
            Some(md) => describe_source(md).unwrap_or_else(|| self.fallback()),
            None => self.fallback(),
        }
    }

    fn override_option(&self, key: &KeyPath) -> Option<&'static str> {
        match key.0.as_slice() {
            [Seg::Key("data_dir")] if self.overrides.data_dir.is_some() => Some("--data-dir"),
            [Seg::Key("admin_socket")] if self.overrides.admin_socket.is_some() => {
                Some("--admin-socket")
            }
            [Seg::Key("targets"), Seg::Index(_), Seg::Key("portals"), ..]
                if self.overrides.listen.is_some() =>
            {
                Some("--listen")
            }
            _ => None,
        }
    }

    /// Problems from figment's extraction (syntax, types, unknown keys).
    fn problems_from_figment(&self, err: figment::Error) -> Vec<Problem> {
        err.into_iter()
            .map(|e| {
                let mut path = e.path.clone();
                if let figment::error::Kind::UnknownField(field, _) = &e.kind {
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                }
                let origin = match &e.metadata {
                    Some(md) if is_env(md) && !path.is_empty() => {
                        env_var_name(path.iter().cloned())
                    }
                    Some(md) => describe_source(md).unwrap_or_else(|| self.fallback()),
                    None => self.fallback(),
                };
                Problem {
                    origin,
                    key: display_figment_path(&path),
                    message: describe_kind(&e.kind),
                }
            })
            .collect()
    }
}

/// figment's own wording, except for unknown keys where it quotes oddly.
fn describe_kind(kind: &figment::error::Kind) -> String {
    match kind {
        figment::error::Kind::UnknownField(_, expected) => {
            format!("unknown field; expected one of: {}", expected.join(", "))
        }
        other => other.to_string(),
    }
}

fn is_env(md: &Metadata) -> bool {
    md.name.contains("environment")
}

fn describe_source(md: &Metadata) -> Option<String> {
    match &md.source {
        Some(Source::File(path)) => Some(path.display().to_string()),
        _ => None,
    }
}

fn env_var_name(segments: impl Iterator<Item = String>) -> String {
    let parts: Vec<String> = segments.map(|s| s.to_ascii_uppercase()).collect();
    format!("{ENV_PREFIX}{}", parts.join("__"))
}

/// `["targets","0","iqn"]` -> `targets[0].iqn`.
fn display_figment_path(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(seg);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    Key(&'static str),
    Index(usize),
}

impl fmt::Display for Seg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seg::Key(k) => f.write_str(k),
            Seg::Index(i) => write!(f, "{i}"),
        }
    }
}

/// A key path into the config, displayed as `targets[0].luns[1].block_size`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KeyPath(Vec<Seg>);

impl KeyPath {
    fn key(&self, k: &'static str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k));
        p
    }

    fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if n == 0 => f.write_str(k)?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
        }
        Ok(())
    }
}

/// Collects (key, message) pairs.
#[derive(Default)]
struct Checker {
    problems: Vec<(KeyPath, String)>,
}

impl Checker {
    fn fail(&mut self, key: KeyPath, message: impl Into<String>) {
        self.problems.push((key, message.into()));
    }

    fn range<T>(&mut self, key: KeyPath, value: T, min: T, max: T)
    where
        T: PartialOrd + fmt::Display + Copy,
    {
        if value < min || value > max {
            self.fail(key, format!("{value} is out of range {min}..={max}"));
        }
    }
}

fn validate(config: &Config) -> Vec<(KeyPath, String)> {
    let mut c = Checker::default();
    let root = KeyPath::default();
    if config.data_dir.as_os_str().is_empty() {
        c.fail(root.key("data_dir"), "must not be empty");
    }
    if let Some(sock) = &config.admin_socket {
        // sun_path holds 108 bytes including the terminating NUL.
        let len = config.admin_socket_path().as_os_str().len();
        if sock.as_os_str().is_empty() {
            c.fail(root.key("admin_socket"), "must not be empty");
        } else if len > MAX_SOCKET_PATH {
            c.fail(
                root.key("admin_socket"),
                format!(
                    "the path is {len} bytes; a Unix socket path holds at most {MAX_SOCKET_PATH}"
                ),
            );
        }
    }
    check_iscsi(&mut c, &root.key("iscsi"), &config.iscsi);
    check_limits(&mut c, &root.key("limits"), &config.limits);
    c.range(
        root.key("reactor").key("threads"),
        config.reactor.threads,
        0,
        256,
    );
    c.range(
        root.key("reactor").key("busy_poll_us"),
        config.reactor.busy_poll_us,
        0,
        1000,
    );
    if !matches!(config.reactor.io_uring.as_str(), "auto" | "off") {
        c.fail(
            root.key("reactor").key("io_uring"),
            format!(
                "unknown value {:?}: expected \"auto\" or \"off\"",
                config.reactor.io_uring
            ),
        );
    }
    if let Some(chap) = &config.discovery.chap {
        check_chap(&mut c, &root.key("discovery").key("chap"), chap);
    }
    let mut iqns: HashMap<String, usize> = HashMap::new();
    let mut backing: HashMap<PathBuf, KeyPath> = HashMap::new();
    for (i, target) in config.targets.iter().enumerate() {
        let key = root.key("targets").index(i);
        check_target(&mut c, &key, target, &config.data_dir, &mut backing);
        // Names compare case-insensitively (RFC 3722 normalization).
        if let Some(first) = iqns.insert(target.iqn.to_ascii_lowercase(), i) {
            c.fail(
                key.key("iqn"),
                format!("duplicate target name, already used by targets[{first}].iqn"),
            );
        }
    }
    c.problems
}

fn check_iscsi(c: &mut Checker, key: &KeyPath, s: &IscsiSettings) {
    const MAX_24BIT: u32 = (1 << 24) - 1;
    c.range(key.key("queue_depth"), s.queue_depth, 1, 65535);
    if s.nop_in_interval_secs > 0 {
        c.range(
            key.key("nop_in_timeout_secs"),
            s.nop_in_timeout_secs,
            1,
            3600,
        );
    }
    c.range(
        key.key("nop_in_interval_secs"),
        s.nop_in_interval_secs,
        0,
        86400,
    );
    c.range(
        key.key("max_recv_data_segment_length"),
        s.max_recv_data_segment_length,
        512,
        MAX_24BIT,
    );
    c.range(
        key.key("max_burst_length"),
        s.max_burst_length,
        512,
        MAX_24BIT,
    );
    c.range(
        key.key("first_burst_length"),
        s.first_burst_length,
        512,
        MAX_24BIT,
    );
    if s.first_burst_length > s.max_burst_length {
        c.fail(
            key.key("first_burst_length"),
            format!(
                "{} exceeds max_burst_length {} (RFC 7143 §13.14)",
                s.first_burst_length, s.max_burst_length
            ),
        );
    }
    c.range(
        key.key("max_outstanding_r2t"),
        s.max_outstanding_r2t,
        1,
        65535,
    );
    check_digests(c, &key.key("header_digest"), &s.header_digest);
    check_digests(c, &key.key("data_digest"), &s.data_digest);
    c.range(key.key("default_time2wait"), s.default_time2wait, 0, 3600);
    c.range(
        key.key("default_time2retain"),
        s.default_time2retain,
        0,
        3600,
    );
    c.range(key.key("workers_per_lun"), s.workers_per_lun, 1, 1024);
}

/// Most connections `[limits] max_connections` may allow (each TCP
/// connection holds two descriptors).
pub const MAX_CONNECTIONS: usize = 1 << 20;

fn check_limits(c: &mut Checker, key: &KeyPath, s: &LimitSettings) {
    c.range(key.key("login_timeout_secs"), s.login_timeout_secs, 1, 3600);
    c.range(
        key.key("max_connections"),
        s.max_connections,
        1,
        MAX_CONNECTIONS,
    );
    let total = s.max_connections.clamp(1, MAX_CONNECTIONS);
    for (name, value) in [
        ("max_connections_per_address", s.max_connections_per_address),
        ("max_login_connections", s.max_login_connections),
    ] {
        if value == 0 || value > total {
            c.fail(
                key.key(name),
                format!("{value} is out of range 1..=max_connections ({total})"),
            );
        }
    }
    c.range(
        key.key("max_sessions_per_initiator"),
        s.max_sessions_per_initiator,
        1,
        65535,
    );
}

fn check_digests(c: &mut Checker, key: &KeyPath, list: &[String]) {
    if list.is_empty() {
        c.fail(
            key.clone(),
            "must list at least one of \"None\", \"CRC32C\"",
        );
    }
    for (i, d) in list.iter().enumerate() {
        if d != DIGEST_NONE && d != DIGEST_CRC32C {
            c.fail(
                key.index(i),
                format!("unknown digest {d:?}: expected \"None\" or \"CRC32C\""),
            );
        } else if list.get(..i).is_some_and(|before| before.contains(d)) {
            c.fail(key.index(i), format!("{d:?} is listed twice"));
        }
    }
}

fn check_chap(c: &mut Checker, key: &KeyPath, chap: &ChapSettings) {
    check_chap_name(c, key.key("user"), &chap.user);
    check_chap_secret(c, key.key("secret"), &chap.secret);
    match (&chap.mutual_user, &chap.mutual_secret) {
        (Some(user), Some(secret)) => {
            check_chap_name(c, key.key("mutual_user"), user);
            check_chap_secret(c, key.key("mutual_secret"), secret);
            if secret == &chap.secret {
                // RFC 7143 §9.2.1: a secret used to authenticate initiators
                // must not also authenticate the target.
                c.fail(key.key("mutual_secret"), "must differ from secret");
            }
        }
        (Some(_), None) => c.fail(
            key.key("mutual_secret"),
            "is required when mutual_user is set",
        ),
        (None, Some(_)) => c.fail(
            key.key("mutual_user"),
            "is required when mutual_secret is set",
        ),
        (None, None) => {}
    }
}

fn check_chap_name(c: &mut Checker, key: KeyPath, name: &str) {
    if name.is_empty() || name.len() > MAX_CHAP_FIELD_LEN {
        c.fail(key, format!("must be 1..={MAX_CHAP_FIELD_LEN} bytes long"));
    } else if name.chars().any(char::is_control) {
        c.fail(key, "must not contain control characters");
    }
}

/// Never echoes the secret itself.
fn check_chap_secret(c: &mut Checker, key: KeyPath, secret: &str) {
    let len = secret.len();
    if len < MIN_CHAP_SECRET_LEN {
        c.fail(
            key,
            format!(
                "is {len} bytes; CHAP secrets must be at least {MIN_CHAP_SECRET_LEN} bytes \
                 (96 bits, RFC 7143 §9.2.1)"
            ),
        );
    } else if len > MAX_CHAP_FIELD_LEN {
        c.fail(
            key,
            format!("is {len} bytes; at most {MAX_CHAP_FIELD_LEN} are accepted"),
        );
    } else if secret.chars().any(char::is_control) {
        c.fail(key, "must not contain control characters");
    }
}

fn check_target(
    c: &mut Checker,
    key: &KeyPath,
    t: &TargetSettings,
    data_dir: &Path,
    backing: &mut HashMap<PathBuf, KeyPath>,
) {
    if let Err(msg) = validate_iscsi_name(&t.iqn) {
        c.fail(key.key("iqn"), msg);
    }
    if let Some(alias) = &t.alias {
        if alias.is_empty() || alias.len() > 255 {
            c.fail(key.key("alias"), "must be 1..=255 bytes long");
        } else if alias.chars().any(char::is_control) {
            c.fail(key.key("alias"), "must not contain control characters");
        }
    }
    if t.portals.is_empty() {
        c.fail(key.key("portals"), "must list at least one ADDR:PORT");
    }
    for (i, p) in t.portals.iter().enumerate() {
        if t.portals.get(..i).is_some_and(|before| before.contains(p)) {
            c.fail(key.key("portals").index(i), format!("{p} is listed twice"));
        }
    }
    for (i, p) in t.iser_portals.iter().enumerate() {
        let at = key.key("iser_portals").index(i);
        if t.iser_portals.get(..i).is_some_and(|b| b.contains(p)) {
            c.fail(at, format!("{p} is listed twice"));
        } else if p.port() == 0 || p.ip().is_unspecified() {
            c.fail(at, "needs an RDMA interface's address and a port");
        }
    }
    for (i, name) in t.acl.iter().enumerate() {
        if let Err(msg) = validate_iscsi_name(name) {
            c.fail(key.key("acl").index(i), msg);
        } else if t
            .acl
            .get(..i)
            .is_some_and(|before| before.iter().any(|b| b.eq_ignore_ascii_case(name)))
        {
            c.fail(key.key("acl").index(i), format!("{name} is listed twice"));
        }
    }
    if let Some(chap) = &t.chap {
        check_chap(c, &key.key("chap"), chap);
    }
    check_port_groups(c, key, t);
    let mut ids: HashMap<u64, usize> = HashMap::new();
    for (j, lun) in t.luns.iter().enumerate() {
        let lkey = key.key("luns").index(j);
        check_lun(c, &lkey, lun, data_dir, backing);
        if let Some(first) = ids.insert(lun.id, j) {
            c.fail(
                lkey.key("id"),
                format!("LUN {} is already defined by luns[{first}]", lun.id),
            );
        }
    }
}

fn check_lun(
    c: &mut Checker,
    key: &KeyPath,
    lun: &LunSettings,
    data_dir: &Path,
    backing: &mut HashMap<PathBuf, KeyPath>,
) {
    if lun.id > MAX_LUN_ID {
        c.fail(
            key.key("id"),
            format!("{} is out of range 0..={MAX_LUN_ID}", lun.id),
        );
    }
    if lun.block_size != 512 && lun.block_size != 4096 {
        c.fail(
            key.key("block_size"),
            format!("{} is not supported: use 512 or 4096", lun.block_size),
        );
    }
    if let Some(w) = lun.workers {
        c.range(key.key("workers"), w, 1, 1024);
    }
    if let Some(serial) = &lun.serial {
        if serial.is_empty() || serial.len() > 64 || !serial.bytes().all(|b| b.is_ascii_graphic()) {
            c.fail(
                key.key("serial"),
                "must be 1..=64 printable ASCII characters without spaces (SPC-4 §7.8.16)",
            );
        }
    }
    let size = check_size(c, &key.key("size"), lun);
    if lun.readahead.parse::<ReadaheadChoice>().is_err() {
        c.fail(
            key.key("readahead"),
            format!(
                "unknown policy {:?}: expected \"auto\", \"none\", \"kernel\", \"classic\", \"context\" or \"streams\"",
                lun.readahead
            ),
        );
    }
    if lun.io_context.parse::<ContextMode>().is_err() {
        c.fail(
            key.key("io_context"),
            format!(
                "unknown mode {:?}: expected \"shared\" or \"per-worker\"",
                lun.io_context
            ),
        );
    }
    for (name, value) in [
        ("readahead_cache", Some(&lun.readahead_cache)),
        ("readahead_max", Some(&lun.readahead_max)),
        ("readahead_io_max", lun.readahead_io_max.as_ref()),
        ("hddsim_offset", lun.hddsim_offset.as_ref()),
        ("sanitize_rate", lun.sanitize_rate.as_ref()),
    ] {
        if let Some(v) = value {
            if parse_size(v).is_none() {
                c.fail(
                    key.key(name),
                    format!("{v:?} is not a size such as \"64M\""),
                );
            }
        }
    }
    if let Some(p) = lun.physical_block_size {
        let ok = p >= lun.block_size && p.is_power_of_two() && p <= 1 << 20;
        if !ok {
            c.fail(
                key.key("physical_block_size"),
                format!(
                    "{p} must be a power of two, at least block_size ({}) and at most 1M",
                    lun.block_size
                ),
            );
        }
    }
    if let Some(t) = lun.readahead_io_threads {
        c.range(key.key("readahead_io_threads"), t, 1, 256);
    }
    if let Some(m) = lun.readahead_io_max.as_deref().and_then(parse_size) {
        if !(4096..=64 << 20).contains(&m) {
            c.fail(
                key.key("readahead_io_max"),
                format!("{m} bytes: must be 4K..=64M"),
            );
        }
    }
    if let Some(d) = &lun.device_slice {
        if d.parse::<DeviceSlice>().is_err() {
            c.fail(
                key.key("device_slice"),
                format!(
                    "{d:?}: expected \"auto\", \"off\" or a size of at least 4K such as \"16M\""
                ),
            );
        }
    }
    if let Some(d) = lun.hddsim_disks {
        c.range(key.key("hddsim_disks"), d, 1, 16);
    }
    if let Some(x) = lun.hddsim_speedup {
        c.range(key.key("hddsim_speedup"), x, 1, 1000);
    }
    if let Some(Err((fault, sub, msg))) = lun.fault.as_ref().map(|f| f.spec()) {
        c.fail(key.key("fault").key(fault).key(sub), msg);
    }
    let Some(kind) = lun.kind() else {
        c.fail(
            key.key("backstore"),
            format!(
                "unknown backstore {:?}: expected \"file\", \"mmap\", \"blockdev\", \"ram\", \"null\", \
                 \"hddsim\" or \"rbd\"",
                lun.backstore
            ),
        );
        return;
    };
    if kind != EngineKind::Rbd && lun.rbd.is_some() {
        c.fail(
            key.key("rbd"),
            format!(
                "is only for an rbd backstore, not {}; remove it",
                kind.as_str()
            ),
        );
    }
    match kind {
        EngineKind::Rbd => check_rbd(c, key, lun),
        EngineKind::File | EngineKind::Mmap | EngineKind::BlockDev => {
            let Some(path) = lun.resolved_path(data_dir) else {
                c.fail(
                    key.key("path"),
                    format!("is required for a {} backstore", kind.as_str()),
                );
                return;
            };
            if lun.path.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                c.fail(key.key("path"), "must not be empty");
                return;
            }
            if let Some(first) = backing.insert(path.clone(), key.key("path")) {
                c.fail(
                    key.key("path"),
                    format!("{} is already the backing store of {first}", path.display()),
                );
            }
            let file_backed = matches!(kind, EngineKind::File | EngineKind::Mmap);
            if file_backed && size.is_none() && !path.exists() {
                let what = if lun.read_only {
                    "the file must exist for a read-only LUN"
                } else {
                    "is required because the backing file does not exist yet"
                };
                c.fail(key.key("size"), format!("{what} ({})", path.display()));
            }
        }
        EngineKind::HddSim => {
            // Data in a sparse file when a path is given, else in RAM.
            if lun.size.is_none() {
                c.fail(key.key("size"), "is required for a hddsim backstore");
            }
        }
        EngineKind::Ram | EngineKind::Null => {
            if lun.path.is_some() {
                c.fail(
                    key.key("path"),
                    format!("is not used by a {} backstore; remove it", kind.as_str()),
                );
            }
            if lun.size.is_none() {
                c.fail(
                    key.key("size"),
                    format!("is required for a {} backstore", kind.as_str()),
                );
            }
        }
    }
}

/// An rbd LUN: its `[rbd]` table, and no path or size of its own.
/// `port_groups`: distinct tags that include the target's own; more than
/// one (gateways) needs every LUN on an RBD image, the one backing whose
/// state the gateways can share.
fn check_port_groups(c: &mut Checker, key: &KeyPath, t: &TargetSettings) {
    let pkey = key.key("port_groups");
    for (i, g) in t.port_groups.iter().enumerate() {
        if *g == 0 {
            c.fail(pkey.index(i), "0 is not a portal group tag (1..=65535)");
        } else if t.port_groups.get(..i).is_some_and(|b| b.contains(g)) {
            c.fail(pkey.index(i), format!("{g} is listed twice"));
        }
    }
    if t.port_groups.len() > 32 {
        c.fail(pkey.clone(), "lists more than 32 gateways");
    }
    if !t.port_groups.is_empty() && !t.port_groups.contains(&t.tpgt) {
        c.fail(
            pkey.clone(),
            format!("must include this gateway's own tpgt ({})", t.tpgt),
        );
    }
    if t.port_groups.len() > 1 {
        for (j, lun) in t.luns.iter().enumerate() {
            if lun.kind() != Some(EngineKind::Rbd) {
                c.fail(
                    key.key("luns").index(j).key("backstore"),
                    format!(
                        "{:?} cannot be served by several gateways (port_groups); only \"rbd\" can",
                        lun.backstore
                    ),
                );
            } else if lun.read_only {
                c.fail(
                    key.key("luns").index(j).key("read_only"),
                    "a read-only LUN cannot take part in gateways' shared state; remove port_groups or read_only",
                );
            }
        }
    }
}

impl TargetSettings {
    /// This daemon's target port group when it is one of several gateways
    /// (`port_groups` lists more than one), else `None`.
    pub fn gateway(&self) -> Option<u16> {
        (self.port_groups.len() > 1).then_some(self.tpgt)
    }
}

fn check_rbd(c: &mut Checker, key: &KeyPath, lun: &LunSettings) {
    for (name, set) in [("path", lun.path.is_some()), ("size", lun.size.is_some())] {
        if set {
            c.fail(
                key.key(name),
                "is not used by an rbd backstore (the image's size is the LUN's); remove it",
            );
        }
    }
    let Some(rbd) = &lun.rbd else {
        c.fail(
            key.key("rbd"),
            "is required for an rbd backstore: a table with pool and image",
        );
        return;
    };
    let rkey = key.key("rbd");
    for (name, value) in [
        ("pool", rbd.pool.as_str()),
        ("image", rbd.image.as_str()),
        ("client_id", rbd.client_id.as_str()),
    ] {
        if value.is_empty() || value.contains(['\0', '/', '@']) {
            c.fail(
                rkey.key(name),
                format!("{value:?} must be a non-empty name without '/', '@' or NUL"),
            );
        }
    }
    if let Some(ns) = &rbd.namespace {
        if ns.contains(['\0', '/']) {
            c.fail(
                rkey.key("namespace"),
                format!("{ns:?} must not contain '/' or NUL"),
            );
        }
    }
    c.range(rkey.key("op_timeout_secs"), rbd.op_timeout_secs, 1, 3600);
}

/// Checks `size` and returns it in bytes when set and valid.
fn check_size(c: &mut Checker, key: &KeyPath, lun: &LunSettings) -> Option<u64> {
    let text = lun.size.as_deref()?;
    let Some(bytes) = parse_size(text) else {
        c.fail(
            key.clone(),
            format!("{text:?} is not a size: use bytes or a K/M/G/T suffix, e.g. \"1G\""),
        );
        return None;
    };
    let bs = u64::from(lun.block_size);
    if bytes == 0 {
        c.fail(key.clone(), "must not be zero");
        return None;
    }
    if bs != 0 && bytes % bs != 0 {
        c.fail(
            key.clone(),
            format!(
                "{bytes} bytes is not a multiple of the block size {}",
                lun.block_size
            ),
        );
        return None;
    }
    Some(bytes)
}

/// Checks an iSCSI name (RFC 7143 §4.2.7): `iqn.yyyy-mm.reversed.domain[:anything]`,
/// `eui.` + 16 hex digits, or `naa.` + 16 or 32 hex digits; at most 223 bytes.
/// `iqn.` names must be lowercase (the RFC 3722 stringprep profile maps to
/// lowercase, so a configured name must already be in that form to match).
pub fn validate_iscsi_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > MAX_ISCSI_NAME_LEN {
        return Err(format!(
            "is {} bytes; iSCSI names are at most {MAX_ISCSI_NAME_LEN} (RFC 7143 §4.2.7.1)",
            name.len()
        ));
    }
    if let Some(rest) = name.strip_prefix("iqn.") {
        return validate_iqn(rest).map_err(|m| format!("{name:?}: {m}"));
    }
    let (hex, lens): (&str, &[usize]) = if let Some(rest) = name.strip_prefix("eui.") {
        (rest, &[16])
    } else if let Some(rest) = name.strip_prefix("naa.") {
        (rest, &[16, 32])
    } else {
        return Err(format!(
            "{name:?} is not an iSCSI name: expected iqn.yyyy-mm.domain[:id], eui.<16 hex> \
             or naa.<16|32 hex> (RFC 7143 §4.2.7)"
        ));
    };
    if !lens.contains(&hex.len()) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        let want = if lens.len() == 1 { "16" } else { "16 or 32" };
        return Err(format!(
            "{name:?}: expected {want} hexadecimal digits after the type prefix"
        ));
    }
    Ok(())
}

fn validate_iqn(rest: &str) -> Result<(), String> {
    if let Some(bad) = rest.chars().find(|&ch| !iqn_char_ok(ch)) {
        return Err(if bad.is_uppercase() {
            "iqn names must be lowercase (RFC 3722)".into()
        } else {
            format!("character {bad:?} is not allowed (letters, digits, '-', '.', ':')")
        });
    }
    // yyyy-mm.
    let date = rest
        .get(..7)
        .ok_or("missing the yyyy-mm date after \"iqn.\"")?;
    let (year, month) = date
        .split_once('-')
        .ok_or("expected a yyyy-mm date after \"iqn.\"")?;
    let year_ok = year.len() == 4 && year.bytes().all(|b| b.is_ascii_digit());
    let month_ok = month.len() == 2 && month.parse::<u8>().is_ok_and(|m| (1..=12).contains(&m));
    if !year_ok || !month_ok {
        return Err(format!("{date:?} is not a yyyy-mm date"));
    }
    let after_date = rest.get(7..).unwrap_or("");
    let authority = after_date
        .strip_prefix('.')
        .ok_or("expected \".\" and a reversed domain name after the date")?;
    let domain = authority.split(':').next().unwrap_or("");
    if domain.is_empty() || domain.split('.').any(|label| label.is_empty()) {
        return Err(
            "the naming authority must be a reversed domain name such as com.example".into(),
        );
    }
    if domain
        .split('.')
        .any(|l| l.starts_with('-') || l.ends_with('-'))
    {
        return Err("domain labels must not start or end with '-'".into());
    }
    Ok(())
}

fn iqn_char_ok(ch: char) -> bool {
    if ch.is_ascii() {
        ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '-' | '.' | ':')
    } else {
        ch.is_alphanumeric() && !ch.is_uppercase()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::Jail;

    /// Every test that calls [`load`] runs in a figment `Jail`: the jail
    /// serializes those tests, so one test's `RUSTGT_*` variables never leak
    /// into another's load.
    #[allow(clippy::result_large_err)] // the closure type is figment's
    fn jailed(f: impl FnOnce(&mut Jail)) {
        Jail::expect_with(|jail| {
            f(jail);
            Ok(())
        });
    }

    fn write_config(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("rustgt.toml");
        std::fs::write(&path, body).expect("write config");
        path
    }

    /// A valid one-target config in `dir` whose LUN is a RAM disk.
    fn base_config(dir: &Path, target_extra: &str, lun_extra: &str) -> String {
        format!(
            "data_dir = {dir:?}\n\
             [[targets]]\n\
             iqn = \"iqn.2026-11.org.rustgt:test\"\n\
             {target_extra}\n\
             [[targets.luns]]\n\
             id = 0\n\
             backstore = \"ram\"\n\
             size = \"64M\"\n\
             {lun_extra}\n",
            dir = dir.display().to_string()
        )
    }

    fn load_str(body: &str) -> (PathBuf, Result<Config, ConfigError>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_config(dir.path(), body);
        let res = load(Some(&path), &Overrides::default());
        (path, res)
    }

    /// Asserts the load fails with a problem at exactly `key`, naming the
    /// file, and whose message contains `fragment`.
    fn assert_problem(body: &str, key: &str, fragment: &str) {
        let (path, res) = load_str(body);
        let err = res.expect_err(&format!("config should be rejected:\n{body}"));
        let text = err.to_string();
        let found = err.problems().iter().find(|p| p.key == key);
        let Some(p) = found else {
            panic!("no problem at key {key}: {text}\nconfig:\n{body}");
        };
        assert!(
            p.message.contains(fragment),
            "problem at {key} should mention {fragment:?}: {p}"
        );
        assert_eq!(p.origin, path.display().to_string(), "{p}");
        assert!(text.contains(key), "display names the key: {text}");
        assert!(
            text.contains(&path.display().to_string()),
            "display names the file: {text}"
        );
    }

    #[test]
    fn admin_socket_group_is_resolved_once_and_unknown_groups_name_the_key() {
        jailed(|jail| {
            let dir = tempfile::tempdir().expect("tempdir");
            let body = format!(
                "admin_socket_group = \"root\"\n{}",
                base_config(dir.path(), "", "")
            );
            let (_, res) = load_str(&body);
            let cfg = res.expect("root exists");
            assert_eq!(
                cfg.admin_socket_group,
                Some(AdminGroup {
                    name: "root".into(),
                    gid: 0
                })
            );
            // Written back as the name, and loads again.
            let text = cfg.to_toml().expect("toml");
            assert!(text.contains("admin_socket_group = \"root\""), "{text}");
            let (_, again) = load_str(&text);
            assert_eq!(again.expect("reloads"), cfg);

            for (value, fragment) in [
                (
                    "\"rustgt-no-such-group-x9\"",
                    "no group \"rustgt-no-such-group-x9\"",
                ),
                ("\"\"", "must not be empty"),
                ("7", "string"),
            ] {
                let body = format!(
                    "admin_socket_group = {value}\n{}",
                    base_config(dir.path(), "", "")
                );
                assert_problem(&body, "admin_socket_group", fragment);
            }

            // From the environment, the error names the variable.
            jail.set_env("RUSTGT_ADMIN_SOCKET_GROUP", "rustgt-no-such-group-x9");
            let (_, res) = load_str(&base_config(dir.path(), "", ""));
            let err = res.expect_err("unknown group");
            assert!(
                err.to_string().contains("RUSTGT_ADMIN_SOCKET_GROUP"),
                "{err}"
            );
        });
    }

    #[test]
    fn no_file_gives_the_default_target() {
        jailed(|_| {
            let cfg = load(None, &Overrides::default()).expect("default config loads");
            assert_eq!(cfg, Config::default());
            assert_eq!(cfg.data_dir, PathBuf::from("./rustgt-data"));
            let [t] = cfg.targets.as_slice() else {
                panic!("one default target expected: {cfg:?}");
            };
            assert_eq!(t.iqn, "iqn.2026-11.org.rustgt:default");
            assert_eq!(t.portals, vec!["127.0.0.1:3260".parse().expect("addr")]);
            assert_eq!(t.tpgt, 1);
            assert!(t.acl.is_empty() && t.chap.is_none());
            let [lun] = t.luns.as_slice() else {
                panic!("one LUN expected: {t:?}");
            };
            assert_eq!(lun.id, 0);
            assert_eq!(lun.kind(), Some(EngineKind::File));
            assert_eq!(
                lun.resolved_path(&cfg.data_dir),
                Some(PathBuf::from("./rustgt-data/lun0.img"))
            );
            assert_eq!(lun.size_bytes(), Some(1 << 30));
            assert_eq!(lun.block_size, 512);
            assert!(lun.thin && lun.write_cache && !lun.read_only);
        });
    }

    #[test]
    fn iscsi_defaults_match_the_documentation() {
        let s = IscsiSettings::default();
        assert_eq!(s.queue_depth, 128);
        assert_eq!(s.nop_in_interval_secs, 15);
        assert_eq!(s.nop_in_timeout_secs, 30);
        assert_eq!(s.max_recv_data_segment_length, 262_144);
        assert_eq!(s.max_burst_length, 1_048_576);
        assert_eq!(s.first_burst_length, 262_144);
        assert!(!s.initial_r2t);
        assert!(s.immediate_data);
        assert_eq!(s.max_outstanding_r2t, 16);
        assert_eq!(s.header_digest, ["None", "CRC32C"]);
        assert_eq!(s.data_digest, ["None", "CRC32C"]);
        assert_eq!(s.default_time2wait, 2);
        assert_eq!(s.default_time2retain, 20);
        assert_eq!(s.workers_per_lun, 8);
    }

    #[test]
    fn limits_defaults_match_the_documentation() {
        let l = LimitSettings::default();
        assert_eq!(l.login_timeout_secs, 15);
        assert_eq!(l.max_connections, 4096);
        assert_eq!(l.max_connections_per_address, 256);
        assert_eq!(l.max_login_connections, 256);
        assert_eq!(l.max_sessions_per_initiator, 64);
        assert_eq!(Config::default().limits, l);
    }

    #[test]
    fn limits_are_read_from_file_and_environment_and_checked_by_key() {
        jailed(|jail| {
            let dir = tempfile::tempdir().expect("tempdir");
            let body = format!(
                "{}[limits]\nlogin_timeout_secs = 5\nmax_connections = 1000\n",
                base_config(dir.path(), "", "")
            );
            let path = write_config(dir.path(), &body);
            jail.set_env("RUSTGT_LIMITS__MAX_LOGIN_CONNECTIONS", 10);
            let cfg = load(Some(&path), &Overrides::default()).expect("loads");
            assert_eq!(cfg.limits.login_timeout_secs, 5);
            assert_eq!(cfg.limits.max_connections, 1000);
            assert_eq!(cfg.limits.max_login_connections, 10);
            assert_eq!(cfg.limits.max_connections_per_address, 256);
        });
    }

    #[test]
    fn limits_out_of_range_name_the_key() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let with =
                |extra: &str| format!("{}[limits]\n{extra}\n", base_config(dir.path(), "", ""));
            assert_problem(
                &with("login_timeout_secs = 0"),
                "limits.login_timeout_secs",
                "out of range",
            );
            assert_problem(
                &with("max_connections = 0"),
                "limits.max_connections",
                "out of range",
            );
            assert_problem(
                &with("max_connections = 10\nmax_connections_per_address = 11"),
                "limits.max_connections_per_address",
                "max_connections",
            );
            assert_problem(
                &with("max_connections = 10\nmax_login_connections = 0"),
                "limits.max_login_connections",
                "out of range",
            );
            assert_problem(
                &with("max_sessions_per_initiator = 0"),
                "limits.max_sessions_per_initiator",
                "out of range",
            );
            assert_problem(
                &with("max_session_per_initiator = 3"),
                "limits.max_session_per_initiator",
                "unknown field",
            );
        });
    }

    #[test]
    fn minimal_file_fills_in_defaults() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let (_, res) = load_str(&base_config(dir.path(), "", ""));
            let cfg = res.expect("loads");
            assert_eq!(cfg.iscsi, IscsiSettings::default());
            assert_eq!(cfg.discovery, DiscoverySettings::default());
            let t = cfg.targets.first().expect("target");
            assert_eq!(t.portals, default_portals());
            let lun = t.luns.first().expect("lun");
            assert_eq!(lun.size_bytes(), Some(64 << 20));
            assert_eq!(lun.block_size, 512);
            assert!(lun.thin && lun.write_cache);
            assert_eq!(lun.effective_workers(&cfg.iscsi), 8);
        });
    }

    #[test]
    fn file_with_no_targets_serves_none() {
        jailed(|_| {
            let (_, res) = load_str("[iscsi]\nqueue_depth = 32\n");
            let cfg = res.expect("loads");
            assert!(cfg.targets.is_empty());
            assert_eq!(cfg.iscsi.queue_depth, 32);
        });
    }

    #[test]
    fn listen_override_replaces_every_portal_list() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut body = base_config(
                dir.path(),
                "portals = [\"10.0.0.1:3260\", \"10.0.0.2:3260\"]",
                "",
            );
            body.push_str(
                "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:second\"\nportals = [\"10.0.0.3:3261\"]\n",
            );
            let path = write_config(dir.path(), &body);
            let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
            let overrides = Overrides {
                listen: Some(listen),
                data_dir: Some(PathBuf::from("/tmp/rustgt-elsewhere")),
                ..Overrides::default()
            };
            let cfg = load(Some(&path), &overrides).expect("loads");
            assert_eq!(cfg.targets.len(), 2);
            for t in &cfg.targets {
                assert_eq!(t.portals, vec![listen]);
            }
            assert_eq!(cfg.data_dir, PathBuf::from("/tmp/rustgt-elsewhere"));

            let default = load(None, &overrides).expect("default loads");
            assert_eq!(
                default.targets.first().map(|t| t.portals.clone()),
                Some(vec![listen])
            );
        });
    }

    #[test]
    fn environment_overrides_file_and_defaults() {
        jailed(|jail| {
            let dir = tempfile::tempdir().expect("tempdir");
            let body = format!(
                "data_dir = {:?}\n\
                 [iscsi]\nqueue_depth = 32\nimmediate_data = true\n\
                 [[targets]]\niqn = \"iqn.2026-11.org.rustgt:test\"\n\
                 [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"64M\"\n",
                dir.path().display().to_string()
            );
            let path = write_config(dir.path(), &body);

            jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", 64);
            jail.set_env("RUSTGT_ISCSI__IMMEDIATE_DATA", "false");
            jail.set_env("RUSTGT_ISCSI__HEADER_DIGEST", "[CRC32C]");
            jail.set_env("RUSTGT_DATA_DIR", "/srv/rustgt");
            // Variables that belong to the command line, not the config.
            jail.set_env("RUSTGT_LOG", "debug");
            jail.set_env("RUSTGT_CONFIG", "/nonexistent.toml");

            let cfg = load(Some(&path), &Overrides::default()).expect("loads");
            assert_eq!(cfg.iscsi.queue_depth, 64);
            assert!(!cfg.iscsi.immediate_data);
            assert_eq!(cfg.iscsi.header_digest, ["CRC32C"]);
            assert_eq!(cfg.data_dir, PathBuf::from("/srv/rustgt"));

            let cfg = load(None, &Overrides::default()).expect("loads without file");
            assert_eq!(cfg.iscsi.queue_depth, 64);
            assert_eq!(cfg.targets, vec![Config::default_target()]);

            let cli = Overrides {
                listen: None,
                data_dir: Some(PathBuf::from("/from/cli")),
                ..Overrides::default()
            };
            let cfg = load(Some(&path), &cli).expect("loads");
            assert_eq!(
                cfg.data_dir,
                PathBuf::from("/from/cli"),
                "command line beats env"
            );
        });
    }

    #[test]
    fn bad_environment_value_names_the_variable() {
        jailed(|jail| {
            jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", 0);
            let err = load(None, &Overrides::default()).expect_err("0 is out of range");
            let text = err.to_string();
            assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPTH"), "{text}");
            assert!(text.contains("iscsi.queue_depth"), "{text}");

            jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", "lots");
            let err = load(None, &Overrides::default()).expect_err("not a number");
            let text = err.to_string();
            assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPTH"), "{text}");
            assert!(text.contains("iscsi.queue_depth"), "{text}");
        });
    }

    #[test]
    fn misspelt_environment_key_is_an_error() {
        jailed(|jail| {
            jail.set_env("RUSTGT_ISCSI__QUEUE_DEPT", 64);
            let err = load(None, &Overrides::default()).expect_err("unknown key");
            let text = err.to_string();
            assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPT"), "{text}");
            assert!(text.contains("queue_dept"), "{text}");
        });
    }

    #[test]
    fn misspelt_file_keys_are_errors_naming_the_key() {
        jailed(|_| {
            assert_problem(
                "[iscsi]\nqueue_dept = 3\n",
                "iscsi.queue_dept",
                "unknown field",
            );
            assert_problem("datadir = \"/x\"\n", "datadir", "unknown field");
            let dir = tempfile::tempdir().expect("tempdir");
            assert_problem(
                &base_config(dir.path(), "", "blok_size = 4096"),
                "targets[0].luns[0].blok_size",
                "unknown field",
            );
            assert_problem(
                &base_config(dir.path(), "aliass = \"x\"", ""),
                "targets[0].aliass",
                "unknown field",
            );
        });
    }

    #[test]
    fn wrong_types_and_missing_keys_name_the_key() {
        jailed(|_| {
            assert_problem(
                "[iscsi]\nqueue_depth = \"many\"\n",
                "iscsi.queue_depth",
                "invalid type",
            );
            assert_problem(
                "[[targets]]\nalias = \"no name\"\n",
                "targets[0]",
                "missing field `iqn`",
            );
            let dir = tempfile::tempdir().expect("tempdir");
            assert_problem(
                &base_config(dir.path(), "portals = [\"localhost\"]", ""),
                "targets[0].portals[0]",
                "",
            );
        });
    }

    #[test]
    fn toml_syntax_error_names_the_file() {
        jailed(|_| {
            let (path, res) = load_str("[iscsi\nqueue_depth = 3\n");
            let text = res.expect_err("syntax error").to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains("TOML parse error"), "{text}");
        });
    }

    #[test]
    fn missing_file_is_a_read_error_naming_it() {
        jailed(|_| {
            let path = PathBuf::from("/nonexistent/rustgt/config.toml");
            let err = load(Some(&path), &Overrides::default()).expect_err("missing");
            assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
            assert!(
                err.to_string().contains("/nonexistent/rustgt/config.toml"),
                "{err}"
            );
        });
    }

    #[test]
    fn iscsi_setting_ranges_name_their_keys() {
        jailed(|_| {
            let cases: &[(&str, &str, &str)] = &[
                ("queue_depth = 0", "iscsi.queue_depth", "out of range"),
                ("queue_depth = 70000", "iscsi.queue_depth", "out of range"),
                (
                    "max_recv_data_segment_length = 511",
                    "iscsi.max_recv_data_segment_length",
                    "out of range",
                ),
                (
                    "max_recv_data_segment_length = 16777216",
                    "iscsi.max_recv_data_segment_length",
                    "out of range",
                ),
                (
                    "max_burst_length = 100",
                    "iscsi.max_burst_length",
                    "out of range",
                ),
                (
                    "first_burst_length = 2097152\nmax_burst_length = 1048576",
                    "iscsi.first_burst_length",
                    "exceeds max_burst_length",
                ),
                (
                    "max_outstanding_r2t = 0",
                    "iscsi.max_outstanding_r2t",
                    "out of range",
                ),
                ("header_digest = []", "iscsi.header_digest", "at least one"),
                (
                    "header_digest = [\"crc32c\"]",
                    "iscsi.header_digest[0]",
                    "unknown digest",
                ),
                (
                    "data_digest = [\"None\", \"MD5\"]",
                    "iscsi.data_digest[1]",
                    "unknown digest",
                ),
                (
                    "data_digest = [\"None\", \"None\"]",
                    "iscsi.data_digest[1]",
                    "twice",
                ),
                (
                    "default_time2wait = 3601",
                    "iscsi.default_time2wait",
                    "out of range",
                ),
                (
                    "default_time2retain = 4000",
                    "iscsi.default_time2retain",
                    "out of range",
                ),
                (
                    "workers_per_lun = 0",
                    "iscsi.workers_per_lun",
                    "out of range",
                ),
                (
                    "nop_in_interval_secs = 5\nnop_in_timeout_secs = 0",
                    "iscsi.nop_in_timeout_secs",
                    "out of range",
                ),
            ];
            for (body, key, fragment) in cases {
                assert_problem(&format!("[iscsi]\n{body}\n"), key, fragment);
            }
            // nop_in_interval_secs = 0 disables the ping, so the timeout is free.
            let (_, res) = load_str("[iscsi]\nnop_in_interval_secs = 0\nnop_in_timeout_secs = 0\n");
            res.expect("disabled NOP-In ignores the timeout");
        });
    }

    #[test]
    fn target_errors_name_their_keys() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let d = dir.path();
            let body = base_config(d, "", "").replace("org.rustgt:test", "ORG.rustgt:test");
            assert_problem(&body, "targets[0].iqn", "lowercase");
            let body = base_config(d, "", "").replace("iqn.2026-11.org.rustgt:test", "target1");
            assert_problem(&body, "targets[0].iqn", "not an iSCSI name");
            let dup = format!(
                "{}[[targets]]\niqn = \"iqn.2026-11.org.rustgt:test\"\n",
                base_config(d, "", "")
            );
            assert_problem(&dup, "targets[1].iqn", "duplicate target name");
            assert_problem(
                &base_config(d, "portals = []", ""),
                "targets[0].portals",
                "at least one",
            );
            assert_problem(
                &base_config(d, "portals = [\"127.0.0.1:3260\", \"127.0.0.1:3260\"]", ""),
                "targets[0].portals[1]",
                "twice",
            );
            assert_problem(
                &base_config(d, "acl = [\"iqn.2026-11.org.rustgt:a\", \"host-b\"]", ""),
                "targets[0].acl[1]",
                "not an iSCSI name",
            );
            assert_problem(
                &base_config(d, "alias = \"\"", ""),
                "targets[0].alias",
                "1..=255",
            );
            assert_problem(&base_config(d, "tpgt = 70000", ""), "targets[0].tpgt", "");
        });
    }

    #[test]
    fn chap_errors_name_their_keys_and_never_the_secret() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let d = dir.path();
            let chap = |fields: &str| base_config(d, &format!("chap = {{ {fields} }}"), "");
            assert_problem(
                &chap("user = \"u\", secret = \"short\""),
                "targets[0].chap.secret",
                "at least 12 bytes",
            );
            assert_problem(
                &chap("user = \"\", secret = \"0123456789ab\""),
                "targets[0].chap.user",
                "1..=255",
            );
            assert_problem(
                &chap("user = \"u\", secret = \"0123456789ab\", mutual_user = \"t\""),
                "targets[0].chap.mutual_secret",
                "required",
            );
            assert_problem(
                &chap("user = \"u\", secret = \"0123456789ab\", mutual_secret = \"abcdefghijkl\""),
                "targets[0].chap.mutual_user",
                "required",
            );
            assert_problem(
                &chap(
                    "user = \"u\", secret = \"0123456789ab\", mutual_user = \"t\", \
                     mutual_secret = \"0123456789ab\"",
                ),
                "targets[0].chap.mutual_secret",
                "must differ",
            );
            let (_, res) = load_str("[discovery.chap]\nuser = \"d\"\nsecret = \"tiny-secret\"\n");
            let text = res.expect_err("11-byte secret").to_string();
            assert!(text.contains("discovery.chap.secret"), "{text}");
            assert!(!text.contains("tiny-secret"), "secret leaked: {text}");
        });
    }

    #[test]
    fn fault_tables_load_typed_and_errors_name_their_keys() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let d = dir.path();
            let body = base_config(
                d,
                "",
                "[targets.luns.fault]\n\
                 read_error = { lba = \"100-199\" }\n\
                 write_error = { every = 3 }\n\
                 write_nospace = { lba = \"1000-\", probability = 0.5 }\n\
                 delay = { time = \"5ms\" }\n\
                 hang = { lba = \"42\" }\n",
            );
            let (_, res) = load_str(&body);
            let cfg = res.expect("valid fault table");
            let f = cfg.targets[0].luns[0].fault.as_ref().expect("fault table");
            let spec = f.spec().expect("typed");
            let r = spec.read_error.and_then(|t| t.lba).expect("range");
            assert_eq!((r.first, r.last), (100, 199));
            assert_eq!(spec.write_error.and_then(|t| t.every), Some(3));
            let n = spec.write_nospace.expect("nospace");
            assert_eq!(n.lba.map(|r| r.last), Some(u64::MAX));
            assert_eq!(n.probability, Some(0.5));
            assert_eq!(
                spec.delay.map(|d| d.time),
                Some(std::time::Duration::from_millis(5))
            );
            assert!(spec.hang.is_some());
            // An empty table: no faults, but the LUN takes them live.
            let (_, res) = load_str(&base_config(d, "", "fault = {}"));
            let cfg = res.expect("empty fault table");
            let f = cfg.targets[0].luns[0].fault.as_ref().expect("table");
            assert!(f.spec().expect("typed").is_empty());
            let lun = |extra: &str| base_config(d, "", extra);
            assert_problem(
                &lun("fault = { read_error = { lba = \"9-3\" } }"),
                "targets[0].luns[0].fault.read_error.lba",
                "after the last",
            );
            assert_problem(
                &lun("fault = { hang = { lba = \"x\" } }"),
                "targets[0].luns[0].fault.hang.lba",
                "not an LBA range",
            );
            assert_problem(
                &lun("fault = { write_error = { every = 0 } }"),
                "targets[0].luns[0].fault.write_error.every",
                "at least 1",
            );
            assert_problem(
                &lun("fault = { write_nospace = { probability = 1.5 } }"),
                "targets[0].luns[0].fault.write_nospace.probability",
                "out of range",
            );
            assert_problem(
                &lun("fault = { delay = { time = \"5 minutes\" } }"),
                "targets[0].luns[0].fault.delay.time",
                "not a duration",
            );
            assert_problem(
                &lun("fault = { delay = { time = \"61s\" } }"),
                "targets[0].luns[0].fault.delay.time",
                "longer than 60s",
            );
            let (_, res) = load_str(&lun("fault = { read_eror = {} }"));
            let err = res.expect_err("misspelt fault key");
            assert!(err.to_string().contains("read_eror"), "{err}");
        });
    }

    #[test]
    fn lun_errors_name_their_keys() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let d = dir.path();
            let lun = |extra: &str| base_config(d, "", extra);
            assert_problem(
                &lun("block_size = 1000"),
                "targets[0].luns[0].block_size",
                "512 or 4096",
            );
            let big_id = base_config(d, "", "").replace("id = 0", "id = 16384");
            assert_problem(&big_id, "targets[0].luns[0].id", "out of range");
            let bad_size = base_config(d, "", "").replace("\"64M\"", "\"64 potatoes\"");
            assert_problem(&bad_size, "targets[0].luns[0].size", "not a size");
            let zero = base_config(d, "", "").replace("\"64M\"", "\"0\"");
            assert_problem(&zero, "targets[0].luns[0].size", "zero");
            let odd = base_config(d, "", "").replace("\"64M\"", "\"1000\"");
            assert_problem(
                &odd,
                "targets[0].luns[0].size",
                "multiple of the block size",
            );
            let kind = base_config(d, "", "").replace("\"ram\"", "\"tape\"");
            assert_problem(&kind, "targets[0].luns[0].backstore", "unknown backstore");
            assert_problem(
                &lun("path = \"x.img\""),
                "targets[0].luns[0].path",
                "not used",
            );
            let no_size = base_config(d, "", "").replace("size = \"64M\"\n", "");
            assert_problem(&no_size, "targets[0].luns[0].size", "required for a ram");
            let file_no_path = base_config(d, "", "").replace("\"ram\"", "\"file\"");
            assert_problem(
                &file_no_path,
                "targets[0].luns[0].path",
                "required for a file",
            );
            let dev_no_path = base_config(d, "", "").replace("\"ram\"", "\"blockdev\"");
            assert_problem(
                &dev_no_path,
                "targets[0].luns[0].path",
                "required for a blockdev",
            );
            let new_file = base_config(d, "", "path = \"new.img\"")
                .replace("\"ram\"", "\"file\"")
                .replace("size = \"64M\"\n", "");
            assert_problem(&new_file, "targets[0].luns[0].size", "does not exist yet");
            assert_problem(
                &lun("workers = 0"),
                "targets[0].luns[0].workers",
                "out of range",
            );
            assert_problem(
                &lun("serial = \"has space\""),
                "targets[0].luns[0].serial",
                "printable",
            );
            let dup_id = format!(
                "{}[[targets.luns]]\nid = 0\nbackstore = \"null\"\nsize = \"1G\"\n",
                base_config(d, "", "")
            );
            assert_problem(
                &dup_id,
                "targets[0].luns[1].id",
                "already defined by luns[0]",
            );
            let shared = format!(
                "{}[[targets.luns]]\nid = 1\nbackstore = \"file\"\npath = \"a.img\"\nsize = \"1M\"\n\
                 [[targets.luns]]\nid = 2\nbackstore = \"file\"\npath = \"a.img\"\nsize = \"1M\"\n",
                base_config(d, "", "")
            );
            assert_problem(
                &shared,
                "targets[0].luns[2].path",
                "targets[0].luns[1].path",
            );
        });
    }

    #[test]
    fn existing_file_needs_no_size() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            std::fs::write(dir.path().join("old.img"), vec![0u8; 4096]).expect("write");
            let body = base_config(dir.path(), "", "path = \"old.img\"")
                .replace("\"ram\"", "\"file\"")
                .replace("size = \"64M\"\n", "");
            let (_, res) = load_str(&body);
            let cfg = res.expect("existing file without size loads");
            let lun = cfg
                .targets
                .first()
                .and_then(|t| t.luns.first())
                .expect("lun");
            assert_eq!(
                lun.resolved_path(&cfg.data_dir),
                Some(dir.path().join("old.img"))
            );
            assert_eq!(lun.size_bytes(), None);
        });
    }

    #[test]
    fn mmap_backstore_is_configured_like_a_file() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let d = dir.path();
            let mmap = |extra: &str| base_config(d, "", extra).replace("\"ram\"", "\"mmap\"");
            let (_, res) = load_str(&mmap("path = \"m.img\""));
            let cfg = res.expect("mmap with a path and a size loads");
            let lun = cfg
                .targets
                .first()
                .and_then(|t| t.luns.first())
                .expect("lun");
            assert_eq!(lun.kind(), Some(EngineKind::Mmap));
            assert_eq!(lun.resolved_path(&cfg.data_dir), Some(d.join("m.img")));
            assert_eq!(lun.size_bytes(), Some(64 << 20));

            assert_problem(
                &mmap(""),
                "targets[0].luns[0].path",
                "required for a mmap backstore",
            );
            let unsized_new = mmap("path = \"new.img\"").replace("size = \"64M\"\n", "");
            assert_problem(
                &unsized_new,
                "targets[0].luns[0].size",
                "does not exist yet",
            );
            let read_only_new =
                mmap("path = \"new.img\"\nread_only = true").replace("size = \"64M\"\n", "");
            assert_problem(
                &read_only_new,
                "targets[0].luns[0].size",
                "must exist for a read-only LUN",
            );
            let shared = format!(
                "{}[[targets.luns]]\nid = 1\nbackstore = \"file\"\npath = \"m.img\"\nsize = \"1M\"\n",
                mmap("path = \"m.img\"")
            );
            assert_problem(
                &shared,
                "targets[0].luns[1].path",
                "targets[0].luns[0].path",
            );
            let kind = base_config(d, "", "").replace("\"ram\"", "\"mmapp\"");
            assert_problem(&kind, "targets[0].luns[0].backstore", "\"mmap\"");

            // An existing file needs no size.
            std::fs::write(d.join("old.img"), vec![0u8; 4096]).expect("write");
            let existing = mmap("path = \"old.img\"").replace("size = \"64M\"\n", "");
            let (_, res) = load_str(&existing);
            res.expect("existing file without size loads");
        });
    }

    #[test]
    fn reactor_settings_load_from_file_and_environment() {
        jailed(|jail| {
            let (_, res) = load_str("[reactor]\nthreads = 2\nrun_to_completion = false\n");
            let cfg = res.expect("valid reactor table");
            assert_eq!(
                (cfg.reactor.threads, cfg.reactor.run_to_completion),
                (2, false)
            );
            let (_, res) = load_str("[reactor]\nthreads = 999\n");
            let err = res.expect_err("too many reactors");
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["reactor.threads"]);
            jail.set_env("RUSTGT_REACTOR__RUN_TO_COMPLETION", "false");
            let (_, res) = load_str("");
            assert!(!res.expect("env override").reactor.run_to_completion);

            let (_, res) = load_str("");
            assert!(res.expect("default").reactor.io_uring_enabled());
            let (_, res) = load_str("[reactor]\nio_uring = \"off\"\n");
            assert!(!res.expect("off").reactor.io_uring_enabled());
            let (_, res) = load_str("[reactor]\nio_uring = \"sometimes\"\n");
            let err = res.expect_err("unknown io_uring mode");
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["reactor.io_uring"]);
            jail.set_env("RUSTGT_REACTOR__IO_URING", "off");
            let (_, res) = load_str("");
            assert!(!res.expect("env override").reactor.io_uring_enabled());

            let (_, res) = load_str("");
            assert_eq!(res.expect("default").reactor.busy_poll_us, 200);
            let (_, res) = load_str("[reactor]\nbusy_poll_us = 0\n");
            assert_eq!(res.expect("off").reactor.busy_poll_us, 0);
            let (_, res) = load_str("[reactor]\nbusy_poll_us = 5000\n");
            let err = res.expect_err("too long a busy-poll");
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["reactor.busy_poll_us"]);
        });
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        jailed(|_| {
            let (_, res) = load_str("[iscsi]\nqueue_depth = 0\nworkers_per_lun = 0\n");
            let err = res.expect_err("two problems");
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["iscsi.queue_depth", "iscsi.workers_per_lun"]);
            assert!(err.to_string().contains("2 problems"), "{err}");
        });
    }

    #[test]
    fn to_toml_round_trips() {
        jailed(|_| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut cfg = Config {
                data_dir: dir.path().to_owned(),
                ..Config::default()
            };
            let mut second = Config::default_target();
            second.iqn = "iqn.2026-11.org.rustgt:second".into();
            second.alias = Some("second disk".into());
            second.acl = vec!["iqn.1993-08.org.debian:01:abc".into()];
            second.chap = Some(ChapSettings {
                user: "alice".into(),
                secret: "0123456789abcdef".into(),
                mutual_user: Some("target".into()),
                mutual_secret: Some("fedcba9876543210".into()),
            });
            if let Some(lun) = second.luns.first_mut() {
                lun.path = Some(PathBuf::from("second.img"));
                lun.serial = Some("SER123".into());
                lun.workers = Some(2);
            }
            cfg.targets.push(second);
            cfg.discovery.chap = Some(ChapSettings {
                user: "disc".into(),
                secret: "discovery-secret".into(),
                mutual_user: None,
                mutual_secret: None,
            });
            let text = cfg.to_toml().expect("serializes");
            let path = write_config(dir.path(), &text);
            let back = load(Some(&path), &Overrides::default()).expect("reloads");
            assert_eq!(back, cfg, "round trip through:\n{text}");
        });
    }

    #[test]
    fn example_config_in_etc_loads() {
        jailed(|_| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/rustgt.toml");
            let text = std::fs::read_to_string(&path).expect("etc/rustgt.toml exists");
            // Point the data dir at a scratch directory so file LUNs that do
            // not exist yet are judged the same way everywhere.
            let dir = tempfile::tempdir().expect("tempdir");
            let overrides = Overrides {
                listen: None,
                data_dir: Some(dir.path().to_owned()),
                ..Overrides::default()
            };
            let cfg = load(Some(&path), &overrides)
                .unwrap_or_else(|e| panic!("etc/rustgt.toml must load: {e}\n{text}"));
            assert!(!cfg.targets.is_empty(), "the example defines targets");
            // Every documented iscsi and limits default is the real default.
            assert_eq!(cfg.iscsi, IscsiSettings::default());
            assert_eq!(cfg.limits, LimitSettings::default());
        });
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let chap = ChapSettings {
            user: "alice".into(),
            secret: "very-secret-123".into(),
            mutual_user: Some("tgt".into()),
            mutual_secret: Some("other-secret-456".into()),
        };
        let shown = format!("{chap:?}");
        assert!(shown.contains("alice") && shown.contains("tgt"), "{shown}");
        assert!(!shown.contains("very-secret-123"), "{shown}");
        assert!(!shown.contains("other-secret-456"), "{shown}");
        let mut cfg = Config::default();
        cfg.discovery.chap = Some(chap);
        assert!(!format!("{cfg:?}").contains("very-secret-123"));
    }

    #[test]
    fn iscsi_name_validation() {
        let good = [
            "iqn.2026-11.org.rustgt:default",
            "iqn.1993-08.org.debian:01:2d7f3c1b9e",
            "iqn.2001-04.com.example",
            "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309",
            "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test",
            "eui.02004567A425678D",
            "eui.02004567a425678d",
            "naa.52004567BA64678D",
            "naa.62004567BA64678D0123456789ABCDEF",
        ];
        for name in good {
            assert_eq!(validate_iscsi_name(name), Ok(()), "{name}");
        }
        let long = format!("iqn.2026-11.org.rustgt:{}", "x".repeat(201));
        let bad = [
            ("", "empty"),
            ("iqn.", "date"),
            ("iqn.2026-13.org.rustgt", "yyyy-mm"),
            ("iqn.26-11.org.rustgt", "yyyy-mm"),
            ("iqn.2026-11", "reversed domain"),
            ("iqn.2026-11.", "reversed domain"),
            ("iqn.2026-11:org", "after the date"),
            ("iqn.2026-11.org..rustgt", "reversed domain"),
            ("iqn.2026-11.org.-bad", "start or end"),
            ("iqn.2026-11.Org.rustgt", "lowercase"),
            ("iqn.2026-11.org.rustgt:a b", "not allowed"),
            ("iqn.2026-11.org.rustgt:a_b", "not allowed"),
            ("eui.0200", "16 hexadecimal"),
            ("eui.02004567A425678G", "16 hexadecimal"),
            ("naa.52004567BA64678D00", "16 or 32"),
            ("IQN.2026-11.org.rustgt", "not an iSCSI name"),
            (long.as_str(), "at most 223"),
        ];
        for (name, fragment) in bad {
            let err = validate_iscsi_name(name).expect_err(name);
            assert!(err.contains(fragment), "{name}: {err}");
        }
    }
}
