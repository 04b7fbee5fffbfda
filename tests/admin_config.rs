//! Black-box tests of declarative configuration through the admin socket:
//! `config apply` touches only what differs (a session on an unchanged
//! target keeps working), SIGHUP and `config reload` re-apply the file,
//! and `config save` followed by a restart reproduces the running state.
//! Live changes are saved to the daemon's file (comments kept), survive
//! SIGHUP and a restart; with persistence off SIGHUP refuses to revert
//! them. Fresh daemons get identities of their own and keep them.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use std::os::unix::fs::PermissionsExt;

use admin_common::{cli, eventually, Admin, Session};
use common::{run_tool, Daemon, DaemonOptions, TOOL_TIMEOUT};
use serde_json::{json, Value};

const A: &str = "iqn.2026-11.org.rustgt:a";
const B: &str = "iqn.2026-11.org.rustgt:b";
const C: &str = "iqn.2026-11.org.rustgt:c";
const INITIATOR: &str = "iqn.2026-11.org.rustgt:config-test";

fn target(iqn: &str, extra: &str, luns: &[(u64, &str)]) -> String {
    let mut s = format!("[[targets]]\niqn = \"{iqn}\"\n{extra}");
    for (id, size) in luns {
        s.push_str(&format!(
            "[[targets.luns]]\nid = {id}\nbackstore = \"ram\"\nsize = \"{size}\"\n"
        ));
    }
    s
}

fn base() -> String {
    target(A, "", &[(0, "16M")]) + &target(B, "", &[(0, "16M")])
}

fn lun_ids(a: &mut Admin, iqn: &str) -> Vec<u64> {
    a.ok(json!({"cmd": "list_luns", "target": iqn}))
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|l| l["id"].as_u64())
        .collect()
}

fn tsihs(a: &mut Admin, iqn: &str) -> Vec<u64> {
    a.ok(json!({"cmd": "list_sessions", "target": iqn}))
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|s| s["tsih"].as_u64())
        .collect()
}

#[test]
fn config_apply_changes_one_target_and_leaves_another_session_alone() {
    let d = Daemon::start_with_config(&base(), 2);
    let mut s = Session::login(d.portal, B, INITIATOR, 1);
    s.settle(0);
    let pattern = vec![0xa5u8; 4096];
    assert!(s.write(0, 100, &pattern).is_good());
    let mut a = Admin::connect(&d);
    let before_tsih = tsihs(&mut a, B);
    assert_eq!(before_tsih.len(), 1);

    // Target A: alias, ACL and a new LUN; target B exactly as before.
    let changed = target(
        A,
        "alias = \"changed\"\nacl = [\"iqn.2026-11.org.rustgt:config-test\"]\n",
        &[(0, "16M"), (1, "8M")],
    ) + &target(B, "", &[(0, "16M")]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("changed.toml");
    std::fs::write(&file, &changed).expect("write");
    let file_arg = file.display().to_string();

    let saved = a.saved();
    let dry = cli(&d, &["config", "apply", &file_arg, "--dry-run"]);
    dry.assert_success();
    assert!(dry.stdout.starts_with("would change:"), "{dry}");
    assert_eq!(a.saved(), saved, "a dry run changes nothing");

    let out = cli(&d, &["config", "apply", &file_arg]);
    out.assert_success();
    for line in [
        format!("target {A}: alias changed"),
        format!("target {A}: acl changed"),
        format!("target {A}: LUN 1 added"),
    ] {
        assert!(out.stdout.contains(&line), "missing {line:?}: {out}");
    }
    assert!(!out.stdout.contains(B), "B must not change: {out}");
    assert_eq!(lun_ids(&mut a, A), [0, 1]);

    // B's session: same TSIH, no unit attention, data intact, still alive.
    assert_eq!(tsihs(&mut a, B), before_tsih);
    assert!(s.ping(), "B's session must survive the apply");
    let tur = s.test_unit_ready(0).expect("alive");
    assert!(
        tur.is_good(),
        "no unit attention on an untouched target: {tur:?}"
    );
    let r = s.read(0, 100, 8);
    assert!(r.is_good() && r.data == pattern, "B's data after apply");

    // A's new LUN answers our (allowed) initiator; libiscsi's default
    // initiator is not in A's new ACL any more.
    let mut sa = Session::login(d.portal, A, INITIATOR, 2);
    sa.settle(1);
    assert_eq!(sa.capacity(1), 8 << 20);
    let inq = run_tool("iscsi-inq", &args![d.url(A, 1)], TOOL_TIMEOUT);
    assert!(inq.stderr.contains("Authorization failure"), "{inq}");

    // Applying the same file again changes nothing.
    let again = cli(&d, &["config", "apply", &file_arg]);
    again.assert_success();
    assert!(again.stdout.contains("nothing to change"), "{again}");

    // A file without B would cut off B's session: refused, unless forced.
    let without_b = dir.path().join("without-b.toml");
    std::fs::write(&without_b, target(A, "", &[(0, "16M")])).expect("write");
    let saved = a.saved();
    let refused = cli(&d, &["config", "apply", &without_b.display().to_string()]);
    assert_eq!(refused.status.code(), Some(1), "{refused}");
    assert!(
        refused.stderr.contains(&format!("removing target {B}"))
            && refused.stderr.contains(INITIATOR),
        "{refused}"
    );
    assert_eq!(a.saved(), saved, "a refused apply changes nothing");
    assert!(s.ping());
}

#[test]
fn config_apply_names_the_file_and_key_of_a_mistake() {
    let d = Daemon::start_with_config(&base(), 2);
    let mut a = Admin::connect(&d);
    let saved = a.saved();
    let e = a.err(json!({
        "cmd": "config_apply",
        "origin": "/etc/rustgt/broken.toml",
        "toml": format!("{}[[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"8M\"\nblock_size = 1000\n", base()),
    }));
    assert!(e.contains("/etc/rustgt/broken.toml"), "{e}");
    assert!(e.contains("targets[1].luns[1].block_size"), "{e}");
    let e = a.err(json!({"cmd": "config_apply", "toml": "[[targets]]\niqn = \"x\"\nbogus = 1\n"}));
    assert!(e.contains("bogus"), "{e}");
    assert_eq!(a.saved(), saved);
}

#[test]
fn sighup_and_config_reload_reapply_the_config_file() {
    let d = Daemon::start_with_config(&base(), 2);
    let mut a = Admin::connect(&d);
    let config_file = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    assert!(config_file.exists());

    std::fs::write(
        &config_file,
        target(A, "", &[(0, "16M")]) + &target(B, "", &[(0, "16M"), (2, "8M")]),
    )
    .expect("rewrite config");
    let pid = a.ok(json!({"cmd": "status"}))["pid"].as_i64().expect("pid");
    let pid = libc::pid_t::try_from(pid).expect("pid fits");
    // SAFETY: kill(2) has no memory effects; the pid is the daemon this
    // test started, which is still running (it answered just now).
    unsafe {
        libc::kill(pid, libc::SIGHUP);
    }
    eventually("SIGHUP to add LUN 2 to B", || lun_ids(&mut a, B) == [0, 2]);
    assert!(d.exit_status().is_none(), "SIGHUP must not stop the daemon");

    std::fs::write(&config_file, base()).expect("rewrite config");
    let r = a.ok(json!({"cmd": "config_reload"}));
    assert_eq!(r["changes"], json!([format!("target {B}: LUN 2 removed")]));
    assert_eq!(lun_ids(&mut a, B), [0]);
}

/// What must survive a restart: targets and LUNs as listed, less what
/// depends on the scratch directory and port.
fn state(a: &mut Admin) -> Value {
    let mut targets = a.ok(json!({"cmd": "list_targets"}));
    for t in targets.as_array_mut().expect("array") {
        if let Some(o) = t.as_object_mut() {
            o.remove("portals");
            o.remove("sessions");
        }
        for l in t["luns"].as_array_mut().expect("luns") {
            if let Some(o) = l.as_object_mut() {
                o.remove("path");
            }
        }
    }
    targets
}

/// The saved TOML without `data_dir` and portals.
fn comparable(toml_text: &str) -> toml::Value {
    let mut v: toml::Value = toml::from_str(toml_text).expect("saved config parses");
    if let Some(t) = v.as_table_mut() {
        t.remove("data_dir");
    }
    if let Some(ts) = v.get_mut("targets").and_then(|t| t.as_array_mut()) {
        for t in ts {
            if let Some(t) = t.as_table_mut() {
                t.remove("portals");
            }
        }
    }
    v
}

#[test]
fn config_save_then_restart_reproduces_the_running_state() {
    let d = Daemon::start_with_config(&base(), 2);
    let mut a = Admin::connect(&d);
    a.ok(json!({"cmd": "add_lun", "target": A,
        "lun": {"id": 3, "backstore": "file", "path": "a3.img", "size": "8M"}}));
    a.ok(json!({"cmd": "resize_lun", "target": A, "lun": 3, "size": "24M"}));
    a.ok(json!({"cmd": "set_readahead", "target": A, "lun": 0, "policy": "streams"}));
    a.ok(json!({"cmd": "acl_add", "target": B, "initiator": INITIATOR}));
    a.ok(json!({"cmd": "set_chap", "target": A,
        "chap": {"user": "alice", "secret": "0123456789abcdef"}}));
    a.ok(json!({"cmd": "set_chap",
        "chap": {"user": "disc", "secret": "discovery-secret"}}));
    a.ok(
        json!({"cmd": "add_target", "target": {"iqn": C, "alias": "third",
        "luns": [{"id": 0, "backstore": "null", "size": "1G"}]}}),
    );
    let before = state(&mut a);

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("saved.toml");
    let out = cli(&d, &["config", "save", &file.display().to_string()]);
    out.assert_success();
    let mode = std::fs::metadata(&file)
        .expect("saved")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "saved config holds secrets");
    let saved = std::fs::read_to_string(&file).expect("read saved");
    assert!(saved.contains("0123456789abcdef"), "secrets are saved");
    drop(a);
    drop(d);

    let d2 = Daemon::start_with_config(&saved, 3);
    let mut a2 = Admin::connect(&d2);
    assert_eq!(state(&mut a2), before, "state after restart");
    assert_eq!(comparable(&a2.saved()), comparable(&saved));
    let luns = a2.ok(json!({"cmd": "list_luns", "target": A}));
    assert_eq!(
        luns[1]["size_bytes"],
        24 << 20,
        "resized LUN restored at its new size"
    );
    // B's ACL came back with us in it.
    let mut s = Session::login(d2.portal, B, INITIATOR, 9);
    s.settle(0);
}

/// SIGHUP to the daemon that answers on `a`.
fn sighup(a: &mut Admin) {
    let pid = a.ok(json!({"cmd": "status"}))["pid"].as_i64().expect("pid");
    let pid = libc::pid_t::try_from(pid).expect("pid fits");
    // SAFETY: kill(2) has no memory effects; the pid is the daemon this
    // test started, which is still running (it answered just now).
    unsafe {
        libc::kill(pid, libc::SIGHUP);
    }
}

/// The admin's file: comments and a layout of their own.
fn commented() -> String {
    format!(
        "# Lab targets -- keep this comment\n\n\
         [iscsi]\nqueue_depth = 64 # tuned by hand\n\n\
         [[targets]]\niqn = \"{A}\" # first target\n\n\
         # LUN 0 of A\n[[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n\n\
         [[targets]]\niqn = \"{B}\"\n\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n"
    )
}

fn chap_user(a: &mut Admin, iqn: &str) -> Value {
    a.ok(json!({"cmd": "show_target", "target": iqn}))["chap"]["user"].clone()
}

fn acl(a: &mut Admin, iqn: &str) -> Value {
    a.ok(json!({"cmd": "show_target", "target": iqn}))["acl"].clone()
}

#[test]
fn live_changes_are_saved_and_survive_sighup_and_restart() {
    let d = Daemon::start_with_config(&commented(), 2);
    let file = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    let mut a = Admin::connect(&d);
    cli(
        &d,
        &["lun", "add", A, "5", "--backstore", "ram", "--size", "16M"],
    )
    .assert_success();
    cli(&d, &["acl", "add", B, INITIATOR]).assert_success();
    let secret = d.data_dir().parent().expect("scratch").join("secret");
    std::fs::write(&secret, "0123456789abcdef\n").expect("secret file");
    cli(
        &d,
        &[
            "chap",
            "set",
            "--target",
            A,
            "--user",
            "alice",
            "--secret-file",
            &secret.display().to_string(),
        ],
    )
    .assert_success();

    let text = std::fs::read_to_string(&file).expect("config file");
    for kept in [
        "# Lab targets -- keep this comment",
        "queue_depth = 64 # tuned by hand",
        &format!("iqn = \"{A}\" # first target"),
        "# LUN 0 of A",
    ] {
        assert!(text.contains(kept), "{kept:?} lost:\n{text}");
    }
    let doc: toml::Value = toml::from_str(&text).expect("saved file parses");
    let ta = &doc["targets"][0];
    let luns: Vec<i64> = ta["luns"]
        .as_array()
        .expect("luns")
        .iter()
        .filter_map(|l| l["id"].as_integer())
        .collect();
    assert_eq!(luns, [0, 5], "LUN 5 saved under A:\n{text}");
    assert_eq!(ta["chap"]["user"].as_str(), Some("alice"), "{text}");
    assert_eq!(
        doc["targets"][1]["acl"],
        toml::Value::from(vec![INITIATOR]),
        "{text}"
    );
    let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the file holds CHAP secrets");
    let status = a.ok(json!({"cmd": "status"}));
    assert_eq!(status["persist"], true);
    assert_eq!(status["unsaved_changes"], false);

    // SIGHUP re-applies the file, which holds the changes: nothing reverts.
    sighup(&mut a);
    eventually("SIGHUP handled", || {
        d.stderr().contains("SIGHUP: configuration re-applied")
    });
    assert!(
        d.stderr()
            .contains("SIGHUP: configuration re-applied changes=0"),
        "{}",
        d.stderr_tail(20)
    );
    assert_eq!(lun_ids(&mut a, A), [0, 5]);
    assert_eq!(acl(&mut a, B), json!([INITIATOR]));
    assert_eq!(chap_user(&mut a, A), "alice");

    // A restart on the same file keeps all three, and they are in force.
    drop(a);
    let text = std::fs::read_to_string(&file).expect("config file");
    let scratch = d.stop_keep_files();
    let d2 = Daemon::start_with(DaemonOptions {
        config: Some(text),
        targets: Some(2),
        scratch: Some(scratch),
        ..DaemonOptions::default()
    });
    let mut a2 = Admin::connect(&d2);
    assert_eq!(lun_ids(&mut a2, A), [0, 5]);
    assert_eq!(acl(&mut a2, B), json!([INITIATOR]));
    assert_eq!(chap_user(&mut a2, A), "alice");
    let mut s = Session::login(d2.portal, B, INITIATOR, 4);
    s.settle(0);
    let other = run_tool("iscsi-inq", &args![d2.url(B, 0)], TOOL_TIMEOUT);
    assert!(!other.success(), "B's ACL admits only {INITIATOR}: {other}");
    let plain = run_tool("iscsi-inq", &args![d2.url(A, 5)], TOOL_TIMEOUT);
    assert!(!plain.success(), "A asks for CHAP: {plain}");
    let with_chap = run_tool(
        "iscsi-inq",
        &args![d2.chap_url("alice", "0123456789abcdef", A, 5)],
        TOOL_TIMEOUT,
    );
    with_chap.assert_success();
}

#[test]
fn without_persistence_sighup_refuses_to_revert_live_changes() {
    let d = Daemon::start_with(DaemonOptions {
        config: Some(base()),
        targets: Some(2),
        args: vec!["--no-persist".into()],
        ..DaemonOptions::default()
    });
    let file = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    let before = std::fs::read_to_string(&file).expect("config file");
    let mut a = Admin::connect(&d);
    let status = a.ok(json!({"cmd": "status"}));
    assert_eq!(status["persist"], false);
    assert_eq!(status["unsaved_changes"], false);
    let r = a.ok(json!({"cmd": "add_lun", "target": A,
        "lun": {"id": 5, "backstore": "ram", "size": "16M"}}));
    assert!(
        r["not_saved"]
            .as_str()
            .is_some_and(|w| w.contains("persistence is off")),
        "{r}"
    );
    assert_eq!(std::fs::read_to_string(&file).expect("config file"), before);
    assert_eq!(a.ok(json!({"cmd": "status"}))["unsaved_changes"], true);
    let out = cli(&d, &["status"]);
    out.assert_success();
    assert!(
        out.stdout.contains("yes: the running state differs"),
        "{out}"
    );

    sighup(&mut a);
    eventually("SIGHUP refused", || {
        d.stderr().contains("SIGHUP: configuration not applied")
    });
    assert!(d.stderr().contains("--force"), "{}", d.stderr_tail(10));
    assert_eq!(lun_ids(&mut a, A), [0, 5], "SIGHUP must not revert LUN 5");
    let e = a.err(json!({"cmd": "config_reload"}));
    assert!(e.contains("--force"), "{e}");

    let r = a.ok(json!({"cmd": "config_reload", "force": true}));
    assert_eq!(r["changes"], json!([format!("target {A}: LUN 5 removed")]));
    assert_eq!(lun_ids(&mut a, A), [0]);
    assert_eq!(a.ok(json!({"cmd": "status"}))["unsaved_changes"], false);
}

/// (target name, unit serial, NAA designator) of LUN 0 of the only target:
/// the serial as libiscsi's iscsi-inq reads page 80h, the designator from
/// page 83h through the raw initiator.
fn identity_of(d: &Daemon) -> (String, String, Vec<u8>) {
    let url = d.urls.first().expect("a target URL").clone();
    let iqn = url.split('/').nth(3).expect("iqn in the URL").to_owned();
    let inq = run_tool(
        "iscsi-inq",
        &args!["-e", "1", "-c", "128", url],
        TOOL_TIMEOUT,
    );
    inq.assert_success();
    let serial = inq
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Unit Serial Number:["))
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("no serial in {inq}"))
        .to_owned();
    let mut s = Session::login(d.portal, &iqn, INITIATOR, 5);
    s.settle(0);
    let page = s
        .command(0, &[0x12, 0x01, 0x83, 0, 255, 0], 255, &[])
        .expect("session alive");
    assert!(page.is_good(), "INQUIRY page 83h");
    let mut at = 4;
    let mut naa = None;
    while let Some(head) = page.data.get(at..at + 4) {
        let len = usize::from(head[3]);
        // Logical unit association, designator type 3 (NAA).
        if head[1] & 0x3f == 0x03 {
            naa = page.data.get(at + 4..at + 4 + len).map(<[u8]>::to_vec);
        }
        at += 4 + len;
    }
    (iqn, serial, naa.expect("an NAA designator"))
}

#[test]
fn fresh_daemons_have_identities_of_their_own_and_keep_them() {
    let fresh = |scratch, args: &[&str]| {
        Daemon::start_with(DaemonOptions {
            fresh: true,
            scratch,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            ..DaemonOptions::default()
        })
    };
    let a = fresh(None, &[]);
    let b = fresh(None, &[]);
    let ia = identity_of(&a);
    let ib = identity_of(&b);
    assert!(ia.0.starts_with("iqn.2026-11.org.rustgt:"), "{ia:?}");
    assert_ne!(ia.0, ib.0, "target names");
    assert_ne!(ia.1, ib.1, "serials");
    assert_ne!(ia.2, ib.2, "NAA designators");
    assert_eq!(ia.2.len(), 16);
    assert_eq!(ia.2[0] >> 4, 6, "NAA 6h: {:02x?}", ia.2);
    let text = std::fs::read_to_string(a.data_dir().join("rustgt.toml")).expect("written");
    assert!(text.contains(&ia.0) && text.contains(&ia.1), "{text}");

    // A restart reads the file written at first start.
    let a = fresh(Some(a.stop_keep_files()), &[]);
    assert_eq!(identity_of(&a), ia);
    let b = fresh(Some(b.stop_keep_files()), &[]);
    assert_eq!(identity_of(&b), ib);

    // Without persistence nothing but a machine id is written, and the
    // identities derived from it are as stable.
    let c = fresh(None, &["--no-persist"]);
    let ic = identity_of(&c);
    assert!(!c.data_dir().join("rustgt.toml").exists());
    assert!(c.data_dir().join("machine-id").exists());
    assert!(
        c.stderr().contains("persistence off"),
        "{}",
        c.stderr_tail(20)
    );
    assert_ne!(ic.2, ia.2);
    let c = fresh(Some(c.stop_keep_files()), &["--no-persist"]);
    assert_eq!(identity_of(&c), ic);
}

#[test]
fn portal_and_target_changes_are_saved_as_configured() {
    let file_text = format!(
        "[[targets]]\niqn = \"{A}\"\nportals = [\"127.0.0.1:0\"] # any free port\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n\n\
         [[targets]]\niqn = \"{B}\"\nportals = [\"127.0.0.1:0\"]\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n"
    );
    let d = Daemon::start_with(DaemonOptions {
        config: Some(file_text),
        targets: Some(2),
        keep_portals: true,
        ..DaemonOptions::default()
    });
    let file = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    let mut a = Admin::connect(&d);
    a.ok(json!({"cmd": "add_portal", "target": A, "portal": "127.0.0.2:0"}));
    a.ok(
        json!({"cmd": "add_target", "target": {"iqn": C, "portals": ["127.0.0.1:0"],
        "luns": [{"id": 0, "backstore": "null", "size": "1G"}]}}),
    );
    a.ok(json!({"cmd": "remove_target", "target": B}));
    let text = std::fs::read_to_string(&file).expect("config file");
    let doc: toml::Value = toml::from_str(&text).expect("parses");
    let targets = doc["targets"].as_array().expect("targets");
    let names: Vec<&str> = targets.iter().filter_map(|t| t["iqn"].as_str()).collect();
    assert_eq!(names, [A, C], "{text}");
    // Port 0 stays port 0 in the file, whatever port it got.
    assert_eq!(
        targets[0]["portals"],
        toml::Value::from(vec!["127.0.0.1:0", "127.0.0.2:0"]),
        "{text}"
    );
    assert!(text.contains("# any free port"), "{text}");
    let lun = &targets[1]["luns"][0];
    assert!(
        lun["serial"].as_str().is_some(),
        "C's LUN got a serial: {text}"
    );
    assert!(
        lun["wwn"].as_str().is_some_and(|w| w.starts_with("naa.6")),
        "C's LUN got a wwn: {text}"
    );
    let wwn = lun["wwn"].clone();
    drop(a);
    let scratch = d.stop_keep_files();
    let d2 = Daemon::start_with(DaemonOptions {
        config: Some(text),
        targets: Some(2),
        keep_portals: true,
        scratch: Some(scratch),
        ..DaemonOptions::default()
    });
    let mut a2 = Admin::connect(&d2);
    let luns = a2.ok(json!({"cmd": "list_luns", "target": C}));
    assert_eq!(luns[0]["wwn"].as_str(), wwn.as_str(), "{luns}");
    assert_eq!(
        a2.ok(json!({"cmd": "show_target", "target": A}))["portals"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}
