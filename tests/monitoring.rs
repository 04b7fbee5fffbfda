//! etc/monitoring, black-box: every rustgt metric the Prometheus alert
//! rules and the Grafana dashboard query is one a live daemon exports
//! (after it served reads and writes on a LUN with readahead of its own);
//! promtool (Debian's `prometheus` package, installed by tests/run)
//! accepts the rules file and lints the daemon's exposition clean; and
//! Debian's Prometheus server scrapes a live daemon with the rules loaded.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use admin_common::{Admin, Session};
use common::Daemon;
use serde_json::{json, Value};

const TARGET: &str = "iqn.2026-11.org.rustgt:monitored";
const INITIATOR: &str = "iqn.2026-11.org.rustgt.test:monitor";

fn etc(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("etc/monitoring")
        .join(file)
}

/// Every `rustgt_...` name in `text`.
fn rustgt_names(text: &str, into: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(at) = rest.find("rustgt_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        into.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
}

/// The `expr` and template queries of a Grafana dashboard.
fn dashboard_queries(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "definition", Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_queries(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| dashboard_queries(v, out)),
        _ => {}
    }
}

fn scrape(addr: &str) -> String {
    let mut sock = std::net::TcpStream::connect(addr).expect("connect metrics");
    write!(sock, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut text = String::new();
    sock.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("end of headers");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    body.to_owned()
}

fn promtool(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; tests/run installs it)");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write to promtool");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("promtool ran");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn rules_and_dashboard_query_exported_metrics() {
    let cfg = format!(
        "metrics_listen = \"127.0.0.1:0\"\n\
         [[targets]]\niqn = \"{TARGET}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"lun0.img\"\nsize = \"16M\"\nreadahead = \"streams\"\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"16M\"\n"
    );
    let d = Daemon::start_with_config(&cfg, 1);
    let mut s = Session::login(d.portal, TARGET, INITIATOR, 9);
    s.settle(0);
    s.settle(1);
    let data = vec![0x6b_u8; 8 * 512];
    for lba in (0..64).step_by(8) {
        assert!(s.write(0, lba, &data).is_good());
    }
    for lba in (0..1024).step_by(64) {
        assert!(s.read(0, lba, 64).is_good());
    }
    assert!(s.read(1, 0, 8).is_good());

    let mut a = Admin::connect(&d);
    let addr = a.ok(json!({"cmd": "status"}))["metrics"]
        .as_str()
        .expect("metrics address")
        .to_owned();
    let exposition = scrape(&addr);
    let exported: BTreeSet<String> = exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    assert!(
        exported.contains("rustgt_lun_readahead_hit_bytes_total"),
        "the LUN with readahead exports its series: {exposition}"
    );

    let rules = std::fs::read_to_string(etc("rustgt-alerts.yml")).expect("rules file");
    let mut queried = BTreeSet::new();
    let exprs: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("expr:"))
        .collect();
    assert_eq!(
        exprs.len(),
        rules.matches("- alert:").count(),
        "one expr per alert"
    );
    for e in exprs {
        rustgt_names(e, &mut queried);
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(etc("grafana-dashboard.json")).expect("dashboard file"),
    )
    .expect("the dashboard is JSON");
    let mut queries = Vec::new();
    dashboard_queries(&dashboard, &mut queries);
    assert!(queries.len() >= 10, "{queries:?}");
    for q in &queries {
        rustgt_names(q, &mut queried);
    }
    assert!(queried.len() >= 20, "{queried:?}");
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "queried but not exported: {missing:?}\nexported: {exported:?}"
    );

    let rules_path = etc("rustgt-alerts.yml");
    let (ok, out) = promtool(
        &["check", "rules", rules_path.to_str().expect("utf-8 path")],
        None,
    );
    assert!(ok, "promtool check rules: {out}");
    let (ok, out) = promtool(&["check", "metrics"], Some(&exposition));
    assert!(ok, "promtool check metrics: {out}");
}

/// `GET path` over HTTP/1.0 (so the answer is not chunked): status line
/// and body.
fn http_get(addr: &str, path: &str) -> Option<(String, String)> {
    let mut sock = std::net::TcpStream::connect(addr).ok()?;
    sock.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(sock, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    sock.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// A Prometheus server (Debian's) scrapes the daemon every second with the
/// alert rules loaded: the scrape is healthy, a counter it stored equals
/// what the admin socket reports, and every alert rule evaluates without
/// error against the live series.
#[test]
fn a_prometheus_server_scrapes_the_daemon_and_evaluates_the_rules() {
    let cfg = format!(
        "metrics_listen = \"127.0.0.1:0\"\n\
         [[targets]]\niqn = \"{TARGET}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\nreadahead = \"streams\"\n"
    );
    let d = Daemon::start_with_config(&cfg, 1);
    let mut s = Session::login(d.portal, TARGET, INITIATOR, 11);
    s.settle(0);
    for lba in (0..256).step_by(32) {
        assert!(s.read(0, lba, 32).is_good());
    }
    let mut a = Admin::connect(&d);
    let metrics = a.ok(json!({"cmd": "status"}))["metrics"]
        .as_str()
        .expect("metrics address")
        .to_owned();
    let reads = a.ok(json!({"cmd": "lun_stats", "target": TARGET, "lun": 0}))[0]["read_commands"]
        .as_u64()
        .expect("reads");
    assert!(reads >= 8);

    let dir = tempfile::tempdir().expect("scratch dir");
    let web = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").to_string()
    };
    let rules = etc("rustgt-alerts.yml");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: rustgt\n    static_configs:\n      - targets: ['{metrics}']\n",
            rules.display()
        ),
    )
    .expect("write prometheus.yml");
    let mut server = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus (Debian package prometheus; tests/run installs it)");
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Kill(&mut server);

    let query = |q: &str| -> Option<Value> {
        let (status, body) = http_get(&web, &format!("/api/v1/query?query={q}"))?;
        if !status.contains(" 200 ") {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"].as_array()?.first().cloned()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut stored = None;
    let mut rules_ok = None;
    while std::time::Instant::now() < deadline {
        let up = query("up").and_then(|r| r["value"][1].as_str().map(str::to_owned));
        stored = query("rustgt_lun_read_commands_total")
            .and_then(|r| r["value"][1].as_str().and_then(|v| v.parse::<u64>().ok()));
        rules_ok = http_get(&web, "/api/v1/rules").and_then(|(_, body)| {
            let v: Value = serde_json::from_str(&body).ok()?;
            let rules: Vec<Value> = v["data"]["groups"]
                .as_array()?
                .iter()
                .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
                .collect();
            let evaluated = rules.iter().all(|r| {
                r["health"] == "ok"
                    && r["lastEvaluation"]
                        .as_str()
                        .is_some_and(|t| !t.starts_with("0001"))
            });
            Some((rules.len(), evaluated, body))
        });
        if up.as_deref() == Some("1")
            && stored == Some(reads)
            && rules_ok.as_ref().is_some_and(|(_, ok, _)| *ok)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    assert_eq!(stored, Some(reads), "the counter Prometheus stored");
    let (count, ok, body) = rules_ok.expect("Prometheus answered /api/v1/rules");
    let alerts = std::fs::read_to_string(&rules)
        .expect("rules file")
        .matches("- alert:")
        .count();
    assert!(alerts >= 10);
    assert_eq!(count, alerts, "the alert rules loaded: {body}");
    assert!(ok, "every rule evaluated with health ok: {body}");
}
