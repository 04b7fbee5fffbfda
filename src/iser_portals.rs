//! The daemon's iSER portals (RFC 7145): iSER listeners on the same port
//! as the TCP portals, so they serve the same targets, sessions and
//! protocol configuration, live (a target added over the admin socket is
//! served here at once), and their connections are listed, counted and
//! controlled with the TCP ones. Discovery stays on the TCP portals; a
//! target's
//! `iser_portals` are where it accepts RDMA connections, usually the
//! address and port of one of its TCP portals on an RDMA-capable
//! interface.
//!
//! Built only with the `iser` cargo feature; without it a configuration
//! that lists iSER portals is refused at start-up.

use std::collections::BTreeSet;
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
pub struct IserPortals {
    addrs: Vec<SocketAddr>,
}

impl IserPortals {
    /// Bind every iSER portal of `cfg` and serve `port` on them.
    #[cfg(feature = "iser")]
    pub fn start(cfg: &Config, port: &Arc<Port>) -> Result<IserPortals> {
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
    pub fn start(cfg: &Config, _port: &Arc<Port>) -> Result<IserPortals> {
        if let Some(addr) = wanted(cfg).into_iter().next() {
            return Err(IserPortalError::NotBuilt { addr });
        }
        Ok(IserPortals { addrs: Vec::new() })
    }

    /// The bound iSER portals.
    pub fn addrs(&self) -> &[SocketAddr] {
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
