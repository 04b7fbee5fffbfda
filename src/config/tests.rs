//! Unit tests of loading and checking the configuration.

use super::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Jail;

use rustgt_backstore::EngineKind;

use super::iscsi::DiscoverySettings;
use super::limits::LimitSettings;
use super::targets::default_portals;
use rustgt_iscsi::IscsiName;

fn validate_iscsi_name(name: &str) -> Result<(), String> {
    IscsiName::parse(name)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Every test that calls [`load`] runs in a figment `Jail`: the jail
/// serializes those tests, so one test's `RUSTGT_*` variables never leak
/// into another's load.
#[allow(clippy::result_large_err)] // the closure type is figment's
fn jailed(f: impl FnOnce(&mut Jail)) {
    Jail::expect_with(|jail| {
        f(jail);
        Ok(())
    });
}

fn write_config(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("rustgt.toml");
    std::fs::write(&path, body).expect("write config");
    path
}

/// A valid one-target config in `dir` whose LUN is a RAM disk.
fn base_config(dir: &Path, target_extra: &str, lun_extra: &str) -> String {
    format!(
        "data_dir = {dir:?}\n\
         [[targets]]\n\
         iqn = \"iqn.2026-11.org.rustgt:test\"\n\
         {target_extra}\n\
         [[targets.luns]]\n\
         id = 0\n\
         backstore = \"ram\"\n\
         size = \"64M\"\n\
         {lun_extra}\n",
        dir = dir.display().to_string()
    )
}

fn load_str(body: &str) -> (PathBuf, Result<Config, ConfigError>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_config(dir.path(), body);
    let res = load(Some(&path), &Overrides::default());
    (path, res)
}

/// Asserts the load fails with a problem at exactly `key`, naming the
/// file, and whose message contains `fragment`.
fn assert_problem(body: &str, key: &str, fragment: &str) {
    let (path, res) = load_str(body);
    let err = res.expect_err(&format!("config should be rejected:\n{body}"));
    let text = err.to_string();
    let found = err.problems().iter().find(|p| p.key == key);
    let Some(p) = found else {
        panic!("no problem at key {key}: {text}\nconfig:\n{body}");
    };
    assert!(
        p.message.contains(fragment),
        "problem at {key} should mention {fragment:?}: {p}"
    );
    assert_eq!(p.origin, path.display().to_string(), "{p}");
    assert!(text.contains(key), "display names the key: {text}");
    assert!(
        text.contains(&path.display().to_string()),
        "display names the file: {text}"
    );
}

#[test]
fn admin_socket_group_is_a_name_and_bad_values_name_the_key() {
    jailed(|jail| {
        let dir = tempfile::tempdir().expect("tempdir");
        // Not looked up here (the control plane does, binding the
        // socket): an unknown group loads, as a name.
        let body = format!(
            "admin_socket_group = \"rustgt-no-such-group-x9\"\n{}",
            base_config(dir.path(), "", "")
        );
        let (_, res) = load_str(&body);
        let cfg = res.expect("a group name");
        assert_eq!(
            cfg.admin_socket_group,
            Some(AdminGroup {
                name: "rustgt-no-such-group-x9".into(),
            })
        );
        // Written back as the name, and loads again.
        let text = cfg.to_toml().expect("toml");
        assert!(
            text.contains("admin_socket_group = \"rustgt-no-such-group-x9\""),
            "{text}"
        );
        let (_, again) = load_str(&text);
        assert_eq!(again.expect("reloads"), cfg);

        for (value, fragment) in [("\"\"", "must not be empty"), ("7", "string")] {
            let body = format!(
                "admin_socket_group = {value}\n{}",
                base_config(dir.path(), "", "")
            );
            assert_problem(&body, "admin_socket_group", fragment);
        }

        // From the environment, the error names the variable.
        jail.set_env("RUSTGT_ADMIN_SOCKET_GROUP", "");
        let (_, res) = load_str(&base_config(dir.path(), "", ""));
        let err = res.expect_err("empty group");
        assert!(
            err.to_string().contains("RUSTGT_ADMIN_SOCKET_GROUP"),
            "{err}"
        );
    });
}

#[test]
fn no_file_gives_the_default_target() {
    jailed(|_| {
        let cfg = load(None, &Overrides::default()).expect("default config loads");
        assert_eq!(cfg, Config::default());
        assert_eq!(cfg.data_dir, PathBuf::from("./rustgt-data"));
        let [t] = cfg.targets.as_slice() else {
            panic!("one default target expected: {cfg:?}");
        };
        assert_eq!(t.iqn, "iqn.2026-11.org.rustgt:default");
        assert_eq!(t.portals, vec!["127.0.0.1:3260".parse().expect("addr")]);
        assert_eq!(t.tpgt, 1);
        assert!(t.acl.is_empty() && t.chap.is_none());
        let [lun] = t.luns.as_slice() else {
            panic!("one LUN expected: {t:?}");
        };
        assert_eq!(lun.id, 0);
        assert_eq!(lun.kind(), Some(EngineKind::File));
        assert_eq!(
            lun.resolved_path(&cfg.data_dir),
            Some(PathBuf::from("./rustgt-data/lun0.img"))
        );
        assert_eq!(lun.size_bytes(), Some(1 << 30));
        assert_eq!(lun.block_size, 512);
        assert!(lun.thin && lun.write_cache && !lun.read_only);
    });
}

#[test]
fn iscsi_defaults_match_the_documentation() {
    let s = IscsiSettings::default();
    assert_eq!(s.queue_depth, 128);
    assert_eq!(s.nop_in_interval_secs, 15);
    assert_eq!(s.nop_in_timeout_secs, 30);
    assert_eq!(s.max_recv_data_segment_length, 262_144);
    assert_eq!(s.max_burst_length, 1_048_576);
    assert_eq!(s.first_burst_length, 262_144);
    assert!(!s.initial_r2t);
    assert!(s.immediate_data);
    assert_eq!(s.max_outstanding_r2t, 16);
    assert_eq!(s.header_digest, ["None", "CRC32C"]);
    assert_eq!(s.data_digest, ["None", "CRC32C"]);
    assert_eq!(s.default_time2wait, 2);
    assert_eq!(s.default_time2retain, 20);
    assert_eq!(s.workers_per_lun, 8);
}

#[test]
fn limits_defaults_match_the_documentation() {
    let l = LimitSettings::default();
    assert_eq!(l.login_timeout_secs, 15);
    assert_eq!(l.max_connections, 4096);
    assert_eq!(l.max_connections_per_address, 256);
    assert_eq!(l.max_login_connections, 256);
    assert_eq!(l.max_login_connections_per_address, 16);
    assert_eq!(l.max_sessions_per_initiator, 64);
    assert_eq!(l.data_buffer_bytes, None);
    assert_eq!(l.data_out_timeout_secs, 30);
    let auto = l.data_buffer_bytes();
    assert!((128 << 20..=512 << 20).contains(&auto), "{auto}");
    assert_eq!(Config::default().limits, l);
}

#[test]
fn limits_are_read_from_file_and_environment_and_checked_by_key() {
    jailed(|jail| {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!(
            "{}[limits]\nlogin_timeout_secs = 5\nmax_connections = 1000\ndata_buffer_bytes = \"64M\"\n",
            base_config(dir.path(), "", "")
        );
        let path = write_config(dir.path(), &body);
        jail.set_env("RUSTGT_LIMITS__MAX_LOGIN_CONNECTIONS", 10);
        jail.set_env("RUSTGT_LIMITS__MAX_LOGIN_CONNECTIONS_PER_ADDRESS", 4);
        let cfg = load(Some(&path), &Overrides::default()).expect("loads");
        assert_eq!(cfg.limits.login_timeout_secs, 5);
        assert_eq!(cfg.limits.max_connections, 1000);
        assert_eq!(cfg.limits.max_login_connections, 10);
        assert_eq!(cfg.limits.max_login_connections_per_address, 4);
        assert_eq!(cfg.limits.max_connections_per_address, 256);
        assert_eq!(cfg.limits.data_buffer_bytes(), 64 << 20);
    });
}

#[test]
fn limits_out_of_range_name_the_key() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let with = |extra: &str| format!("{}[limits]\n{extra}\n", base_config(dir.path(), "", ""));
        assert_problem(
            &with("login_timeout_secs = 0"),
            "limits.login_timeout_secs",
            "out of range",
        );
        assert_problem(
            &with("max_connections = 0"),
            "limits.max_connections",
            "out of range",
        );
        assert_problem(
            &with("max_connections = 10\nmax_connections_per_address = 11"),
            "limits.max_connections_per_address",
            "max_connections",
        );
        assert_problem(
            &with("max_connections = 10\nmax_login_connections = 0"),
            "limits.max_login_connections",
            "out of range",
        );
        assert_problem(
            &with("max_login_connections = 8"),
            "limits.max_login_connections_per_address",
            "below max_login_connections (8)",
        );
        assert_problem(
            &with("max_sessions_per_initiator = 0"),
            "limits.max_sessions_per_initiator",
            "out of range",
        );
        assert_problem(
            &with("data_buffer_bytes = \"512K\""),
            "limits.data_buffer_bytes",
            "smallest budget",
        );
        assert_problem(
            &with("data_buffer_bytes = \"lots\""),
            "limits.data_buffer_bytes",
            "not a size",
        );
        assert_problem(
            &with("data_out_timeout_secs = 0"),
            "limits.data_out_timeout_secs",
            "out of range",
        );
        assert_problem(
            &with("max_session_per_initiator = 3"),
            "limits.max_session_per_initiator",
            "unknown field",
        );
    });
}

#[test]
fn minimal_file_fills_in_defaults() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, res) = load_str(&base_config(dir.path(), "", ""));
        let cfg = res.expect("loads");
        assert_eq!(cfg.iscsi, IscsiSettings::default());
        assert_eq!(cfg.discovery, DiscoverySettings::default());
        let t = cfg.targets.first().expect("target");
        assert_eq!(t.portals, default_portals());
        let lun = t.luns.first().expect("lun");
        assert_eq!(lun.size_bytes(), Some(64 << 20));
        assert_eq!(lun.block_size, 512);
        assert!(lun.thin && lun.write_cache);
        assert_eq!(lun.effective_workers(&cfg.iscsi), 8);
    });
}

#[test]
fn file_with_no_targets_serves_none() {
    jailed(|_| {
        let (_, res) = load_str("[iscsi]\nqueue_depth = 32\n");
        let cfg = res.expect("loads");
        assert!(cfg.targets.is_empty());
        assert_eq!(cfg.iscsi.queue_depth, 32);
    });
}

#[test]
fn listen_override_replaces_every_portal_list() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut body = base_config(
            dir.path(),
            "portals = [\"10.0.0.1:3260\", \"10.0.0.2:3260\"]",
            "",
        );
        body.push_str(
            "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:second\"\nportals = [\"10.0.0.3:3261\"]\n",
        );
        let path = write_config(dir.path(), &body);
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let overrides = Overrides {
            listen: Some(listen),
            data_dir: Some(PathBuf::from("/tmp/rustgt-elsewhere")),
            ..Overrides::default()
        };
        let cfg = load(Some(&path), &overrides).expect("loads");
        assert_eq!(cfg.targets.len(), 2);
        for t in &cfg.targets {
            assert_eq!(t.portals, vec![listen]);
        }
        assert_eq!(cfg.data_dir, PathBuf::from("/tmp/rustgt-elsewhere"));

        let default = load(None, &overrides).expect("default loads");
        assert_eq!(
            default.targets.first().map(|t| t.portals.clone()),
            Some(vec![listen])
        );
    });
}

#[test]
fn environment_overrides_file_and_defaults() {
    jailed(|jail| {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = format!(
            "data_dir = {:?}\n\
             [iscsi]\nqueue_depth = 32\nimmediate_data = true\n\
             [[targets]]\niqn = \"iqn.2026-11.org.rustgt:test\"\n\
             [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"64M\"\n",
            dir.path().display().to_string()
        );
        let path = write_config(dir.path(), &body);

        jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", 64);
        jail.set_env("RUSTGT_ISCSI__IMMEDIATE_DATA", "false");
        jail.set_env("RUSTGT_ISCSI__HEADER_DIGEST", "[CRC32C]");
        jail.set_env("RUSTGT_DATA_DIR", "/srv/rustgt");
        // Variables that belong to the command line, not the config.
        jail.set_env("RUSTGT_LOG", "debug");
        jail.set_env("RUSTGT_CONFIG", "/nonexistent.toml");

        let cfg = load(Some(&path), &Overrides::default()).expect("loads");
        assert_eq!(cfg.iscsi.queue_depth, 64);
        assert!(!cfg.iscsi.immediate_data);
        assert_eq!(cfg.iscsi.header_digest, ["CRC32C"]);
        assert_eq!(cfg.data_dir, PathBuf::from("/srv/rustgt"));

        let cfg = load(None, &Overrides::default()).expect("loads without file");
        assert_eq!(cfg.iscsi.queue_depth, 64);
        assert_eq!(cfg.targets, vec![Config::default_target()]);

        let cli = Overrides {
            listen: None,
            data_dir: Some(PathBuf::from("/from/cli")),
            ..Overrides::default()
        };
        let cfg = load(Some(&path), &cli).expect("loads");
        assert_eq!(
            cfg.data_dir,
            PathBuf::from("/from/cli"),
            "command line beats env"
        );
    });
}

#[test]
fn bad_environment_value_names_the_variable() {
    jailed(|jail| {
        jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", 0);
        let err = load(None, &Overrides::default()).expect_err("0 is out of range");
        let text = err.to_string();
        assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPTH"), "{text}");
        assert!(text.contains("iscsi.queue_depth"), "{text}");

        jail.set_env("RUSTGT_ISCSI__QUEUE_DEPTH", "lots");
        let err = load(None, &Overrides::default()).expect_err("not a number");
        let text = err.to_string();
        assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPTH"), "{text}");
        assert!(text.contains("iscsi.queue_depth"), "{text}");
    });
}

#[test]
fn misspelt_environment_key_is_an_error() {
    jailed(|jail| {
        jail.set_env("RUSTGT_ISCSI__QUEUE_DEPT", 64);
        let err = load(None, &Overrides::default()).expect_err("unknown key");
        let text = err.to_string();
        assert!(text.contains("RUSTGT_ISCSI__QUEUE_DEPT"), "{text}");
        assert!(text.contains("queue_dept"), "{text}");
    });
}

#[test]
fn misspelt_file_keys_are_errors_naming_the_key() {
    jailed(|_| {
        assert_problem(
            "[iscsi]\nqueue_dept = 3\n",
            "iscsi.queue_dept",
            "unknown field",
        );
        assert_problem("datadir = \"/x\"\n", "datadir", "unknown field");
        let dir = tempfile::tempdir().expect("tempdir");
        assert_problem(
            &base_config(dir.path(), "", "blok_size = 4096"),
            "targets[0].luns[0].blok_size",
            "unknown field",
        );
        assert_problem(
            &base_config(dir.path(), "aliass = \"x\"", ""),
            "targets[0].aliass",
            "unknown field",
        );
    });
}

#[test]
fn wrong_types_and_missing_keys_name_the_key() {
    jailed(|_| {
        assert_problem(
            "[iscsi]\nqueue_depth = \"many\"\n",
            "iscsi.queue_depth",
            "invalid type",
        );
        assert_problem(
            "[[targets]]\nalias = \"no name\"\n",
            "targets[0]",
            "missing field `iqn`",
        );
        let dir = tempfile::tempdir().expect("tempdir");
        assert_problem(
            &base_config(dir.path(), "portals = [\"localhost\"]", ""),
            "targets[0].portals[0]",
            "",
        );
    });
}

#[test]
fn toml_syntax_error_names_the_file() {
    jailed(|_| {
        let (path, res) = load_str("[iscsi\nqueue_depth = 3\n");
        let text = res.expect_err("syntax error").to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("TOML parse error"), "{text}");
    });
}

#[test]
fn missing_file_is_a_read_error_naming_it() {
    jailed(|_| {
        let path = PathBuf::from("/nonexistent/rustgt/config.toml");
        let err = load(Some(&path), &Overrides::default()).expect_err("missing");
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        assert!(
            err.to_string().contains("/nonexistent/rustgt/config.toml"),
            "{err}"
        );
    });
}

#[test]
fn iscsi_setting_ranges_name_their_keys() {
    jailed(|_| {
        let cases: &[(&str, &str, &str)] = &[
            ("queue_depth = 0", "iscsi.queue_depth", "out of range"),
            ("queue_depth = 70000", "iscsi.queue_depth", "out of range"),
            (
                "max_recv_data_segment_length = 511",
                "iscsi.max_recv_data_segment_length",
                "out of range",
            ),
            (
                "max_recv_data_segment_length = 16777216",
                "iscsi.max_recv_data_segment_length",
                "out of range",
            ),
            (
                "max_burst_length = 100",
                "iscsi.max_burst_length",
                "out of range",
            ),
            (
                "first_burst_length = 2097152\nmax_burst_length = 1048576",
                "iscsi.first_burst_length",
                "exceeds max_burst_length",
            ),
            (
                "max_outstanding_r2t = 0",
                "iscsi.max_outstanding_r2t",
                "out of range",
            ),
            ("header_digest = []", "iscsi.header_digest", "at least one"),
            (
                "header_digest = [\"crc32c\"]",
                "iscsi.header_digest[0]",
                "unknown digest",
            ),
            (
                "data_digest = [\"None\", \"MD5\"]",
                "iscsi.data_digest[1]",
                "unknown digest",
            ),
            (
                "data_digest = [\"None\", \"None\"]",
                "iscsi.data_digest[1]",
                "twice",
            ),
            (
                "default_time2wait = 3601",
                "iscsi.default_time2wait",
                "out of range",
            ),
            (
                "default_time2retain = 4000",
                "iscsi.default_time2retain",
                "out of range",
            ),
            (
                "workers_per_lun = 0",
                "iscsi.workers_per_lun",
                "out of range",
            ),
            (
                "nop_in_interval_secs = 5\nnop_in_timeout_secs = 0",
                "iscsi.nop_in_timeout_secs",
                "out of range",
            ),
        ];
        for (body, key, fragment) in cases {
            assert_problem(&format!("[iscsi]\n{body}\n"), key, fragment);
        }
        // nop_in_interval_secs = 0 disables the ping, so the timeout is free.
        let (_, res) = load_str("[iscsi]\nnop_in_interval_secs = 0\nnop_in_timeout_secs = 0\n");
        res.expect("disabled NOP-In ignores the timeout");
    });
}

#[test]
fn target_errors_name_their_keys() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let body = base_config(d, "", "").replace("org.rustgt:test", "ORG.rustgt:test");
        assert_problem(&body, "targets[0].iqn", "lowercase");
        let body = base_config(d, "", "").replace("iqn.2026-11.org.rustgt:test", "target1");
        assert_problem(&body, "targets[0].iqn", "not an iSCSI name");
        let dup = format!(
            "{}[[targets]]\niqn = \"iqn.2026-11.org.rustgt:test\"\n",
            base_config(d, "", "")
        );
        assert_problem(&dup, "targets[1].iqn", "duplicate target name");
        assert_problem(
            &base_config(d, "portals = []", ""),
            "targets[0].portals",
            "at least one",
        );
        assert_problem(
            &base_config(d, "portals = [\"127.0.0.1:3260\", \"127.0.0.1:3260\"]", ""),
            "targets[0].portals[1]",
            "twice",
        );
        assert_problem(
            &base_config(d, "acl = [\"iqn.2026-11.org.rustgt:a\", \"host-b\"]", ""),
            "targets[0].acl[1]",
            "not an iSCSI name",
        );
        assert_problem(
            &base_config(d, "alias = \"\"", ""),
            "targets[0].alias",
            "1..=255",
        );
        assert_problem(&base_config(d, "tpgt = 70000", ""), "targets[0].tpgt", "");
    });
}

#[test]
fn chap_errors_name_their_keys_and_never_the_secret() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let chap = |fields: &str| base_config(d, &format!("chap = {{ {fields} }}"), "");
        assert_problem(
            &chap("user = \"u\", secret = \"short\""),
            "targets[0].chap.secret",
            "at least 12 bytes",
        );
        assert_problem(
            &chap("user = \"\", secret = \"0123456789ab\""),
            "targets[0].chap.user",
            "1..=255",
        );
        assert_problem(
            &chap("user = \"u\", secret = \"0123456789ab\", mutual_user = \"t\""),
            "targets[0].chap.mutual_secret",
            "required",
        );
        assert_problem(
            &chap("user = \"u\", secret = \"0123456789ab\", mutual_secret = \"abcdefghijkl\""),
            "targets[0].chap.mutual_user",
            "required",
        );
        assert_problem(
            &chap(
                "user = \"u\", secret = \"0123456789ab\", mutual_user = \"t\", \
                 mutual_secret = \"0123456789ab\"",
            ),
            "targets[0].chap.mutual_secret",
            "must differ",
        );
        let (_, res) = load_str("[discovery.chap]\nuser = \"d\"\nsecret = \"tiny-secret\"\n");
        let text = res.expect_err("11-byte secret").to_string();
        assert!(text.contains("discovery.chap.secret"), "{text}");
        assert!(!text.contains("tiny-secret"), "secret leaked: {text}");
    });
}

#[test]
fn fault_tables_load_typed_and_errors_name_their_keys() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let body = base_config(
            d,
            "",
            "[targets.luns.fault]\n\
             read_error = { lba = \"100-199\" }\n\
             write_error = { every = 3 }\n\
             write_nospace = { lba = \"1000-\", probability = 0.5 }\n\
             delay = { time = \"5ms\" }\n\
             hang = { lba = \"42\" }\n",
        );
        let (_, res) = load_str(&body);
        let cfg = res.expect("valid fault table");
        let f = cfg.targets[0].luns[0].fault.as_ref().expect("fault table");
        let spec = f.spec().expect("typed");
        let r = spec.read_error.and_then(|t| t.lba).expect("range");
        assert_eq!((r.first, r.last), (100, 199));
        assert_eq!(spec.write_error.and_then(|t| t.every), Some(3));
        let n = spec.write_nospace.expect("nospace");
        assert_eq!(n.lba.map(|r| r.last), Some(u64::MAX));
        assert_eq!(n.probability, Some(0.5));
        assert_eq!(
            spec.delay.map(|d| d.time),
            Some(std::time::Duration::from_millis(5))
        );
        assert!(spec.hang.is_some());
        // An empty table: no faults, but the LUN takes them live.
        let (_, res) = load_str(&base_config(d, "", "fault = {}"));
        let cfg = res.expect("empty fault table");
        let f = cfg.targets[0].luns[0].fault.as_ref().expect("table");
        assert!(f.spec().expect("typed").is_empty());
        let lun = |extra: &str| base_config(d, "", extra);
        assert_problem(
            &lun("fault = { read_error = { lba = \"9-3\" } }"),
            "targets[0].luns[0].fault.read_error.lba",
            "after the last",
        );
        assert_problem(
            &lun("fault = { hang = { lba = \"x\" } }"),
            "targets[0].luns[0].fault.hang.lba",
            "not an LBA range",
        );
        assert_problem(
            &lun("fault = { write_error = { every = 0 } }"),
            "targets[0].luns[0].fault.write_error.every",
            "at least 1",
        );
        assert_problem(
            &lun("fault = { write_nospace = { probability = 1.5 } }"),
            "targets[0].luns[0].fault.write_nospace.probability",
            "out of range",
        );
        assert_problem(
            &lun("fault = { delay = { time = \"5 minutes\" } }"),
            "targets[0].luns[0].fault.delay.time",
            "not a duration",
        );
        assert_problem(
            &lun("fault = { delay = { time = \"61s\" } }"),
            "targets[0].luns[0].fault.delay.time",
            "longer than 60s",
        );
        let (_, res) = load_str(&lun("fault = { read_eror = {} }"));
        let err = res.expect_err("misspelt fault key");
        assert!(err.to_string().contains("read_eror"), "{err}");
    });
}

#[test]
fn lun_errors_name_their_keys() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let lun = |extra: &str| base_config(d, "", extra);
        assert_problem(
            &lun("block_size = 1000"),
            "targets[0].luns[0].block_size",
            "512 or 4096",
        );
        let big_id = base_config(d, "", "").replace("id = 0", "id = 16384");
        assert_problem(&big_id, "targets[0].luns[0].id", "out of range");
        assert_problem(
            &lun("wwn = \"naa.5000000000000000000000000000000a\""),
            "targets[0].luns[0].wwn",
            "not a WWN",
        );
        assert_problem(
            &lun("wwn = \"naa.60000000000000000000000000000zz\""),
            "targets[0].luns[0].wwn",
            "32 hex digits",
        );
        let wwn = "wwn = \"naa.6000000000000000000000000000000a\"";
        let twice = base_config(d, "", wwn)
            + &format!("[[targets.luns]]\nid = 1\nbackstore = \"null\"\nsize = \"1M\"\n{wwn}\n");
        assert_problem(
            &twice,
            "targets[0].luns[1].wwn",
            "already the wwn of targets[0].luns[0].wwn",
        );
        let (_, ok) = load_str(&lun("wwn = \"6000000000000000000000000000000A\""));
        let ok = ok.expect("a wwn without naa. and in capitals loads");
        assert_eq!(
            ok.targets[0].luns[0].wwn.as_ref().map(|w| w.value().0[15]),
            Some(0x0a)
        );
        let bad_size = base_config(d, "", "").replace("\"64M\"", "\"64 potatoes\"");
        assert_problem(&bad_size, "targets[0].luns[0].size", "not a size");
        let zero = base_config(d, "", "").replace("\"64M\"", "\"0\"");
        assert_problem(&zero, "targets[0].luns[0].size", "zero");
        let odd = base_config(d, "", "").replace("\"64M\"", "\"1000\"");
        assert_problem(
            &odd,
            "targets[0].luns[0].size",
            "multiple of the block size",
        );
        let kind = base_config(d, "", "").replace("\"ram\"", "\"tape\"");
        assert_problem(&kind, "targets[0].luns[0].backstore", "unknown backstore");
        assert_problem(
            &lun("path = \"x.img\""),
            "targets[0].luns[0].path",
            "not used",
        );
        let no_size = base_config(d, "", "").replace("size = \"64M\"\n", "");
        assert_problem(&no_size, "targets[0].luns[0].size", "required for a ram");
        let file_no_path = base_config(d, "", "").replace("\"ram\"", "\"file\"");
        assert_problem(
            &file_no_path,
            "targets[0].luns[0].path",
            "required for a file",
        );
        let dev_no_path = base_config(d, "", "").replace("\"ram\"", "\"blockdev\"");
        assert_problem(
            &dev_no_path,
            "targets[0].luns[0].path",
            "required for a blockdev",
        );
        let new_file = base_config(d, "", "path = \"new.img\"")
            .replace("\"ram\"", "\"file\"")
            .replace("size = \"64M\"\n", "");
        assert_problem(&new_file, "targets[0].luns[0].size", "does not exist yet");
        assert_problem(
            &lun("workers = 0"),
            "targets[0].luns[0].workers",
            "out of range",
        );
        assert_problem(
            &lun("serial = \"has space\""),
            "targets[0].luns[0].serial",
            "printable",
        );
        let dup_id = format!(
            "{}[[targets.luns]]\nid = 0\nbackstore = \"null\"\nsize = \"1G\"\n",
            base_config(d, "", "")
        );
        assert_problem(
            &dup_id,
            "targets[0].luns[1].id",
            "already defined by luns[0]",
        );
        let shared = format!(
            "{}[[targets.luns]]\nid = 1\nbackstore = \"file\"\npath = \"a.img\"\nsize = \"1M\"\n\
             [[targets.luns]]\nid = 2\nbackstore = \"file\"\npath = \"a.img\"\nsize = \"1M\"\n",
            base_config(d, "", "")
        );
        assert_problem(
            &shared,
            "targets[0].luns[2].path",
            "targets[0].luns[1].path",
        );
    });
}

#[test]
fn existing_file_needs_no_size() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("old.img"), vec![0u8; 4096]).expect("write");
        let body = base_config(dir.path(), "", "path = \"old.img\"")
            .replace("\"ram\"", "\"file\"")
            .replace("size = \"64M\"\n", "");
        let (_, res) = load_str(&body);
        let cfg = res.expect("existing file without size loads");
        let lun = cfg
            .targets
            .first()
            .and_then(|t| t.luns.first())
            .expect("lun");
        assert_eq!(
            lun.resolved_path(&cfg.data_dir),
            Some(dir.path().join("old.img"))
        );
        assert_eq!(lun.size_bytes(), None);
    });
}

#[test]
fn mmap_backstore_is_configured_like_a_file() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mmap = |extra: &str| base_config(d, "", extra).replace("\"ram\"", "\"mmap\"");
        let (_, res) = load_str(&mmap("path = \"m.img\""));
        let cfg = res.expect("mmap with a path and a size loads");
        let lun = cfg
            .targets
            .first()
            .and_then(|t| t.luns.first())
            .expect("lun");
        assert_eq!(lun.kind(), Some(EngineKind::Mmap));
        assert_eq!(lun.resolved_path(&cfg.data_dir), Some(d.join("m.img")));
        assert_eq!(lun.size_bytes(), Some(64 << 20));

        assert_problem(
            &mmap(""),
            "targets[0].luns[0].path",
            "required for a mmap backstore",
        );
        let unsized_new = mmap("path = \"new.img\"").replace("size = \"64M\"\n", "");
        assert_problem(
            &unsized_new,
            "targets[0].luns[0].size",
            "does not exist yet",
        );
        let read_only_new =
            mmap("path = \"new.img\"\nread_only = true").replace("size = \"64M\"\n", "");
        assert_problem(
            &read_only_new,
            "targets[0].luns[0].size",
            "must exist for a read-only LUN",
        );
        let shared = format!(
            "{}[[targets.luns]]\nid = 1\nbackstore = \"file\"\npath = \"m.img\"\nsize = \"1M\"\n",
            mmap("path = \"m.img\"")
        );
        assert_problem(
            &shared,
            "targets[0].luns[1].path",
            "targets[0].luns[0].path",
        );
        let kind = base_config(d, "", "").replace("\"ram\"", "\"mmapp\"");
        assert_problem(&kind, "targets[0].luns[0].backstore", "\"mmap\"");

        // An existing file needs no size.
        std::fs::write(d.join("old.img"), vec![0u8; 4096]).expect("write");
        let existing = mmap("path = \"old.img\"").replace("size = \"64M\"\n", "");
        let (_, res) = load_str(&existing);
        res.expect("existing file without size loads");
    });
}

#[test]
fn reactor_settings_load_from_file_and_environment() {
    jailed(|jail| {
        let (_, res) = load_str("[reactor]\nthreads = 2\nrun_to_completion = false\n");
        let cfg = res.expect("valid reactor table");
        assert_eq!(
            (cfg.reactor.threads, cfg.reactor.run_to_completion),
            (2, false)
        );
        let (_, res) = load_str("[reactor]\nthreads = 999\n");
        let err = res.expect_err("too many reactors");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["reactor.threads"]);
        jail.set_env("RUSTGT_REACTOR__RUN_TO_COMPLETION", "false");
        let (_, res) = load_str("");
        assert!(!res.expect("env override").reactor.run_to_completion);

        let (_, res) = load_str("");
        assert!(res.expect("default").reactor.io_uring_enabled());
        let (_, res) = load_str("[reactor]\nio_uring = \"off\"\n");
        assert!(!res.expect("off").reactor.io_uring_enabled());
        let (_, res) = load_str("[reactor]\nio_uring = \"sometimes\"\n");
        let err = res.expect_err("unknown io_uring mode");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["reactor.io_uring"]);
        jail.set_env("RUSTGT_REACTOR__IO_URING", "off");
        let (_, res) = load_str("");
        assert!(!res.expect("env override").reactor.io_uring_enabled());

        let (_, res) = load_str("");
        assert_eq!(res.expect("default").reactor.busy_poll_us, 100);
        let (_, res) = load_str("[reactor]\nbusy_poll_us = 0\n");
        assert_eq!(res.expect("off").reactor.busy_poll_us, 0);
        let (_, res) = load_str("[reactor]\nbusy_poll_us = 5000\n");
        let err = res.expect_err("too long a busy-poll");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["reactor.busy_poll_us"]);

        let (_, res) = load_str("");
        assert_eq!(res.expect("default").reactor.slice_us, 100);
        let (_, res) = load_str("[reactor]\nslice_us = 0\n");
        assert_eq!(res.expect("kernel default").reactor.slice_us, 0);
        for bad in [50, 200_000] {
            let (_, res) = load_str(&format!("[reactor]\nslice_us = {bad}\n"));
            let err = res.expect_err("a slice the kernel does not grant");
            let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys, ["reactor.slice_us"]);
        }

        let (_, res) = load_str("");
        assert!(res.expect("default").reactor.inline_writes);
        let (_, res) = load_str("[reactor]\ninline_writes = false\n");
        assert!(!res.expect("off").reactor.inline_writes);
        let (_, res) = load_str("[reactor]\ninline_writes = \"yes\"\n");
        let err = res.expect_err("not a boolean");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["reactor.inline_writes"]);
    });
}

#[test]
fn all_problems_are_reported_at_once() {
    jailed(|_| {
        let (_, res) = load_str("[iscsi]\nqueue_depth = 0\nworkers_per_lun = 0\n");
        let err = res.expect_err("two problems");
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["iscsi.queue_depth", "iscsi.workers_per_lun"]);
        assert!(err.to_string().contains("2 problems"), "{err}");
    });
}

#[test]
fn to_toml_round_trips() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        let mut second = Config::default_target();
        second.iqn = "iqn.2026-11.org.rustgt:second".into();
        second.alias = Some("second disk".into());
        second.acl = vec!["iqn.1993-08.org.debian:01:abc".into()];
        second.chap = Some(ChapSettings {
            user: "alice".into(),
            secret: "0123456789abcdef".into(),
            mutual_user: Some("target".into()),
            mutual_secret: Some("fedcba9876543210".into()),
        });
        if let Some(lun) = second.luns.first_mut() {
            lun.path = Some(PathBuf::from("second.img"));
            lun.serial = Some("SER123".into());
            lun.workers = Some(2);
        }
        cfg.targets.push(second);
        cfg.discovery.chap = Some(ChapSettings {
            user: "disc".into(),
            secret: "discovery-secret".into(),
            mutual_user: None,
            mutual_secret: None,
        });
        let text = cfg.to_toml().expect("serializes");
        let path = write_config(dir.path(), &text);
        let back = load(Some(&path), &Overrides::default()).expect("reloads");
        assert_eq!(back, cfg, "round trip through:\n{text}");
    });
}

#[test]
fn example_config_in_etc_loads() {
    jailed(|_| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/rustgt.toml");
        let text = std::fs::read_to_string(&path).expect("etc/rustgt.toml exists");
        // Point the data dir at a scratch directory so file LUNs that do
        // not exist yet are judged the same way everywhere.
        let dir = tempfile::tempdir().expect("tempdir");
        let overrides = Overrides {
            listen: None,
            data_dir: Some(dir.path().to_owned()),
            ..Overrides::default()
        };
        let cfg = load(Some(&path), &overrides)
            .unwrap_or_else(|e| panic!("etc/rustgt.toml must load: {e}\n{text}"));
        assert!(!cfg.targets.is_empty(), "the example defines targets");
        // Every documented iscsi and limits default is the real default.
        assert_eq!(cfg.iscsi, IscsiSettings::default());
        assert_eq!(cfg.limits, LimitSettings::default());
    });
}

#[test]
fn debug_output_redacts_secrets() {
    let chap = ChapSettings {
        user: "alice".into(),
        secret: "very-secret-123".into(),
        mutual_user: Some("tgt".into()),
        mutual_secret: Some("other-secret-456".into()),
    };
    let shown = format!("{chap:?}");
    assert!(shown.contains("alice") && shown.contains("tgt"), "{shown}");
    assert!(!shown.contains("very-secret-123"), "{shown}");
    assert!(!shown.contains("other-secret-456"), "{shown}");
    let mut cfg = Config::default();
    cfg.discovery.chap = Some(chap);
    assert!(!format!("{cfg:?}").contains("very-secret-123"));
}

#[test]
fn iscsi_name_validation() {
    let good = [
        "iqn.2026-11.org.rustgt:default",
        "iqn.1993-08.org.debian:01:2d7f3c1b9e",
        "iqn.2001-04.com.example",
        "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309",
        "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test",
        "eui.02004567A425678D",
        "eui.02004567a425678d",
        "naa.52004567BA64678D",
        "naa.62004567BA64678D0123456789ABCDEF",
    ];
    for name in good {
        assert_eq!(validate_iscsi_name(name), Ok(()), "{name}");
    }
    let long = format!("iqn.2026-11.org.rustgt:{}", "x".repeat(201));
    let bad = [
        ("", "empty"),
        ("iqn.", "date"),
        ("iqn.2026-13.org.rustgt", "yyyy-mm"),
        ("iqn.26-11.org.rustgt", "yyyy-mm"),
        ("iqn.2026-11", "reversed domain"),
        ("iqn.2026-11.", "reversed domain"),
        ("iqn.2026-11:org", "after the date"),
        ("iqn.2026-11.org..rustgt", "reversed domain"),
        ("iqn.2026-11.org.-bad", "start or end"),
        ("iqn.2026-11.Org.rustgt", "lowercase"),
        ("iqn.2026-11.org.rustgt:a b", "not allowed"),
        ("iqn.2026-11.org.rustgt:a_b", "not allowed"),
        ("eui.0200", "16 hexadecimal"),
        ("eui.02004567A425678G", "16 hexadecimal"),
        ("naa.52004567BA64678D00", "16 or 32"),
        ("IQN.2026-11.org.rustgt", "not an iSCSI name"),
        (long.as_str(), "at most 223"),
    ];
    for (name, fragment) in bad {
        let err = validate_iscsi_name(name).expect_err(name);
        assert!(err.contains(fragment), "{name}: {err}");
    }
}

#[test]
fn admin_socket_of_reads_the_data_directory_file_without_config() {
    jailed(|_| {
        let dir = tempfile::tempdir().expect("tempdir");
        let overrides = Overrides {
            data_dir: Some(dir.path().to_owned()),
            ..Overrides::default()
        };
        assert_eq!(
            admin_socket_of(None, &overrides).expect("socket"),
            dir.path().join("admin.sock")
        );
        std::fs::write(
            dir.path().join(DATA_DIR_CONFIG),
            "admin_socket = \"ctl.sock\"\n",
        )
        .expect("write");
        assert_eq!(
            admin_socket_of(None, &overrides).expect("socket"),
            dir.path().join("ctl.sock")
        );
    });
}

#[test]
fn redirect_addresses_and_portals_are_checked() {
    let target = |redirect: &str| {
        format!(
            "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:moved\"\nportals = [\"127.0.0.1:3260\"]\n\
             [targets.redirect]\n{redirect}\n"
        )
    };
    let (_, res) = load_str(&target(
        "to = [\"192.0.2.1:3260,1\", \"[2001:db8::1]:3260\", \"gw-2.example.net:3261,2\"]\n\
         from = [\"127.0.0.1:3260\"]\npermanent = true",
    ));
    let cfg = res.expect("valid redirect");
    let r = cfg.targets[0].redirect.as_ref().expect("redirect");
    assert_eq!(r.to.len(), 3);
    assert!(r.permanent);
    assert!(r.metrics.is_empty());
    assert_problem(&target("to = []"), "targets[0].redirect.to", "at least one");
    assert_problem(
        &target("to = [\"192.0.2.1\"]"),
        "targets[0].redirect.to[0]",
        "HOST:PORT",
    );
    assert_problem(
        &target("to = [\"192.0.2.1:3260,70000\"]"),
        "targets[0].redirect.to[0]",
        "portal group tag",
    );
    assert_problem(
        &target("to = [\"bad host:3260\"]"),
        "targets[0].redirect.to[0]",
        "DNS name",
    );
    assert_problem(
        &target("to = [\"192.0.2.1:3260\"]\nfrom = [\"127.0.0.9:3260\"]"),
        "targets[0].redirect.from[0]",
        "not one of the target's portals",
    );
    assert_problem(
        &target("to = [\"192.0.2.1:3260\", \"192.0.2.2:3260\"]\nmetrics = [\"192.0.2.1:9464\"]"),
        "targets[0].redirect.metrics",
        "1 metrics endpoints for 2 gateways",
    );
    assert_problem(
        &target("to = [\"192.0.2.1:3260\"]\nmetrics = [\"192.0.2.1\"]"),
        "targets[0].redirect.metrics[0]",
        "socket address",
    );
    assert_problem(
        &target("to = [\"192.0.2.1:3260\"]\nwhere = 1"),
        "targets[0].redirect.where",
        "",
    );
}

#[test]
fn explicit_alua_on_gateways_is_accepted() {
    jailed(|jail| {
        let body = format!(
            "data_dir = {dir:?}\n\
             [[targets]]\niqn = \"iqn.2026-11.org.rustgt:t\"\nport_groups = [1, 2]\n\
             [[targets.luns]]\nid = 0\nbackstore = \"rbd\"\nalua = \"explicit\"\n\
             [targets.luns.rbd]\npool = \"rbd\"\nimage = \"a\"\n\
             [[targets.luns]]\nid = 1\nbackstore = \"rbd\"\nalua = \"both\"\n\
             [targets.luns.rbd]\npool = \"rbd\"\nimage = \"b\"\n",
            dir = jail.directory().display().to_string()
        );
        let path = write_config(jail.directory(), &body);
        let cfg = load(Some(&path), &Overrides::default()).expect("explicit ALUA on gateways");
        let modes: Vec<_> = cfg.targets[0]
            .luns
            .iter()
            .map(|l| l.alua.as_ref().map(|a| a.get()))
            .collect();
        assert_eq!(
            modes,
            vec![
                Some(rustgt_scsi::AluaMode::Explicit),
                Some(rustgt_scsi::AluaMode::Both)
            ]
        );
    });
}
