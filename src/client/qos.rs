//! `rustgt admin qos`: set, clear and show QoS limits.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::args::QosCmd;
use super::socket::{Client, Failure};
use crate::api::proto::QosView;
use crate::api::proto::Request;
use crate::client::render;

/// Splits `[LUN] REST...`: a first argument that is a number is the LUN.
fn lun_and_rest(args: &[String]) -> (Option<u64>, &[String]) {
    match args.split_first() {
        Some((first, rest)) if !first.contains('=') => match first.parse::<u64>() {
            Ok(lun) => (Some(lun), rest),
            Err(_) => (None, args),
        },
        _ => (None, args),
    }
}

pub(super) fn qos(c: &mut Client, cmd: &QosCmd, json: bool) -> Result<String, Failure> {
    let req = match cmd {
        QosCmd::Show { iqn } => {
            let (v, views) = c.call_as::<Vec<QosView>>(&Request::ShowQos {
                target: iqn.clone(),
            })?;
            return Ok(if json {
                serde_json::to_string_pretty(&v).unwrap_or_default()
            } else {
                table(&views)
            });
        }
        QosCmd::Set {
            iqn,
            args,
            initiator,
        } => {
            let (lun, pairs) = lun_and_rest(args);
            if pairs.is_empty() {
                return Err(Failure::usage("qos set: give at least one KEY=VALUE"));
            }
            let mut set = BTreeMap::new();
            for p in pairs {
                let (k, v) = p
                    .split_once('=')
                    .ok_or_else(|| Failure::usage(format!("qos set: {p:?} is not KEY=VALUE")))?;
                set.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            Request::SetQos {
                target: iqn.clone(),
                lun,
                initiator: initiator.clone(),
                set,
                clear: Vec::new(),
                clear_all: false,
            }
        }
        QosCmd::Clear {
            iqn,
            args,
            initiator,
        } => {
            let (lun, keys) = lun_and_rest(args);
            Request::SetQos {
                target: iqn.clone(),
                lun,
                initiator: initiator.clone(),
                set: BTreeMap::new(),
                clear: keys.to_vec(),
                clear_all: keys.is_empty(),
            }
        }
    };
    let (v, report) = c.call_as::<crate::api::proto::ChangeReport>(&req)?;
    Ok(if json {
        serde_json::to_string_pretty(&v).unwrap_or_default()
    } else {
        render::change_report(&report)
    })
}

/// One block per limited scope: its keys, then its counters.
fn table(v: &[QosView]) -> String {
    if v.is_empty() {
        return "no QoS limits\n".to_owned();
    }
    let mut out = String::new();
    for q in v {
        let scope = match (&q.lun, &q.initiator) {
            (None, _) => "(all LUNs)".to_owned(),
            (Some(l), None) => format!("LUN {l}"),
            (Some(l), Some(i)) => format!("LUN {l} initiator {i}"),
        };
        let _ = writeln!(out, "{} {scope}", q.target);
        let keys: Vec<String> = q.limits.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "  limits:  {}", keys.join(" "));
        let s = &q.stats;
        let _ = writeln!(
            out,
            "  passed:  {} commands ({}), {} delayed, throttled {} in all, {} waiting now",
            s.commands,
            render::bytes(s.bytes),
            s.delayed,
            render::micros(s.throttled_us),
            s.waiting
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leading_number_is_the_lun() {
        let a = vec!["0".to_owned(), "total_iops_sec=5".to_owned()];
        assert_eq!(lun_and_rest(&a), (Some(0), &a[1..]));
        let b = vec!["total_iops_sec=5".to_owned()];
        assert_eq!(lun_and_rest(&b), (None, &b[..]));
    }
}
