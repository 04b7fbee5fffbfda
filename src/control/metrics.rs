//! Prometheus metrics: the same figures as the stats commands, encoded by
//! prometheus-client in the Prometheus text format (version 0.0.4) and
//! served on `GET /metrics` by hyper on `metrics_listen`.
//!
//! The figures come from the control task (a `metrics` request), so a
//! scrape sees one consistent moment: each scrape collects them into
//! metric families ([`Exposition`]), which a prometheus-client collector
//! encodes.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};

use super::server::{ControlTx, Envelope};
use crate::api::proto::{DataBuffersView, LunStatsView, Request as AdminRequest, SessionStatsView};
use crate::api::stats::Histogram;

/// Largest HTTP request head read (hyper's smallest buffer).
const MAX_HEAD: usize = 8192;
/// Time a client gets to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a connection is kept, answer included.
const CONN_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections served at once.
const MAX_CLIENTS: usize = 16;

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
    out.encode()
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
            out.sample_f64(&name, labels, q.throttled_us as f64 / 1e6);
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
    let with: Vec<(&LunStatsView, &crate::api::proto::ReadaheadStatsView)> = luns
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
    type Field = fn(&crate::api::proto::ReadaheadStatsView) -> u64;
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
    let mut devices: Vec<&crate::api::proto::DeviceTurnsView> = with
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
                (|d: &crate::api::proto::DeviceTurnsView| d.turns) as fn(&_) -> u64,
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

/// A metric family as collected: its samples are encoded by
/// prometheus-client in the Prometheus text format.
#[derive(Debug)]
struct Family {
    /// Without the `_total` a counter's samples carry (the encoder adds
    /// it).
    name: String,
    help: String,
    kind: MetricType,
    samples: Vec<(Labels, Value)>,
}

type Labels = Vec<(&'static str, String)>;

#[derive(Debug)]
enum Value {
    Int(u64),
    Float(f64),
    /// Per-bucket (not cumulative) counts by upper bound; `+Inf` is
    /// `count`.
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

/// The families of one scrape, in the order written.
#[derive(Debug, Default)]
struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// Starts family `name` (a counter's name ends in `_total`).
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let kind = match kind {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            _ => MetricType::Unknown,
        };
        let name = match kind {
            MetricType::Counter => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        self.families.push(Family {
            name: name.to_owned(),
            help: help.to_owned(),
            kind,
            samples: Vec::new(),
        });
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&'static str, String)], v: u64) {
        self.header(name, help, "gauge");
        self.sample(name, labels, v);
    }

    fn push(&mut self, name: &str, labels: &[(&'static str, String)], v: Value) {
        match self.families.last_mut() {
            Some(f) => f.samples.push((labels.to_vec(), v)),
            None => debug_assert!(false, "sample of {name} before its header"),
        }
    }

    fn sample(&mut self, name: &str, labels: &[(&'static str, String)], v: u64) {
        self.push(name, labels, Value::Int(v));
    }

    fn sample_f64(&mut self, name: &str, labels: &[(&'static str, String)], v: f64) {
        self.push(name, labels, Value::Float(v));
    }

    /// Buckets up to the last non-empty one, then `+Inf`, sum and count.
    /// Microsecond histograms are exported in seconds.
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&'static str, String)],
        h: &Histogram,
        micros: bool,
    ) {
        let buckets = h
            .buckets
            .iter()
            .filter(|(le, _)| *le != u64::MAX)
            .map(|(le, count)| {
                let bound = if micros {
                    (*le as f64 + 1.0) / 1e6
                } else {
                    *le as f64
                };
                (bound, *count)
            })
            .collect();
        let sum = if micros {
            h.sum as f64 / 1e6
        } else {
            h.sum as f64
        };
        self.push(
            name,
            labels,
            Value::Histogram {
                sum,
                count: h.count,
                buckets,
            },
        );
    }

    /// The Prometheus text format (version 0.0.4) of every family.
    fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        // Writing to a String cannot fail; the encoder fails only on that.
        let _ = prometheus_text::encode(&mut text, &registry);
        text
    }
}

fn encode_value(m: &mut MetricEncoder<'_>, kind: MetricType, v: &Value) -> std::fmt::Result {
    match (kind, v) {
        (MetricType::Counter, Value::Int(v)) => m.encode_counter::<NoLabelSet, _, u64>(v, None),
        (MetricType::Counter, Value::Float(v)) => m.encode_counter::<NoLabelSet, _, f64>(v, None),
        (_, Value::Int(v)) => m.encode_gauge(v),
        (_, Value::Float(v)) => m.encode_gauge(v),
        (
            _,
            Value::Histogram {
                sum,
                count,
                buckets,
            },
        ) => m.encode_histogram::<NoLabelSet>(*sum, *count, buckets, None),
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        for f in &self.families {
            let mut m = encoder.encode_descriptor(&f.name, &f.help, None, f.kind)?;
            for (labels, v) in &f.samples {
                if labels.is_empty() {
                    encode_value(&mut m, f.kind, v)?;
                } else {
                    encode_value(&mut m.encode_family(labels)?, f.kind, v)?;
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// Serves `GET /metrics` (and `HEAD`) on `listener` until the task is
/// dropped: HTTP/1.1 by hyper, one request per connection, the head read
/// within [`HEAD_TIMEOUT`], at most [`MAX_CLIENTS`] connections at once
/// (more wait in the listen backlog).
pub async fn serve(listener: TcpListener, control: ControlTx) {
    let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((sock, _)) => {
                let control = control.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| respond(req, control.clone()));
                    let conn = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEAD_TIMEOUT)
                        .max_buf_size(MAX_HEAD)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(sock), svc);
                    let _ = tokio::time::timeout(CONN_TIMEOUT, conn).await;
                    drop(permit);
                });
            }
            Err(e) => {
                drop(permit);
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The answer to one request: the exposition on `GET`/`HEAD /metrics`
/// (hyper sends no body for `HEAD`), 404 elsewhere, 405 for other methods.
async fn respond(
    req: Request<Incoming>,
    control: ControlTx,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let plain = "text/plain; charset=utf-8";
    let (status, content_type, body) =
        if req.method() != Method::GET && req.method() != Method::HEAD {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                plain,
                "only GET\n".to_owned(),
            )
        } else if req.uri().path() != "/metrics" {
            (StatusCode::NOT_FOUND, plain, "try /metrics\n".to_owned())
        } else {
            match fetch(&control).await {
                Ok(text) => (StatusCode::OK, prometheus_text::CONTENT_TYPE, text),
                Err(e) => (StatusCode::SERVICE_UNAVAILABLE, plain, format!("{e}\n")),
            }
        };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    Ok(response)
}

async fn fetch(control: &ControlTx) -> Result<String, String> {
    let (tx, rx) = oneshot::channel();
    control
        .send(Envelope {
            request: AdminRequest::Metrics,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::proto::StoreStatsView;
    use crate::api::stats::AtomicLog2;

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

    /// One HTTP exchange with `serve` on 127.0.0.1: what came back before
    /// the server closed the connection.
    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
        sock.write_all(request).await.expect("send");
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out))
            .await
            .expect("the server closes the connection")
            .expect("read");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn get_and_head_of_metrics_are_served_the_rest_refused() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Envelope>(4);
        tokio::spawn(async move {
            while let Some(e) = rx.recv().await {
                assert!(matches!(e.request, AdminRequest::Metrics));
                let _ = e.reply.send(crate::api::proto::Reply::success(
                    serde_json::json!({ "text": "rustgt_up 1\n" }),
                ));
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, tx));

        let get = exchange(addr, b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
        assert!(
            get.contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            "{get}"
        );
        assert!(get.contains("content-length: 12\r\n"), "{get}");
        assert!(get.ends_with("\r\n\r\nrustgt_up 1\n"), "{get}");

        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
        assert!(head.contains("content-length: 12\r\n"), "{head}");

        let post = exchange(
            addr,
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        )
        .await;
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(post.contains("allow: GET, HEAD\r\n"), "{post}");

        let other = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");

        let garbage = exchange(addr, b"\xff\xfe garbage\r\n\r\n").await;
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");

        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', 64 * 1024));
        long.extend_from_slice(b"\r\n\r\n");
        let long = exchange(addr, &long).await;
        assert!(
            long.starts_with("HTTP/1.1 431 "),
            "a head over {MAX_HEAD} bytes: {long}"
        );
    }
}
