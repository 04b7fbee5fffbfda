//! `[targets.luns.fault]`: injected faults, converted to the backstore's
//! typed fault spec.

use serde::{Deserialize, Serialize};

/// Faults injected into one LUN's reads and writes, for tests and failure
/// rehearsals (`rustgt_backstore::fault`). Each key is a fault; its table
/// says when it fires ([`TriggerSettings`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSettings {
    /// Reads fail: MEDIUM ERROR, UNRECOVERED READ ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_error: Option<TriggerSettings>,
    /// Writes fail: MEDIUM ERROR, WRITE ERROR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_error: Option<TriggerSettings>,
    /// Writes find no space (ENOSPC): DATA PROTECT, SPACE ALLOCATION
    /// FAILED WRITE PROTECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_nospace: Option<TriggerSettings>,
    /// Reads and writes wait `time` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelaySettings>,
    /// Reads and writes never complete, until the task is aborted (ABORT
    /// TASK, LOGICAL UNIT RESET, session loss) or the fault is cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<TriggerSettings>,
}

// `probability` is a float; NaN is refused when the config is checked,
// so equality is an equivalence on every config that loads.
impl Eq for FaultSettings {}

/// When a fault fires: every key given must hold; none fires always.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSettings {
    /// The I/O touches these logical blocks: "100", "100-199" (inclusive)
    /// or "100-" (to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lba: Option<String>,
    /// Every Nth I/O (among those `lba` lets through), N >= 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// With this probability, 0.0..=1.0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
}

/// A delay: `time` ("5ms", "2s", "100us"; at most 60 s) and when.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelaySettings {
    pub time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lba: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
}

/// A problem in a fault table: the fault's key, the key inside it, what.
pub type FaultProblem = (&'static str, &'static str, String);

fn trigger_of(
    fault: &'static str,
    lba: Option<&String>,
    every: Option<u64>,
    probability: Option<f64>,
) -> Result<rustgt_backstore::fault::Trigger, FaultProblem> {
    let t = rustgt_backstore::fault::Trigger {
        lba: lba
            .map(|r| r.parse())
            .transpose()
            .map_err(|msg| (fault, "lba", msg))?,
        every,
        probability,
    };
    t.validate().map_err(|(k, msg)| (fault, k, msg))?;
    Ok(t)
}

impl TriggerSettings {
    fn trigger(
        &self,
        fault: &'static str,
    ) -> Result<rustgt_backstore::fault::Trigger, FaultProblem> {
        trigger_of(fault, self.lba.as_ref(), self.every, self.probability)
    }
}

impl FaultSettings {
    /// The typed faults, or the first problem (checked at load, so a
    /// loaded config always converts).
    pub fn spec(&self) -> Result<rustgt_backstore::FaultSpec, FaultProblem> {
        use rustgt_backstore::fault::{parse_duration, Delay, MAX_DELAY};
        let delay = match &self.delay {
            None => None,
            Some(d) => {
                let time = parse_duration(&d.time)
                    .ok_or_else(|| {
                        (
                            "delay",
                            "time",
                            format!("{:?} is not a duration such as \"5ms\"", d.time),
                        )
                    })
                    .and_then(|t| {
                        if t > MAX_DELAY {
                            Err(("delay", "time", format!("{:?} is longer than 60s", d.time)))
                        } else {
                            Ok(t)
                        }
                    })?;
                let when = trigger_of("delay", d.lba.as_ref(), d.every, d.probability)?;
                Some(Delay { time, when })
            }
        };
        Ok(rustgt_backstore::FaultSpec {
            read_error: self
                .read_error
                .as_ref()
                .map(|t| t.trigger("read_error"))
                .transpose()?,
            write_error: self
                .write_error
                .as_ref()
                .map(|t| t.trigger("write_error"))
                .transpose()?,
            write_nospace: self
                .write_nospace
                .as_ref()
                .map(|t| t.trigger("write_nospace"))
                .transpose()?,
            delay,
            hang: self.hang.as_ref().map(|t| t.trigger("hang")).transpose()?,
        })
    }
}
