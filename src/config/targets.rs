//! `[[targets]]`: one target's name, portals, ACL and CHAP, and their
//! checks (its LUNs are in [`super::luns`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rustgt_backstore::EngineKind;
use serde::{Deserialize, Serialize};

use super::auth::{check_chap, ChapSettings};
use super::keypath::{Checker, KeyPath};
use super::luns::{check_lun, LunSettings};
use super::qos::{check_qos, QosSettings};
use rustgt_iscsi::IscsiName;

pub(super) fn default_portals() -> Vec<SocketAddr> {
    vec![SocketAddr::from(([127, 0, 0, 1], 3260))]
}

pub(super) fn default_tpgt() -> u16 {
    1
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
    /// `[targets.qos]`: IOPS and bandwidth limits on all the target's
    /// commands together (see [`QosSettings`]); changed live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<Box<QosSettings>>,
    /// Initiator groups with LUN maps and CHAP of their own
    /// ([`super::groups`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<super::groups::GroupSettings>,
    /// `[targets.redirect]`: Normal logins answered with TARGET MOVED and
    /// an address elsewhere instead of being served ([`RedirectSettings`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<RedirectSettings>,
}

/// Login redirection (RFC 7143 §11.13.5): where a target's Normal logins
/// are sent instead of being served here. Discovery is not redirected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedirectSettings {
    /// TargetAddress values, `HOST:PORT` or `HOST:PORT,TPGT` (HOST an
    /// IPv4 address, a bracketed IPv6 address or a DNS name): one or more,
    /// given to new logins in turn.
    pub to: Vec<String>,
    /// The target's portals whose logins are redirected; empty: all of
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<SocketAddr>,
    /// TARGET MOVED PERMANENTLY (0x0102) instead of TEMPORARILY (0x0101).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
    /// The metrics endpoint (`metrics_listen`) of each `to` gateway, in
    /// the same order: when given, each login goes to the gateway with
    /// the fewest logged-in sessions (read every second) instead of in
    /// turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<SocketAddr>,
}

/// Why `addr` is not a TargetAddress value (`HOST:PORT[,TPGT]`).
fn target_address_problem(addr: &str) -> Option<&'static str> {
    if addr.is_empty() || addr.len() > 255 {
        return Some("must be 1..=255 bytes long");
    }
    let (hostport, tpgt) = match addr.rsplit_once(',') {
        Some((hp, tag)) => (hp, Some(tag)),
        None => (addr, None),
    };
    if tpgt.is_some_and(|t| t.parse::<u16>().is_err()) {
        return Some("the portal group tag after ',' must be 0..=65535");
    }
    if hostport.parse::<SocketAddr>().is_ok() {
        return None;
    }
    let Some((host, port)) = hostport.rsplit_once(':') else {
        return Some("must be HOST:PORT or HOST:PORT,TPGT");
    };
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Some("needs a port, 1..=65535");
    }
    let dns = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !dns {
        return Some("HOST must be an IPv4 address, a bracketed IPv6 address or a DNS name");
    }
    None
}

fn check_redirect(c: &mut Checker, key: &KeyPath, t: &TargetSettings) {
    let Some(r) = &t.redirect else { return };
    let key = key.key("redirect");
    if r.to.is_empty() {
        c.fail(key.key("to"), "must list at least one HOST:PORT[,TPGT]");
    }
    for (i, addr) in r.to.iter().enumerate() {
        if let Some(why) = target_address_problem(addr) {
            c.fail(key.key("to").index(i), format!("{addr:?}: {why}"));
        }
    }
    if !r.metrics.is_empty() && r.metrics.len() != r.to.len() {
        c.fail(
            key.key("metrics"),
            format!(
                "lists {} metrics endpoints for {} gateways in `to`: give one per gateway, in the same order",
                r.metrics.len(),
                r.to.len()
            ),
        );
    }
    for (i, p) in r.from.iter().enumerate() {
        if !t.portals.contains(p) && !t.iser_portals.contains(p) {
            c.fail(
                key.key("from").index(i),
                format!("{p} is not one of the target's portals"),
            );
        }
    }
}

pub(super) fn check_target(
    c: &mut Checker,
    key: &KeyPath,
    t: &TargetSettings,
    data_dir: &Path,
    backing: &mut HashMap<PathBuf, KeyPath>,
) {
    if let Err(msg) = IscsiName::parse(&t.iqn) {
        c.fail(key.key("iqn"), msg.to_string());
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
        if let Err(msg) = IscsiName::parse(name) {
            c.fail(key.key("acl").index(i), msg.to_string());
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
    check_redirect(c, key, t);
    if let Some(q) = &t.qos {
        check_qos(c, &key.key("qos"), q, false, false);
    }
    super::groups::check_groups(c, key, t);
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
                        lun.backstore.text()
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
