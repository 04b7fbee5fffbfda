//! What each `rustgt admin` command sends and how its answer is shown.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::args::{
    AclCmd, AdminArgs, AdminCommand, ChapCmd, ConfigCmd, GroupCmd, LunCmd, PortalCmd, SessionCmd,
    StatsCmd, TargetCmd,
};
use super::socket::{Client, Failure};
use crate::api::proto::Request;
use crate::config::{
    ChapSettings, FaultSettings, GroupSettings, LunMapping, LunSettings, TargetSettings,
};
use crate::{api::proto, client::render};

/// Builds the request(s) of `args`, sends them, prints the answer.
pub(super) fn execute(
    c: &mut Client,
    args: &AdminArgs,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    use AdminCommand as A;
    let j = args.json;
    let w = |e: std::io::Error| Failure::usage(format!("stdout: {e}"));
    let text = match &args.command {
        A::Raw { request } => {
            let reply = c.send_line(request.trim())?;
            writeln!(out, "{}", reply.to_line()).map_err(w)?;
            return if reply.ok {
                Ok(())
            } else {
                Err(Failure {
                    code: 1,
                    message: reply.error.unwrap_or_default(),
                })
            };
        }
        A::Status => show(c, &Request::Status, j, render::status)?,
        A::Ls => {
            let (status_v, status) = c.call_as::<proto::StatusView>(&Request::Status)?;
            let (targets_v, targets) =
                c.call_as::<Vec<proto::TargetView>>(&Request::ListTargets)?;
            let (portals_v, portals) =
                c.call_as::<Vec<proto::PortalView>>(&Request::ListPortals)?;
            if j {
                pretty(&json!({
                    "status": status_v,
                    "targets": targets_v,
                    "portals": portals_v,
                }))
            } else {
                render::tree(&render::Tree {
                    status,
                    targets,
                    portals,
                })
            }
        }
        A::Connections => show(
            c,
            &Request::ListConnections,
            j,
            |v: &Vec<proto::ConnView>| render::connections(v),
        )?,
        A::Metrics => {
            let (v, m) = c.call_as::<proto::MetricsText>(&Request::Metrics)?;
            if j {
                pretty(&v)
            } else {
                m.text
            }
        }
        A::Target(t) => target(c, t, j)?,
        A::Portal(p) => portal(c, p, j)?,
        A::Lun(l) => lun(c, l, j)?,
        A::Acl(a) => acl(c, a, j)?,
        A::Group(g) => group(c, g, j)?,
        A::Chap(ch) => chap(c, ch, j)?,
        A::Session(s) => session(c, s, j)?,
        A::Stats(s) => stats(c, s, j)?,
        A::Config(cfg) => config(c, cfg, j)?,
        A::Qos(q) => super::qos::qos(c, q, j)?,
    };
    write!(out, "{text}").map_err(w)?;
    if !text.ends_with('\n') && !text.is_empty() {
        writeln!(out).map_err(w)?;
    }
    Ok(())
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Calls `req` and renders its result with `table` (or as JSON).
fn show<T: DeserializeOwned>(
    c: &mut Client,
    req: &Request,
    json: bool,
    table: impl Fn(&T) -> String,
) -> Result<String, Failure> {
    let (v, t) = c.call_as::<T>(req)?;
    Ok(if json { pretty(&v) } else { table(&t) })
}

fn change(c: &mut Client, req: &Request, json: bool) -> Result<String, Failure> {
    show(c, req, json, render::change_report)
}

fn target(c: &mut Client, cmd: &TargetCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        TargetCmd::List => show(c, &Request::ListTargets, j, |v: &Vec<proto::TargetView>| {
            render::targets(v)
        }),
        TargetCmd::Show { iqn } => show(
            c,
            &Request::ShowTarget {
                target: iqn.clone(),
            },
            j,
            render::target,
        ),
        TargetCmd::Set { iqn, settings } => change(
            c,
            &Request::SetTarget {
                target: iqn.clone(),
                settings: pairs(settings),
            },
            j,
        ),
        TargetCmd::Add {
            iqn,
            alias,
            tpgt,
            portals,
            acl,
        } => {
            let mut m = Map::new();
            m.insert("iqn".into(), json!(iqn));
            if let Some(a) = alias {
                m.insert("alias".into(), json!(a));
            }
            if let Some(t) = tpgt {
                m.insert("tpgt".into(), json!(t));
            }
            if !portals.is_empty() {
                m.insert("portals".into(), json!(portals));
            }
            m.insert("acl".into(), json!(acl));
            let target: TargetSettings = from_fields(m)?;
            change(c, &Request::AddTarget { target }, j)
        }
        TargetCmd::Remove { iqn, force } => change(
            c,
            &Request::RemoveTarget {
                target: iqn.clone(),
                force: *force,
            },
            j,
        ),
    }
}

/// `KEY=VALUE` pairs as the settings object of `set_lun` / `set_target`:
/// values stay text, the daemon reads them for each key's type.
fn pairs(kv: &[(String, String)]) -> Map<String, Value> {
    kv.iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// A config struct from the fields given, the rest by their defaults.
pub(super) fn from_fields<T: DeserializeOwned>(m: Map<String, Value>) -> Result<T, Failure> {
    serde_json::from_value(Value::Object(m)).map_err(|e| Failure::usage(e.to_string()))
}

fn portal(c: &mut Client, cmd: &PortalCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        PortalCmd::List => show(c, &Request::ListPortals, j, |v: &Vec<proto::PortalView>| {
            render::portals(v)
        }),
        PortalCmd::Add { iqn, portal } => change(
            c,
            &Request::AddPortal {
                target: iqn.clone(),
                portal: *portal,
            },
            j,
        ),
        PortalCmd::Remove { iqn, portal } => change(
            c,
            &Request::RemovePortal {
                target: iqn.clone(),
                portal: *portal,
            },
            j,
        ),
    }
}

fn lun(c: &mut Client, cmd: &LunCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        LunCmd::List { iqn } => show(
            c,
            &Request::ListLuns {
                target: iqn.clone(),
            },
            j,
            |v: &Vec<proto::LunView>| render::luns(v),
        ),
        LunCmd::Add {
            iqn,
            id,
            backstore,
            path,
            size,
            block_size,
            read_only,
            thick,
            no_write_cache,
            workers,
            serial,
            wwn,
            readahead,
            rbd_image,
            ceph_conf,
            ceph_id,
            ceph_keyring,
            set,
        } => {
            let mut m = Map::new();
            m.insert("id".into(), json!(id));
            m.insert("backstore".into(), json!(backstore));
            if let Some(spec) = rbd_image {
                let parts: Vec<&str> = spec.split('/').collect();
                let (pool, namespace, image) = match parts.as_slice() {
                    [pool, image] => (*pool, None, *image),
                    [pool, ns, image] => (*pool, Some(*ns), *image),
                    _ => {
                        return Err(Failure::usage(format!(
                            "--rbd-image {spec:?}: expected POOL/IMAGE or POOL/NAMESPACE/IMAGE"
                        )))
                    }
                };
                let mut r = Map::new();
                r.insert("pool".into(), json!(pool));
                r.insert("image".into(), json!(image));
                let optional = [
                    ("namespace", namespace.map(|n| json!(n))),
                    ("ceph_conf", ceph_conf.as_ref().map(|p| json!(p))),
                    ("client_id", ceph_id.as_ref().map(|i| json!(i))),
                    ("keyring", ceph_keyring.as_ref().map(|p| json!(p))),
                ];
                for (k, v) in optional {
                    if let Some(v) = v {
                        r.insert(k.into(), v);
                    }
                }
                m.insert("rbd".into(), serde_json::Value::Object(r));
            } else if ceph_conf.is_some() || ceph_id.is_some() || ceph_keyring.is_some() {
                return Err(Failure::usage(
                    "--ceph-conf, --ceph-id and --ceph-keyring need --rbd-image",
                ));
            }
            let optional = [
                ("path", path.as_ref().map(|p| json!(p))),
                ("size", size.as_ref().map(|s| json!(s))),
                ("block_size", block_size.map(|b| json!(b))),
                ("workers", workers.map(|w| json!(w))),
                ("serial", serial.as_ref().map(|s| json!(s))),
                ("wwn", wwn.as_ref().map(|s| json!(s))),
                ("readahead", readahead.as_ref().map(|r| json!(r))),
            ];
            for (k, v) in optional {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            m.insert("read_only".into(), json!(read_only));
            m.insert("thin".into(), json!(!thick));
            m.insert("write_cache".into(), json!(!no_write_cache));
            for (k, v) in set {
                if m.contains_key(k) && k != "read_only" && k != "thin" && k != "write_cache" {
                    return Err(Failure::usage(format!(
                        "--set {k}=...: {k} is set by its own option already"
                    )));
                }
                proto::set_key::<LunSettings>(&mut m, k, &json!(v))
                    .map_err(|e| Failure::usage(format!("--set {e}")))?;
            }
            let lun: LunSettings = from_fields(m)?;
            change(
                c,
                &Request::AddLun {
                    target: iqn.clone(),
                    lun,
                },
                j,
            )
        }
        LunCmd::Set {
            iqn,
            id,
            settings,
            force,
        } => change(
            c,
            &Request::SetLun {
                target: iqn.clone(),
                lun: *id,
                settings: pairs(settings),
                force: *force,
            },
            j,
        ),
        LunCmd::Remove { iqn, id, force } => change(
            c,
            &Request::RemoveLun {
                target: iqn.clone(),
                lun: *id,
                force: *force,
            },
            j,
        ),
        LunCmd::Resize { iqn, id, size } => change(
            c,
            &Request::ResizeLun {
                target: iqn.clone(),
                lun: *id,
                size: size.clone(),
            },
            j,
        ),
        LunCmd::Readahead { iqn, id, policy } => change(
            c,
            &Request::SetReadahead {
                target: iqn.clone(),
                lun: *id,
                policy: policy.clone(),
            },
            j,
        ),
        LunCmd::Fault {
            iqn,
            id,
            read_error,
            write_error,
            write_nospace,
            delay,
            hang,
            off,
        } => {
            let fault = if *off {
                None
            } else {
                let mut m = Map::new();
                for (k, v) in [
                    ("read_error", read_error),
                    ("write_error", write_error),
                    ("write_nospace", write_nospace),
                    ("delay", delay),
                    ("hang", hang),
                ] {
                    if let Some(v) = v {
                        m.insert(k.into(), Value::Object(trigger_fields(k, v)?));
                    }
                }
                Some(Box::new(from_fields::<FaultSettings>(m)?))
            };
            change(
                c,
                &Request::SetFaults {
                    target: iqn.clone(),
                    lun: *id,
                    fault,
                },
                j,
            )
        }
    }
}

/// `always`, or `key=value` pairs separated by commas, as the JSON fields
/// of a fault's trigger: `every` as an integer, `probability` as a number,
/// the others (`lba`, `time`) as strings. The daemon checks the values.
pub(super) fn trigger_fields(fault: &str, spec: &str) -> Result<Map<String, Value>, Failure> {
    let mut m = Map::new();
    let spec = spec.trim();
    if spec.is_empty() || spec.eq_ignore_ascii_case("always") {
        return Ok(m);
    }
    for part in spec.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            Failure::usage(format!(
                "--{}: {part:?} is not KEY=VALUE",
                fault.replace('_', "-")
            ))
        })?;
        let (k, v) = (k.trim(), v.trim());
        let value = match k {
            "every" => json!(v.parse::<u64>().map_err(|_| Failure::usage(format!(
                "--{}: every={v:?} is not a count",
                fault.replace('_', "-")
            )))?),
            "probability" => json!(v.parse::<f64>().map_err(|_| Failure::usage(format!(
                "--{}: probability={v:?} is not a number",
                fault.replace('_', "-")
            )))?),
            _ => json!(v),
        };
        m.insert(k.to_owned(), value);
    }
    Ok(m)
}

fn acl(c: &mut Client, cmd: &AclCmd, j: bool) -> Result<String, Failure> {
    let (target, req) = match cmd {
        AclCmd::List { iqn } => {
            let (v, t) = c.call_as::<proto::TargetView>(&Request::ShowTarget {
                target: iqn.clone(),
            })?;
            return Ok(if j {
                pretty(v.get("acl").unwrap_or(&Value::Null))
            } else {
                render::acl(&t)
            });
        }
        AclCmd::Add { iqn, initiator } => (
            iqn,
            Request::AclAdd {
                target: iqn.clone(),
                initiator: initiator.clone(),
            },
        ),
        AclCmd::Remove { iqn, initiator } => (
            iqn,
            Request::AclRemove {
                target: iqn.clone(),
                initiator: initiator.clone(),
            },
        ),
        AclCmd::Set { iqn, initiators } => (
            iqn,
            Request::SetAcl {
                target: iqn.clone(),
                acl: initiators.clone(),
            },
        ),
        AclCmd::Clear { iqn } => (
            iqn,
            Request::SetAcl {
                target: iqn.clone(),
                acl: Vec::new(),
            },
        ),
    };
    let _ = target;
    change(c, &req, j)
}

/// The first line of FILE, or of stdin for "-".
fn read_secret(path: &Path) -> Result<String, Failure> {
    let mut text = String::new();
    let res = if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text)
    } else {
        std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
    };
    res.map_err(|e| Failure::usage(format!("reading the secret from {}: {e}", path.display())))?;
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

fn group(c: &mut Client, cmd: &GroupCmd, j: bool) -> Result<String, Failure> {
    let req = match cmd {
        GroupCmd::List { iqn } => {
            let (v, t) = c.call_as::<proto::TargetView>(&Request::ShowTarget {
                target: iqn.clone(),
            })?;
            return Ok(if j {
                pretty(v.get("groups").unwrap_or(&Value::Null))
            } else {
                render::groups(&t)
            });
        }
        GroupCmd::Add {
            iqn,
            name,
            initiators,
            luns,
            no_luns,
            chap_user,
            chap_secret_file,
            mutual_user,
            mutual_secret_file,
        } => {
            let map = if *no_luns {
                Some(Vec::new())
            } else if luns.is_empty() {
                None
            } else {
                Some(
                    luns.iter()
                        .map(|m| parse_mapping(m))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            };
            let chap = match (chap_user, chap_secret_file) {
                (Some(user), Some(file)) => Some(ChapSettings {
                    user: user.clone(),
                    secret: read_secret(file)?,
                    mutual_user: mutual_user.clone(),
                    mutual_secret: match mutual_secret_file {
                        Some(f) => Some(read_secret(f)?),
                        None => None,
                    },
                }),
                _ => None,
            };
            Request::GroupAdd {
                target: iqn.clone(),
                group: GroupSettings {
                    name: name.clone(),
                    initiators: initiators.clone(),
                    chap,
                    luns: map,
                },
            }
        }
        GroupCmd::Remove { iqn, name } => Request::GroupRemove {
            target: iqn.clone(),
            name: name.clone(),
        },
    };
    change(c, &req, j)
}

/// `LUN=SOURCE` or `LUN=SOURCE:ro`.
fn parse_mapping(text: &str) -> Result<LunMapping, Failure> {
    let bad = || Failure {
        code: 2,
        message: format!("--lun {text}: expected LUN=SOURCE or LUN=SOURCE:ro (e.g. 0=3:ro)"),
    };
    let (lun, rest) = text.split_once('=').ok_or_else(bad)?;
    let (source, read_only) = match rest.strip_suffix(":ro") {
        Some(s) => (s, true),
        None => (rest, false),
    };
    Ok(LunMapping {
        lun: lun.trim().parse().map_err(|_| bad())?,
        source: source.trim().parse().map_err(|_| bad())?,
        read_only,
    })
}

fn chap(c: &mut Client, cmd: &ChapCmd, j: bool) -> Result<String, Failure> {
    let req = match cmd {
        ChapCmd::Set {
            target,
            user,
            secret_file,
            mutual_user,
            mutual_secret_file,
        } => Request::SetChap {
            target: target.clone(),
            chap: Some(ChapSettings {
                user: user.clone(),
                secret: read_secret(secret_file)?,
                mutual_user: mutual_user.clone(),
                mutual_secret: match mutual_secret_file {
                    Some(f) => Some(read_secret(f)?),
                    None => None,
                },
            }),
        },
        ChapCmd::Clear { target } => Request::SetChap {
            target: target.clone(),
            chap: None,
        },
    };
    change(c, &req, j)
}

fn session(c: &mut Client, cmd: &SessionCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        SessionCmd::List { iqn } => show(
            c,
            &Request::ListSessions {
                target: iqn.clone(),
            },
            j,
            |v: &Vec<proto::SessionView>| render::sessions(v),
        ),
        SessionCmd::Show { tsih } => {
            let (_, all) =
                c.call_as::<Vec<proto::SessionView>>(&Request::ListSessions { target: None })?;
            let s = all.into_iter().find(|s| s.tsih == *tsih).ok_or(Failure {
                code: 1,
                message: format!("no session with TSIH {tsih}"),
            })?;
            Ok(if j {
                serde_json::to_string_pretty(&s).unwrap_or_default()
            } else {
                render::session(&s)
            })
        }
        SessionCmd::Logout { tsih } => show(
            c,
            &Request::LogoutSession { tsih: *tsih },
            j,
            |a: &proto::SessionAction| {
                format!(
                    "asked the initiator of session {} to log out ({} connection(s))\n",
                    a.tsih, a.connections
                )
            },
        ),
        SessionCmd::Kill { tsih } => show(
            c,
            &Request::KillSession { tsih: *tsih },
            j,
            |a: &proto::SessionAction| {
                format!(
                    "closed session {} ({} connection(s))\n",
                    a.tsih, a.connections
                )
            },
        ),
    }
}

fn stats(c: &mut Client, cmd: &StatsCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        StatsCmd::Lun { iqn, id, interval } => {
            let req = Request::LunStats {
                target: iqn.clone(),
                lun: *id,
            };
            let (v1, first) = c.call_as::<Vec<proto::LunStatsView>>(&req)?;
            let Some(secs) = interval else {
                return Ok(if j {
                    pretty(&v1)
                } else {
                    render::lun_stats(&first)
                });
            };
            let secs = (*secs).max(1);
            std::thread::sleep(Duration::from_secs(secs));
            let (v2, second) = c.call_as::<Vec<proto::LunStatsView>>(&req)?;
            let rates = render::lun_rates(&first, &second, secs);
            Ok(if j {
                pretty(&json!({ "interval_secs": secs, "rates": rates, "stats": v2 }))
            } else {
                render::lun_rates_table(&rates)
            })
        }
        StatsCmd::Session { tsih, interval } => {
            let req = Request::SessionStats { tsih: *tsih };
            let (v1, first) = c.call_as::<Vec<proto::SessionStatsView>>(&req)?;
            let Some(secs) = interval else {
                return Ok(if j {
                    pretty(&v1)
                } else {
                    render::session_stats(&first)
                });
            };
            let secs = (*secs).max(1);
            std::thread::sleep(Duration::from_secs(secs));
            let (v2, second) = c.call_as::<Vec<proto::SessionStatsView>>(&req)?;
            let rates = render::session_rates(&first, &second, secs);
            Ok(if j {
                pretty(&json!({ "interval_secs": secs, "rates": rates, "stats": v2 }))
            } else {
                render::session_rates_table(&rates)
            })
        }
    }
}

fn config(c: &mut Client, cmd: &ConfigCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        ConfigCmd::Save { file } => {
            let (v, t) = c.call_as::<proto::ConfigText>(&Request::ConfigSave)?;
            match file {
                None => Ok(if j { pretty(&v) } else { t.toml }),
                Some(path) => {
                    write_private(path, &t.toml)?;
                    Ok(if j {
                        pretty(&json!({ "saved": path }))
                    } else {
                        format!("saved the running configuration to {}\n", path.display())
                    })
                }
            }
        }
        ConfigCmd::Apply {
            file,
            force,
            dry_run,
        } => {
            let toml = std::fs::read_to_string(file)
                .map_err(|e| Failure::usage(format!("reading {}: {e}", file.display())))?;
            let origin = std::path::absolute(file)
                .unwrap_or_else(|_| file.clone())
                .display()
                .to_string();
            change(
                c,
                &Request::ConfigApply {
                    toml,
                    origin: Some(origin),
                    force: *force,
                    dry_run: *dry_run,
                },
                j,
            )
        }
        ConfigCmd::Reload { force } => change(c, &Request::ConfigReload { force: *force }, j),
    }
}

/// Writes `text` to `path` with mode 0600 (it holds CHAP secrets),
/// through a temporary file and a rename.
pub(super) fn write_private(path: &Path, text: &str) -> Result<(), Failure> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "rustgt.toml".into())
    ));
    let fail = |e: std::io::Error| Failure::usage(format!("writing {}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}
