//! Prometheus metrics: the text exposition format (version 0.0.4) of the
//! same figures as the stats commands, served on `GET /metrics` by a
//! minimal HTTP/1.1 responder on `metrics_listen`.
//!
//! The figures come from the control task (a `metrics` request), so a
//! scrape sees one consistent moment; the HTTP side only parses a request
//! line, bounded in size and time, and never panics on what it reads.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::proto::{DataBuffersView, LunStatsView, Request, SessionStatsView};
use super::server::{ControlTx, Envelope};
use super::stats::Histogram;

/// Longest HTTP request head read.
const MAX_HEAD: usize = 8192;
/// Time a client gets to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Daemon-wide gauges.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauges {
    pub uptime_secs: u64,
    pub targets: usize,
    pub portals: usize,
    /// Of every transport.
    pub connections: usize,
    pub tcp_connections: usize,
    pub iser_connections: usize,
    /// Logins refused for failed authentication, since start.
    pub auth_failures: u64,
    /// Logins held back by the brake on password guessing, since start.
    pub logins_held: u64,
    /// The write data buffer budget and its use.
    pub data_buffers: DataBuffersView,
}

/// Renders the exposition.
/// The optional cargo features of this build, for `rustgt_build_info`.
const BUILD_FEATURES: &[&str] = &[
    #[cfg(feature = "iser")]
    "iser",
    #[cfg(feature = "rbd")]
    "rbd",
];

pub fn render(g: &Gauges, luns: &[LunStatsView], sessions: &[SessionStatsView]) -> String {
    let mut out = Exposition::default();
    out.gauge(
        "rustgt_build_info",
        "Always 1: the daemon's version and the optional features it was built with.",
        &[
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("features", BUILD_FEATURES.join(",")),
        ],
        1,
    );
    out.gauge(
        "rustgt_uptime_seconds",
        "Seconds since the daemon started.",
        &[],
        g.uptime_secs,
    );
    out.gauge("rustgt_targets", "Targets served.", &[], g.targets as u64);
    out.gauge(
        "rustgt_portals",
        "Portals listening.",
        &[],
        g.portals as u64,
    );
    out.gauge(
        "rustgt_connections",
        "Open iSCSI connections.",
        &[],
        g.connections as u64,
    );
    let name = "rustgt_transport_connections";
    out.header(name, "Open iSCSI connections by transport.", "gauge");
    out.sample(
        name,
        &[("transport", "tcp".into())],
        g.tcp_connections as u64,
    );
    out.sample(
        name,
        &[("transport", "iser".into())],
        g.iser_connections as u64,
    );
    out.gauge(
        "rustgt_sessions",
        "Logged-in Normal sessions.",
        &[],
        sessions.len() as u64,
    );
    let name = "rustgt_auth_failures_total";
    out.header(
        name,
        "Logins refused for failed authentication (CHAP), since start.",
        "counter",
    );
    out.sample(name, &[], g.auth_failures);
    let name = "rustgt_logins_held_total";
    out.header(
        name,
        "Logins held back because their source address failed to authenticate before.",
        "counter",
    );
    out.sample(name, &[], g.logins_held);
    data_buffer_metrics(&mut out, &g.data_buffers);
    lun_metrics(&mut out, luns);
    session_metrics(&mut out, sessions);
    qos_metrics(&mut out, luns, sessions);
    out.text
}

/// Throttling counters of LUNs and sessions QoS limits cover.
fn qos_metrics(out: &mut Exposition, luns: &[LunStatsView], sessions: &[SessionStatsView]) {
    use super::qos::QosStatsView;
    type Field = fn(&QosStatsView) -> u64;
    let lun_labels =
        |l: &LunStatsView| vec![("target", l.target.clone()), ("lun", l.lun.to_string())];
    let session_labels = |s: &SessionStatsView| {
        vec![
            ("target", s.target.clone()),
            ("initiator", s.initiator.clone()),
            ("isid", s.isid.clone()),
            ("transport", s.transport.clone()),
        ]
    };
    let fields: [(&str, &str, &str, Field); 4] = [
        (
            "qos_commands_total",
            "READs and WRITEs that passed the QoS limits.",
            "counter",
            |q| q.commands,
        ),
        (
            "qos_bytes_total",
            "Bytes of the READs and WRITEs that passed the QoS limits.",
            "counter",
            |q| q.bytes,
        ),
        (
            "qos_delayed_commands_total",
            "Commands that waited for a QoS limit.",
            "counter",
            |q| q.delayed,
        ),
        (
            "qos_waiting_commands",
            "Commands waiting for a QoS limit now.",
            "gauge",
            |q| q.waiting,
        ),
    ];
    let lq: Vec<_> = luns
        .iter()
        .filter_map(|l| Some((lun_labels(l), l.qos?)))
        .collect();
    let sq: Vec<_> = sessions
        .iter()
        .filter_map(|s| Some((session_labels(s), s.qos?)))
        .collect();
    for (scope, rows) in [("lun", &lq), ("session", &sq)] {
        if rows.is_empty() {
            continue;
        }
        for (suffix, help, kind, f) in fields {
            let name = format!("rustgt_{scope}_{suffix}");
            out.header(&name, help, kind);
            for (labels, q) in rows.iter() {
                out.sample(&name, labels, f(q));
            }
        }
        let name = format!("rustgt_{scope}_qos_throttled_seconds_total");
        out.header(
            &name,
            "Time commands waited for QoS limits, summed.",
            "counter",
        );
        for (labels, q) in rows.iter() {
            let _ = writeln!(
                out.text,
                "{name}{} {}",
                label_set(labels),
                q.throttled_us as f64 / 1e6
            );
        }
    }
}

fn data_buffer_metrics(out: &mut Exposition, b: &DataBuffersView) {
    out.gauge(
        "rustgt_data_buffer_budget_bytes",
        "The daemon-wide budget of write data buffers ([limits] data_buffer_bytes).",
        &[],
        b.budget_bytes,
    );
    out.gauge(
        "rustgt_data_buffer_used_bytes",
        "Bytes of the budget held by writes being collected or written.",
        &[],
        b.used_bytes,
    );
    out.gauge(
        "rustgt_data_buffer_waiting_connections",
        "Connections with a write waiting for room in the budget.",
        &[],
        b.waiting_connections as u64,
    );
    let name = "rustgt_data_buffer_waits_total";
    out.header(
        name,
        "Writes that waited for room in the budget before their R2Ts, since start.",
        "counter",
    );
    out.sample(name, &[], b.waits);
    let name = "rustgt_data_out_timeouts_total";
    out.header(
        name,
        "Connections closed for not sending solicited Data-Out within data_out_timeout_secs, since start.",
        "counter",
    );
    out.sample(name, &[], b.data_out_timeouts);
}

fn lun_metrics(out: &mut Exposition, luns: &[LunStatsView]) {
    let labels = |l: &LunStatsView| vec![("target", l.target.clone()), ("lun", l.lun.to_string())];
    type Field = fn(&LunStatsView) -> u64;
    let gauges: [(&str, &str, Field); 1] = [(
        "rustgt_lun_capacity_bytes",
        "Capacity the LUN reports.",
        |l| l.capacity_bytes,
    )];
    let counters: [(&str, &str, Field); 10] = [
        (
            "rustgt_lun_read_commands_total",
            "SCSI read commands.",
            |l| l.read_commands,
        ),
        (
            "rustgt_lun_write_commands_total",
            "SCSI write commands.",
            |l| l.write_commands,
        ),
        (
            "rustgt_lun_read_bytes_total",
            "Bytes read by SCSI commands.",
            |l| l.read_bytes,
        ),
        (
            "rustgt_lun_write_bytes_total",
            "Bytes written by SCSI commands.",
            |l| l.write_bytes,
        ),
        (
            "rustgt_lun_backing_reads_total",
            "Read requests to the LUN's store.",
            |l| l.backing.reads,
        ),
        (
            "rustgt_lun_backing_writes_total",
            "Write requests to the LUN's store.",
            |l| l.backing.writes,
        ),
        (
            "rustgt_lun_backing_read_bytes_total",
            "Bytes read from the LUN's store.",
            |l| l.backing.read_bytes,
        ),
        (
            "rustgt_lun_backing_write_bytes_total",
            "Bytes written to the LUN's store.",
            |l| l.backing.write_bytes,
        ),
        (
            "rustgt_lun_backing_flushes_total",
            "Flushes of the LUN's store.",
            |l| l.backing.flushes,
        ),
        (
            "rustgt_lun_backing_errors_total",
            "Failed requests to the LUN's store.",
            |l| l.backing.errors,
        ),
    ];
    for (name, help, f) in gauges {
        out.header(name, help, "gauge");
        for l in luns {
            out.sample(name, &labels(l), f(l));
        }
    }
    for (name, help, f) in counters {
        out.header(name, help, "counter");
        for l in luns {
            out.sample(name, &labels(l), f(l));
        }
    }
    type Hist = fn(&LunStatsView) -> &Histogram;
    let hists: [(&str, &str, Hist, bool); 3] = [
        (
            "rustgt_lun_backing_read_latency_seconds",
            "Latency of reads from the LUN's store.",
            |l| &l.backing.read_latency,
            true,
        ),
        (
            "rustgt_lun_backing_write_latency_seconds",
            "Latency of writes to the LUN's store.",
            |l| &l.backing.write_latency,
            true,
        ),
        (
            "rustgt_lun_backing_request_size_bytes",
            "Sizes of requests to the LUN's store.",
            |l| &l.backing.request_sizes,
            false,
        ),
    ];
    for (name, help, f, micros) in hists {
        out.header(name, help, "histogram");
        for l in luns {
            out.histogram(name, &labels(l), f(l), micros);
        }
    }
    readahead_metrics(out, luns);
}

fn readahead_metrics(out: &mut Exposition, luns: &[LunStatsView]) {
    let with: Vec<(&LunStatsView, &super::proto::ReadaheadStatsView)> = luns
        .iter()
        .filter_map(|l| l.readahead.as_ref().map(|r| (l, r)))
        .collect();
    if with.is_empty() {
        return;
    }
    let labels = |l: &LunStatsView| vec![("target", l.target.clone()), ("lun", l.lun.to_string())];
    out.header(
        "rustgt_lun_readahead_policy",
        "Readahead policy running (value 1).",
        "gauge",
    );
    for (l, r) in &with {
        let mut lb = labels(l);
        lb.push(("policy", r.policy.clone()));
        out.sample("rustgt_lun_readahead_policy", &lb, 1);
    }
    type Field = fn(&super::proto::ReadaheadStatsView) -> u64;
    let counters: [(&str, &str, Field); 7] = [
        (
            "rustgt_lun_readahead_requests_total",
            "Demand reads through the I/O context.",
            |r| r.requests,
        ),
        (
            "rustgt_lun_readahead_bytes_total",
            "Bytes of demand reads.",
            |r| r.bytes,
        ),
        (
            "rustgt_lun_readahead_hit_bytes_total",
            "Demand bytes found cached or in flight.",
            |r| r.hit_bytes,
        ),
        (
            "rustgt_lun_readahead_miss_bytes_total",
            "Demand bytes that needed their own backing read.",
            |r| r.miss_bytes,
        ),
        (
            "rustgt_lun_readahead_wasted_bytes_total",
            "Readahead bytes evicted unused.",
            |r| r.wasted_bytes,
        ),
        (
            "rustgt_lun_readahead_backing_reads_total",
            "Backing reads after coalescing.",
            |r| r.backing_requests,
        ),
        (
            "rustgt_lun_readahead_backing_read_bytes_total",
            "Bytes of backing reads.",
            |r| r.backing_bytes,
        ),
    ];
    for (name, help, f) in counters {
        out.header(name, help, "counter");
        for (l, r) in &with {
            out.sample(name, &labels(l), f(r));
        }
    }
    out.header(
        "rustgt_lun_readahead_cache_bytes",
        "Bytes held by the readahead cache.",
        "gauge",
    );
    for (l, r) in &with {
        out.sample(
            "rustgt_lun_readahead_cache_bytes",
            &labels(l),
            r.cache_bytes,
        );
    }
    // Turns are counted per device, for all its LUNs: one series each.
    let mut devices: Vec<&super::proto::DeviceTurnsView> = with
        .iter()
        .filter_map(|(_, r)| r.device_turns.as_ref())
        .collect();
    devices.sort_by(|a, b| a.device.cmp(&b.device));
    devices.dedup_by(|a, b| a.device == b.device);
    if !devices.is_empty() {
        for (name, help, f) in [
            (
                "rustgt_device_turns_total",
                "Turns granted to LUNs' I/O contexts at a shared seeking device.",
                (|d: &super::proto::DeviceTurnsView| d.turns) as fn(&_) -> u64,
            ),
            (
                "rustgt_device_turn_budget_ends_total",
                "Turns that ended on their byte budget while another LUN waited.",
                |d| d.budget_ends,
            ),
            (
                "rustgt_device_stale_turns_total",
                "Turns taken from an owner that started nothing for 500 ms (should stay 0).",
                |d| d.stale_turns,
            ),
        ] {
            out.header(name, help, "counter");
            for d in &devices {
                out.sample(name, &[("device", d.device.clone())], f(d));
            }
        }
    }
    let name = "rustgt_lun_readahead_backing_read_size_bytes";
    out.header(
        name,
        "Sizes of backing reads after coalescing.",
        "histogram",
    );
    for (l, r) in &with {
        out.histogram(name, &labels(l), &r.backing_sizes, false);
    }
    let name = "rustgt_lun_readahead_read_latency_seconds";
    out.header(
        name,
        "Latency of demand reads through the I/O context.",
        "histogram",
    );
    for (l, r) in &with {
        out.histogram(name, &labels(l), &r.latency, true);
    }
}

fn session_metrics(out: &mut Exposition, sessions: &[SessionStatsView]) {
    let labels = |s: &SessionStatsView| {
        vec![
            ("target", s.target.clone()),
            ("initiator", s.initiator.clone()),
            ("isid", s.isid.clone()),
            ("transport", s.transport.clone()),
        ]
    };
    type Field = fn(&SessionStatsView) -> u64;
    let counters: [(&str, &str, Field); 4] = [
        (
            "rustgt_session_commands_total",
            "SCSI commands of the session.",
            |s| s.commands,
        ),
        (
            "rustgt_session_errors_total",
            "Commands that ended with a status other than GOOD.",
            |s| s.errors,
        ),
        (
            "rustgt_session_read_bytes_total",
            "Data-In bytes sent to the initiator.",
            |s| s.read_bytes,
        ),
        (
            "rustgt_session_write_bytes_total",
            "Data-Out bytes received from the initiator.",
            |s| s.write_bytes,
        ),
    ];
    for (name, help, f) in counters {
        out.header(name, help, "counter");
        for s in sessions {
            out.sample(name, &labels(s), f(s));
        }
    }
    let name = "rustgt_session_command_latency_seconds";
    out.header(
        name,
        "From command arrival to SCSI completion.",
        "histogram",
    );
    for s in sessions {
        out.histogram(name, &labels(s), &s.latency, true);
    }
}

/// Builder of the text format.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, String)], v: u64) {
        self.header(name, help, "gauge");
        self.sample(name, labels, v);
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], v: u64) {
        let _ = writeln!(self.text, "{name}{} {v}", label_set(labels));
    }

    /// Cumulative buckets up to the last non-empty one, then `+Inf`, sum
    /// and count. Microsecond histograms are exported in seconds.
    fn histogram(&mut self, name: &str, labels: &[(&str, String)], h: &Histogram, micros: bool) {
        let mut cumulative = 0;
        for (le, count) in &h.buckets {
            if *le == u64::MAX {
                continue;
            }
            cumulative += count;
            let bound = if micros {
                format!("{}", (*le as f64 + 1.0) / 1e6)
            } else {
                le.to_string()
            };
            let mut lb = labels.to_vec();
            lb.push(("le", bound));
            let _ = writeln!(self.text, "{name}_bucket{} {cumulative}", label_set(&lb));
        }
        let mut lb = labels.to_vec();
        lb.push(("le", "+Inf".to_owned()));
        let _ = writeln!(self.text, "{name}_bucket{} {}", label_set(&lb), h.count);
        let sum = if micros {
            format!("{}", h.sum as f64 / 1e6)
        } else {
            h.sum.to_string()
        };
        let _ = writeln!(self.text, "{name}_sum{} {sum}", label_set(labels));
        let _ = writeln!(self.text, "{name}_count{} {}", label_set(labels), h.count);
    }
}

fn label_set(labels: &[(&str, String)]) -> String {
    if labels.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// Label value escaping of the text format: backslash, quote, newline.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, control: ControlTx) {
    loop {
        match listener.accept().await {
            Ok((sock, _)) => {
                tokio::spawn(serve_one(sock, control.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_one(mut sock: TcpStream, control: ControlTx) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut sock)).await {
        Ok(Some(h)) => h,
        _ => return,
    };
    // HEAD: the same status and headers, no body (RFC 9110 §9.3.2).
    let head_only = head.starts_with(b"HEAD ");
    let (status, body) = match route(&head) {
        Route::Metrics => match fetch(&control).await {
            Ok(text) => ("200 OK", text),
            Err(e) => ("503 Service Unavailable", format!("{e}\n")),
        },
        Route::NotFound => ("404 Not Found", "try /metrics\n".to_owned()),
        Route::BadMethod => ("405 Method Not Allowed", "only GET\n".to_owned()),
        Route::Bad => ("400 Bad Request", "bad request\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.len(),
        if head_only { "" } else { body.as_str() }
    );
    let _ = sock.write_all(response.as_bytes()).await;
    let _ = sock.shutdown().await;
}

async fn fetch(control: &ControlTx) -> Result<String, String> {
    let (tx, rx) = oneshot::channel();
    control
        .send(Envelope {
            request: Request::Metrics,
            reply: tx,
            caller: None,
        })
        .await
        .map_err(|_| "the daemon is shutting down".to_owned())?;
    let reply = rx
        .await
        .map_err(|_| "the daemon is shutting down".to_owned())?;
    match (reply.ok, reply.result, reply.error) {
        (true, Some(v), _) => v
            .get("text")
            .and_then(|t| t.as_str())
            .map(str::to_owned)
            .ok_or_else(|| "malformed metrics result".to_owned()),
        (_, _, e) => Err(e.unwrap_or_else(|| "metrics failed".to_owned())),
    }
}

/// Reads up to the blank line ending the head (or `MAX_HEAD` bytes).
async fn read_head(sock: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() >= MAX_HEAD {
            break;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(chunk.get(..n)?);
    }
    Some(buf)
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
    Bad,
}

fn route(head: &[u8]) -> Route {
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(first) else {
        return Route::Bad;
    };
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Route::BadMethod;
    }
    let path = target.split('?').next().unwrap_or_default();
    if path == "/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::proto::StoreStatsView;
    use crate::admin::stats::AtomicLog2;

    fn lun() -> LunStatsView {
        let lat = AtomicLog2::default();
        lat.record(100);
        lat.record(3000);
        LunStatsView {
            target: "iqn.2026-11.org.rustgt:a\"b".into(),
            lun: 1,
            capacity_bytes: 1 << 20,
            read_commands: 5,
            write_commands: 2,
            read_bytes: 5 << 12,
            write_bytes: 2 << 12,
            backing: StoreStatsView {
                reads: 5,
                read_latency: lat.snapshot("us"),
                ..StoreStatsView::default()
            },
            readahead: None,
            qos: None,
        }
    }

    #[test]
    fn exposition_has_help_type_escaped_labels_and_cumulative_buckets() {
        let text = render(&Gauges::default(), &[lun()], &[]);
        assert!(text.contains("# TYPE rustgt_lun_read_commands_total counter\n"));
        assert!(text.contains(
            "rustgt_lun_read_commands_total{target=\"iqn.2026-11.org.rustgt:a\\\"b\",lun=\"1\"} 5\n"
        ));
        let name = "rustgt_lun_backing_read_latency_seconds";
        let buckets: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket")))
            .collect();
        // 100 us is in [64, 128), 3000 us in [2048, 4096).
        assert_eq!(buckets.len(), 3, "{buckets:?}");
        assert!(buckets[0].contains("le=\"0.000128\"") && buckets[0].ends_with(" 1"));
        assert!(buckets[1].contains("le=\"0.004096\"") && buckets[1].ends_with(" 2"));
        assert!(buckets[2].contains("le=\"+Inf\"") && buckets[2].ends_with(" 2"));
        assert!(text.contains(&format!("{name}_count{{")));
        assert!(
            !text.contains("rustgt_lun_readahead"),
            "no I/O context, no readahead series"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap_or_default();
            assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
        }
    }

    #[test]
    fn connections_and_sessions_say_their_transport() {
        let g = Gauges {
            connections: 3,
            tcp_connections: 2,
            iser_connections: 1,
            ..Gauges::default()
        };
        let session = SessionStatsView {
            tsih: 7,
            isid: "023d00000001".into(),
            transport: "iser".into(),
            target: "iqn.2026-11.org.rustgt:t".into(),
            initiator: "iqn.2026-11.org.rustgt:i".into(),
            connections: 1,
            commands: 4,
            errors: 0,
            read_bytes: 0,
            write_bytes: 0,
            latency: Histogram::default(),
            qos: None,
        };
        let text = render(&g, &[], &[session]);
        assert!(text.contains("rustgt_connections 3\n"), "{text}");
        assert!(
            text.contains(
                "# TYPE rustgt_auth_failures_total counter\nrustgt_auth_failures_total 0\n"
            ),
            "{text}"
        );
        assert!(text.contains("rustgt_logins_held_total 0\n"), "{text}");
        assert!(text.contains("rustgt_transport_connections{transport=\"tcp\"} 2\n"));
        assert!(text.contains("rustgt_transport_connections{transport=\"iser\"} 1\n"));
        assert!(text.contains(
            "rustgt_session_commands_total{target=\"iqn.2026-11.org.rustgt:t\",initiator=\"iqn.2026-11.org.rustgt:i\",isid=\"023d00000001\",transport=\"iser\"} 4\n"
        ), "{text}");
    }

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(b"\xff\xfe garbage"), Route::Bad);
        assert_eq!(route(b""), Route::Bad);
    }
}
