//! Identities that never collide across hosts: the default target's name
//! and each LUN's `serial` (VPD page 80h) and `wwn` (the NAA designator
//! of page 83h).
//!
//! They are random, made once and written to the configuration file, so
//! a restart, or the file moved to another host, keeps them, and two
//! hosts never share them. When the configuration cannot be written
//! (`persist = false`, `--no-persist`), they are derived from a random id
//! kept in the data directory (`machine-id`) together with the target
//! name and LUN, which is as stable as that directory.
//!
//! rbd LUNs get none: every gateway serving an image must report the same
//! LU, so theirs stays derived from the target name and LUN, which all
//! gateways share (`wiring::lun_config`; docs/rbd.md).

use std::path::Path;

use rustgt_backstore::EngineKind;

use crate::config::{Config, LunSettings};

/// The prefix of generated target names.
pub const IQN_PREFIX: &str = "iqn.2026-11.org.rustgt:";
/// The file in the data directory holding its random id.
pub const MACHINE_ID_FILE: &str = "machine-id";

/// Where new identities come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Random (for a configuration that is written back).
    Random,
    /// Derived from the data directory's machine id, the target and LUN.
    Derived([u8; 16]),
}

/// Why an identity could not be made.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("no random numbers from the kernel: {0}")]
    Random(getrandom::Error),
    #[error("{}: {source}", path.display())]
    MachineId {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn random<const N: usize>() -> Result<[u8; N], IdentityError> {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).map_err(IdentityError::Random)?;
    Ok(b)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This host's name as it may appear in an IQN: lowercase letters,
/// digits and '-', at most 63 characters; "host" when it has none.
fn host_label() -> String {
    let raw = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let first = raw.trim().split('.').next().unwrap_or_default();
    let label: String = first
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(63)
        .collect();
    let label = label.trim_matches('-').to_owned();
    if label.is_empty() {
        "host".to_owned()
    } else {
        label
    }
}

/// A target name for this host: `iqn.2026-11.org.rustgt:<host>.<12 hex>`,
/// random, or derived from `source`'s machine id.
pub fn default_iqn(source: Source) -> Result<String, IdentityError> {
    let tag = match source {
        Source::Random => random::<6>()?,
        Source::Derived(id) => {
            let mut t = [0u8; 6];
            t.copy_from_slice(id.get(..6).unwrap_or(&[0; 6]));
            t
        }
    };
    let name = format!("{IQN_PREFIX}{}.{}", host_label(), hex(&tag));
    debug_assert!(rustgt_iscsi::IscsiName::parse(&name).is_ok(), "{name}");
    Ok(name)
}

/// The data directory's random id (`machine-id`, 32 hex digits), made at
/// first use.
pub fn machine_id(data_dir: &Path) -> Result<[u8; 16], IdentityError> {
    let path = data_dir.join(MACHINE_ID_FILE);
    let err = |source| IdentityError::MachineId {
        path: path.clone(),
        source,
    };
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(id) = parse_hex16(text.trim()) {
            return Ok(id);
        }
        tracing::warn!(file = %path.display(), "machine id unreadable: making a new one");
    }
    let id = random::<16>()?;
    std::fs::create_dir_all(data_dir).map_err(err)?;
    crate::persist::atomic::write_atomic(&path, format!("{}\n", hex(&id)).as_bytes())
        .map_err(err)?;
    Ok(id)
}

fn parse_hex16(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// FNV-1a over `parts`, for derived identities.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 16 bytes of identity for LUN `lun` of `iqn`.
fn lun_bytes(source: Source, iqn: &str, lun: u64) -> Result<[u8; 16], IdentityError> {
    match source {
        Source::Random => random(),
        Source::Derived(id) => {
            let iqn = iqn.to_ascii_lowercase();
            let lun = lun.to_le_bytes();
            let a = fnv(&[&id, iqn.as_bytes(), &lun, b"a"]);
            let b = fnv(&[&id, iqn.as_bytes(), &lun, b"b"]);
            let mut out = [0u8; 16];
            out[..8].copy_from_slice(&a.to_be_bytes());
            out[8..].copy_from_slice(&b.to_be_bytes());
            Ok(out)
        }
    }
}

/// A NAA 6h (IEEE Registered Extended) designator with company id 0 and
/// the 100 bits of vendor specific identifier and extension from `r`.
fn naa(r: [u8; 16]) -> [u8; 16] {
    let mut v = r;
    v[0] = 0x60;
    v[1] = 0;
    v[2] = 0;
    v[3] &= 0x0F;
    v
}

/// Gives every LUN of `cfg` that lacks a `serial` or `wwn` one: the one
/// the same LUN (target name and id) has in `running`, else a new one
/// from `source`. rbd LUNs are left alone (see the module docs). Returns
/// "target IQN LUN N" for each LUN that got something.
pub fn fill(
    cfg: &mut Config,
    running: Option<&Config>,
    source: Source,
) -> Result<Vec<String>, IdentityError> {
    let mut filled = Vec::new();
    for t in &mut cfg.targets {
        for l in &mut t.luns {
            if *l.backstore.value() == EngineKind::Rbd || (l.serial.is_some() && l.wwn.is_some()) {
                continue;
            }
            let same: Option<&LunSettings> = running.and_then(|r| {
                r.targets
                    .iter()
                    .find(|rt| rt.iqn.eq_ignore_ascii_case(&t.iqn))
                    .and_then(|rt| rt.luns.iter().find(|rl| rl.id == l.id))
            });
            let wwn = match (&l.wwn, same.and_then(|s| s.wwn.clone())) {
                (Some(w), _) => w.clone(),
                (None, Some(w)) => w,
                (None, None) => {
                    let v = crate::config::Naa(naa(lun_bytes(source, &t.iqn, l.id)?));
                    crate::config::Wwn::new(v, v.to_text())
                }
            };
            if l.serial.is_none() {
                // The serial is the designator's last 16 hex digits: as
                // unique, and short enough for every initiator's tools.
                l.serial = Some(
                    same.and_then(|s| s.serial.clone())
                        .unwrap_or_else(|| hex(wwn.value().0.get(8..).unwrap_or(&[]))),
                );
            }
            l.wwn = Some(wwn);
            filled.push(format!("target {} LUN {}", t.iqn, l.id));
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_valid_and_differ() {
        let a = default_iqn(Source::Random).expect("name");
        let b = default_iqn(Source::Random).expect("name");
        assert!(rustgt_iscsi::IscsiName::parse(&a).is_ok(), "{a}");
        assert!(a.starts_with(IQN_PREFIX), "{a}");
        assert_ne!(a, b);
        let id = [7u8; 16];
        assert_eq!(
            default_iqn(Source::Derived(id)).expect("name"),
            default_iqn(Source::Derived(id)).expect("name")
        );
    }

    #[test]
    fn machine_id_is_made_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let a = machine_id(dir.path()).expect("id");
        assert_eq!(machine_id(dir.path()).expect("id"), a);
        let other = tempfile::tempdir().expect("tmp");
        assert_ne!(machine_id(other.path()).expect("id"), a);
    }

    #[test]
    fn fill_gives_unique_valid_identities_and_keeps_given_ones() {
        let mut cfg = Config::default();
        let mut l1 = cfg.targets[0].luns[0].clone();
        l1.id = 1;
        l1.path = Some("lun1.img".into());
        l1.serial = Some("mine".into());
        cfg.targets[0].luns.push(l1);
        let mut a = cfg.clone();
        let mut b = cfg.clone();
        assert_eq!(fill(&mut a, None, Source::Random).expect("fill").len(), 2);
        fill(&mut b, None, Source::Random).expect("fill");
        let (la, lb) = (&a.targets[0].luns, &b.targets[0].luns);
        assert_ne!(la[0].wwn, lb[0].wwn);
        assert_ne!(la[0].serial, lb[0].serial);
        assert_ne!(la[0].wwn, la[1].wwn);
        assert_eq!(la[1].serial.as_deref(), Some("mine"));
        crate::config::check(&a, "test").expect("valid");
        let text = la[0].wwn.as_ref().expect("wwn").text().to_owned();
        assert!(text.starts_with("naa.6") && text.len() == 36, "{text}");
        // A LUN the running configuration knows keeps its identity.
        let mut c = cfg.clone();
        fill(&mut c, Some(&a), Source::Random).expect("fill");
        assert_eq!(c.targets[0].luns[0].wwn, la[0].wwn);
        assert_eq!(c.targets[0].luns[0].serial, la[0].serial);
        // Derived ones are stable per machine id and differ between them.
        let (mut d1, mut d2, mut d3) = (cfg.clone(), cfg.clone(), cfg);
        fill(&mut d1, None, Source::Derived([1; 16])).expect("fill");
        fill(&mut d2, None, Source::Derived([1; 16])).expect("fill");
        fill(&mut d3, None, Source::Derived([2; 16])).expect("fill");
        assert_eq!(d1, d2);
        assert_eq!(d1.targets[0].luns[0].serial, d2.targets[0].luns[0].serial);
        assert_ne!(d1.targets[0].luns[0].wwn, d3.targets[0].luns[0].wwn);
    }
}
