//! The admin wire protocol: JSON lines over a Unix socket.
//!
//! Each line a client sends is one [`Request`], an object whose `"cmd"`
//! names the variant in snake_case (`{"cmd":"list_targets"}`,
//! `{"cmd":"remove_lun","target":"iqn...","lun":1,"force":false}`).
//! Unknown commands and unknown fields are errors. Each request gets
//! exactly one line back, in order:
//! `{"ok":true,"result":...}` or `{"ok":false,"error":"..."}`.
//! The result's shape depends on the command (see `docs/admin.md`).
//!
//! Secrets: CHAP secrets go in (`set_chap`, `add_target`, `config_apply`)
//! but only `config_save` gives them back, as the socket is mode 0600.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::stats::Histogram;
use crate::config::{
    ChapSettings, FaultSettings, GroupSettings, LunMapping, LunSettings, TargetSettings,
};

/// Longest request line accepted (a `config_apply` carries a whole file).
pub const MAX_REQUEST_LEN: usize = 16 << 20;

/// One admin request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
// One request per admin call: the size of the LUN and target settings
// variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Request {
    /// Daemon summary: version, uptime, counts, socket and metrics addresses.
    Status,
    ListTargets,
    ShowTarget {
        target: String,
    },
    /// A whole target as in the config file (portals, ACL, CHAP, LUNs).
    AddTarget {
        target: TargetSettings,
    },
    RemoveTarget {
        target: String,
        #[serde(default)]
        force: bool,
    },
    ListPortals,
    AddPortal {
        target: String,
        portal: SocketAddr,
    },
    RemovePortal {
        target: String,
        portal: SocketAddr,
    },
    ListLuns {
        #[serde(default)]
        target: Option<String>,
    },
    /// A LUN as in the config file (`[[targets.luns]]`).
    AddLun {
        target: String,
        lun: LunSettings,
    },
    RemoveLun {
        target: String,
        lun: u64,
        #[serde(default)]
        force: bool,
    },
    /// Grow a LUN to `size` ("2G"); without a size, pick up the backing
    /// file's or device's current size. Raises CAPACITY DATA HAS CHANGED.
    ResizeLun {
        target: String,
        lun: u64,
        #[serde(default)]
        size: Option<String>,
    },
    SetReadahead {
        target: String,
        lun: u64,
        policy: String,
    },
    /// Change keys of an existing LUN (`[[targets.luns]]` keys, see
    /// [`LUN_KEYS`]). A value is JSON, or a string read like the value of
    /// `KEY=VALUE` on the command line; null or "" restores the key's
    /// default. Keys whose change replaces the LUN need `force` while its
    /// target has sessions; keys that cannot change live are refused by name.
    SetLun {
        target: String,
        lun: u64,
        settings: serde_json::Map<String, serde_json::Value>,
        #[serde(default)]
        force: bool,
    },
    /// Change keys of an existing target (see [`TARGET_KEYS`]), as
    /// [`Request::SetLun`] does.
    SetTarget {
        target: String,
        settings: serde_json::Map<String, serde_json::Value>,
    },
    /// Replace a LUN's injected faults (`[targets.luns.fault]`); an empty
    /// table clears them, `None` removes fault injection from the LUN.
    SetFaults {
        target: String,
        lun: u64,
        #[serde(default)]
        fault: Option<Box<FaultSettings>>,
    },
    /// Change QoS limits (Cinder's key names): of the target (no `lun`),
    /// of a LUN, or of one initiator on a LUN. `set` gives keys their
    /// values (as text: "2000", "50M"), `clear` removes keys, `clear_all`
    /// every key of that scope first.
    SetQos {
        target: String,
        #[serde(default)]
        lun: Option<u64>,
        #[serde(default)]
        initiator: Option<String>,
        #[serde(default)]
        set: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        clear: Vec<String>,
        #[serde(default)]
        clear_all: bool,
    },
    /// QoS limits and their throttling counters (all targets without
    /// `target`).
    ShowQos {
        #[serde(default)]
        target: Option<String>,
    },
    /// Replace the initiator ACL; empty allows any initiator.
    SetAcl {
        target: String,
        acl: Vec<String>,
    },
    AclAdd {
        target: String,
        initiator: String,
    },
    AclRemove {
        target: String,
        initiator: String,
    },
    /// Add an initiator group (`[[targets.groups]]`) to a target; refused
    /// if one of that name exists. Sessions whose LUN map changes are
    /// asked to log out (and see the new map when they log in again).
    GroupAdd {
        target: String,
        group: GroupSettings,
    },
    /// Remove an initiator group of a target by name.
    GroupRemove {
        target: String,
        name: String,
    },
    /// CHAP of a target, or of discovery sessions when `target` is absent;
    /// `chap` absent turns CHAP off.
    SetChap {
        #[serde(default)]
        target: Option<String>,
        #[serde(default)]
        chap: Option<ChapSettings>,
    },
    ListSessions {
        #[serde(default)]
        target: Option<String>,
    },
    ListConnections,
    /// Ask every connection of the session to log out (Async Message).
    LogoutSession {
        tsih: u16,
    },
    /// Close every connection of the session now.
    KillSession {
        tsih: u16,
    },
    LunStats {
        #[serde(default)]
        target: Option<String>,
        #[serde(default)]
        lun: Option<u64>,
    },
    SessionStats {
        #[serde(default)]
        tsih: Option<u16>,
    },
    /// The Prometheus text exposition served on `metrics_listen`.
    Metrics,
    /// The running configuration as TOML (with secrets).
    ConfigSave,
    /// Apply a configuration file's text as a diff against the running
    /// state. `origin` names the file in error messages.
    ConfigApply {
        toml: String,
        #[serde(default)]
        origin: Option<String>,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        dry_run: bool,
    },
    /// Re-apply the daemon's own config file (what SIGHUP does).
    ConfigReload {
        #[serde(default)]
        force: bool,
    },
}

impl Request {
    /// The `cmd` name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::ListTargets => "list_targets",
            Request::ShowTarget { .. } => "show_target",
            Request::AddTarget { .. } => "add_target",
            Request::RemoveTarget { .. } => "remove_target",
            Request::ListPortals => "list_portals",
            Request::AddPortal { .. } => "add_portal",
            Request::RemovePortal { .. } => "remove_portal",
            Request::ListLuns { .. } => "list_luns",
            Request::AddLun { .. } => "add_lun",
            Request::RemoveLun { .. } => "remove_lun",
            Request::ResizeLun { .. } => "resize_lun",
            Request::SetReadahead { .. } => "set_readahead",
            Request::SetLun { .. } => "set_lun",
            Request::SetTarget { .. } => "set_target",
            Request::SetFaults { .. } => "set_faults",
            Request::SetQos { .. } => "set_qos",
            Request::ShowQos { .. } => "show_qos",
            Request::SetAcl { .. } => "set_acl",
            Request::AclAdd { .. } => "acl_add",
            Request::AclRemove { .. } => "acl_remove",
            Request::SetChap { .. } => "set_chap",
            Request::GroupAdd { .. } => "group_add",
            Request::GroupRemove { .. } => "group_remove",
            Request::ListSessions { .. } => "list_sessions",
            Request::ListConnections => "list_connections",
            Request::LogoutSession { .. } => "logout_session",
            Request::KillSession { .. } => "kill_session",
            Request::LunStats { .. } => "lun_stats",
            Request::SessionStats { .. } => "session_stats",
            Request::Metrics => "metrics",
            Request::ConfigSave => "config_save",
            Request::ConfigApply { .. } => "config_apply",
            Request::ConfigReload { .. } => "config_reload",
        }
    }
}

impl Request {
    /// Whether the request changes anything (and is therefore logged with
    /// who sent it). Queries, statistics, `config_save` and dry runs do
    /// not; `logout_session` and `kill_session` do.
    pub fn is_change(&self) -> bool {
        match self {
            Request::Status
            | Request::ListTargets
            | Request::ShowTarget { .. }
            | Request::ListPortals
            | Request::ListLuns { .. }
            | Request::ListSessions { .. }
            | Request::ListConnections
            | Request::LunStats { .. }
            | Request::SessionStats { .. }
            | Request::ShowQos { .. }
            | Request::Metrics
            | Request::ConfigSave => false,
            Request::ConfigApply { dry_run, .. } => !dry_run,
            Request::AddTarget { .. }
            | Request::RemoveTarget { .. }
            | Request::AddPortal { .. }
            | Request::RemovePortal { .. }
            | Request::AddLun { .. }
            | Request::RemoveLun { .. }
            | Request::ResizeLun { .. }
            | Request::SetReadahead { .. }
            | Request::SetLun { .. }
            | Request::SetTarget { .. }
            | Request::SetFaults { .. }
            | Request::SetQos { .. }
            | Request::SetAcl { .. }
            | Request::AclAdd { .. }
            | Request::AclRemove { .. }
            | Request::SetChap { .. }
            | Request::GroupAdd { .. }
            | Request::GroupRemove { .. }
            | Request::LogoutSession { .. }
            | Request::KillSession { .. }
            | Request::ConfigReload { .. } => true,
        }
    }

    /// What the request asks for, in one line for the log: its name and
    /// the fields that say what it touches. Never a CHAP secret, nor a
    /// `config_apply` file's text (only its origin and length).
    pub fn describe(&self) -> String {
        let name = self.name();
        match self {
            Request::ShowTarget { target } => format!("{name} target={target}"),
            Request::AddTarget { target } => {
                let luns: Vec<u64> = target.luns.iter().map(|l| l.id).collect();
                format!("{name} target={} luns={luns:?}", target.iqn)
            }
            Request::RemoveTarget { target, force } => {
                format!("{name} target={target} force={force}")
            }
            Request::AddPortal { target, portal } | Request::RemovePortal { target, portal } => {
                format!("{name} target={target} portal={portal}")
            }
            Request::AddLun { target, lun } => format!(
                "{name} target={target} lun={} backstore={}",
                lun.id, lun.backstore
            ),
            Request::RemoveLun { target, lun, force } => {
                format!("{name} target={target} lun={lun} force={force}")
            }
            Request::ResizeLun { target, lun, size } => format!(
                "{name} target={target} lun={lun} size={}",
                size.as_deref().unwrap_or("(backing size)")
            ),
            Request::SetReadahead {
                target,
                lun,
                policy,
            } => format!("{name} target={target} lun={lun} policy={policy}"),
            Request::SetLun {
                target,
                lun,
                settings,
                force,
            } => format!(
                "{name} target={target} lun={lun} keys={:?} force={force}",
                settings.keys().collect::<Vec<_>>()
            ),
            Request::SetTarget { target, settings } => format!(
                "{name} target={target} keys={:?}",
                settings.keys().collect::<Vec<_>>()
            ),
            Request::SetFaults { target, lun, fault } => format!(
                "{name} target={target} lun={lun} faults={}",
                if fault.is_some() { "set" } else { "off" }
            ),
            Request::SetAcl { target, acl } => format!("{name} target={target} acl={acl:?}"),
            Request::AclAdd { target, initiator } | Request::AclRemove { target, initiator } => {
                format!("{name} target={target} initiator={initiator}")
            }
            Request::GroupAdd { target, group } => format!(
                "{name} target={target} group={} initiators={:?} luns={} chap={}",
                group.name,
                group.initiators,
                group
                    .luns
                    .as_ref()
                    .map_or("(target's)".to_owned(), |l| l.len().to_string()),
                group.chap.as_ref().map_or("-", |c| c.user.as_str())
            ),
            Request::GroupRemove {
                target,
                name: group,
            } => {
                format!("{name} target={target} group={group}")
            }
            Request::SetChap { target, chap } => format!(
                "{name} target={} chap={}",
                target.as_deref().unwrap_or("(discovery)"),
                match chap {
                    Some(c) => format!(
                        "user={} mutual_user={}",
                        c.user,
                        c.mutual_user.as_deref().unwrap_or("-")
                    ),
                    None => "off".to_owned(),
                }
            ),
            Request::ListLuns { target } | Request::ListSessions { target } => {
                format!("{name} target={}", target.as_deref().unwrap_or("(all)"))
            }
            Request::LogoutSession { tsih } | Request::KillSession { tsih } => {
                format!("{name} tsih={tsih}")
            }
            Request::ConfigApply {
                toml,
                origin,
                force,
                dry_run,
            } => format!(
                "{name} origin={} bytes={} force={force} dry_run={dry_run}",
                origin.as_deref().unwrap_or("(request)"),
                toml.len()
            ),
            Request::ConfigReload { force } => format!("{name} force={force}"),
            Request::SetQos {
                target,
                lun,
                initiator,
                set,
                clear,
                clear_all,
            } => format!(
                "{name} target={target} lun={} initiator={} set={set:?} clear={clear:?} clear_all={clear_all}",
                lun.map_or("(target)".to_owned(), |l| l.to_string()),
                initiator.as_deref().unwrap_or("(all)")
            ),
            Request::ShowQos { target } => {
                format!("{name} target={}", target.as_deref().unwrap_or("(all)"))
            }
            Request::Status
            | Request::ListTargets
            | Request::ListPortals
            | Request::ListConnections
            | Request::LunStats { .. }
            | Request::SessionStats { .. }
            | Request::Metrics
            | Request::ConfigSave => name.to_owned(),
        }
    }
}

// ---------------------------------------------------------------------------
// Keys `set_lun` and `set_target` (`lun set`, `target set`) take
// ---------------------------------------------------------------------------

/// What changing a key through `set_lun` / `set_target` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// Applied in place: sessions keep running (readahead switched, store
    /// resized, new logins see new target settings).
    Live,
    /// Applied by replacing the LUN (removed, then added with the new
    /// value at once): needs `force` while the target has sessions, which
    /// then see REPORTED LUNS DATA HAS CHANGED.
    Replaces,
    /// Not changed this way; the text says what to do instead.
    Refused(&'static str),
}

/// One key of `[[targets]]` or `[[targets.luns]]` as `set_*` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettableKey {
    pub name: &'static str,
    pub rule: KeyRule,
    /// The values it takes when they are a fixed set (for completion).
    pub values: &'static [&'static str],
}

const fn key(name: &'static str, rule: KeyRule, values: &'static [&'static str]) -> SettableKey {
    SettableKey { name, rule, values }
}

/// The `backstore` engines (`lun add --backstore`).
pub const BACKSTORES: &[&str] = &["file", "mmap", "blockdev", "ram", "null", "hddsim", "rbd"];
/// Readahead settings (`lun readahead`, `lun add --readahead`).
pub const READAHEAD_POLICIES: &[&str] =
    &["auto", "none", "kernel", "classic", "context", "streams"];
const BOOLS: &[&str] = &["true", "false"];
const IO_CONTEXTS: &[&str] = &["shared", "per-worker"];
const DEVICE_SLICES: &[&str] = &["auto", "off"];

const NEW_LUN: KeyRule = KeyRule::Refused(
    "it names the LUN's data; remove the LUN and add it anew (`lun remove`, `lun add`)",
);
const IDENTITY: KeyRule = KeyRule::Refused(
    "it is the LU's identity, fixed when the LUN was added (initiators take a new one for another disk); \
     remove the LUN and add it anew",
);

/// Every `[[targets.luns]]` key and how `lun set` treats it.
pub const LUN_KEYS: &[SettableKey] = &[
    key("id", NEW_LUN, &[]),
    key("backstore", NEW_LUN, BACKSTORES),
    key("path", NEW_LUN, &[]),
    key("rbd", NEW_LUN, &[]),
    key("size", KeyRule::Live, &[]),
    key(
        "block_size",
        KeyRule::Refused(
            "initiators would read the LUN's data with another geometry; remove the LUN and add it anew",
        ),
        &["512", "4096"],
    ),
    key("read_only", KeyRule::Replaces, BOOLS),
    key("thin", KeyRule::Replaces, BOOLS),
    key("write_cache", KeyRule::Replaces, BOOLS),
    key("workers", KeyRule::Replaces, &[]),
    key("serial", IDENTITY, &[]),
    key("wwn", IDENTITY, &[]),
    key("removable", KeyRule::Replaces, BOOLS),
    key("alua", KeyRule::Replaces, &["implicit", "explicit", "both"]),
    key(
        "pr_state",
        KeyRule::Refused(
            "the LUN's persistent reservations are kept there; edit the file and restart",
        ),
        &[],
    ),
    key("physical_block_size", KeyRule::Replaces, &[]),
    key("unmap_command", KeyRule::Replaces, BOOLS),
    key("sanitize_rate", KeyRule::Replaces, &[]),
    key("readahead", KeyRule::Live, READAHEAD_POLICIES),
    key("io_context", KeyRule::Live, IO_CONTEXTS),
    key("readahead_cache", KeyRule::Live, &[]),
    key("readahead_max", KeyRule::Live, &[]),
    key("readahead_io_threads", KeyRule::Live, &[]),
    key("readahead_io_max", KeyRule::Live, &[]),
    key("device_slice", KeyRule::Live, DEVICE_SLICES),
    key("hddsim_device", KeyRule::Replaces, &[]),
    key("hddsim_offset", KeyRule::Replaces, &[]),
    key("hddsim_disks", KeyRule::Replaces, &[]),
    key("hddsim_speedup", KeyRule::Replaces, &[]),
    key(
        "fault",
        KeyRule::Refused("it is a table; use `rustgt admin lun fault`"),
        &[],
    ),
    key(
        "qos",
        KeyRule::Refused("it is a table; use `rustgt admin qos set` and `qos clear`"),
        &[],
    ),
];

/// Every `[[targets]]` key and how `target set` treats it.
pub const TARGET_KEYS: &[SettableKey] = &[
    key(
        "iqn",
        KeyRule::Refused("it is the target's name; add a target under the new name"),
        &[],
    ),
    key("alias", KeyRule::Live, &[]),
    key("portals", KeyRule::Live, &[]),
    key(
        "iser_portals",
        KeyRule::Refused("iSER listeners start with the daemon; edit the file and restart"),
        &[],
    ),
    key("tpgt", KeyRule::Live, &[]),
    key(
        "port_groups",
        KeyRule::Refused(
            "gateways' shared state is chosen when the images are opened; edit the file and restart",
        ),
        &[],
    ),
    key("acl", KeyRule::Live, &[]),
    key(
        "chap",
        KeyRule::Refused("use `rustgt admin chap set`, which reads secrets from files"),
        &[],
    ),
    key(
        "luns",
        KeyRule::Refused("use `rustgt admin lun add`, `lun remove` and `lun set`"),
        &[],
    ),
    key(
        "qos",
        KeyRule::Refused("it is a table; use `rustgt admin qos set` and `qos clear`"),
        &[],
    ),
    key(
        "groups",
        KeyRule::Refused("use `rustgt admin group add` and `group remove`"),
        &[],
    ),
    key(
        "redirect",
        KeyRule::Refused(
            "it is a table; edit [targets.redirect] in the file and `rustgt admin config apply` it (or SIGHUP)",
        ),
        &[],
    ),
];

/// The entry of `name` in `keys`.
pub fn settable(keys: &[SettableKey], name: &str) -> Option<SettableKey> {
    keys.iter().find(|k| k.name == name).copied()
}

/// Sets key `name` of the settings object `obj` (a `T` as JSON) to
/// `value`, read as [`candidates`] says; null or "" removes the key so
/// that its default applies. The result must still be a `T`. Errors name
/// the key.
pub fn set_key<T: serde::de::DeserializeOwned>(
    obj: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    value: &serde_json::Value,
) -> Result<(), String> {
    let fits = |o: &serde_json::Map<String, Value>| {
        serde_json::from_value::<T>(Value::Object(o.clone())).map(|_| ())
    };
    if value.is_null() || value.as_str().is_some_and(str::is_empty) {
        let mut next = obj.clone();
        next.remove(name);
        fits(&next).map_err(|e| format!("{name} has no default: {e}"))?;
        *obj = next;
        return Ok(());
    }
    let mut error = None;
    for candidate in candidates(value) {
        let is_text = candidate.is_string();
        let mut next = obj.clone();
        next.insert(name.to_owned(), candidate);
        match fits(&next) {
            Ok(()) => {
                *obj = next;
                return Ok(());
            }
            // The text reading's error says the most (a misspelt policy,
            // a bad size); a typed one's only what it is not.
            Err(e) if is_text || error.is_none() => error = Some(e),
            Err(_) => {}
        }
    }
    let e = error.map(|e| e.to_string()).unwrap_or_default();
    Err(format!("{name} = {value}: {e}"))
}

/// The readings of one `set_*` value: JSON as given; a string as a TOML
/// value when it is one and not text, as the text itself, and as a
/// comma-separated list of such values.
pub fn candidates(value: &Value) -> Vec<Value> {
    let Value::String(s) = value else {
        return vec![value.clone()];
    };
    let typed = |s: &str| -> Option<Value> {
        let t: toml::Table = toml::from_str(&format!("v = {s}")).ok()?;
        let v = t.get("v")?;
        if v.is_str() {
            return None;
        }
        serde_json::to_value(v).ok()
    };
    let mut out = Vec::new();
    if let Some(v) = typed(s) {
        out.push(v);
    }
    out.push(Value::String(s.clone()));
    let items: Vec<Value> = s
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(|i| typed(i).unwrap_or_else(|| Value::String(i.to_owned())))
        .collect();
    out.push(Value::Array(items));
    out
}

/// The answer line: exactly one of `result` and `error` is present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    pub fn success(result: serde_json::Value) -> Reply {
        Reply {
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    pub fn failure(error: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            result: None,
            error: Some(error.into()),
        }
    }

    /// The line to send, without the newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self)
            .unwrap_or_else(|e| format!(r#"{{"ok":false,"error":"cannot encode the reply: {e}"}}"#))
    }
}

/// Parses one request line, with an error message fit for the client.
pub fn parse_request(line: &str) -> Result<Request, String> {
    serde_json::from_str(line).map_err(|e| format!("bad request: {e}"))
}

// ---------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------

/// Result of `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusView {
    pub version: String,
    pub pid: u32,
    pub uptime_secs: u64,
    /// The file SIGHUP re-applies, if the daemon was started with one.
    pub config_file: Option<String>,
    pub admin_socket: String,
    pub metrics: Option<SocketAddr>,
    pub targets: usize,
    pub luns: usize,
    pub portals: Vec<SocketAddr>,
    pub sessions: usize,
    pub connections: usize,
    /// Whether admin changes are written to `config_file`.
    #[serde(default)]
    pub persist: bool,
    /// The running state has changes the configuration file lacks (only
    /// with persistence off, or after a failed write); SIGHUP then refuses
    /// to revert them unless forced.
    #[serde(default)]
    pub unsaved_changes: bool,
    /// The daemon-wide budget of write data buffers.
    #[serde(default)]
    pub data_buffers: DataBuffersView,
}

/// The write data buffer budget (`[limits] data_buffer_bytes`) and its use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DataBuffersView {
    /// Bytes the budget allows.
    pub budget_bytes: u64,
    /// Bytes held now by writes being collected or written.
    pub used_bytes: u64,
    /// Connections with a write waiting for room now.
    pub waiting_connections: usize,
    /// Writes that waited for room, since start.
    pub waits: u64,
    /// Connections closed for sitting on solicited data past
    /// `data_out_timeout_secs`, since start.
    pub data_out_timeouts: u64,
}

impl From<rustgt_iscsi::BudgetSnapshot> for DataBuffersView {
    fn from(b: rustgt_iscsi::BudgetSnapshot) -> Self {
        DataBuffersView {
            budget_bytes: b.total,
            used_bytes: b.used,
            waiting_connections: b.waiting,
            waits: b.waits,
            data_out_timeouts: b.timeouts,
        }
    }
}

/// CHAP as shown: names only, never secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChapView {
    pub user: String,
    pub mutual_user: Option<String>,
}

impl ChapView {
    pub fn of(c: &ChapSettings) -> ChapView {
        ChapView {
            user: c.user.clone(),
            mutual_user: c.mutual_user.clone(),
        }
    }
}

/// One target (`list_targets` items, `show_target` result).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetView {
    pub iqn: String,
    pub alias: Option<String>,
    pub tpgt: u16,
    pub portals: Vec<SocketAddr>,
    /// Empty: any initiator may log in.
    pub acl: Vec<String>,
    pub chap: Option<ChapView>,
    pub luns: Vec<LunView>,
    pub sessions: Vec<SessionView>,
    /// Initiator groups, in matching order (CHAP names only).
    #[serde(default)]
    pub groups: Vec<GroupView>,
}

/// One initiator group of a target as shown: no secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupView {
    pub name: String,
    pub initiators: Vec<String>,
    pub chap: Option<ChapView>,
    /// `None`: the target's LUNs under their own numbers.
    pub luns: Option<Vec<LunMapping>>,
}

impl GroupView {
    pub fn of(g: &GroupSettings) -> GroupView {
        GroupView {
            name: g.name.clone(),
            initiators: g.initiators.clone(),
            chap: g.chap.as_ref().map(ChapView::of),
            luns: g.luns.clone(),
        }
    }
}

/// One LUN as configured and as running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LunView {
    pub target: String,
    pub id: u64,
    pub backstore: String,
    pub path: Option<String>,
    /// The capacity the LUN reports now.
    pub size_bytes: u64,
    pub block_size: u32,
    pub read_only: bool,
    pub thin: bool,
    pub write_cache: bool,
    pub workers: usize,
    pub serial: String,
    /// The configured NAA designator ("naa.6..."); none for rbd LUNs,
    /// whose designator is derived from the target name and LUN.
    #[serde(default)]
    pub wwn: Option<String>,
    /// The readahead policy running, if the LUN has an I/O context.
    pub readahead: Option<String>,
    /// With a `fault` table: the faults set now ("read_error", "hang", ...;
    /// empty when none) and how many have been injected.
    #[serde(default)]
    pub faults: Option<FaultsView>,
    /// With explicit ALUA: the `alua` setting and the access state of this
    /// daemon's target port group ("explicit, standby").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alua: Option<String>,
}

/// A LUN's injected faults (see `lun fault`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsView {
    pub set: Vec<String>,
    pub injected: u64,
}

/// One listening portal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortalView {
    /// The address bound (port resolved).
    pub address: SocketAddr,
    /// Targets that list it (SendTargets answers).
    pub targets: Vec<String>,
    /// Connections that came in through it.
    pub connections: usize,
}

/// Negotiated session parameters (RFC 7143 §13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamsView {
    pub header_digest: String,
    pub data_digest: String,
    pub max_connections: u16,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    /// Most the target sends per PDU (the initiator's declaration).
    pub initiator_max_recv_data_segment_length: u32,
    /// Most the target accepts per PDU (its own declaration).
    pub target_max_recv_data_segment_length: u32,
    pub max_outstanding_r2t: u32,
    pub default_time2wait: u16,
    pub default_time2retain: u16,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u8,
    pub rdma_extensions: bool,
}

/// One connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnView {
    pub conn_id: u64,
    pub peer: SocketAddr,
    /// The portal it came in through.
    pub local: SocketAddr,
    /// "tcp" (or "iser").
    pub transport: String,
    /// "full-feature" for a logged-in Normal session; "login" for a login
    /// in progress or a discovery session.
    pub state: String,
    pub cid: Option<u16>,
    pub tsih: Option<u16>,
    pub initiator: Option<String>,
    pub target: Option<String>,
}

/// One Normal session and its connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    pub tsih: u16,
    /// ISID as 12 hex digits.
    pub isid: String,
    pub initiator: String,
    pub initiator_alias: Option<String>,
    pub target: String,
    pub connections: Vec<ConnView>,
    pub params: ParamsView,
}

/// Counters of the backing requests a LUN made (below the SCSI core,
/// above or without an I/O context).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatsView {
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub errors: u64,
    pub read_latency: Histogram,
    pub write_latency: Histogram,
    /// Sizes of the read and write requests to the store.
    pub request_sizes: Histogram,
}

/// The LUN's I/O context: readahead and the backing reads it issued.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadaheadStatsView {
    pub policy: String,
    /// True when readahead is left to the kernel's page cache: the context
    /// only counts, so hits and misses are not known.
    pub passthrough: bool,
    pub requests: u64,
    pub bytes: u64,
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    pub wasted_bytes: u64,
    pub backing_requests: u64,
    pub backing_bytes: u64,
    pub backing_sizes: Histogram,
    /// Demand read latency through the context; for a passthrough context,
    /// whose reads are the store's, the store's read latency.
    pub latency: Histogram,
    pub cache_bytes: u64,
    pub cache_limit_bytes: u64,
    /// Turns at a device shared with other LUNs; absent when the context
    /// does not take turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_turns: Option<DeviceTurnsView>,
}

/// A seeking device's turn-taking, counted for all its LUNs together.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTurnsView {
    pub device: String,
    /// Turns granted to a context.
    pub turns: u64,
    /// Turns that ended on their byte budget while another context waited.
    pub budget_ends: u64,
    /// Turns taken from an owner that started nothing for 500 ms while
    /// others waited: the gate's safety valve. Non-zero means a bug.
    #[serde(default)]
    pub stale_turns: u64,
}

/// `lun_stats` items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LunStatsView {
    pub target: String,
    pub lun: u64,
    pub capacity_bytes: u64,
    /// SCSI commands counted by the SCSI core.
    pub read_commands: u64,
    pub write_commands: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub backing: StoreStatsView,
    /// Absent when the LUN has no I/O context.
    pub readahead: Option<ReadaheadStatsView>,
    /// Throttling counters, when a QoS limit covers the LUN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosStatsView>,
}

/// `session_stats` items: sums over the session's connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatsView {
    pub tsih: u16,
    /// The initiator's session ID, 12 hex digits: with the initiator name
    /// it names the session across re-logins (a reinstated session keeps
    /// it, and gets a new TSIH), so the metrics label sessions by it.
    #[serde(default)]
    pub isid: String,
    /// "tcp" or "iser" (empty from a daemon that did not say).
    #[serde(default)]
    pub transport: String,
    pub target: String,
    pub initiator: String,
    pub connections: usize,
    pub commands: u64,
    /// Commands that ended with a status other than GOOD.
    pub errors: u64,
    /// Data-In bytes (to the initiator).
    pub read_bytes: u64,
    /// Data-Out bytes (from the initiator).
    pub write_bytes: u64,
    /// From command arrival to SCSI completion.
    pub latency: Histogram,
    /// Throttling counters over the target's LUNs, when QoS limits are
    /// set on the target or one of its LUNs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosStatsView>,
}

/// Result of every change (`add_*`, `remove_*`, `set_*`, `config_apply`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeReport {
    /// Nothing was changed: the plan is only shown.
    pub dry_run: bool,
    /// One line per change made (or planned), e.g. "target iqn.x: LUN 2 added".
    pub changes: Vec<String>,
    /// Settings that differ but only take effect after a restart.
    pub restart_needed: Vec<String>,
    /// The file the change was written to (persistence on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_to: Option<String>,
    /// Why the change, applied, is not in the configuration file: the
    /// write failed, or persistence is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_saved: Option<String>,
}

/// Result of `config_save`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigText {
    pub toml: String,
}

/// Result of `metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricsText {
    pub text: String,
}

/// Result of `logout_session` / `kill_session`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAction {
    pub tsih: u16,
    pub connections: usize,
}

/// Throttling counters (`rustgt_scsi::QosStats`) as the protocol carries
/// them (`From` it is in `admin/qos.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosStatsView {
    /// READs and WRITEs that passed the limits (their rate over an
    /// interval is the effective IOPS).
    pub commands: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, commands that had to wait.
    pub delayed: u64,
    /// Time they waited, summed, microseconds.
    pub throttled_us: u64,
    /// Commands waiting for a limit now.
    pub waiting: u64,
}

/// `show_qos` items: one per limited scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosView {
    pub target: String,
    /// Absent for the target's own limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lun: Option<u64>,
    /// Set for an initiator's limits on a LUN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator: Option<String>,
    /// The keys set (Cinder's names), as in the config file.
    pub limits: std::collections::BTreeMap<String, serde_json::Value>,
    pub stats: QosStatsView,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_told_from_queries_and_described_without_secrets() {
        let req = |line: &str| parse_request(line).expect(line);
        for q in [
            r#"{"cmd":"status"}"#,
            r#"{"cmd":"list_luns"}"#,
            r#"{"cmd":"lun_stats","target":"iqn.x:a","lun":0}"#,
            r#"{"cmd":"config_save"}"#,
            r#"{"cmd":"config_apply","toml":"","dry_run":true}"#,
        ] {
            assert!(!req(q).is_change(), "{q}");
        }
        let chap = req(
            r#"{"cmd":"set_chap","target":"iqn.x:a","chap":{"user":"alice","secret":"0123456789abcdef","mutual_user":"t","mutual_secret":"fedcba9876543210"}}"#,
        );
        assert!(chap.is_change());
        let text = chap.describe();
        assert_eq!(
            text,
            "set_chap target=iqn.x:a chap=user=alice mutual_user=t"
        );
        assert!(!text.contains("0123456789abcdef") && !text.contains("fedcba9876543210"));
        let apply = req(r#"{"cmd":"config_apply","toml":"secret = 1","origin":"f.toml"}"#);
        assert!(apply.is_change());
        assert_eq!(
            apply.describe(),
            "config_apply origin=f.toml bytes=10 force=false dry_run=false"
        );
        let kill = req(r#"{"cmd":"kill_session","tsih":7}"#);
        assert!(kill.is_change());
        assert_eq!(kill.describe(), "kill_session tsih=7");
    }

    #[test]
    fn requests_are_tagged_snake_case_objects() {
        let r = parse_request(r#"{"cmd":"remove_lun","target":"iqn.a","lun":3}"#).expect("parses");
        assert_eq!(
            r,
            Request::RemoveLun {
                target: "iqn.a".into(),
                lun: 3,
                force: false
            }
        );
        assert_eq!(r.name(), "remove_lun");
        let line = serde_json::to_string(&Request::ListTargets).expect("encodes");
        assert_eq!(line, r#"{"cmd":"list_targets"}"#);
        let round: Request = serde_json::from_str(
            &serde_json::to_string(&Request::ConfigApply {
                toml: "x = 1".into(),
                origin: Some("/etc/a.toml".into()),
                force: true,
                dry_run: false,
            })
            .expect("encodes"),
        )
        .expect("decodes");
        assert!(matches!(round, Request::ConfigApply { force: true, .. }));
    }

    #[test]
    fn unknown_commands_and_fields_are_named() {
        let e = parse_request(r#"{"cmd":"frobnicate"}"#).expect_err("unknown cmd");
        assert!(e.contains("frobnicate"), "{e}");
        let e = parse_request(r#"{"cmd":"list_luns","targt":"x"}"#).expect_err("typo");
        assert!(e.contains("targt"), "{e}");
        let e = parse_request(r#"{"cmd":"remove_lun","target":"x"}"#).expect_err("no lun");
        assert!(e.contains("lun"), "{e}");
        let e = parse_request("not json").expect_err("garbage");
        assert!(e.starts_with("bad request"), "{e}");
    }

    #[test]
    fn add_lun_takes_config_file_fields_with_their_defaults() {
        let r = parse_request(
            r#"{"cmd":"add_lun","target":"iqn.a","lun":{"id":1,"backstore":"ram","size":"16M"}}"#,
        )
        .expect("parses");
        let Request::AddLun { lun, .. } = r else {
            panic!("wrong variant");
        };
        assert_eq!(lun.id, 1);
        assert_eq!(lun.block_size, 512);
        assert!(lun.write_cache);
    }

    /// The fields of a config struct, from its `deny_unknown_fields` error.
    fn fields_of<T: serde::de::DeserializeOwned>() -> Vec<String> {
        let e = serde_json::from_str::<T>(r#"{"zz_not_a_key": 1}"#)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        let list = e.split("expected one of").nth(1).unwrap_or_default();
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn settable_key_tables_cover_the_config_schema() {
        use crate::config::{LunSettings, TargetSettings};
        let names = |keys: &[SettableKey]| {
            let mut v: Vec<String> = keys.iter().map(|k| k.name.to_owned()).collect();
            v.sort();
            v
        };
        let mut lun: Vec<String> = fields_of::<LunSettings>();
        lun.sort();
        assert!(lun.len() > 20, "{lun:?}");
        assert_eq!(lun, names(LUN_KEYS), "LUN_KEYS");
        let mut target: Vec<String> = fields_of::<TargetSettings>();
        target.sort();
        assert_eq!(target, names(TARGET_KEYS), "TARGET_KEYS");
        for b in BACKSTORES {
            b.parse::<rustgt_backstore::EngineKind>().expect(b);
        }
        for p in READAHEAD_POLICIES {
            p.parse::<rustgt_backstore::ReadaheadChoice>().expect(p);
        }
        for v in IO_CONTEXTS {
            v.parse::<rustgt_backstore::ContextMode>().expect(v);
        }
    }

    #[test]
    fn set_values_are_read_for_the_key_type() {
        use crate::config::{LunSettings, TargetSettings};
        let lun = |extra: &[(&str, &str)]| {
            let mut m = serde_json::Map::new();
            m.insert("id".into(), json(1));
            m.insert("backstore".into(), Value::String("file".into()));
            for (k, v) in extra {
                set_key::<LunSettings>(&mut m, k, &Value::String((*v).into()))?;
            }
            serde_json::from_value::<LunSettings>(Value::Object(m)).map_err(|e| e.to_string())
        };
        let l = lun(&[("read_only", "true"), ("workers", "3"), ("size", "1G")]).expect("typed");
        assert!(l.read_only);
        assert_eq!(l.workers, Some(3));
        assert_eq!(l.size_bytes(), Some(1 << 30));
        let l = lun(&[("readahead", "streams"), ("readahead", "")]).expect("default again");
        assert_eq!(l.readahead.text(), "auto");
        let e = lun(&[("read_only", "yes")]).expect_err("not a bool");
        assert!(e.starts_with("read_only = \"yes\": invalid type"), "{e}");
        let e = lun(&[("readahead", "fast")]).expect_err("no such policy");
        assert!(e.contains("readahead") && e.contains("streams"), "{e}");
        let mut t = serde_json::Map::new();
        t.insert(
            "iqn".into(),
            Value::String("iqn.2026-11.org.rustgt:a".into()),
        );
        for (k, v) in [
            ("alias", "true"),
            ("acl", "iqn.2026-11.a:x, iqn.2026-11.a:y"),
            ("tpgt", "7"),
        ] {
            set_key::<TargetSettings>(&mut t, k, &Value::String(v.into())).expect(k);
        }
        let t: TargetSettings = serde_json::from_value(Value::Object(t)).expect("target");
        assert_eq!(
            t.alias.as_deref(),
            Some("true"),
            "text where the key is text"
        );
        assert_eq!(t.acl, ["iqn.2026-11.a:x", "iqn.2026-11.a:y"]);
        assert_eq!(t.tpgt, 7);
    }

    fn json(n: u64) -> Value {
        Value::from(n)
    }

    #[test]
    fn replies_carry_result_or_error() {
        let ok = Reply::success(serde_json::json!({"a": 1})).to_line();
        assert_eq!(ok, r#"{"ok":true,"result":{"a":1}}"#);
        let bad = Reply::failure("unknown target \"iqn.x\"").to_line();
        assert_eq!(bad, r#"{"ok":false,"error":"unknown target \"iqn.x\""}"#);
    }
}
