//! `[limits]`: caps on connections, logins and sessions, and their checks.

use serde::{Deserialize, Serialize};

use super::keypath::{Checker, KeyPath};
use super::values::ByteSize;

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
    /// Connections open at once from one source address that have not
    /// reached full feature phase, 1..max_login_connections (below it, so
    /// that the slot of a flooding address can always be evicted for a
    /// login from elsewhere).
    pub max_login_connections_per_address: usize,
    /// Normal sessions one initiator name may hold at once (all ISIDs and
    /// targets together), 1..=65535; the login of one more fails with
    /// Out of Resources.
    pub max_sessions_per_initiator: usize,
    /// The daemon-wide budget of write data buffers (Data-Out being
    /// collected or written), a size of at least 1M; absent: a sixteenth
    /// of physical memory, at least 128M and at most 4G
    /// ([`default_data_buffer_bytes`]). A write waits for room before its
    /// R2Ts; a session over its fair share does not get its CmdSN window
    /// opened further.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_buffer_bytes: Option<ByteSize>,
    /// Seconds a write may go without Data-Out for the R2Ts it was sent
    /// before its connection is closed and its commands aborted, 1..=3600.
    pub data_out_timeout_secs: u64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            login_timeout_secs: 15,
            max_connections: 4096,
            max_connections_per_address: 256,
            max_login_connections: 256,
            max_login_connections_per_address: 16,
            max_sessions_per_initiator: 64,
            data_buffer_bytes: None,
            data_out_timeout_secs: 30,
        }
    }
}

/// Most connections `[limits] max_connections` may allow (each TCP
/// connection holds two descriptors).
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// Smallest `[limits] data_buffer_bytes`.
pub const MIN_DATA_BUFFER_BYTES: u64 = 1 << 20;

impl LimitSettings {
    /// The data buffer budget in bytes: the configured size, or
    /// [`default_data_buffer_bytes`].
    pub fn data_buffer_bytes(&self) -> u64 {
        self.data_buffer_bytes
            .as_ref()
            .map_or_else(default_data_buffer_bytes, ByteSize::bytes)
    }
}

/// A sixteenth of physical memory (MemTotal of /proc/meminfo), at least
/// 128 MiB and at most 512 MiB (so what peers can pin stays well under
/// 1 GiB on any host: dozens of 1 MiB writes, or sixteen of 32 MiB, in
/// flight at once); 512 MiB when memory cannot be read.
pub fn default_data_buffer_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|kb| kb.trim().parse::<u64>().ok())
        })
        .map(|kb| kb.saturating_mul(1024));
    total.map_or(512 << 20, |t| (t / 16).clamp(128 << 20, 512 << 20))
}

pub(super) fn check_limits(c: &mut Checker, key: &KeyPath, s: &LimitSettings) {
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
    let share = s.max_login_connections_per_address;
    if share == 0 || share >= s.max_login_connections {
        c.fail(
            key.key("max_login_connections_per_address"),
            format!(
                "{share} must be at least 1 and below max_login_connections ({}), so a flooding address's login slots can be given to others",
                s.max_login_connections
            ),
        );
    }
    c.range(
        key.key("max_sessions_per_initiator"),
        s.max_sessions_per_initiator,
        1,
        65535,
    );
    if let Some(b) = s.data_buffer_bytes.as_ref() {
        if b.bytes() < MIN_DATA_BUFFER_BYTES {
            c.fail(
                key.key("data_buffer_bytes"),
                format!("{b} is less than the smallest budget, 1M"),
            );
        }
    }
    c.range(
        key.key("data_out_timeout_secs"),
        s.data_out_timeout_secs,
        1,
        3600,
    );
}
