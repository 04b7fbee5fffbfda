//! The command line of `rustgt admin`: its arguments and subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `rustgt admin [--socket PATH] [--json] COMMAND`
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AdminArgs {
    /// Admin socket [default: found from --admin-socket, --config and
    /// --data-dir like the daemon does, else ./rustgt-data/admin.sock, or
    /// the packaged daemon's /run/rustgt/admin.sock when that one does not
    /// exist].
    #[arg(short, long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print results as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AdminCommand {
    /// Daemon summary: version, uptime, socket, metrics, counts.
    Status,
    /// List, show, add and remove targets.
    #[command(subcommand)]
    Target(TargetCmd),
    /// List portals; add or remove a target's portal.
    #[command(subcommand)]
    Portal(PortalCmd),
    /// List, add, remove and resize LUNs; set their readahead policy.
    #[command(subcommand)]
    Lun(LunCmd),
    /// A target's initiator access list.
    #[command(subcommand)]
    Acl(AclCmd),
    /// CHAP credentials of a target or of discovery.
    #[command(subcommand)]
    Chap(ChapCmd),
    /// Sessions: list, show, ask to log out, kill.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Every open connection, logged in or not.
    Connections,
    /// Per-LUN and per-session statistics.
    #[command(subcommand)]
    Stats(StatsCmd),
    /// Save, apply or reload the configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// The Prometheus exposition (what GET /metrics serves).
    Metrics,
    /// Send one raw JSON request line and print the raw reply.
    Raw {
        /// e.g. '{"cmd":"list_targets"}'
        request: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum TargetCmd {
    List,
    Show {
        iqn: String,
    },
    /// Add a target without LUNs (add them with `lun add`).
    Add {
        iqn: String,
        #[arg(long)]
        alias: Option<String>,
        /// Target portal group tag [default: 1].
        #[arg(long)]
        tpgt: Option<u16>,
        /// ADDR:PORT, repeatable [default: 127.0.0.1:3260].
        #[arg(long = "portal", value_name = "ADDR:PORT")]
        portals: Vec<SocketAddr>,
        /// Allowed initiator name, repeatable [default: any initiator].
        #[arg(long = "acl", value_name = "INITIATOR")]
        acl: Vec<String>,
    },
    /// Remove a target; refused while it has sessions unless --force.
    Remove {
        iqn: String,
        /// Kill its sessions and remove it anyway.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum PortalCmd {
    List,
    /// Add ADDR:PORT to a target (a new address is bound at once).
    Add {
        iqn: String,
        portal: SocketAddr,
    },
    /// Remove ADDR:PORT from a target (closed once no target lists it;
    /// connections already made stay).
    Remove {
        iqn: String,
        portal: SocketAddr,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum LunCmd {
    List {
        iqn: Option<String>,
    },
    /// Add a LUN; options are the config file's LUN keys.
    Add {
        iqn: String,
        id: u64,
        /// file, blockdev, ram, null, hddsim or rbd.
        #[arg(long)]
        backstore: String,
        /// rbd: the image as POOL/IMAGE or POOL/NAMESPACE/IMAGE (it must
        /// exist; its size is the LUN's).
        #[arg(long, value_name = "POOL/[NAMESPACE/]IMAGE")]
        rbd_image: Option<String>,
        /// rbd: ceph.conf of the cluster (default: librados' search).
        #[arg(long)]
        ceph_conf: Option<PathBuf>,
        /// rbd: cephx client id without "client." (default admin).
        #[arg(long)]
        ceph_id: Option<String>,
        /// rbd: keyring (default: the one ceph.conf names).
        #[arg(long)]
        ceph_keyring: Option<PathBuf>,
        #[arg(long)]
        path: Option<PathBuf>,
        /// e.g. 1G, 512M.
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        block_size: Option<u32>,
        #[arg(long)]
        read_only: bool,
        /// Fully provisioned instead of thin.
        #[arg(long)]
        thick: bool,
        /// Report no volatile write cache (every write is FUA).
        #[arg(long)]
        no_write_cache: bool,
        #[arg(long)]
        workers: Option<usize>,
        /// Unit serial number; default: generated and saved.
        #[arg(long)]
        serial: Option<String>,
        /// NAA designator, "naa.6" and 31 hex digits; default: generated
        /// and saved.
        #[arg(long)]
        wwn: Option<String>,
        /// none, kernel, classic, context or streams.
        #[arg(long)]
        readahead: Option<String>,
    },
    /// Remove a LUN; refused while its target has sessions unless --force.
    Remove {
        iqn: String,
        id: u64,
        #[arg(long)]
        force: bool,
    },
    /// Grow a LUN (file, blockdev, null); without SIZE pick up the backing
    /// file's or device's current size. Raises CAPACITY DATA HAS CHANGED.
    Resize {
        iqn: String,
        id: u64,
        size: Option<String>,
    },
    /// Set the readahead policy: auto, none, kernel, classic, context, streams.
    Readahead {
        iqn: String,
        id: u64,
        policy: String,
    },
    /// Replace the LUN's injected faults (for tests and failure
    /// rehearsals). Each fault takes a trigger: `always`, or
    /// comma-separated `lba=100-199`, `every=N`, `probability=P` (all must
    /// hold); --delay also takes `time=5ms`. No fault option clears them.
    Fault {
        iqn: String,
        id: u64,
        /// Reads fail: MEDIUM ERROR / UNRECOVERED READ ERROR.
        #[arg(long, value_name = "TRIGGER")]
        read_error: Option<String>,
        /// Writes fail: MEDIUM ERROR / WRITE ERROR.
        #[arg(long, value_name = "TRIGGER")]
        write_error: Option<String>,
        /// Writes find no space: DATA PROTECT / SPACE ALLOCATION FAILED.
        #[arg(long, value_name = "TRIGGER")]
        write_nospace: Option<String>,
        /// Reads and writes wait first: `time=5ms[,TRIGGER]`.
        #[arg(long, value_name = "time=T[,TRIGGER]")]
        delay: Option<String>,
        /// Reads and writes hang until aborted or cleared.
        #[arg(long, value_name = "TRIGGER")]
        hang: Option<String>,
        /// Remove fault injection from the LUN altogether (its I/O then
        /// goes straight to its store again).
        #[arg(long)]
        off: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AclCmd {
    List {
        iqn: String,
    },
    Add {
        iqn: String,
        initiator: String,
    },
    Remove {
        iqn: String,
        initiator: String,
    },
    /// Replace the whole list.
    Set {
        iqn: String,
        #[arg(required = true)]
        initiators: Vec<String>,
    },
    /// Empty the list: any initiator may log in.
    Clear {
        iqn: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ChapCmd {
    /// Require CHAP. Secrets are read from files ("-" for stdin), never
    /// from the command line.
    Set {
        /// The target [default: discovery sessions].
        #[arg(long)]
        target: Option<String>,
        #[arg(long)]
        user: String,
        #[arg(long, value_name = "FILE")]
        secret_file: PathBuf,
        /// Name the target answers with when the initiator asks (mutual CHAP).
        #[arg(long, requires = "mutual_secret_file")]
        mutual_user: Option<String>,
        #[arg(long, value_name = "FILE", requires = "mutual_user")]
        mutual_secret_file: Option<PathBuf>,
    },
    /// Turn CHAP off.
    Clear {
        /// The target [default: discovery sessions].
        #[arg(long)]
        target: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SessionCmd {
    List {
        iqn: Option<String>,
    },
    /// A session's connections and negotiated parameters.
    Show {
        tsih: u16,
    },
    /// Ask the initiator to log out (it has 2 seconds).
    Logout {
        tsih: u16,
    },
    /// Close the session's connections now.
    Kill {
        tsih: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum StatsCmd {
    /// Per-LUN I/O, latency, request sizes and readahead.
    Lun {
        iqn: Option<String>,
        id: Option<u64>,
        /// Sample twice, SECS apart, and show rates (IOPS, bytes/s).
        #[arg(long, value_name = "SECS")]
        interval: Option<u64>,
    },
    /// Per-session commands, bytes and latency.
    Session {
        tsih: Option<u16>,
        #[arg(long, value_name = "SECS")]
        interval: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ConfigCmd {
    /// The running configuration as TOML, to FILE (mode 0600) or stdout.
    Save { file: Option<PathBuf> },
    /// Apply FILE as a diff against the running state.
    Apply {
        file: PathBuf,
        /// Remove or replace LUNs and targets even if they have sessions.
        #[arg(long)]
        force: bool,
        /// Only show what would change.
        #[arg(long)]
        dry_run: bool,
    },
    /// Re-apply the daemon's own config file (same as SIGHUP).
    Reload {
        #[arg(long)]
        force: bool,
    },
}
