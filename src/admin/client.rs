//! `rustgt admin`: the command line client of the admin socket.
//!
//! Each invocation sends one request line (two for `--interval` stats)
//! and prints the result as a table, or as JSON with `--json`. Exit
//! status: 0 done, 1 the daemon refused the request (its error is printed
//! on stderr), 2 the daemon could not be reached or the arguments are bad.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::proto::{Reply, Request};
use super::render;
use crate::config::{ChapSettings, FaultSettings, LunSettings, Overrides, TargetSettings};

/// How long the client waits for an answer (a `config apply` may open
/// many backing files).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// `rustgt admin [--socket PATH] [--json] COMMAND`
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AdminArgs {
    /// Admin socket [default: found from --admin-socket, --config and
    /// --data-dir like the daemon does, else ./rustgt-data/admin.sock].
    #[arg(short, long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print results as JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AdminCommand {
    /// Daemon summary: version, uptime, socket, metrics, counts.
    Status,
    /// List, show, add and remove targets.
    #[command(subcommand)]
    Target(TargetCmd),
    /// List portals; add or remove a target's portal.
    #[command(subcommand)]
    Portal(PortalCmd),
    /// List, add, remove and resize LUNs; set their readahead policy.
    #[command(subcommand)]
    Lun(LunCmd),
    /// A target's initiator access list.
    #[command(subcommand)]
    Acl(AclCmd),
    /// CHAP credentials of a target or of discovery.
    #[command(subcommand)]
    Chap(ChapCmd),
    /// Sessions: list, show, ask to log out, kill.
    #[command(subcommand)]
    Session(SessionCmd),
    /// Every open connection, logged in or not.
    Connections,
    /// Per-LUN and per-session statistics.
    #[command(subcommand)]
    Stats(StatsCmd),
    /// Save, apply or reload the configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// The Prometheus exposition (what GET /metrics serves).
    Metrics,
    /// Send one raw JSON request line and print the raw reply.
    Raw {
        /// e.g. '{"cmd":"list_targets"}'
        request: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum TargetCmd {
    List,
    Show {
        iqn: String,
    },
    /// Add a target without LUNs (add them with `lun add`).
    Add {
        iqn: String,
        #[arg(long)]
        alias: Option<String>,
        /// Target portal group tag [default: 1].
        #[arg(long)]
        tpgt: Option<u16>,
        /// ADDR:PORT, repeatable [default: 127.0.0.1:3260].
        #[arg(long = "portal", value_name = "ADDR:PORT")]
        portals: Vec<SocketAddr>,
        /// Allowed initiator name, repeatable [default: any initiator].
        #[arg(long = "acl", value_name = "INITIATOR")]
        acl: Vec<String>,
    },
    /// Remove a target; refused while it has sessions unless --force.
    Remove {
        iqn: String,
        /// Kill its sessions and remove it anyway.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum PortalCmd {
    List,
    /// Add ADDR:PORT to a target (a new address is bound at once).
    Add {
        iqn: String,
        portal: SocketAddr,
    },
    /// Remove ADDR:PORT from a target (closed once no target lists it;
    /// connections already made stay).
    Remove {
        iqn: String,
        portal: SocketAddr,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum LunCmd {
    List {
        iqn: Option<String>,
    },
    /// Add a LUN; options are the config file's LUN keys.
    Add {
        iqn: String,
        id: u64,
        /// file, blockdev, ram, null, hddsim or rbd.
        #[arg(long)]
        backstore: String,
        /// rbd: the image as POOL/IMAGE or POOL/NAMESPACE/IMAGE (it must
        /// exist; its size is the LUN's).
        #[arg(long, value_name = "POOL/[NAMESPACE/]IMAGE")]
        rbd_image: Option<String>,
        /// rbd: ceph.conf of the cluster (default: librados' search).
        #[arg(long)]
        ceph_conf: Option<PathBuf>,
        /// rbd: cephx client id without "client." (default admin).
        #[arg(long)]
        ceph_id: Option<String>,
        /// rbd: keyring (default: the one ceph.conf names).
        #[arg(long)]
        ceph_keyring: Option<PathBuf>,
        #[arg(long)]
        path: Option<PathBuf>,
        /// e.g. 1G, 512M.
        #[arg(long)]
        size: Option<String>,
        #[arg(long)]
        block_size: Option<u32>,
        #[arg(long)]
        read_only: bool,
        /// Fully provisioned instead of thin.
        #[arg(long)]
        thick: bool,
        /// Report no volatile write cache (every write is FUA).
        #[arg(long)]
        no_write_cache: bool,
        #[arg(long)]
        workers: Option<usize>,
        #[arg(long)]
        serial: Option<String>,
        /// none, kernel, classic, context or streams.
        #[arg(long)]
        readahead: Option<String>,
    },
    /// Remove a LUN; refused while its target has sessions unless --force.
    Remove {
        iqn: String,
        id: u64,
        #[arg(long)]
        force: bool,
    },
    /// Grow a LUN (file, blockdev, null); without SIZE pick up the backing
    /// file's or device's current size. Raises CAPACITY DATA HAS CHANGED.
    Resize {
        iqn: String,
        id: u64,
        size: Option<String>,
    },
    /// Set the readahead policy: auto, none, kernel, classic, context, streams.
    Readahead {
        iqn: String,
        id: u64,
        policy: String,
    },
    /// Replace the LUN's injected faults (for tests and failure
    /// rehearsals). Each fault takes a trigger: `always`, or
    /// comma-separated `lba=100-199`, `every=N`, `probability=P` (all must
    /// hold); --delay also takes `time=5ms`. No fault option clears them.
    Fault {
        iqn: String,
        id: u64,
        /// Reads fail: MEDIUM ERROR / UNRECOVERED READ ERROR.
        #[arg(long, value_name = "TRIGGER")]
        read_error: Option<String>,
        /// Writes fail: MEDIUM ERROR / WRITE ERROR.
        #[arg(long, value_name = "TRIGGER")]
        write_error: Option<String>,
        /// Writes find no space: DATA PROTECT / SPACE ALLOCATION FAILED.
        #[arg(long, value_name = "TRIGGER")]
        write_nospace: Option<String>,
        /// Reads and writes wait first: `time=5ms[,TRIGGER]`.
        #[arg(long, value_name = "time=T[,TRIGGER]")]
        delay: Option<String>,
        /// Reads and writes hang until aborted or cleared.
        #[arg(long, value_name = "TRIGGER")]
        hang: Option<String>,
        /// Remove fault injection from the LUN altogether (its I/O then
        /// goes straight to its store again).
        #[arg(long)]
        off: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum AclCmd {
    List {
        iqn: String,
    },
    Add {
        iqn: String,
        initiator: String,
    },
    Remove {
        iqn: String,
        initiator: String,
    },
    /// Replace the whole list.
    Set {
        iqn: String,
        #[arg(required = true)]
        initiators: Vec<String>,
    },
    /// Empty the list: any initiator may log in.
    Clear {
        iqn: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ChapCmd {
    /// Require CHAP. Secrets are read from files ("-" for stdin), never
    /// from the command line.
    Set {
        /// The target [default: discovery sessions].
        #[arg(long)]
        target: Option<String>,
        #[arg(long)]
        user: String,
        #[arg(long, value_name = "FILE")]
        secret_file: PathBuf,
        /// Name the target answers with when the initiator asks (mutual CHAP).
        #[arg(long, requires = "mutual_secret_file")]
        mutual_user: Option<String>,
        #[arg(long, value_name = "FILE", requires = "mutual_user")]
        mutual_secret_file: Option<PathBuf>,
    },
    /// Turn CHAP off.
    Clear {
        /// The target [default: discovery sessions].
        #[arg(long)]
        target: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum SessionCmd {
    List {
        iqn: Option<String>,
    },
    /// A session's connections and negotiated parameters.
    Show {
        tsih: u16,
    },
    /// Ask the initiator to log out (it has 2 seconds).
    Logout {
        tsih: u16,
    },
    /// Close the session's connections now.
    Kill {
        tsih: u16,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum StatsCmd {
    /// Per-LUN I/O, latency, request sizes and readahead.
    Lun {
        iqn: Option<String>,
        id: Option<u64>,
        /// Sample twice, SECS apart, and show rates (IOPS, bytes/s).
        #[arg(long, value_name = "SECS")]
        interval: Option<u64>,
    },
    /// Per-session commands, bytes and latency.
    Session {
        tsih: Option<u16>,
        #[arg(long, value_name = "SECS")]
        interval: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ConfigCmd {
    /// The running configuration as TOML, to FILE (mode 0600) or stdout.
    Save { file: Option<PathBuf> },
    /// Apply FILE as a diff against the running state.
    Apply {
        file: PathBuf,
        /// Remove or replace LUNs and targets even if they have sessions.
        #[arg(long)]
        force: bool,
        /// Only show what would change.
        #[arg(long)]
        dry_run: bool,
    },
    /// Re-apply the daemon's own config file (same as SIGHUP).
    Reload {
        #[arg(long)]
        force: bool,
    },
}

/// Failure of a client run, with its exit status.
#[derive(Debug)]
struct Failure {
    code: i32,
    message: String,
}

impl Failure {
    fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
}

/// Runs `rustgt admin ...`; returns the process exit status.
pub fn run(args: &AdminArgs, config: Option<&Path>, overrides: &Overrides) -> i32 {
    match run_inner(args, config, overrides) {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("rustgt admin: {}", f.message);
            f.code
        }
    }
}

fn run_inner(
    args: &AdminArgs,
    config: Option<&Path>,
    overrides: &Overrides,
) -> Result<(), Failure> {
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => crate::config::admin_socket_of(config, overrides)
            .map_err(|e| Failure::usage(format!("cannot find the admin socket: {e}")))?,
    };
    let mut client = Client::connect(&socket)?;
    let out = &mut std::io::stdout().lock();
    execute(&mut client, args, out)?;
    out.flush()
        .map_err(|e| Failure::usage(format!("stdout: {e}")))
}

/// One connection to the daemon.
struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    socket: PathBuf,
}

impl Client {
    fn connect(socket: &Path) -> Result<Client, Failure> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            Failure::usage(format!(
                "cannot connect to the admin socket {}: {e} (is the daemon running? \
                 --socket, --config or --data-dir tell where its socket is)",
                socket.display()
            ))
        })?;
        let _ = stream.set_read_timeout(Some(REPLY_TIMEOUT));
        let writer = stream
            .try_clone()
            .map_err(|e| Failure::usage(format!("admin socket: {e}")))?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            socket: socket.to_owned(),
        })
    }

    fn send_line(&mut self, line: &str) -> Result<Reply, Failure> {
        let io = |e: std::io::Error| {
            Failure::usage(format!("admin socket {}: {e}", self.socket.display()))
        };
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(io)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(io)?;
        if n == 0 {
            return Err(Failure::usage(
                "the daemon closed the admin connection without answering",
            ));
        }
        serde_json::from_str(answer.trim_end())
            .map_err(|e| Failure::usage(format!("unreadable reply from the daemon: {e}")))
    }

    /// Sends `req`; the result on success, the daemon's error as a Failure.
    fn call(&mut self, req: &Request) -> Result<Value, Failure> {
        let line = serde_json::to_string(req)
            .map_err(|e| Failure::usage(format!("cannot encode the request: {e}")))?;
        let reply = self.send_line(&line)?;
        match (reply.ok, reply.result, reply.error) {
            (true, Some(v), _) => Ok(v),
            (true, None, _) => Ok(Value::Null),
            (false, _, e) => Err(Failure {
                code: 1,
                message: e.unwrap_or_else(|| "the daemon refused the request".to_owned()),
            }),
        }
    }

    fn call_as<T: DeserializeOwned>(&mut self, req: &Request) -> Result<(Value, T), Failure> {
        let v = self.call(req)?;
        let t = serde_json::from_value(v.clone())
            .map_err(|e| Failure::usage(format!("unexpected result shape: {e}")))?;
        Ok((v, t))
    }
}

/// Builds the request(s) of `args`, sends them, prints the answer.
fn execute(c: &mut Client, args: &AdminArgs, out: &mut dyn Write) -> Result<(), Failure> {
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
        A::Connections => show(
            c,
            &Request::ListConnections,
            j,
            |v: &Vec<super::proto::ConnView>| render::connections(v),
        )?,
        A::Metrics => {
            let (v, m) = c.call_as::<super::proto::MetricsText>(&Request::Metrics)?;
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
        A::Chap(ch) => chap(c, ch, j)?,
        A::Session(s) => session(c, s, j)?,
        A::Stats(s) => stats(c, s, j)?,
        A::Config(cfg) => config(c, cfg, j)?,
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
        TargetCmd::List => show(
            c,
            &Request::ListTargets,
            j,
            |v: &Vec<super::proto::TargetView>| render::targets(v),
        ),
        TargetCmd::Show { iqn } => show(
            c,
            &Request::ShowTarget {
                target: iqn.clone(),
            },
            j,
            render::target,
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

/// A config struct from the fields given, the rest by their defaults.
fn from_fields<T: DeserializeOwned>(m: Map<String, Value>) -> Result<T, Failure> {
    serde_json::from_value(Value::Object(m)).map_err(|e| Failure::usage(e.to_string()))
}

fn portal(c: &mut Client, cmd: &PortalCmd, j: bool) -> Result<String, Failure> {
    match cmd {
        PortalCmd::List => show(
            c,
            &Request::ListPortals,
            j,
            |v: &Vec<super::proto::PortalView>| render::portals(v),
        ),
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
            |v: &Vec<super::proto::LunView>| render::luns(v),
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
            readahead,
            rbd_image,
            ceph_conf,
            ceph_id,
            ceph_keyring,
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
fn trigger_fields(fault: &str, spec: &str) -> Result<Map<String, Value>, Failure> {
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
            let (v, t) = c.call_as::<super::proto::TargetView>(&Request::ShowTarget {
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
            |v: &Vec<super::proto::SessionView>| render::sessions(v),
        ),
        SessionCmd::Show { tsih } => {
            let (_, all) = c.call_as::<Vec<super::proto::SessionView>>(&Request::ListSessions {
                target: None,
            })?;
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
            |a: &super::proto::SessionAction| {
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
            |a: &super::proto::SessionAction| {
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
            let (v1, first) = c.call_as::<Vec<super::proto::LunStatsView>>(&req)?;
            let Some(secs) = interval else {
                return Ok(if j {
                    pretty(&v1)
                } else {
                    render::lun_stats(&first)
                });
            };
            let secs = (*secs).max(1);
            std::thread::sleep(Duration::from_secs(secs));
            let (v2, second) = c.call_as::<Vec<super::proto::LunStatsView>>(&req)?;
            let rates = render::lun_rates(&first, &second, secs);
            Ok(if j {
                pretty(&json!({ "interval_secs": secs, "rates": rates, "stats": v2 }))
            } else {
                render::lun_rates_table(&rates)
            })
        }
        StatsCmd::Session { tsih, interval } => {
            let req = Request::SessionStats { tsih: *tsih };
            let (v1, first) = c.call_as::<Vec<super::proto::SessionStatsView>>(&req)?;
            let Some(secs) = interval else {
                return Ok(if j {
                    pretty(&v1)
                } else {
                    render::session_stats(&first)
                });
            };
            let secs = (*secs).max(1);
            std::thread::sleep(Duration::from_secs(secs));
            let (v2, second) = c.call_as::<Vec<super::proto::SessionStatsView>>(&req)?;
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
            let (v, t) = c.call_as::<super::proto::ConfigText>(&Request::ConfigSave)?;
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
fn write_private(path: &Path, text: &str) -> Result<(), Failure> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: AdminArgs,
    }

    fn parse(args: &[&str]) -> AdminArgs {
        Wrap::try_parse_from(std::iter::once("admin").chain(args.iter().copied()))
            .map(|w| w.args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn commands_parse() {
        let a = parse(&[
            "--json",
            "-s",
            "/tmp/x.sock",
            "lun",
            "remove",
            "iqn.a",
            "3",
            "--force",
        ]);
        assert!(a.json);
        assert_eq!(a.socket, Some(PathBuf::from("/tmp/x.sock")));
        assert_eq!(
            a.command,
            AdminCommand::Lun(LunCmd::Remove {
                iqn: "iqn.a".into(),
                id: 3,
                force: true
            })
        );
        let a = parse(&["lun", "resize", "iqn.a", "1"]);
        assert!(matches!(
            a.command,
            AdminCommand::Lun(LunCmd::Resize { size: None, .. })
        ));
        let a = parse(&["config", "apply", "new.toml", "--dry-run"]);
        assert!(matches!(
            a.command,
            AdminCommand::Config(ConfigCmd::Apply {
                dry_run: true,
                force: false,
                ..
            })
        ));
        assert!(Wrap::try_parse_from(["admin", "acl", "set", "iqn.a"]).is_err());
        assert!(Wrap::try_parse_from([
            "admin",
            "chap",
            "set",
            "--user",
            "u",
            "--secret-file",
            "f",
            "--mutual-user",
            "m"
        ])
        .is_err());
    }

    #[test]
    fn lun_add_fields_become_config_settings_with_defaults() {
        let mut m = Map::new();
        m.insert("id".into(), json!(2));
        m.insert("backstore".into(), json!("ram"));
        m.insert("size".into(), json!("16M"));
        let l: LunSettings = from_fields(m).expect("valid");
        assert_eq!((l.id, l.block_size), (2, 512));
        let mut bad = Map::new();
        bad.insert("id".into(), json!(2));
        assert!(
            from_fields::<LunSettings>(bad).is_err(),
            "backstore is required"
        );
    }

    #[test]
    fn fault_triggers_parse_into_fields() {
        assert!(trigger_fields("hang", "always").expect("always").is_empty());
        assert!(trigger_fields("hang", "").expect("empty").is_empty());
        let m = trigger_fields("delay", "time=5ms, lba=10-20,every=2,probability=0.25")
            .expect("fields");
        assert_eq!(m.get("time"), Some(&json!("5ms")));
        assert_eq!(m.get("lba"), Some(&json!("10-20")));
        assert_eq!(m.get("every"), Some(&json!(2)));
        assert_eq!(m.get("probability"), Some(&json!(0.25)));
        assert!(trigger_fields("hang", "lba").is_err());
        assert!(trigger_fields("hang", "every=x").is_err());
        let a = parse(&[
            "lun",
            "fault",
            "iqn.a",
            "1",
            "--hang",
            "lba=5",
            "--read-error",
            "always",
        ]);
        assert!(matches!(
            a.command,
            AdminCommand::Lun(LunCmd::Fault {
                hang: Some(_),
                read_error: Some(_),
                off: false,
                ..
            })
        ));
    }

    #[test]
    fn saved_config_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("saved.toml");
        write_private(&path, "data_dir = \"/x\"\n").expect("writes");
        let meta = std::fs::metadata(&path).expect("exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).expect("reads"),
            "data_dir = \"/x\"\n"
        );
    }
}
