//! Live changes of initiator groups: a session keeps the LUN map it
//! logged in with, so after a change the sessions whose map is no longer
//! the one their initiator would get are asked to log out (RFC 7143
//! §11.9.1); logging in again, they see the new map.

use super::diff::Plan;
use super::runtime::Runtime;

impl Runtime {
    /// Asks every session of a target whose groups changed, and whose LUN
    /// map differs from the one it would get now, to log out.
    pub(super) fn relogin_remapped(&self, plan: &Plan) {
        let cfg = self.port.config();
        for tp in &plan.changed_targets {
            if !tp.settings.contains(&"groups") {
                continue;
            }
            let Some(info) = cfg.target(&tp.iqn) else {
                continue;
            };
            for c in self.port.connections() {
                let Some(s) = &c.session else { continue };
                if !s.target.eq_ignore_ascii_case(&tp.iqn) {
                    continue;
                }
                if s.nexus.lun_map != info.lun_map_for(&s.initiator) {
                    tracing::info!(
                        target = %tp.iqn,
                        initiator = %s.initiator,
                        tsih = s.tsih,
                        "LUN map changed; session asked to log out"
                    );
                    self.port.logout(c.conn_id);
                }
            }
        }
    }
}
