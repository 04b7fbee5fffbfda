//! Black-box tests of `rustgt admin ls`, `lun set` and `target set`
//! against a live daemon: the tree (text and JSON) shows targets,
//! portals, LUNs, ACL and sessions as they are; `lun set` of a live key
//! is applied (read_only: the initiator's next WRITE fails with DATA
//! PROTECT), saved to the daemon's file with its comments, and survives
//! SIGHUP and a restart; keys that cannot change live are refused by name
//! and change nothing.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

use admin_common::{cli, eventually, Admin, Session, REPORTED_LUNS_CHANGED};
use common::{Daemon, DaemonOptions};
use serde_json::{json, Value};

const A: &str = "iqn.2026-11.org.rustgt:ls-a";
const B: &str = "iqn.2026-11.org.rustgt:ls-b";
const INITIATOR: &str = "iqn.2026-11.org.rustgt:ls-test";
const OTHER: &str = "iqn.2026-11.org.rustgt:ls-other";

/// A: a file LUN and a ram LUN; B: a ram LUN and an ACL.
fn config() -> String {
    format!(
        "# Lab file -- keep this comment\n\
         [[targets]]\niqn = \"{A}\"\nalias = \"lab a\"\n\n\
         # LUN 0 of A\n[[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"a0.img\"\nsize = \"16M\"\n\n\
         [[targets.luns]]\nid = 1\nbackstore = \"ram\"\nsize = \"8M\"\n\n\
         [[targets]]\niqn = \"{B}\"\nacl = [\"{OTHER}\"]\n\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"4M\"\n"
    )
}

fn config_file(d: &Daemon) -> std::path::PathBuf {
    d.data_dir().parent().expect("scratch").join("rustgt.toml")
}

fn lun(a: &mut Admin, iqn: &str, id: u64) -> Value {
    a.ok(json!({"cmd": "list_luns", "target": iqn}))
        .as_array()
        .expect("array")
        .iter()
        .find(|l| l["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{iqn} has no LUN {id}"))
}

fn sighup(a: &mut Admin) {
    let pid = a.ok(json!({"cmd": "status"}))["pid"].as_i64().expect("pid");
    let pid = libc::pid_t::try_from(pid).expect("pid fits");
    // SAFETY: kill(2) has no memory effects; the pid is the daemon this
    // test started, which is still running (it answered just now).
    unsafe {
        libc::kill(pid, libc::SIGHUP);
    }
}

#[test]
fn ls_shows_targets_portals_luns_acls_and_sessions() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut s = Session::login(d.portal, A, INITIATOR, 1);
    s.settle(0);

    let out = cli(&d, &["ls"]);
    out.assert_success();
    let text = &out.stdout;
    let portal = d.portal.to_string();
    for want in [
        "targets (2)",
        &format!("{A} [tpgt 1, alias \"lab a\"]"),
        &format!("{B} [tpgt 1]"),
        "LUN 0 [file 16M, 512-byte blocks, rw thin wce]",
        "LUN 1 [ram 8M",
        "LUN 0 [ram 4M",
        "any initiator",
        OTHER,
        "sessions (1)",
        INITIATOR,
        &portal,
        "portals (1)",
        &format!("{portal} [2 target(s), 1 connection(s)]"),
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // The session hangs under A, not B: it comes before B's line.
    let (at_session, at_b) = (
        text.find(INITIATOR).expect("session"),
        text.find(&format!("{B} [")).expect("B"),
    );
    assert!(at_session < at_b, "the session belongs to A:\n{text}");

    let out = cli(&d, &["--json", "ls"]);
    out.assert_success();
    let v: Value = serde_json::from_str(&out.stdout).expect("ls --json is JSON");
    assert_eq!(v["status"]["targets"], 2, "{v}");
    let targets = v["targets"].as_array().expect("targets");
    let iqns: Vec<&str> = targets.iter().filter_map(|t| t["iqn"].as_str()).collect();
    assert_eq!(iqns, [A, B]);
    let ta = &targets[0];
    let luns: Vec<(u64, &str)> = ta["luns"]
        .as_array()
        .expect("luns")
        .iter()
        .map(|l| {
            (
                l["id"].as_u64().expect("id"),
                l["backstore"].as_str().expect("backstore"),
            )
        })
        .collect();
    assert_eq!(luns, [(0, "file"), (1, "ram")]);
    assert_eq!(ta["sessions"][0]["initiator"], INITIATOR);
    assert_eq!(ta["sessions"][0]["connections"][0]["local"], portal);
    assert_eq!(targets[1]["acl"], json!([OTHER]));
    assert_eq!(targets[1]["sessions"], json!([]));
    assert_eq!(v["portals"][0]["address"], portal);
    assert_eq!(v["portals"][0]["connections"], 1);
    assert!(s.ping());
}

#[test]
fn lun_set_applies_live_keys_saves_them_and_they_survive_sighup_and_restart() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut a = Admin::connect(&d);
    let mut s = Session::login(d.portal, A, INITIATOR, 2);
    s.settle(0);
    let data = vec![0x5au8; 4096];
    assert!(s.write(0, 8, &data).is_good());

    // In place: the session carries on, no unit attention.
    let out = cli(&d, &["lun", "set", A, "0", "readahead=streams"]);
    out.assert_success();
    assert!(
        out.stdout
            .contains(&format!("target {A}: LUN 0 readahead set to streams")),
        "{out}"
    );
    assert_eq!(lun(&mut a, A, 0)["readahead"], "streams");
    assert!(s.test_unit_ready(0).expect("alive").is_good());

    // read_only replaces the LUN: refused while A has a session...
    let refused = cli(&d, &["lun", "set", A, "0", "read_only=true"]);
    assert_eq!(refused.status.code(), Some(1), "{refused}");
    assert!(
        refused.stderr.contains("--force") && refused.stderr.contains(INITIATOR),
        "{refused}"
    );
    assert_eq!(lun(&mut a, A, 0)["read_only"], false);
    // ... done with --force: the initiator is told, then WRITE fails
    // with DATA PROTECT / WRITE PROTECTED and the data is still there.
    let out = cli(&d, &["lun", "set", A, "0", "read_only=true", "--force"]);
    out.assert_success();
    assert!(out.stdout.contains("saved to"), "{out}");
    assert_eq!(lun(&mut a, A, 0)["read_only"], true);
    let tur = s.test_unit_ready(0).expect("alive");
    assert_eq!(tur.sense_code(), Some(REPORTED_LUNS_CHANGED), "{tur:?}");
    s.settle(0);
    let w = s.write(0, 8, &data);
    assert_eq!(
        w.sense_code().map(|(key, asc, _)| (key, asc)),
        Some((0x07, 0x27)),
        "WRITE to a read-only LUN: {w:?}"
    );
    let r = s.read(0, 8, 8);
    assert!(r.is_good() && r.data == data, "{r:?}");

    // Saved, with the admin's comments kept.
    let file = config_file(&d);
    let text = std::fs::read_to_string(&file).expect("config file");
    assert!(text.contains("# Lab file -- keep this comment"), "{text}");
    assert!(text.contains("# LUN 0 of A"), "{text}");
    let doc: toml::Value = toml::from_str(&text).expect("saved file parses");
    let l0 = &doc["targets"][0]["luns"][0];
    assert_eq!(l0["read_only"].as_bool(), Some(true), "{text}");
    assert_eq!(l0["readahead"].as_str(), Some("streams"), "{text}");

    // target set: alias and ACL, live and saved.
    let out = cli(
        &d,
        &[
            "target",
            "set",
            B,
            "alias=lab b",
            &format!("acl={OTHER},{INITIATOR}"),
        ],
    );
    out.assert_success();
    let tb = a.ok(json!({"cmd": "show_target", "target": B}));
    assert_eq!(tb["alias"], "lab b");
    assert_eq!(tb["acl"], json!([OTHER, INITIATOR]));
    let mut sb = Session::login(d.portal, B, INITIATOR, 3);
    sb.settle(0);

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
    assert_eq!(lun(&mut a, A, 0)["read_only"], true);
    assert_eq!(lun(&mut a, A, 0)["readahead"], "streams");

    // A restart on the same file keeps them.
    drop((a, s, sb));
    let text = std::fs::read_to_string(&file).expect("config file");
    let scratch = d.stop_keep_files();
    let d2 = Daemon::start_with(DaemonOptions {
        config: Some(text),
        targets: Some(2),
        scratch: Some(scratch),
        ..DaemonOptions::default()
    });
    let mut a2 = Admin::connect(&d2);
    assert_eq!(lun(&mut a2, A, 0)["read_only"], true);
    assert_eq!(lun(&mut a2, A, 0)["readahead"], "streams");
    assert_eq!(
        a2.ok(json!({"cmd": "show_target", "target": B}))["alias"],
        "lab b"
    );
    let mut s2 = Session::login(d2.portal, A, INITIATOR, 4);
    s2.settle(0);
    let w = s2.write(0, 8, &data);
    assert_eq!(
        w.sense_code().map(|(k, asc, _)| (k, asc)),
        Some((0x07, 0x27))
    );
    // Back to writable, by the same command.
    cli(&d2, &["lun", "set", A, "0", "read_only=", "--force"]).assert_success();
    s2.settle(0);
    assert!(s2.write(0, 8, &data).is_good());
}

#[test]
fn keys_that_cannot_change_live_are_refused_by_name() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut a = Admin::connect(&d);
    let saved = a.saved();
    let file_before = std::fs::read_to_string(config_file(&d)).expect("config file");
    for (args, named) in [
        (
            vec!["lun", "set", A, "0", "serial=NEW1"],
            "serial cannot be changed live",
        ),
        (
            vec!["lun", "set", A, "0", "path=b.img"],
            "path cannot be changed live",
        ),
        (
            vec!["lun", "set", A, "0", "block_size=4096"],
            "block_size cannot be changed live",
        ),
        (
            vec!["lun", "set", A, "0", "fault="],
            "fault cannot be changed live",
        ),
        (
            vec!["lun", "set", A, "0", "bogus=1"],
            "unknown key \"bogus\"",
        ),
        (
            vec!["lun", "set", A, "0", "read_only=yes"],
            "read_only = \"yes\"",
        ),
        (vec!["lun", "set", A, "0", "readahead=fast"], "readahead"),
        // A ram LUN would lose its data to the replacement.
        (
            vec!["lun", "set", A, "1", "write_cache=false"],
            "data would be lost",
        ),
        (vec!["lun", "set", A, "9", "readahead=none"], "no LUN 9"),
        (
            vec!["target", "set", A, "chap=x"],
            "chap cannot be changed live",
        ),
        (
            vec!["target", "set", A, "iqn=iqn.2026-11.org.rustgt:x"],
            "iqn cannot be changed live",
        ),
        (
            vec!["target", "set", A, "port_groups=1,2"],
            "port_groups cannot be changed live",
        ),
        (vec!["target", "set", A, "tpgt=0x10000"], "tpgt"),
    ] {
        let out = cli(&d, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out}");
        assert!(
            out.stderr.contains(named),
            "{args:?}: want {named:?}: {out}"
        );
    }
    // Not KEY=VALUE at all: a usage error from the command line.
    let out = cli(&d, &["lun", "set", A, "0", "read_only"]);
    assert_eq!(out.status.code(), Some(2), "{out}");
    assert!(out.stderr.contains("KEY=VALUE"), "{out}");
    assert_eq!(a.saved(), saved, "refusals change nothing");
    assert_eq!(
        std::fs::read_to_string(config_file(&d)).expect("config file"),
        file_before,
        "refusals write nothing"
    );
}
