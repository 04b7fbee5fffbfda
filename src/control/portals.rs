//! The daemon's portals, both transports in one place ([`Portals`]): the
//! TCP portals, bound and closed live as the configuration changes (the
//! change transaction of [`super::apply`] binds new ones before anything
//! is visible, serves them once the change is committed, and closes the
//! ones nobody lists any more), and the iSER portals (RFC 7145): iSER
//! listeners on the same port, so they serve the same targets, sessions
//! and protocol configuration, live (a target added over the admin socket
//! is served there at once), and their connections are listed, counted
//! and controlled with the TCP ones. Discovery stays on the TCP portals;
//! a target's `iser_portals` are where it accepts RDMA connections,
//! usually the address and port of one of its TCP portals on an
//! RDMA-capable interface; that list is read at start (a change needs a
//! restart).
//!
//! iSER is built only with the `iser` cargo feature; without it a
//! configuration that lists iSER portals is refused at start-up.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use rustgt_port::Port;

use crate::config::Config;

/// Why the iSER portals could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IserPortalError {
    /// A portal could not be bound.
    #[cfg(feature = "iser")]
    #[error("iSER portal {addr} (needs an RDMA device on that address)")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: rustgt_iser::VerbsError,
    },
    /// The configuration lists iSER portals but iSER was not built in.
    #[cfg(not(feature = "iser"))]
    #[error(
        "iser_portals ({addr}) need a rustgt built with iSER support: cargo build --features iser"
    )]
    NotBuilt { addr: SocketAddr },
}

type Result<T, E = IserPortalError> = std::result::Result<T, E>;

/// One listening TCP portal.
#[derive(Debug)]
struct Listener {
    /// The address as configured (port 0 stays 0 here).
    configured: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Every portal the daemon listens on, TCP and iSER.
#[derive(Debug, Default)]
pub struct Portals {
    /// TCP, by bound address.
    tcp: BTreeMap<SocketAddr, Listener>,
    /// iSER, once started.
    iser: Vec<SocketAddr>,
}

impl Portals {
    /// Binds a TCP portal at `addr` (port 0: a free one); it accepts
    /// nothing until [`Portals::serve_tcp`].
    pub async fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        rustgt_iscsi_tcp::bind(addr).await
    }

    /// Serves `port` on a listener [`Portals::bind_tcp`] bound for
    /// `configured`.
    pub fn serve_tcp(
        &mut self,
        port: &Arc<Port>,
        configured: SocketAddr,
        l: tokio::net::TcpListener,
    ) {
        let Ok(bound) = l.local_addr() else { return };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(rustgt_iscsi_tcp::serve_until(
            Arc::clone(port),
            l,
            async move {
                let _ = stopped.await;
            },
        ));
        tracing::info!(%bound, "portal up");
        self.tcp.insert(
            bound,
            Listener {
                configured,
                stop: Some(stop),
            },
        );
    }

    /// Closes every TCP portal not in `in_use`.
    pub fn close_tcp_unused(&mut self, in_use: &BTreeSet<SocketAddr>) {
        let unused: Vec<SocketAddr> = self
            .tcp
            .keys()
            .filter(|a| !in_use.contains(a))
            .copied()
            .collect();
        for addr in unused {
            if let Some(mut l) = self.tcp.remove(&addr) {
                if let Some(stop) = l.stop.take() {
                    let _ = stop.send(());
                }
                tracing::info!(%addr, "portal closed");
            }
        }
    }

    /// Stops accepting on every TCP portal (shutdown; the iSER portals
    /// stop with the port).
    pub fn stop_tcp(&mut self) {
        for l in self.tcp.values_mut() {
            if let Some(stop) = l.stop.take() {
                let _ = stop.send(());
            }
        }
    }

    /// Bound addresses of the TCP portals.
    pub fn tcp(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.tcp.keys().copied()
    }

    /// Whether a TCP portal is bound at `addr`.
    pub fn serves_tcp(&self, addr: &SocketAddr) -> bool {
        self.tcp.contains_key(addr)
    }

    /// The configured address of the TCP portal bound at `bound`.
    pub fn tcp_configured(&self, bound: &SocketAddr) -> Option<SocketAddr> {
        self.tcp.get(bound).map(|l| l.configured)
    }

    /// Bound addresses of the TCP portals configured as `configured`.
    pub fn tcp_bound_for(&self, configured: SocketAddr) -> Vec<SocketAddr> {
        self.tcp
            .iter()
            .filter(|(_, l)| l.configured == configured)
            .map(|(bound, _)| *bound)
            .collect()
    }

    /// Number of TCP portals.
    pub fn tcp_count(&self) -> usize {
        self.tcp.len()
    }

    /// Binds and serves every iSER portal of `cfg` (once, at start).
    pub fn start_iser(&mut self, cfg: &Config, port: &Arc<Port>) -> Result<()> {
        self.iser = IserPortals::start(cfg, port)?.addrs;
        Ok(())
    }

    /// Bound addresses of the iSER portals.
    pub fn iser(&self) -> &[SocketAddr] {
        &self.iser
    }
}

/// Every distinct iSER portal of `cfg`.
fn wanted(cfg: &Config) -> BTreeSet<SocketAddr> {
    cfg.targets
        .iter()
        .flat_map(|t| t.iser_portals.iter().copied())
        .collect()
}

/// The bound iSER portals (none when no portal is configured). They stop
/// accepting when the port shuts down.
#[derive(Debug)]
struct IserPortals {
    addrs: Vec<SocketAddr>,
}

impl IserPortals {
    /// Bind every iSER portal of `cfg` and serve `port` on them.
    #[cfg(feature = "iser")]
    fn start(cfg: &Config, port: &Arc<Port>) -> Result<IserPortals> {
        let addrs: Vec<SocketAddr> = wanted(cfg).into_iter().collect();
        for addr in &addrs {
            let l = rustgt_iser::bind(*addr).map_err(|source| IserPortalError::Bind {
                addr: *addr,
                source,
            })?;
            tracing::info!(%addr, "iSER portal up");
            tokio::spawn(rustgt_iser::serve(
                Arc::clone(port),
                l,
                rustgt_iser::IserSettings::default(),
            ));
        }
        Ok(IserPortals { addrs })
    }

    /// Without iSER support: refuse a configuration that asks for it.
    #[cfg(not(feature = "iser"))]
    fn start(cfg: &Config, _port: &Arc<Port>) -> Result<IserPortals> {
        if let Some(addr) = wanted(cfg).into_iter().next() {
            return Err(IserPortalError::NotBuilt { addr });
        }
        Ok(IserPortals { addrs: Vec::new() })
    }

    #[cfg(test)]
    fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("address")
    }

    fn config(iser: &[&str]) -> Config {
        let mut t = Config::default_target();
        t.iser_portals = iser.iter().map(|a| addr(a)).collect();
        let mut u = t.clone();
        u.iqn = "iqn.2026-11.org.rustgt:second".into();
        for l in &mut u.luns {
            l.path = Some("second.img".into());
        }
        Config {
            targets: vec![t, u],
            ..Config::default()
        }
    }

    #[test]
    fn portals_are_collected_once_across_targets() {
        let c = config(&["192.0.2.1:3260", "192.0.2.2:3260"]);
        let w: Vec<SocketAddr> = wanted(&c).into_iter().collect();
        assert_eq!(w, vec![addr("192.0.2.1:3260"), addr("192.0.2.2:3260")]);
        assert!(wanted(&config(&[])).is_empty());
    }

    #[test]
    fn iser_portals_are_validated() {
        let ok = crate::config::check(&config(&["192.0.2.1:3260"]), "test");
        assert!(ok.is_ok(), "{ok:?}");
        for bad in [
            &["192.0.2.1:3260", "192.0.2.1:3260"][..],
            &["192.0.2.1:0"][..],
            &["0.0.0.0:3260"][..],
        ] {
            let e = crate::config::check(&config(bad), "test").expect_err("refused");
            assert!(e.to_string().contains("iser_portals"), "{e}");
        }
    }

    #[test]
    fn no_iser_portal_starts_nothing() {
        let tcp = Port::new(rustgt_iscsi::PortalConfig::default());
        let p = IserPortals::start(&config(&[]), &tcp).expect("nothing to start");
        assert!(p.addrs().is_empty());
    }

    #[cfg(not(feature = "iser"))]
    #[test]
    fn iser_portals_need_the_feature() {
        let tcp = Port::new(rustgt_iscsi::PortalConfig::default());
        let e = IserPortals::start(&config(&["192.0.2.1:3260"]), &tcp).expect_err("refused");
        assert!(e.to_string().contains("--features iser"), "{e}");
    }
}
