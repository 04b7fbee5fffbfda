//! `[targets.qos]`, `[targets.luns.qos]` and
//! `[[targets.luns.qos.initiators]]`: IOPS and bandwidth limits in the
//! key names of OpenStack Cinder's QoS specs, converted to the SCSI core's
//! typed limits (`rustgt_scsi::qos`).

use serde::{Deserialize, Serialize};

use super::keypath::{Checker, KeyPath};
use rustgt_iscsi::IscsiName;
use rustgt_scsi::{Limit, LunQos, QosLimits, MAX_QOS_INITIATORS};

/// A bytes-per-second value: an integer (bytes, as Cinder writes it) or a
/// size such as "50M" (binary units, as every size in the file).
#[derive(Debug, Clone)]
pub struct BytesRate {
    bytes: u64,
    text: Option<String>,
}

impl BytesRate {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A value given as a number.
    pub fn from_bytes(bytes: u64) -> BytesRate {
        BytesRate { bytes, text: None }
    }
}

impl PartialEq for BytesRate {
    fn eq(&self, o: &BytesRate) -> bool {
        self.bytes == o.bytes
    }
}

impl Eq for BytesRate {}

impl std::str::FromStr for BytesRate {
    type Err = String;
    fn from_str(text: &str) -> Result<BytesRate, String> {
        rustgt_backstore::parse_size(text)
            .map(|bytes| BytesRate {
                bytes,
                text: Some(text.to_owned()),
            })
            .ok_or_else(|| {
                format!(
                    "{text:?} is not a rate in bytes: use a number or a K/M/G suffix, e.g. \"50M\""
                )
            })
    }
}

impl Serialize for BytesRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.text {
            Some(t) => s.serialize_str(t),
            None => s.serialize_u64(self.bytes),
        }
    }
}

impl<'de> Deserialize<'de> for BytesRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = BytesRate;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes per second: a number or a size such as \"50M\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<BytesRate, E> {
                Ok(BytesRate::from_bytes(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<BytesRate, E> {
                u64::try_from(v)
                    .map(BytesRate::from_bytes)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BytesRate, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// QoS limits of a target, a LUN, or one initiator on a LUN. Keys are
/// Cinder's QoS spec keys; every key set is a limit, all apply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QosSettings {
    /// In `initiators` entries only: the iSCSI initiator name limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_iops_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_iops_sec_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_iops_sec_max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops_sec_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops_sec_max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops_sec: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops_sec_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops_sec_max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes_sec: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes_sec_max: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_bytes_sec_max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_sec: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_sec_max: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_sec_max_length: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_sec: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_sec_max: Option<BytesRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_sec_max_length: Option<u64>,
    /// Bytes of one I/O in the IOPS limits: a larger I/O counts as
    /// `bytes / size_iops_sec` I/Os.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_iops_sec: Option<BytesRate>,
    /// On a LUN only: limits of single initiators, each an entry with
    /// `initiator` and the keys above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initiators: Vec<QosSettings>,
}

/// One limit's three keys as (name, rate, max, max_length).
type LimitKeys = (&'static str, Option<u64>, Option<u64>, Option<u64>);

/// Every key that takes a value, as written in the file.
pub const QOS_KEYS: [&str; 19] = [
    "total_iops_sec",
    "total_iops_sec_max",
    "total_iops_sec_max_length",
    "read_iops_sec",
    "read_iops_sec_max",
    "read_iops_sec_max_length",
    "write_iops_sec",
    "write_iops_sec_max",
    "write_iops_sec_max_length",
    "total_bytes_sec",
    "total_bytes_sec_max",
    "total_bytes_sec_max_length",
    "read_bytes_sec",
    "read_bytes_sec_max",
    "read_bytes_sec_max_length",
    "write_bytes_sec",
    "write_bytes_sec_max",
    "write_bytes_sec_max_length",
    "size_iops_sec",
];

fn b(x: &Option<BytesRate>) -> Option<u64> {
    x.as_ref().map(BytesRate::bytes)
}

impl QosSettings {
    fn limit_keys(&self) -> [LimitKeys; 6] {
        [
            (
                "total_iops_sec",
                self.total_iops_sec,
                self.total_iops_sec_max,
                self.total_iops_sec_max_length,
            ),
            (
                "read_iops_sec",
                self.read_iops_sec,
                self.read_iops_sec_max,
                self.read_iops_sec_max_length,
            ),
            (
                "write_iops_sec",
                self.write_iops_sec,
                self.write_iops_sec_max,
                self.write_iops_sec_max_length,
            ),
            (
                "total_bytes_sec",
                b(&self.total_bytes_sec),
                b(&self.total_bytes_sec_max),
                self.total_bytes_sec_max_length,
            ),
            (
                "read_bytes_sec",
                b(&self.read_bytes_sec),
                b(&self.read_bytes_sec_max),
                self.read_bytes_sec_max_length,
            ),
            (
                "write_bytes_sec",
                b(&self.write_bytes_sec),
                b(&self.write_bytes_sec_max),
                self.write_bytes_sec_max_length,
            ),
        ]
    }

    /// The SCSI core's limits of this table (not its `initiators`).
    pub fn limits(&self) -> QosLimits {
        let l = |(_, rate, max, len): LimitKeys| {
            rate.map(|rate| Limit {
                rate,
                max,
                max_length_secs: len.unwrap_or(1),
            })
        };
        let [ti, ri, wi, tb, rb, wb] = self.limit_keys();
        QosLimits {
            total_iops: l(ti),
            read_iops: l(ri),
            write_iops: l(wi),
            total_bytes: l(tb),
            read_bytes: l(rb),
            write_bytes: l(wb),
            size_iops: b(&self.size_iops_sec),
        }
    }

    /// A LUN's limits with its initiators'.
    pub fn lun_qos(&self) -> LunQos {
        LunQos {
            all: self.limits(),
            initiators: self
                .initiators
                .iter()
                .map(|i| (i.initiator.clone().unwrap_or_default(), i.limits()))
                .collect(),
        }
    }

    /// Sets one key from its text (the admin `qos set KEY=VALUE`);
    /// `None` for `initiator` and `initiators`.
    pub fn set_key(&mut self, key: &str, value: &str) -> Result<(), String> {
        let int = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{key}: {v:?} is not a whole number"))
        };
        let bytes = |v: &str| -> Result<BytesRate, String> {
            v.parse::<BytesRate>().map_err(|e| format!("{key}: {e}"))
        };
        match key {
            "total_iops_sec" => self.total_iops_sec = Some(int(value)?),
            "total_iops_sec_max" => self.total_iops_sec_max = Some(int(value)?),
            "total_iops_sec_max_length" => self.total_iops_sec_max_length = Some(int(value)?),
            "read_iops_sec" => self.read_iops_sec = Some(int(value)?),
            "read_iops_sec_max" => self.read_iops_sec_max = Some(int(value)?),
            "read_iops_sec_max_length" => self.read_iops_sec_max_length = Some(int(value)?),
            "write_iops_sec" => self.write_iops_sec = Some(int(value)?),
            "write_iops_sec_max" => self.write_iops_sec_max = Some(int(value)?),
            "write_iops_sec_max_length" => self.write_iops_sec_max_length = Some(int(value)?),
            "total_bytes_sec" => self.total_bytes_sec = Some(bytes(value)?),
            "total_bytes_sec_max" => self.total_bytes_sec_max = Some(bytes(value)?),
            "total_bytes_sec_max_length" => self.total_bytes_sec_max_length = Some(int(value)?),
            "read_bytes_sec" => self.read_bytes_sec = Some(bytes(value)?),
            "read_bytes_sec_max" => self.read_bytes_sec_max = Some(bytes(value)?),
            "read_bytes_sec_max_length" => self.read_bytes_sec_max_length = Some(int(value)?),
            "write_bytes_sec" => self.write_bytes_sec = Some(bytes(value)?),
            "write_bytes_sec_max" => self.write_bytes_sec_max = Some(bytes(value)?),
            "write_bytes_sec_max_length" => self.write_bytes_sec_max_length = Some(int(value)?),
            "size_iops_sec" => self.size_iops_sec = Some(bytes(value)?),
            _ => {
                return Err(format!(
                    "unknown QoS key {key:?}: expected one of {}",
                    QOS_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    /// Whether no key is set (initiators aside).
    pub fn no_limits(&self) -> bool {
        self.limits().is_empty() && self.size_iops_sec.is_none()
    }
}

/// Largest rate accepted (IOPS or bytes per second).
const MAX_RATE: u64 = 1 << 50;

/// Checks a `qos` table. `lun`: on a LUN (`initiators` allowed);
/// `entry`: an `initiators` entry (`initiator` required).
pub(super) fn check_qos(c: &mut Checker, key: &KeyPath, q: &QosSettings, lun: bool, entry: bool) {
    for (name, rate, max, len) in q.limit_keys() {
        let (kmax, klen) = match name {
            "total_iops_sec" => ("total_iops_sec_max", "total_iops_sec_max_length"),
            "read_iops_sec" => ("read_iops_sec_max", "read_iops_sec_max_length"),
            "write_iops_sec" => ("write_iops_sec_max", "write_iops_sec_max_length"),
            "total_bytes_sec" => ("total_bytes_sec_max", "total_bytes_sec_max_length"),
            "read_bytes_sec" => ("read_bytes_sec_max", "read_bytes_sec_max_length"),
            _ => ("write_bytes_sec_max", "write_bytes_sec_max_length"),
        };
        if let Some(r) = rate {
            c.range(key.key(name), r, 1, MAX_RATE);
        }
        match (rate, max) {
            (None, Some(_)) => c.fail(
                key.key(kmax),
                format!("needs {name} (the rate a burst is above)"),
            ),
            (Some(r), Some(m)) if m <= r => {
                c.fail(key.key(kmax), format!("{m} must be above {name} ({r})"))
            }
            (_, Some(m)) if m > MAX_RATE => c.range(key.key(kmax), m, 1, MAX_RATE),
            _ => {}
        }
        match (max, len) {
            (None, Some(_)) => c.fail(key.key(klen), format!("needs {kmax} (the burst it bounds)")),
            (Some(_), Some(l)) => c.range(key.key(klen), l, 1, 3600),
            _ => {}
        }
    }
    if let Some(s) = b(&q.size_iops_sec) {
        c.range(key.key("size_iops_sec"), s, 512, 1 << 30);
    }
    match (&q.initiator, entry) {
        (Some(_), false) => c.fail(
            key.key("initiator"),
            "is only for an entry of a LUN's qos.initiators",
        ),
        (None, true) => c.fail(
            key.key("initiator"),
            "is required: the initiator name limited",
        ),
        (Some(name), true) => {
            if let Err(msg) = IscsiName::parse(name) {
                c.fail(key.key("initiator"), msg.to_string());
            }
        }
        (None, false) => {}
    }
    if !q.initiators.is_empty() && (!lun || entry) {
        c.fail(
            key.key("initiators"),
            "is only for a LUN's qos table (limits of single initiators on that LUN)",
        );
        return;
    }
    if q.initiators.len() > MAX_QOS_INITIATORS {
        c.fail(
            key.key("initiators"),
            format!("lists more than {MAX_QOS_INITIATORS} initiators"),
        );
    }
    for (i, e) in q.initiators.iter().enumerate() {
        let ekey = key.key("initiators").index(i);
        check_qos(c, &ekey, e, true, true);
        let dup = e.initiator.as_ref().is_some_and(|n| {
            q.initiators.get(..i).is_some_and(|before| {
                before.iter().any(|x| {
                    x.initiator
                        .as_ref()
                        .is_some_and(|m| m.eq_ignore_ascii_case(n))
                })
            })
        });
        if dup {
            c.fail(ekey.key("initiator"), "is listed twice");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_text_jailed, Overrides};
    use std::path::Path;

    fn load(target: &str, lun: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        let body = format!(
            "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:q\"\n{target}\n\
             [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"64M\"\n{lun}\n"
        );
        load_text_jailed(Path::new("qos.toml"), body, &Overrides::default())
    }

    fn problem(target: &str, lun: &str, key: &str, fragment: &str) {
        let err = load(target, lun).expect_err("must be refused");
        let p = err
            .problems()
            .iter()
            .find(|p| p.key == key)
            .unwrap_or_else(|| panic!("no problem at {key}: {err}"));
        assert!(p.message.contains(fragment), "{key}: {}", p.message);
    }

    #[test]
    fn cinder_keys_load_typed() {
        let cfg = load(
            "[targets.qos]\ntotal_bytes_sec = 104857600",
            "[targets.luns.qos]\ntotal_iops_sec = 2000\ntotal_iops_sec_max = 8000\n\
             total_iops_sec_max_length = 2\nread_bytes_sec = \"50M\"\nsize_iops_sec = 4096\n\
             [[targets.luns.qos.initiators]]\ninitiator = \"iqn.2026-11.org.x:a\"\nwrite_iops_sec = 10\n",
        )
        .expect("loads");
        let t = &cfg.targets[0];
        let tl = t.qos.as_ref().expect("target table").limits();
        assert_eq!(tl.total_bytes.map(|l| l.rate), Some(100 << 20));
        let q = t.luns[0].qos.as_ref().expect("lun table").lun_qos();
        assert_eq!(
            q.all.total_iops,
            Some(Limit {
                rate: 2000,
                max: Some(8000),
                max_length_secs: 2
            })
        );
        assert_eq!(q.all.read_bytes.map(|l| l.rate), Some(50 << 20));
        assert_eq!(q.all.size_iops, Some(4096));
        assert_eq!(q.initiators[0].0, "iqn.2026-11.org.x:a");
        assert_eq!(q.initiators[0].1.write_iops.map(|l| l.rate), Some(10));
        // Written back as given.
        let text = cfg.to_toml().expect("toml");
        assert!(text.contains("read_bytes_sec = \"50M\""), "{text}");
        assert!(text.contains("total_bytes_sec = 104857600"), "{text}");
    }

    #[test]
    fn qos_errors_name_their_keys() {
        let l = "targets[0].luns[0].qos";
        problem(
            "",
            "[targets.luns.qos]\ntotal_iops_sec = 0",
            &format!("{l}.total_iops_sec"),
            "out of range",
        );
        problem(
            "",
            "[targets.luns.qos]\ntotal_iops_sec = 100\ntotal_iops_sec_max = 50",
            &format!("{l}.total_iops_sec_max"),
            "must be above total_iops_sec",
        );
        problem(
            "",
            "[targets.luns.qos]\nread_iops_sec_max = 50",
            &format!("{l}.read_iops_sec_max"),
            "needs read_iops_sec",
        );
        problem(
            "",
            "[targets.luns.qos]\nwrite_bytes_sec = 100\nwrite_bytes_sec_max_length = 3",
            &format!("{l}.write_bytes_sec_max_length"),
            "needs write_bytes_sec_max",
        );
        problem(
            "",
            "[targets.luns.qos]\nread_bytes_sec = \"fast\"",
            &format!("{l}.read_bytes_sec"),
            "not a rate",
        );
        problem(
            "",
            "[[targets.luns.qos.initiators]]\ntotal_iops_sec = 5",
            &format!("{l}.initiators[0].initiator"),
            "is required",
        );
        problem(
            "",
            "[[targets.luns.qos.initiators]]\ninitiator = \"iqn.2026-11.org.x:a\"\ntotal_iops_sec = 5\n\
             [[targets.luns.qos.initiators]]\ninitiator = \"iqn.2026-11.org.x:a\"\ntotal_iops_sec = 6",
            &format!("{l}.initiators[1].initiator"),
            "listed twice",
        );
        problem(
            "[[targets.qos.initiators]]\ninitiator = \"iqn.2026-11.org.x:a\"",
            "",
            "targets[0].qos.initiators",
            "only for a LUN",
        );
        let err = load("", "[targets.luns.qos]\ntotal_iops = 5").expect_err("misspelt");
        assert!(err.to_string().contains("total_iops"), "{err}");
    }
}
