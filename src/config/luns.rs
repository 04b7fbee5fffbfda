//! `[[targets.luns]]`: one logical unit, its backing store and I/O
//! context, its `[rbd]` table, and their checks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rustgt_backstore::{ContextMode, DeviceSlice, EngineKind, ReadaheadChoice, ReadaheadPolicy};
use serde::{Deserialize, Serialize};

use super::fault::FaultSettings;
use super::iscsi::IscsiSettings;
use super::keypath::{Checker, KeyPath};
use super::qos::{check_qos, QosSettings};
use super::values::{ByteSize, Bytes, Setting, Wwn};

/// SAM-5 flat/peripheral LUN addressing used here: LUN ids 0..=16383.
pub const MAX_LUN_ID: u64 = 16383;

pub(super) fn default_block_size() -> u32 {
    512
}

pub(super) fn default_true() -> bool {
    true
}

/// One logical unit and its backing store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LunSettings {
    /// LUN number, 0..=16383.
    pub id: u64,
    /// Engine: "file", "mmap", "blockdev", "ram", "null", "hddsim" or
    /// "rbd".
    pub backstore: Setting<EngineKind>,
    /// Backing file or device (file/mmap/blockdev only); relative = under data_dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Capacity such as "1G" or "512M" (binary units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<ByteSize>,
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
    /// Unit serial number (VPD page 0x80). Generated once and written to
    /// the configuration when absent (see `crate::identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// NAA designator (VPD page 0x83), "naa.6" and 31 hex digits.
    /// Generated once and written to the configuration when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<Wwn>,
    /// Removable medium: START STOP UNIT with LOEJ ejects and loads it.
    #[serde(default)]
    pub removable: bool,
    /// ALUA transitions (SPC-4 §5.16): "implicit" (the default: the daemon
    /// alone changes access states), "explicit" (initiators change them
    /// with SET TARGET PORT GROUPS) or "both".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alua: Option<Setting<rustgt_scsi::AluaMode>>,
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
    pub sanitize_rate: Option<ByteSize>,
    /// Readahead policy of the LUN's I/O context: "auto" (the default:
    /// "streams" where the backing seeks, hddsim or a rotational disk under
    /// a file or block device; "kernel" elsewhere), "none", "kernel" (leave
    /// it to Linux's page cache), "classic", "context" or "streams".
    #[serde(default = "default_readahead")]
    pub readahead: Setting<ReadaheadChoice>,
    /// "shared": all workers of the LUN share one I/O context (one stream
    /// table, one cache); "per-worker": each has its own (the pre-fix
    /// behaviour, for comparison).
    #[serde(default = "default_io_context")]
    pub io_context: Setting<ContextMode>,
    /// Memory bound of the LUN's readahead cache, e.g. "64M".
    #[serde(default = "default_readahead_cache")]
    pub readahead_cache: ByteSize,
    /// Largest readahead window, e.g. "4M".
    #[serde(default = "default_readahead_max")]
    pub readahead_max: ByteSize,
    /// Threads issuing the context's backing reads (its I/O depth),
    /// 1..=256; default 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readahead_io_threads: Option<u32>,
    /// Largest backing read after coalescing, e.g. "1M" (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readahead_io_max: Option<ByteSize>,
    /// Turns at a device shared with other LUNs' I/O contexts: "auto"
    /// (the default: on a seeking device, sixteen positioning times of
    /// transfer per turn), "off", or a size per turn such as "16M".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_slice: Option<Setting<DeviceSlice>>,
    /// hddsim: name of the simulated device; LUNs naming the same device
    /// share its disks (default "md0").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_device: Option<String>,
    /// hddsim: byte offset of the LUN on the device, e.g. "90G".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hddsim_offset: Option<ByteSize>,
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
    /// `[targets.luns.qos]`: IOPS and bandwidth limits of the LUN and of
    /// single initiators on it (see [`QosSettings`]); changed live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Box<QosSettings>>,
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

fn default_readahead() -> Setting<ReadaheadChoice> {
    Setting::new(ReadaheadChoice::Auto, "auto")
}

pub(super) fn default_io_context() -> Setting<ContextMode> {
    Setting::new(ContextMode::Shared, "shared")
}

pub(super) fn default_readahead_cache() -> ByteSize {
    Setting::new(Bytes(64 << 20), "64M")
}

pub(super) fn default_readahead_max() -> ByteSize {
    Setting::new(Bytes(4 << 20), "4M")
}

impl LunSettings {
    /// The engine (always `Some`: `backstore` is parsed when read).
    pub fn kind(&self) -> Option<EngineKind> {
        Some(self.backstore.value().clone())
    }

    /// The backing path with a relative path placed under `data_dir`.
    pub fn resolved_path(&self, data_dir: &Path) -> Option<PathBuf> {
        self.path.as_ref().map(|p| data_dir.join(p))
    }

    /// The size in bytes, `None` when unset.
    pub fn size_bytes(&self) -> Option<u64> {
        self.size.as_ref().map(ByteSize::bytes)
    }

    /// The fixed readahead policy, `None` for "auto".
    pub fn fixed_policy(&self) -> Option<ReadaheadPolicy> {
        match self.readahead.get() {
            ReadaheadChoice::Fixed(p) => Some(p),
            ReadaheadChoice::Auto => None,
        }
    }

    /// Worker threads for this LUN.
    pub fn effective_workers(&self, iscsi: &IscsiSettings) -> usize {
        self.workers.unwrap_or(iscsi.workers_per_lun)
    }
}

pub(super) fn check_lun(
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
    if let Some(m) = lun.readahead_io_max.as_ref().map(ByteSize::bytes) {
        if !(4096..=64 << 20).contains(&m) {
            c.fail(
                key.key("readahead_io_max"),
                format!("{m} bytes: must be 4K..=64M"),
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
    if let Some(q) = &lun.qos {
        check_qos(c, &key.key("qos"), q, true, false);
    }
    let kind = lun.backstore.value().clone();
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
    let bytes = lun.size.as_ref()?.bytes();
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
