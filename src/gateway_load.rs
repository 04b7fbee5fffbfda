//! The load of the gateways a redirecting target sends logins to
//! (`[targets.redirect] metrics`): every second, each gateway's
//! `rustgt_sessions` is read from its metrics endpoint over HTTP and
//! written into the running configuration's [`GatewayLoads`], which the
//! login path reads to pick the least loaded gateway. A gateway that does
//! not answer within [`READ_TIMEOUT`] counts as unknown (it gets no logins
//! while another's load is known). The reader runs only while some
//! redirect has `metrics` ([`LoadWatch`]): a daemon without them never
//! wakes for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustgt_iscsi::GatewayLoads;
use rustgt_port::Port;

/// How often the loads are read.
const PERIOD: Duration = Duration::from_secs(1);
/// How long one gateway's read may take, connection included.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest exposition read (a gateway with thousands of sessions and
/// LUNs stays well under it).
const MAX_BODY: usize = 8 << 20;
/// The metric read: a daemon's logged-in Normal sessions.
const METRIC: &str = "rustgt_sessions";

/// Starts the reader when the port's configuration has redirects with
/// `metrics` and none runs; it stops by itself when none is left.
#[derive(Debug, Default)]
pub struct LoadWatch {
    running: Arc<AtomicBool>,
}

impl LoadWatch {
    /// Called after every change of the port's configuration.
    pub fn ensure(&self, port: &Arc<Port>) {
        if !loads_of(port).is_empty() && !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(watch(Arc::downgrade(port), Arc::clone(&self.running)));
        }
    }
}

/// The loads of every redirect with `metrics` in the port's configuration.
fn loads_of(port: &Port) -> Vec<Arc<GatewayLoads>> {
    port.config()
        .targets
        .iter()
        .filter_map(|t| t.redirect.as_ref()?.loads.clone())
        .collect()
}

/// Reads the loads of every redirect with `metrics` in the port's current
/// configuration, every [`PERIOD`], while there are any and the port
/// exists; `running` is true while it does.
async fn watch(port: Weak<Port>, running: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(p) = port.upgrade() else {
            running.store(false, Ordering::Release);
            return;
        };
        let mut loads = loads_of(&p);
        if loads.is_empty() {
            // Stop, unless a change installed some between the look and
            // the flag (then `ensure` saw the flag still up and started
            // nothing).
            running.store(false, Ordering::Release);
            loads = loads_of(&p);
            if loads.is_empty() || running.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        drop(p);
        let mut reads = tokio::task::JoinSet::new();
        for l in loads {
            for (i, &addr) in l.metrics.iter().enumerate() {
                let l = Arc::clone(&l);
                reads.spawn(async move {
                    let sessions = sessions_at(addr).await;
                    let known = l.estimate(i).is_some();
                    l.set(i, sessions);
                    match sessions {
                        Some(n) if !known => {
                            tracing::info!(metrics = %addr, sessions = n, "redirect gateway load read")
                        }
                        None if known => tracing::warn!(
                            metrics = %addr,
                            "redirect gateway load unreadable: no logins go to it while another gateway's load is known"
                        ),
                        _ => {}
                    }
                });
            }
        }
        while reads.join_next().await.is_some() {}
    }
}

/// `rustgt_sessions` of the daemon whose metrics endpoint is `addr`.
async fn sessions_at(addr: SocketAddr) -> Option<u64> {
    let read = async {
        let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let (mut send, conn) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                .await
                .ok()?;
        let ask = async move {
            let req = hyper::Request::get("/metrics")
                .header(hyper::header::HOST, addr.to_string())
                .body(Empty::new())
                .ok()?;
            let resp = send.send_request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .ok()?
                .to_bytes();
            sessions_in(&body)
        };
        // The connection ends once `ask` has dropped its sender.
        let (sessions, _) = tokio::join!(ask, conn);
        sessions
    };
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .ok()
        .flatten()
}

/// The value of the unlabelled [`METRIC`] sample in a Prometheus text
/// exposition.
fn sessions_in(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines().find_map(|line| {
        let value = line.strip_prefix(METRIC)?.strip_prefix(' ')?;
        let v: f64 = value.split_whitespace().next()?.parse().ok()?;
        (v.is_finite() && v >= 0.0).then_some(v as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sessions_sample_is_found_and_nothing_else() {
        let text = b"# HELP rustgt_sessions Logged-in Normal sessions.\n\
            # TYPE rustgt_sessions gauge\n\
            rustgt_sessions_total 9\n\
            rustgt_sessions 3\n\
            rustgt_connections 4\n";
        assert_eq!(sessions_in(text), Some(3));
        assert_eq!(sessions_in(b"rustgt_sessions 7 1700000000000\n"), Some(7));
        assert_eq!(sessions_in(b"rustgt_sessions_total 9\n"), None);
        assert_eq!(sessions_in(b"rustgt_sessions NaN\n"), None);
        assert_eq!(sessions_in(b"rustgt_sessions -1\n"), None);
        assert_eq!(sessions_in(&[0xff, 0xfe]), None);
    }

    fn with_redirect(metrics: Vec<SocketAddr>) -> rustgt_iscsi::PortalConfig {
        let mut cfg = rustgt_iscsi::PortalConfig::default();
        cfg.targets.push(rustgt_iscsi::TargetInfo {
            name: "iqn.2026-11.org.rustgt:moved".into(),
            alias: None,
            tpgt: 1,
            portals: Vec::new(),
            iser_portals: Vec::new(),
            acl: Vec::new(),
            chap: Default::default(),
            groups: Vec::new(),
            redirect: Some(
                rustgt_iscsi::Redirect::new(vec!["192.0.2.1:3260".into()], Vec::new(), false)
                    .by_sessions(metrics),
            ),
        });
        cfg
    }

    #[tokio::test]
    async fn the_reader_runs_only_while_a_redirect_has_metrics() {
        let port = Port::new(with_redirect(Vec::new()));
        let w = LoadWatch::default();
        w.ensure(&port);
        assert!(!w.running.load(Ordering::Acquire), "no metrics: no reader");

        // An endpoint nobody listens on: read (and found unknown) each second.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = closed.local_addr().expect("addr");
        drop(closed);
        port.set_config(with_redirect(vec![addr]));
        w.ensure(&port);
        assert!(w.running.load(Ordering::Acquire));
        w.ensure(&port); // a second call starts no second reader
        tokio::time::sleep(PERIOD * 2).await;
        assert!(w.running.load(Ordering::Acquire));

        // The metrics gone: it stops within a period or two.
        port.set_config(with_redirect(Vec::new()));
        for _ in 0..10 {
            tokio::time::sleep(PERIOD).await;
            if !w.running.load(Ordering::Acquire) {
                break;
            }
        }
        assert!(!w.running.load(Ordering::Acquire), "the reader stopped");
    }

    #[tokio::test]
    async fn an_endpoint_that_does_not_answer_is_unknown_in_time() {
        // Accepts and never answers.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let t0 = std::time::Instant::now();
        assert_eq!(sessions_at(addr).await, None);
        assert!(t0.elapsed() < READ_TIMEOUT + Duration::from_secs(2));
        hold.abort();
    }
}
