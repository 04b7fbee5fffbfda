//! Human-readable tables of admin results (the default output of
//! `rustgt admin`; `--json` prints the results themselves).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::api::proto::{
    ChangeReport, ConnView, LunStatsView, LunView, PortalView, SessionStatsView, SessionView,
    StatusView, TargetView,
};
use crate::api::stats::Histogram;

/// A table: a header row and rows of cells, columns padded to fit.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let w = widths.get(c).copied().unwrap_or(0);
                if c + 1 == r.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<w$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// 1536 -> "1.5K", binary units.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    let unit = UNITS.get(u).copied().unwrap_or("");
    if u == 0 {
        format!("{n}")
    } else if v >= 100.0 || (v - v.round()).abs() < 0.05 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// Microseconds as "850us", "2.1ms", "1.3s".
pub fn micros(us: u64) -> String {
    if us < 1000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else {
        format!("{:.1}s", us as f64 / 1e6)
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn or_dash(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_owned(), str::to_owned)
}

fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else {
        format!("{m}m{s:02}s")
    }
}

pub fn status(s: &StatusView) -> String {
    let portals: Vec<String> = s.portals.iter().map(ToString::to_string).collect();
    let mut t = Table::new(&["", ""]);
    t.rows.clear();
    for (k, v) in [
        ("version", s.version.clone()),
        ("pid", s.pid.to_string()),
        ("uptime", duration(s.uptime_secs)),
        ("config file", or_dash(s.config_file.as_deref())),
        ("admin socket", s.admin_socket.clone()),
        (
            "metrics",
            s.metrics
                .map_or_else(|| "-".to_owned(), |m| format!("http://{m}/metrics")),
        ),
        ("portals", portals.join(", ")),
        ("targets", s.targets.to_string()),
        ("LUNs", s.luns.to_string()),
        ("sessions", s.sessions.to_string()),
        ("connections", s.connections.to_string()),
        ("persist", if s.persist { "on" } else { "off" }.to_owned()),
        (
            "unsaved changes",
            if s.unsaved_changes {
                "yes: the running state differs from the config file".to_owned()
            } else {
                "no".to_owned()
            },
        ),
        (
            "data buffers",
            format!(
                "{} of {} used, {} connections waiting, {} waits, {} Data-Out timeouts",
                s.data_buffers.used_bytes,
                s.data_buffers.budget_bytes,
                s.data_buffers.waiting_connections,
                s.data_buffers.waits,
                s.data_buffers.data_out_timeouts
            ),
        ),
    ] {
        t.row(vec![format!("{k}:"), v]);
    }
    t.render()
}

pub fn targets(v: &[TargetView]) -> String {
    if v.is_empty() {
        return "no targets\n".to_owned();
    }
    let mut t = Table::new(&[
        "TARGET", "TPGT", "PORTALS", "LUNS", "SESSIONS", "ACL", "CHAP",
    ]);
    for x in v {
        let portals: Vec<String> = x.portals.iter().map(ToString::to_string).collect();
        let luns: Vec<String> = x.luns.iter().map(|l| l.id.to_string()).collect();
        t.row(vec![
            x.iqn.clone(),
            x.tpgt.to_string(),
            portals.join(","),
            luns.join(","),
            x.sessions.len().to_string(),
            if x.acl.is_empty() {
                "any".to_owned()
            } else {
                x.acl.len().to_string()
            },
            x.chap.as_ref().map_or_else(
                || "off".to_owned(),
                |c| {
                    if c.mutual_user.is_some() {
                        "mutual"
                    } else {
                        "on"
                    }
                    .to_owned()
                },
            ),
        ]);
    }
    t.render()
}

pub fn target(x: &TargetView) -> String {
    let mut out = String::new();
    let portals: Vec<String> = x.portals.iter().map(ToString::to_string).collect();
    let _ = writeln!(out, "target:  {}", x.iqn);
    let _ = writeln!(out, "alias:   {}", or_dash(x.alias.as_deref()));
    let _ = writeln!(out, "tpgt:    {}", x.tpgt);
    let _ = writeln!(out, "portals: {}", portals.join(", "));
    let _ = writeln!(
        out,
        "acl:     {}",
        if x.acl.is_empty() {
            "any initiator".to_owned()
        } else {
            x.acl.join(", ")
        }
    );
    let _ = writeln!(
        out,
        "chap:    {}",
        x.chap.as_ref().map_or_else(
            || "off".to_owned(),
            |c| match &c.mutual_user {
                Some(m) => format!("user {}, mutual user {m}", c.user),
                None => format!("user {}", c.user),
            }
        )
    );
    out.push('\n');
    out.push_str(&luns(&x.luns));
    out.push('\n');
    out.push_str(&sessions(&x.sessions));
    out
}

pub fn acl(x: &TargetView) -> String {
    if x.acl.is_empty() {
        return format!("{}: any initiator may log in\n", x.iqn);
    }
    let mut out = String::new();
    for a in &x.acl {
        let _ = writeln!(out, "{a}");
    }
    out
}

/// A target's initiator groups, in matching order.
pub fn groups(x: &TargetView) -> String {
    if x.groups.is_empty() {
        return format!(
            "{}: no groups; every initiator sees the target's LUNs\n",
            x.iqn
        );
    }
    let mut out = String::new();
    for g in &x.groups {
        let _ = writeln!(out, "group {}", g.name);
        let _ = writeln!(out, "  initiators: {}", g.initiators.join(", "));
        if let Some(c) = &g.chap {
            let _ = writeln!(
                out,
                "  chap:       user {}{}",
                c.user,
                c.mutual_user
                    .as_deref()
                    .map(|m| format!(", mutual {m}"))
                    .unwrap_or_default()
            );
        }
        match &g.luns {
            None => {
                let _ = writeln!(out, "  luns:       the target's");
            }
            Some(m) if m.is_empty() => {
                let _ = writeln!(out, "  luns:       none");
            }
            Some(m) => {
                for e in m {
                    let _ = writeln!(
                        out,
                        "  lun {:<5} -> target LUN {}{}",
                        e.lun,
                        e.source,
                        if e.read_only { " (read-only)" } else { "" }
                    );
                }
            }
        }
    }
    out
}

pub fn luns(v: &[LunView]) -> String {
    if v.is_empty() {
        return "no LUNs\n".to_owned();
    }
    let mut t = Table::new(&[
        "TARGET",
        "LUN",
        "BACKSTORE",
        "SIZE",
        "BS",
        "RO",
        "THIN",
        "WCE",
        "WORKERS",
        "READAHEAD",
        "FAULTS",
        "SERIAL",
        "PATH",
    ]);
    for l in v {
        let faults = match &l.faults {
            None => "-".to_owned(),
            Some(f) if f.set.is_empty() => format!("none ({} injected)", f.injected),
            Some(f) => format!("{} ({} injected)", f.set.join(","), f.injected),
        };
        t.row(vec![
            l.target.clone(),
            l.id.to_string(),
            l.backstore.clone(),
            bytes(l.size_bytes),
            l.block_size.to_string(),
            yes(l.read_only),
            yes(l.thin),
            yes(l.write_cache),
            l.workers.to_string(),
            or_dash(l.readahead.as_deref()),
            faults,
            l.serial.clone(),
            or_dash(l.path.as_deref()),
        ]);
    }
    t.render()
}

pub fn portals(v: &[PortalView]) -> String {
    if v.is_empty() {
        return "no portals\n".to_owned();
    }
    let mut t = Table::new(&["PORTAL", "CONNECTIONS", "TARGETS"]);
    for p in v {
        t.row(vec![
            p.address.to_string(),
            p.connections.to_string(),
            p.targets.join(", "),
        ]);
    }
    t.render()
}

fn digests(s: &SessionView) -> String {
    format!("{}/{}", s.params.header_digest, s.params.data_digest)
}

pub fn sessions(v: &[SessionView]) -> String {
    if v.is_empty() {
        return "no sessions\n".to_owned();
    }
    let mut t = Table::new(&[
        "TSIH",
        "ISID",
        "INITIATOR",
        "TARGET",
        "CONNS",
        "PEER",
        "TRANSPORT",
        "DIGESTS",
        "BURST",
    ]);
    for s in v {
        let peers: Vec<String> = s.connections.iter().map(|c| c.peer.to_string()).collect();
        let transport = s
            .connections
            .first()
            .map_or_else(|| "-".to_owned(), |c| c.transport.clone());
        t.row(vec![
            s.tsih.to_string(),
            s.isid.clone(),
            s.initiator.clone(),
            s.target.clone(),
            s.connections.len().to_string(),
            peers.join(","),
            transport,
            digests(s),
            bytes(u64::from(s.params.max_burst_length)),
        ]);
    }
    t.render()
}

pub fn session(s: &SessionView) -> String {
    let p = &s.params;
    let mut t = Table::new(&["", ""]);
    t.rows.clear();
    let rows: Vec<(&str, String)> = vec![
        ("TSIH", s.tsih.to_string()),
        ("ISID", s.isid.clone()),
        ("initiator", s.initiator.clone()),
        ("initiator alias", or_dash(s.initiator_alias.as_deref())),
        ("target", s.target.clone()),
        ("HeaderDigest", p.header_digest.clone()),
        ("DataDigest", p.data_digest.clone()),
        ("MaxConnections", p.max_connections.to_string()),
        ("InitialR2T", yes(p.initial_r2t)),
        ("ImmediateData", yes(p.immediate_data)),
        ("MaxBurstLength", p.max_burst_length.to_string()),
        ("FirstBurstLength", p.first_burst_length.to_string()),
        (
            "MaxRecvDataSegmentLength (initiator)",
            p.initiator_max_recv_data_segment_length.to_string(),
        ),
        (
            "MaxRecvDataSegmentLength (target)",
            p.target_max_recv_data_segment_length.to_string(),
        ),
        ("MaxOutstandingR2T", p.max_outstanding_r2t.to_string()),
        ("DefaultTime2Wait", p.default_time2wait.to_string()),
        ("DefaultTime2Retain", p.default_time2retain.to_string()),
        ("DataPDUInOrder", yes(p.data_pdu_in_order)),
        ("DataSequenceInOrder", yes(p.data_sequence_in_order)),
        ("ErrorRecoveryLevel", p.error_recovery_level.to_string()),
        ("RDMAExtensions", yes(p.rdma_extensions)),
    ];
    for (k, v) in rows {
        t.row(vec![format!("{k}:"), v]);
    }
    let mut out = t.render();
    out.push('\n');
    out.push_str(&connections(&s.connections));
    out
}

pub fn connections(v: &[ConnView]) -> String {
    if v.is_empty() {
        return "no connections\n".to_owned();
    }
    let mut t = Table::new(&[
        "ID",
        "PEER",
        "PORTAL",
        "TRANSPORT",
        "STATE",
        "TSIH",
        "CID",
        "INITIATOR",
        "TARGET",
    ]);
    for c in v {
        t.row(vec![
            c.conn_id.to_string(),
            c.peer.to_string(),
            c.local.to_string(),
            c.transport.clone(),
            c.state.clone(),
            c.tsih.map_or_else(|| "-".to_owned(), |x| x.to_string()),
            c.cid.map_or_else(|| "-".to_owned(), |x| x.to_string()),
            or_dash(c.initiator.as_deref()),
            or_dash(c.target.as_deref()),
        ]);
    }
    t.render()
}

/// "p50 / p99 / mean" of a microsecond histogram.
fn latency(h: &Histogram) -> String {
    if h.count == 0 {
        return "-".to_owned();
    }
    format!(
        "{} / {} / {}",
        micros(h.quantile(0.5)),
        micros(h.quantile(0.99)),
        micros(h.mean() as u64)
    )
}

fn histogram_lines(out: &mut String, title: &str, h: &Histogram, fmt: fn(u64) -> String) {
    if h.count == 0 {
        return;
    }
    let _ = writeln!(out, "  {title} (count {}):", h.count);
    let max = h.buckets.iter().map(|(_, c)| *c).max().unwrap_or(1).max(1);
    for (le, c) in &h.buckets {
        let bar = "#".repeat(((*c * 40).div_ceil(max)) as usize);
        let bound = if *le == u64::MAX {
            "larger".to_owned()
        } else {
            format!("<= {}", fmt(*le))
        };
        let _ = writeln!(out, "    {bound:>12} {c:>10} {bar}");
    }
}

pub fn lun_stats(v: &[LunStatsView]) -> String {
    if v.is_empty() {
        return "no LUNs\n".to_owned();
    }
    let mut out = String::new();
    for s in v {
        let b = &s.backing;
        let _ = writeln!(
            out,
            "{} LUN {} ({})",
            s.target,
            s.lun,
            bytes(s.capacity_bytes)
        );
        let _ = writeln!(
            out,
            "  SCSI:     {} reads ({}), {} writes ({})",
            s.read_commands,
            bytes(s.read_bytes),
            s.write_commands,
            bytes(s.write_bytes)
        );
        if let Some(q) = &s.qos {
            let _ = writeln!(
                out,
                "  QoS:      {} passed, {} delayed, throttled {} in all, {} waiting",
                q.commands,
                q.delayed,
                micros(q.throttled_us),
                q.waiting
            );
        }
        let _ = writeln!(
            out,
            "  store:    {} reads, {} writes, {} flushes, {} errors",
            b.reads, b.writes, b.flushes, b.errors
        );
        let _ = writeln!(
            out,
            "  read latency p50/p99/mean:  {}",
            latency(&b.read_latency)
        );
        let _ = writeln!(
            out,
            "  write latency p50/p99/mean: {}",
            latency(&b.write_latency)
        );
        histogram_lines(&mut out, "store request sizes", &b.request_sizes, bytes);
        match &s.readahead {
            None => {
                let _ = writeln!(out, "  readahead: no I/O context");
            }
            Some(r) if r.passthrough => {
                let _ = writeln!(
                    out,
                    "  readahead: {} (left to the kernel: {} reads, {}; hits and misses not known)",
                    r.policy,
                    r.requests,
                    bytes(r.bytes)
                );
            }
            Some(r) => {
                let _ = writeln!(
                    out,
                    "  readahead: {}: {} reads ({}), hits {}, misses {}, wasted {}, cache {} of {}",
                    r.policy,
                    r.requests,
                    bytes(r.bytes),
                    bytes(r.hit_bytes),
                    bytes(r.miss_bytes),
                    bytes(r.wasted_bytes),
                    bytes(r.cache_bytes),
                    bytes(r.cache_limit_bytes)
                );
                let _ = writeln!(
                    out,
                    "  backing reads: {} ({}), read latency p50/p99/mean: {}",
                    r.backing_requests,
                    bytes(r.backing_bytes),
                    latency(&r.latency)
                );
                histogram_lines(&mut out, "backing read sizes", &r.backing_sizes, bytes);
                if let Some(d) = &r.device_turns {
                    let _ = writeln!(
                        out,
                        "  device {} (all its LUNs): {} turns, {} ended on budget, {} stale",
                        d.device, d.turns, d.budget_ends, d.stale_turns
                    );
                }
            }
        }
    }
    out
}

/// Per-second rates between two samples of a LUN.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LunRate {
    pub target: String,
    pub lun: u64,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    pub readahead_hit_ratio: Option<f64>,
}

pub fn lun_rates(a: &[LunStatsView], b: &[LunStatsView], secs: u64) -> Vec<LunRate> {
    let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs.max(1) as f64;
    b.iter()
        .filter_map(|n| {
            let o = a.iter().find(|o| o.target == n.target && o.lun == n.lun)?;
            let hit = match (&o.readahead, &n.readahead) {
                (Some(x), Some(y)) if !y.passthrough && y.bytes > x.bytes => Some(
                    y.hit_bytes.saturating_sub(x.hit_bytes) as f64
                        / y.bytes.saturating_sub(x.bytes) as f64,
                ),
                _ => None,
            };
            Some(LunRate {
                target: n.target.clone(),
                lun: n.lun,
                read_iops: per(o.read_commands, n.read_commands),
                write_iops: per(o.write_commands, n.write_commands),
                read_bytes_per_sec: per(o.read_bytes, n.read_bytes),
                write_bytes_per_sec: per(o.write_bytes, n.write_bytes),
                readahead_hit_ratio: hit,
            })
        })
        .collect()
}

pub fn lun_rates_table(v: &[LunRate]) -> String {
    let mut t = Table::new(&[
        "TARGET",
        "LUN",
        "READ IOPS",
        "WRITE IOPS",
        "READ/s",
        "WRITE/s",
        "RA HITS",
    ]);
    for r in v {
        t.row(vec![
            r.target.clone(),
            r.lun.to_string(),
            format!("{:.1}", r.read_iops),
            format!("{:.1}", r.write_iops),
            bytes(r.read_bytes_per_sec as u64),
            bytes(r.write_bytes_per_sec as u64),
            r.readahead_hit_ratio
                .map_or_else(|| "-".to_owned(), |h| format!("{:.0}%", h * 100.0)),
        ]);
    }
    t.render()
}

pub fn session_stats(v: &[SessionStatsView]) -> String {
    let mut out = session_table(v);
    for s in v {
        if let Some(q) = &s.qos {
            let _ = writeln!(
                out,
                "session {} QoS: {} passed, {} delayed, throttled {} in all, {} waiting",
                s.tsih,
                q.commands,
                q.delayed,
                micros(q.throttled_us),
                q.waiting
            );
        }
    }
    out
}

fn session_table(v: &[SessionStatsView]) -> String {
    if v.is_empty() {
        return "no sessions\n".to_owned();
    }
    let mut t = Table::new(&[
        "TSIH",
        "TARGET",
        "INITIATOR",
        "COMMANDS",
        "ERRORS",
        "READ",
        "WRITTEN",
        "LATENCY p50/p99/mean",
    ]);
    for s in v {
        t.row(vec![
            s.tsih.to_string(),
            s.target.clone(),
            s.initiator.clone(),
            s.commands.to_string(),
            s.errors.to_string(),
            bytes(s.read_bytes),
            bytes(s.write_bytes),
            latency(&s.latency),
        ]);
    }
    t.render()
}

/// Per-second rates between two samples of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionRate {
    pub tsih: u16,
    pub target: String,
    pub initiator: String,
    pub iops: f64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
}

pub fn session_rates(
    a: &[SessionStatsView],
    b: &[SessionStatsView],
    secs: u64,
) -> Vec<SessionRate> {
    let per = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs.max(1) as f64;
    b.iter()
        .filter_map(|n| {
            let o = a.iter().find(|o| o.tsih == n.tsih)?;
            Some(SessionRate {
                tsih: n.tsih,
                target: n.target.clone(),
                initiator: n.initiator.clone(),
                iops: per(o.commands, n.commands),
                read_bytes_per_sec: per(o.read_bytes, n.read_bytes),
                write_bytes_per_sec: per(o.write_bytes, n.write_bytes),
            })
        })
        .collect()
}

pub fn session_rates_table(v: &[SessionRate]) -> String {
    let mut t = Table::new(&["TSIH", "TARGET", "INITIATOR", "IOPS", "READ/s", "WRITE/s"]);
    for r in v {
        t.row(vec![
            r.tsih.to_string(),
            r.target.clone(),
            r.initiator.clone(),
            format!("{:.1}", r.iops),
            bytes(r.read_bytes_per_sec as u64),
            bytes(r.write_bytes_per_sec as u64),
        ]);
    }
    t.render()
}

pub fn change_report(r: &ChangeReport) -> String {
    let mut out = String::new();
    if r.changes.is_empty() {
        out.push_str("nothing to change\n");
    } else {
        let _ = writeln!(
            out,
            "{}",
            if r.dry_run {
                "would change:"
            } else {
                "changed:"
            }
        );
        for c in &r.changes {
            let _ = writeln!(out, "  {c}");
        }
    }
    for k in &r.restart_needed {
        let _ = writeln!(out, "note: {k} differs; it takes effect after a restart");
    }
    if let Some(f) = &r.saved_to {
        let _ = writeln!(out, "saved to {f}");
    }
    if let Some(why) = &r.not_saved {
        let _ = writeln!(out, "warning: not saved: {why}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_are_short() {
        assert_eq!(bytes(512), "512");
        assert_eq!(bytes(1536), "1.5K");
        assert_eq!(bytes(1 << 30), "1G");
        assert_eq!(bytes(64 << 20), "64M");
        assert_eq!(micros(850), "850us");
        assert_eq!(micros(2100), "2.1ms");
        assert_eq!(duration(3725), "1h02m05s");
    }

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["A", "LONGER"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        assert_eq!(t.render(), "A          LONGER\nwide cell  x\n");
    }

    #[test]
    fn change_reports_say_what_changed_or_nothing() {
        assert_eq!(
            change_report(&ChangeReport::default()),
            "nothing to change\n"
        );
        let r = ChangeReport {
            dry_run: true,
            changes: vec!["target t: LUN 1 added".into()],
            restart_needed: vec!["data_dir".into()],
            ..ChangeReport::default()
        };
        let text = change_report(&r);
        assert!(
            text.starts_with("would change:\n  target t: LUN 1 added\n"),
            "{text}"
        );
        assert!(text.contains("data_dir differs"), "{text}");
    }
}

/// What `rustgt admin ls` shows: the daemon, its targets (portals, LUNs,
/// ACL, CHAP, sessions) and its listening portals, in one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tree {
    pub status: StatusView,
    pub targets: Vec<TargetView>,
    pub portals: Vec<PortalView>,
}

/// A tree drawn with `+-` branches and `|` rails, targetcli's `ls` style.
#[derive(Default)]
struct Drawer {
    out: String,
}

struct Node {
    label: String,
    children: Vec<Node>,
}

fn node(label: impl Into<String>, children: Vec<Node>) -> Node {
    Node {
        label: label.into(),
        children,
    }
}

fn leaf(label: impl Into<String>) -> Node {
    node(label, Vec::new())
}

impl Drawer {
    fn draw(&mut self, n: &Node, prefix: &str, last: bool, root: bool) {
        if root {
            let _ = writeln!(self.out, "{}", n.label);
        } else {
            let branch = if last { "`- " } else { "+- " };
            let _ = writeln!(self.out, "{prefix}{branch}{}", n.label);
        }
        let rail = if root {
            String::new()
        } else if last {
            format!("{prefix}   ")
        } else {
            format!("{prefix}|  ")
        };
        for (i, c) in n.children.iter().enumerate() {
            self.draw(c, &rail, i + 1 == n.children.len(), false);
        }
    }
}

fn lun_node(l: &LunView) -> Node {
    let mut flags = vec![if l.read_only { "ro" } else { "rw" }];
    if l.thin {
        flags.push("thin");
    }
    if l.write_cache {
        flags.push("wce");
    }
    let mut label = format!(
        "LUN {} [{} {}, {}-byte blocks, {}]",
        l.id,
        l.backstore,
        bytes(l.size_bytes),
        l.block_size,
        flags.join(" ")
    );
    if let Some(p) = &l.path {
        let _ = write!(label, " {p}");
    }
    let mut children = vec![leaf(format!("serial {}", l.serial))];
    if let Some(w) = &l.wwn {
        children.push(leaf(format!("wwn {w}")));
    }
    if let Some(r) = &l.readahead {
        children.push(leaf(format!("readahead {r}")));
    }
    if let Some(a) = &l.alua {
        children.push(leaf(format!("alua {a}")));
    }
    if let Some(f) = &l.faults {
        let set = if f.set.is_empty() {
            "none".to_owned()
        } else {
            f.set.join(",")
        };
        children.push(leaf(format!("faults {set} ({} injected)", f.injected)));
    }
    node(label, children)
}

fn session_node(s: &SessionView) -> Node {
    let conns = s
        .connections
        .iter()
        .map(|c| {
            leaf(format!(
                "cid {} {} {} -> {}",
                c.cid.map_or_else(|| "-".to_owned(), |c| c.to_string()),
                c.transport,
                c.peer,
                c.local
            ))
        })
        .collect();
    node(
        format!("TSIH {} {} (ISID {})", s.tsih, s.initiator, s.isid),
        conns,
    )
}

fn target_node(t: &TargetView) -> Node {
    let mut label = format!("{} [tpgt {}", t.iqn, t.tpgt);
    if let Some(a) = &t.alias {
        let _ = write!(label, ", alias {a:?}");
    }
    label.push(']');
    let portals = t.portals.iter().map(|p| leaf(p.to_string())).collect();
    let luns = t.luns.iter().map(lun_node).collect();
    let acl = if t.acl.is_empty() {
        vec![leaf("any initiator")]
    } else {
        t.acl.iter().map(|a| leaf(a.clone())).collect()
    };
    let chap = match &t.chap {
        None => "chap: off".to_owned(),
        Some(c) => format!(
            "chap: user {}{}",
            c.user,
            c.mutual_user
                .as_ref()
                .map_or_else(String::new, |m| format!(", mutual user {m}"))
        ),
    };
    node(
        label,
        vec![
            node(format!("portals ({})", t.portals.len()), portals),
            node(format!("luns ({})", t.luns.len()), luns),
            node(format!("acl ({})", t.acl.len()), acl),
            leaf(chap),
            node(
                format!("sessions ({})", t.sessions.len()),
                t.sessions.iter().map(session_node).collect(),
            ),
        ],
    )
}

/// `rustgt admin ls`.
pub fn tree(t: &Tree) -> String {
    let s = &t.status;
    let portals = t
        .portals
        .iter()
        .map(|p| {
            leaf(format!(
                "{} [{} target(s), {} connection(s)]",
                p.address,
                p.targets.len(),
                p.connections
            ))
        })
        .collect();
    let root = node(
        format!(
            "rustgt {} (pid {}, config {})",
            s.version,
            s.pid,
            s.config_file.as_deref().unwrap_or("none")
        ),
        vec![
            node(
                format!("targets ({})", t.targets.len()),
                t.targets.iter().map(target_node).collect(),
            ),
            node(format!("portals ({})", t.portals.len()), portals),
        ],
    );
    let mut d = Drawer::default();
    d.draw(&root, "", true, true);
    d.out
}
