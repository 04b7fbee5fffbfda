//! SendTargets (RFC 7143 Appendix C): which targets an initiator may see and
//! at which addresses.

use crate::config::PortalConfig;

/// Answer `SendTargets=<query>` for `initiator`, connected through
/// `local_addr`: only the targets served on that portal
/// ([`TargetInfo::served_at`]), each with the addresses of its own
/// portals (those listening on a wildcard address reported as the
/// address the initiator reached, with the portal's port).
///
/// `only` restricts the answer to the session's own target (a Normal
/// session may only discover the target it is logged in to).
///
/// [`TargetInfo::served_at`]: crate::TargetInfo::served_at
pub fn send_targets(
    cfg: &PortalConfig,
    query: &str,
    initiator: &str,
    local_addr: &str,
    only: Option<&str>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for t in &cfg.targets {
        let wanted = match (query, only) {
            (_, Some(own)) if !own.eq_ignore_ascii_case(&t.name) => false,
            ("All", None) => true,
            ("All" | "", Some(_)) => true,
            (name, _) => name.eq_ignore_ascii_case(&t.name),
        };
        if !wanted || !t.served_at(local_addr) || !t.allows(initiator) {
            continue;
        }
        out.push(("TargetName".to_string(), t.name.clone()));
        for p in &t.portals {
            out.push((
                "TargetAddress".to_string(),
                format!("{},{}", concrete_portal(p, local_addr), t.tpgt),
            ));
        }
    }
    out
}

/// A portal bound to a wildcard address is reported as the address the
/// initiator reached us on, with the portal's port.
fn concrete_portal(portal: &str, local_addr: &str) -> String {
    let (host, port) = match portal.rsplit_once(':') {
        Some(hp) => hp,
        None => return portal.to_string(),
    };
    if host == "0.0.0.0" || host == "[::]" {
        if let Some((lhost, _)) = local_addr.rsplit_once(':') {
            return format!("{lhost}:{port}");
        }
    }
    portal.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TargetInfo;

    fn cfg() -> PortalConfig {
        let t = |name: &str, acl: Vec<String>| TargetInfo {
            name: name.into(),
            alias: None,
            tpgt: 1,
            portals: vec!["0.0.0.0:3260".into(), "127.0.0.2:3261".into()],
            iser_portals: vec![],
            acl,
            chap: Default::default(),
            groups: Vec::new(),
            redirect: None,
        };
        PortalConfig {
            targets: vec![
                t("iqn.2026-11.org.rustgt:a", vec![]),
                t("iqn.2026-11.org.rustgt:b", vec!["iqn.x:allowed".into()]),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn all_filters_by_acl_and_resolves_wildcards() {
        let c = cfg();
        let r = send_targets(&c, "All", "iqn.x:other", "127.0.0.1:3260", None);
        assert_eq!(
            r,
            vec![
                ("TargetName".into(), "iqn.2026-11.org.rustgt:a".into()),
                ("TargetAddress".into(), "127.0.0.1:3260,1".into()),
                ("TargetAddress".into(), "127.0.0.2:3261,1".into()),
            ]
        );
        let r = send_targets(&c, "All", "iqn.x:allowed", "127.0.0.1:3260", None);
        assert_eq!(r.iter().filter(|(k, _)| k == "TargetName").count(), 2);
    }

    #[test]
    fn by_name_and_session_restriction() {
        let c = cfg();
        let r = send_targets(
            &c,
            "iqn.2026-11.org.rustgt:b",
            "iqn.x:allowed",
            "1.2.3.4:3260",
            None,
        );
        assert_eq!(r[0].1, "iqn.2026-11.org.rustgt:b");
        let r = send_targets(
            &c,
            "All",
            "iqn.x:allowed",
            "1.2.3.4:3260",
            Some("iqn.2026-11.org.rustgt:a"),
        );
        assert_eq!(r.iter().filter(|(k, _)| k == "TargetName").count(), 1);
        assert!(send_targets(&c, "iqn.nope", "i", "1.2.3.4:1", None).is_empty());
    }

    #[test]
    fn a_portal_lists_only_the_targets_it_serves() {
        let t = |name: &str, portals: &[&str]| TargetInfo {
            name: name.into(),
            alias: None,
            tpgt: 1,
            portals: portals.iter().map(|p| (*p).to_owned()).collect(),
            iser_portals: vec![],
            acl: vec![],
            chap: Default::default(),
            groups: Vec::new(),
            redirect: None,
        };
        let c = PortalConfig {
            targets: vec![
                t("iqn.2026-11.org.rustgt:a", &["127.0.0.1:3401"]),
                t(
                    "iqn.2026-11.org.rustgt:b",
                    &["127.0.0.1:3260", "10.0.0.1:3260"],
                ),
                t("iqn.2026-11.org.rustgt:all", &["0.0.0.0:3260"]),
            ],
            ..Default::default()
        };
        let names = |local: &str| -> Vec<String> {
            send_targets(&c, "All", "iqn.x:i", local, None)
                .into_iter()
                .filter(|(k, _)| k == "TargetName")
                .map(|(_, v)| v)
                .collect()
        };
        assert_eq!(names("127.0.0.1:3401"), ["iqn.2026-11.org.rustgt:a"]);
        assert_eq!(
            names("127.0.0.1:3260"),
            ["iqn.2026-11.org.rustgt:b", "iqn.2026-11.org.rustgt:all"]
        );
        assert_eq!(names("127.0.0.2:3260"), ["iqn.2026-11.org.rustgt:all"]);
        assert!(names("127.0.0.1:9").is_empty());
        // A target's own portals, all of them, and no other target's.
        let r = send_targets(
            &c,
            "iqn.2026-11.org.rustgt:b",
            "iqn.x:i",
            "127.0.0.1:3260",
            None,
        );
        assert_eq!(
            r,
            vec![
                ("TargetName".into(), "iqn.2026-11.org.rustgt:b".into()),
                ("TargetAddress".into(), "127.0.0.1:3260,1".into()),
                ("TargetAddress".into(), "10.0.0.1:3260,1".into()),
            ]
        );
        // Asked by name on a portal that does not serve it: nothing.
        assert!(send_targets(
            &c,
            "iqn.2026-11.org.rustgt:a",
            "iqn.x:i",
            "127.0.0.1:3260",
            None
        )
        .is_empty());
    }
}
