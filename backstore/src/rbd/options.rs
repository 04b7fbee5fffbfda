//! Where an RBD image is and how to reach its cluster ([`RbdOptions`]).

use std::path::PathBuf;
use std::time::Duration;

/// Where an RBD image is and how to reach its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RbdOptions {
    /// RADOS pool of the image.
    pub pool: String,
    /// Image name.
    pub image: String,
    /// RADOS namespace inside the pool; `None` for the default one.
    pub namespace: Option<String>,
    /// ceph.conf to read; `None`: librados' search ($CEPH_CONF,
    /// /etc/ceph/ceph.conf, ...).
    pub ceph_conf: Option<PathBuf>,
    /// Client id without the "client." prefix, e.g. "admin".
    pub client_id: String,
    /// Keyring overriding the one ceph.conf names.
    pub keyring: Option<PathBuf>,
    /// Logical block size: 512 or 4096.
    pub block_size: u32,
    /// Open the image read-only; writes are refused before librbd.
    pub read_only: bool,
    /// Connect timeout and OSD/monitor operation timeout.
    pub op_timeout: Duration,
    /// Gateway mode: other daemons serve the same image, and this one is
    /// the gateway of this target port group. The SCSI state the gateways
    /// share (persistent reservations, resets, COMPARE AND WRITE's
    /// exclusion, the lock owner's port group) is then kept in Ceph.
    pub gateway: Option<u16>,
}

impl RbdOptions {
    /// `pool/image` as client "admin", the default ceph.conf, 512-byte
    /// blocks, writable, 30 s timeouts.
    pub fn new(pool: impl Into<String>, image: impl Into<String>) -> Self {
        Self {
            pool: pool.into(),
            image: image.into(),
            namespace: None,
            ceph_conf: None,
            client_id: "admin".into(),
            keyring: None,
            block_size: 512,
            read_only: false,
            op_timeout: Duration::from_secs(30),
            gateway: None,
        }
    }

    /// "pool/image" or "pool/namespace/image", for logs.
    pub fn image_spec(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.pool, self.image),
            None => format!("{}/{}", self.pool, self.image),
        }
    }
}
