//! Typed values of the configuration, parsed once when it is read: the
//! [`Setting`] wrapper (value plus the text it came from) and the values it
//! holds.

use rustgt_backstore::{ContextMode, DeviceSlice, EngineKind, ReadaheadChoice};

/// A value parsed from its text once, when the configuration is read (or
/// an admin request names it); the text is kept so that the configuration
/// is written back as it was given. Two settings are equal when their
/// values are ("64M" and "65536K" are the same size).
#[derive(Debug, Clone)]
pub struct Setting<T> {
    value: T,
    text: String,
}

/// A type a [`Setting`] can hold: how its text parses, and the problem's
/// message when it does not.
pub trait SettingValue: Sized {
    fn parse_setting(text: &str) -> Result<Self, String>;
}

impl<T> Setting<T> {
    /// A setting whose `text` is known to parse to `value` (built-in defaults).
    pub fn new(value: T, text: impl Into<String>) -> Self {
        Self {
            value,
            text: text.into(),
        }
    }

    /// The parsed value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The text it was parsed from.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<T: Copy> Setting<T> {
    /// The parsed value, by copy.
    pub fn get(&self) -> T {
        self.value
    }
}

impl<T: SettingValue> std::str::FromStr for Setting<T> {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Ok(Self::new(T::parse_setting(text)?, text))
    }
}

impl<T: PartialEq> PartialEq for Setting<T> {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
    }
}

impl<T: Eq> Eq for Setting<T> {}

impl<T> std::fmt::Display for Setting<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl<T> serde::Serialize for Setting<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de, T: SettingValue> serde::Deserialize<'de> for Setting<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A number of bytes written as a size such as "64M" (binary units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

/// A size setting: `size`, `readahead_cache`, `sanitize_rate`, ...
pub type ByteSize = Setting<Bytes>;

impl ByteSize {
    /// A size of `bytes`, written as the plain number.
    pub fn from_bytes(bytes: u64) -> Self {
        Self::new(Bytes(bytes), bytes.to_string())
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.value.0
    }
}

impl SettingValue for Bytes {
    fn parse_setting(text: &str) -> Result<Self, String> {
        rustgt_backstore::parse_size(text)
            .map(Bytes)
            .ok_or_else(|| {
                format!("{text:?} is not a size: use bytes or a K/M/G/T suffix, e.g. \"64M\"")
            })
    }
}

impl SettingValue for ReadaheadChoice {
    fn parse_setting(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| {
            format!(
                "unknown policy {text:?}: expected \"auto\", \"none\", \"kernel\", \"classic\", \"context\" or \"streams\""
            )
        })
    }
}

impl SettingValue for rustgt_scsi::AluaMode {
    fn parse_setting(text: &str) -> Result<Self, String> {
        use rustgt_scsi::AluaMode;
        [AluaMode::Implicit, AluaMode::Explicit, AluaMode::Both]
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| {
                format!("unknown mode {text:?}: expected \"implicit\", \"explicit\" or \"both\"")
            })
    }
}

impl SettingValue for ContextMode {
    fn parse_setting(text: &str) -> Result<Self, String> {
        text.parse()
            .map_err(|_| format!("unknown mode {text:?}: expected \"shared\" or \"per-worker\""))
    }
}

impl SettingValue for DeviceSlice {
    fn parse_setting(text: &str) -> Result<Self, String> {
        text.parse().map_err(|()| {
            format!("{text:?}: expected \"auto\", \"off\" or a size of at least 4K such as \"16M\"")
        })
    }
}

impl SettingValue for EngineKind {
    fn parse_setting(text: &str) -> Result<Self, String> {
        text.parse().map_err(|_| {
            format!(
                "unknown backstore {text:?}: expected \"file\", \"mmap\", \"blockdev\", \"ram\", \"null\", \
                 \"hddsim\" or \"rbd\""
            )
        })
    }
}

/// `[reactor] io_uring`: whether reactors submit blocking I/O to their own
/// io_uring ("auto", when the kernel offers one) or not ("off").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoUringMode {
    Auto,
    Off,
}

impl SettingValue for IoUringMode {
    fn parse_setting(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "off" => Ok(Self::Off),
            _ => Err(format!(
                "unknown value {text:?}: expected \"auto\" or \"off\""
            )),
        }
    }
}

impl SettingValue for rustgt_iscsi::negotiate::Digest {
    fn parse_setting(text: &str) -> Result<Self, String> {
        Self::from_name(text)
            .ok_or_else(|| format!("unknown digest {text:?}: expected \"None\" or \"CRC32C\""))
    }
}

/// A LUN's `wwn`: the 16-byte NAA designator of VPD page 83h, written as
/// "naa." and 32 hex digits, the first one 6 (NAA 6h, IEEE Registered
/// Extended); "naa." may be left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Naa(pub [u8; 16]);

impl Naa {
    /// The canonical text, "naa.6" and 31 lowercase hex digits.
    pub fn to_text(self) -> String {
        let mut s = String::from("naa.");
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl SettingValue for Naa {
    fn parse_setting(text: &str) -> Result<Self, String> {
        let hex = text
            .strip_prefix("naa.")
            .or_else(|| text.strip_prefix("NAA."))
            .unwrap_or(text);
        let bad = || {
            format!(
                "{text:?} is not a WWN: expected \"naa.\" and 32 hex digits, the first one 6 \
                 (NAA IEEE Registered Extended), e.g. \"naa.6{}\"",
                "0".repeat(31)
            )
        };
        if hex.len() != 32 || !hex.starts_with('6') {
            return Err(bad());
        }
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            let pair = hex.get(2 * i..2 * i + 2).ok_or_else(bad)?;
            *b = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }
}

/// A LUN's `wwn` setting.
pub type Wwn = Setting<Naa>;
