//! `[iscsi]` (session defaults offered in login negotiation) and
//! `[discovery]`, and their checks.

use serde::{Deserialize, Serialize};

use super::auth::ChapSettings;
use rustgt_iscsi::negotiate::{Digest, Limits};

use super::keypath::{Checker, KeyPath};
use super::values::Setting;

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
    pub header_digest: DigestList,
    /// DataDigest values the target accepts, in preference order (§13.1).
    pub data_digest: DigestList,
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
            header_digest: DigestList::both(),
            data_digest: DigestList::both(),
            default_time2wait: 2,
            default_time2retain: 20,
            workers_per_lun: 8,
        }
    }
}

/// The two digest names of RFC 7143 §13.1.
pub const DIGEST_NONE: &str = "None";
pub const DIGEST_CRC32C: &str = "CRC32C";

/// A digest list in preference order (`header_digest`, `data_digest`),
/// each name parsed when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DigestList(pub Vec<Setting<Digest>>);

impl DigestList {
    /// `["None", "CRC32C"]`, the default.
    fn both() -> Self {
        Self(vec![
            Setting::new(Digest::None, DIGEST_NONE),
            Setting::new(Digest::CRC32C, DIGEST_CRC32C),
        ])
    }

    /// The digests, in preference order.
    pub fn digests(&self) -> Vec<Digest> {
        self.0.iter().map(Setting::get).collect()
    }
}

/// Compares the names as written (`assert_eq!(list, ["None", "CRC32C"])`).
impl<const N: usize> PartialEq<[&str; N]> for DigestList {
    fn eq(&self, other: &[&str; N]) -> bool {
        self.0.len() == N && self.0.iter().zip(other).all(|(a, b)| a.text() == *b)
    }
}

/// Discovery session settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscoverySettings {
    /// CHAP required for discovery sessions; none means open discovery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chap: Option<ChapSettings>,
    /// Per-initiator CHAP of discovery sessions (`[[discovery.groups]]`:
    /// `name`, `initiators`, `chap`; matched as a target's groups).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<super::groups::GroupSettings>,
}

pub(super) fn check_iscsi(c: &mut Checker, key: &KeyPath, s: &IscsiSettings) {
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
    // The negotiation limits' ranges are the iSCSI crate's, checked once
    // there; each problem names its field, which is its key here.
    for p in s.limits().problems() {
        c.fail(key.key(p.field()), p.message());
    }
    check_digests(c, &key.key("header_digest"), &s.header_digest);
    check_digests(c, &key.key("data_digest"), &s.data_digest);
    c.range(key.key("workers_per_lun"), s.workers_per_lun, 1, 1024);
}

impl IscsiSettings {
    /// The negotiation limits these settings declare (the rest at the
    /// iSCSI crate's defaults).
    pub fn limits(&self) -> Limits {
        Limits {
            max_recv_data_segment_length: self.max_recv_data_segment_length,
            max_burst_length: self.max_burst_length,
            first_burst_length: self.first_burst_length,
            initial_r2t: self.initial_r2t,
            immediate_data: self.immediate_data,
            max_outstanding_r2t: self.max_outstanding_r2t,
            header_digest: self.header_digest.digests(),
            data_digest: self.data_digest.digests(),
            default_time2wait: self.default_time2wait,
            default_time2retain: self.default_time2retain,
            ..Limits::default()
        }
    }
}

fn check_digests(c: &mut Checker, key: &KeyPath, list: &DigestList) {
    for (i, d) in list.0.iter().enumerate() {
        if list.0.get(..i).is_some_and(|before| before.contains(d)) {
            c.fail(key.index(i), format!("{:?} is listed twice", d.text()));
        }
    }
}
