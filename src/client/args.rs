//! The command line of `rustgt admin`: its arguments and subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};

use crate::api::proto::{
    KeyRule, SettableKey, BACKSTORES, LUN_KEYS, READAHEAD_POLICIES, TARGET_KEYS,
};

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
// One command per process: the size of `lun add`'s options does not matter.
#[allow(clippy::large_enum_variant)]
pub enum AdminCommand {
    /// Daemon summary: version, uptime, socket, metrics, counts.
    Status,
    /// The tree of targets with their portals, LUNs, ACL, CHAP and
    /// sessions, and the listening portals.
    Ls,
    /// List, show, add, change and remove targets.
    #[command(subcommand)]
    Target(TargetCmd),
    /// List portals; add or remove a target's portal.
    #[command(subcommand)]
    Portal(PortalCmd),
    /// List, add, change, remove and resize LUNs; set their readahead
    /// policy and injected faults.
    #[command(subcommand)]
    Lun(LunCmd),
    /// A target's initiator access list.
    #[command(subcommand)]
    Acl(AclCmd),
    /// CHAP credentials of a target or of discovery.
    #[command(subcommand)]
    Chap(ChapCmd),
    /// Initiator groups of a target: LUN maps and CHAP of their own.
    #[command(subcommand)]
    Group(GroupCmd),
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
    /// QoS limits (OpenStack Cinder's keys) of targets, LUNs and
    /// initiators on a LUN, and their throttling counters.
    #[command(subcommand)]
    Qos(QosCmd),
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
    /// Change keys of a target (alias, tpgt, acl, portals), live and saved.
    ///
    /// KEY is a [[targets]] key of the config file; lists are
    /// comma-separated (acl=iqn.a,iqn.b); KEY= restores the default. New
    /// logins see the change; keys that cannot change live (iqn, chap,
    /// luns, iser_portals, port_groups) are refused by name.
    Set {
        iqn: String,
        #[arg(required = true, value_name = "KEY=VALUE", value_parser = KeyValueParser::Target, hide_possible_values = true)]
        settings: Vec<(String, String)>,
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
        #[arg(long, value_parser = PossibleValuesParser::new(BACKSTORES))]
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
        /// Logical block size [default: 512].
        #[arg(long, value_parser = PossibleValuesParser::new(["512", "4096"]).try_map(|s| s.parse::<u32>()))]
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
        /// Readahead policy [default: auto].
        #[arg(long, value_parser = PossibleValuesParser::new(READAHEAD_POLICIES))]
        readahead: Option<String>,
        /// Any other LUN key of the config file, e.g. io_context=per-worker
        /// (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = KeyValueParser::Lun, hide_possible_values = true)]
        set: Vec<(String, String)>,
    },
    /// Change keys of a LUN, live and saved.
    ///
    /// KEY is a [[targets.luns]] key of the config file; KEY= restores the
    /// default. readahead, io_context, readahead_*, device_slice, size and
    /// alua change in place; read_only, write_cache, thin, unmap_command,
    /// removable, workers, physical_block_size, sanitize_rate and hddsim_*
    /// replace the LUN (--force while its target has sessions; refused for
    /// a ram LUN, whose data would be lost); id, backstore, path, rbd,
    /// block_size, serial, wwn, pr_state and fault are refused by name.
    Set {
        iqn: String,
        id: u64,
        #[arg(required = true, value_name = "KEY=VALUE", value_parser = KeyValueParser::Lun, hide_possible_values = true)]
        settings: Vec<(String, String)>,
        /// Replace the LUN even while its target has sessions.
        #[arg(long)]
        force: bool,
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
    /// Set the readahead policy (as `lun set IQN ID readahead=POLICY`).
    Readahead {
        iqn: String,
        id: u64,
        #[arg(value_parser = PossibleValuesParser::new(READAHEAD_POLICIES))]
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
pub enum GroupCmd {
    /// A target's groups, in matching order.
    List { iqn: String },
    /// Add a group (`[[targets.groups]]`).
    Add {
        iqn: String,
        name: String,
        /// Initiator name or pattern (`*`, `?`); repeat for several.
        #[arg(long = "initiator", value_name = "NAME", required = true)]
        initiators: Vec<String>,
        /// A mapping LUN=SOURCE, or LUN=SOURCE:ro for read-only; repeat
        /// for several. None: the target's LUNs under their own numbers.
        #[arg(long = "lun", value_name = "LUN=SOURCE[:ro]")]
        luns: Vec<String>,
        /// Members see no LUN (an empty map).
        #[arg(long, conflicts_with = "luns")]
        no_luns: bool,
        /// CHAP name the members log in with (instead of the target's).
        #[arg(long, requires = "chap_secret_file")]
        chap_user: Option<String>,
        /// File holding that CHAP secret ("-" for stdin).
        #[arg(long, value_name = "FILE", requires = "chap_user")]
        chap_secret_file: Option<PathBuf>,
        /// Name the target answers with (mutual CHAP).
        #[arg(long, requires_all = ["mutual_secret_file", "chap_user"])]
        mutual_user: Option<String>,
        #[arg(long, value_name = "FILE", requires = "mutual_user")]
        mutual_secret_file: Option<PathBuf>,
    },
    /// Remove a group by name.
    Remove { iqn: String, name: String },
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
pub enum QosCmd {
    /// Set limits: `qos set IQN [LUN] KEY=VALUE...` (no LUN: the whole
    /// target's), e.g. `total_iops_sec=2000 read_bytes_sec=50M`.
    Set {
        iqn: String,
        /// [LUN] then KEY=VALUE pairs.
        #[arg(required = true, value_name = "[LUN] KEY=VALUE")]
        args: Vec<String>,
        /// Limits of this initiator's commands to the LUN.
        #[arg(long, value_name = "NAME")]
        initiator: Option<String>,
    },
    /// Remove limits: `qos clear IQN [LUN] [KEY...]` (no key: all of them).
    Clear {
        iqn: String,
        #[arg(value_name = "[LUN] KEY")]
        args: Vec<String>,
        #[arg(long, value_name = "NAME")]
        initiator: Option<String>,
    },
    /// Limits and throttling counters (time throttled, waiting, rates).
    Show { iqn: Option<String> },
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

/// Reads `KEY=VALUE`; offers the keys of a table (with their values when
/// they are a fixed set) for completion. The daemon checks the values.
#[derive(Debug, Clone, Copy)]
pub enum KeyValueParser {
    /// `[[targets.luns]]` keys.
    Lun,
    /// `[[targets]]` keys.
    Target,
}

impl TypedValueParser for KeyValueParser {
    type Value = (String, String);

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let bad = |why: String| {
            let mut e = clap::Error::new(clap::error::ErrorKind::ValueValidation).with_cmd(cmd);
            if let Some(a) = arg {
                e.insert(
                    clap::error::ContextKind::InvalidArg,
                    clap::error::ContextValue::String(a.to_string()),
                );
            }
            e.insert(
                clap::error::ContextKind::InvalidValue,
                clap::error::ContextValue::String(value.to_string_lossy().into_owned()),
            );
            e.insert(
                clap::error::ContextKind::Custom,
                clap::error::ContextValue::String(why),
            );
            e
        };
        let text = value.to_str().ok_or_else(|| bad("not UTF-8".into()))?;
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| bad("expected KEY=VALUE".into()))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(bad("expected KEY=VALUE".into()));
        }
        Ok((k.to_owned(), v.to_owned()))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            completions(*self).iter().map(|s| PossibleValue::new(*s)),
        ))
    }
}

/// `KEY=` for each key that can be set, `KEY=VALUE` for each value of an
/// enumerated one; made once per process.
fn completions(table: KeyValueParser) -> &'static [&'static str] {
    use std::sync::OnceLock;
    static LUN: OnceLock<Vec<&'static str>> = OnceLock::new();
    static TARGET: OnceLock<Vec<&'static str>> = OnceLock::new();
    let (cell, keys): (_, &[SettableKey]) = match table {
        KeyValueParser::Lun => (&LUN, LUN_KEYS),
        KeyValueParser::Target => (&TARGET, TARGET_KEYS),
    };
    cell.get_or_init(|| {
        keys.iter()
            .filter(|k| !matches!(k.rule, KeyRule::Refused(_)))
            .flat_map(|k| {
                if k.values.is_empty() {
                    vec![format!("{}=", k.name)]
                } else {
                    k.values.iter().map(|v| format!("{}={v}", k.name)).collect()
                }
            })
            .map(|s| &*s.leak())
            .collect()
    })
}
