//! What a portal serves: the protocol configuration logins see and the
//! SCSI target devices by iSCSI name. One for the port, which hands it to
//! every connection of both transports (TCP and iSER), changed
//! live by the daemon while connections look names up. No I/O.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use rustgt_scsi::ScsiTarget;

use crate::config::PortalConfig;

/// The live configuration and the SCSI targets by iSCSI name; shared by
/// every connection (behind an `Arc`), changed at run time by the daemon.
#[derive(Debug)]
pub struct Directory {
    config: RwLock<Arc<PortalConfig>>,
    /// Keyed by lower-case name: iSCSI names compare case-insensitively
    /// (the stringprep profile of RFC 3722 folds case).
    targets: RwLock<HashMap<String, Arc<ScsiTarget>>>,
}

impl Directory {
    /// A directory with `config` and no SCSI targets attached yet.
    pub fn new(config: PortalConfig) -> Directory {
        Directory {
            config: RwLock::new(Arc::new(config)),
            targets: RwLock::new(HashMap::new()),
        }
    }

    /// Replaces the configuration; new logins see it at once.
    pub fn set_config(&self, mut config: PortalConfig) {
        let mut slot = self.config.write().unwrap_or_else(PoisonError::into_inner);
        // One budget for the port's life: connections already open keep
        // counting in it; the new configuration brings only its size.
        slot.data_budget.set_total(config.data_budget.total());
        config.data_budget = Arc::clone(&slot.data_budget);
        *slot = Arc::new(config);
    }

    /// The configuration now in force; a login keeps the snapshot it took.
    pub fn config(&self) -> Arc<PortalConfig> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Attaches the SCSI target device that serves iSCSI target `name`.
    pub fn add_target(&self, name: &str, target: Arc<ScsiTarget>) {
        self.targets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_ascii_lowercase(), target);
    }

    /// Detaches the SCSI target of iSCSI target `name` (ignoring ASCII
    /// case) and returns it; sessions already on it keep their `Arc`.
    pub fn remove_target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.targets
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&name.to_ascii_lowercase())
    }

    /// The SCSI target that serves iSCSI target `name` (ignoring ASCII case).
    pub fn target(&self, name: &str) -> Option<Arc<ScsiTarget>> {
        self.targets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&name.to_ascii_lowercase())
            .cloned()
    }

    /// All SCSI target devices.
    pub fn scsi_targets(&self) -> Vec<Arc<ScsiTarget>> {
        self.targets
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_config_is_replaced() {
        let d = Directory::new(PortalConfig::default());
        let t = ScsiTarget::new("iqn.2026-11.org.rustgt:Mixed");
        d.add_target("iqn.2026-11.org.rustgt:Mixed", Arc::clone(&t));
        let found = d.target("IQN.2026-11.ORG.RUSTGT:MIXED").expect("found");
        assert!(Arc::ptr_eq(&found, &t));
        assert_eq!(d.scsi_targets().len(), 1);
        assert!(d.remove_target("iqn.2026-11.org.rustgt:mixed").is_some());
        assert!(d.target("iqn.2026-11.org.rustgt:mixed").is_none());
        let before = d.config();
        d.set_config(PortalConfig::default());
        assert!(!Arc::ptr_eq(&before, &d.config()));
    }
}
