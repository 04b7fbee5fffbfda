//! Initiator groups (`[[targets.groups]]`): per-initiator LUN maps and
//! CHAP, checked over real sockets with libiscsi's iscsi-ls / iscsi-inq
//! and the project's raw initiator.

mod admin_common;
mod common;
use rustgt_test_initiator as initiator;

#[path = "common/pr.rs"]
mod pr;

use admin_common::{cli, Admin};
use common::{run_tool, Daemon, ToolOutput, TOOL_TIMEOUT};
use initiator::{Session, CHECK_CONDITION, GOOD, RESERVATION_CONFLICT};
use rustgt_iscsi::pdu::{TmfCode, TmfResult};
use serde_json::json;

const IQN: &str = "iqn.2026-11.org.rustgt:maps";
const CHAP_IQN: &str = "iqn.2026-11.org.rustgt:chapmaps";
const HOST_A: &str = "iqn.2026-11.org.rustgt.test:host-a";
/// Matches the `b*` pattern of group "b".
const HOST_B: &str = "iqn.2026-11.org.rustgt.test:b1";
/// Matches `b*` too, but is listed by name in group "exact".
const HOST_EXACT: &str = "iqn.2026-11.org.rustgt.test:bexact";
/// In the ACL, in no group: the target's own LUNs.
const PLAIN: &str = "iqn.2026-11.org.rustgt.test:plain";
/// In neither ACL nor group.
const STRANGER: &str = "iqn.2026-11.org.rustgt.test:stranger";
const CAROL: &str = "iqn.2026-11.org.rustgt.test:carol";
const DAVE: &str = "iqn.2026-11.org.rustgt.test:dave";
const EVE: &str = "iqn.2026-11.org.rustgt.test:eve";

const ALL_SECRET: &str = "everyone-secret-01";
const CAROL_SECRET: &str = "carol-secret-0123";
const DAVE_SECRET: &str = "dave-secret-45678";
const TARGET_SECRET: &str = "target-secret-999";

fn lun(id: u64, size: &str) -> String {
    format!("[[targets.luns]]\nid = {id}\nbackstore = \"ram\"\nsize = \"{size}\"\n")
}

/// Target `maps`: LUNs 0 (16M), 1 (32M), 2 (48M); host-a sees 2 as 0 and
/// 1 read-only as 3; `b*` sees 2 as 5; `bexact` (also matching `b*`) has
/// a group without a map. Target `chapmaps` (ACL: eve): CHAP for eve, carol
/// with one-way CHAP of her own, dave with mutual CHAP of his own.
fn config() -> String {
    format!(
        "[[targets]]\niqn = \"{IQN}\"\nacl = [\"{PLAIN}\"]\n\
         {l0}{l1}{l2}\
         [[targets.groups]]\nname = \"b\"\ninitiators = [\"iqn.2026-11.org.rustgt.test:b*\"]\n\
         luns = [{{ lun = 5, source = 2 }}]\n\
         [[targets.groups]]\nname = \"a\"\ninitiators = [\"{HOST_A}\"]\n\
         luns = [{{ lun = 0, source = 2 }}, {{ lun = 3, source = 1, read_only = true }}]\n\
         [[targets.groups]]\nname = \"exact\"\ninitiators = [\"{HOST_EXACT}\"]\n\
         [[targets]]\niqn = \"{CHAP_IQN}\"\nacl = [\"{EVE}\"]\n\
         chap = {{ user = \"all\", secret = \"{ALL_SECRET}\" }}\n{l0}\
         [[targets.groups]]\nname = \"carol\"\ninitiators = [\"{CAROL}\"]\n\
         chap = {{ user = \"carol\", secret = \"{CAROL_SECRET}\" }}\n\
         [[targets.groups]]\nname = \"dave\"\ninitiators = [\"{DAVE}\"]\n\
         chap = {{ user = \"dave\", secret = \"{DAVE_SECRET}\", mutual_user = \"maps\", \
                  mutual_secret = \"{TARGET_SECRET}\" }}\n",
        l0 = lun(0, "16M"),
        l1 = lun(1, "32M"),
        l2 = lun(2, "48M"),
    )
}

fn ls(initiator: &str, url: &str) -> ToolOutput {
    run_tool("iscsi-ls", &args!["-s", "-i", initiator, url], TOOL_TIMEOUT)
}

/// (LUN, size) of every `Lun:` line iscsi-ls printed for `iqn`; the
/// size as iscsi-ls shows it: the last LBA's offset in MiB, so "47M" for
/// a 48 MiB LUN.
fn luns_listed(out: &ToolOutput, iqn: &str) -> Vec<(u64, String)> {
    let mut mine = false;
    let mut found = Vec::new();
    for line in out.stdout.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("Target:") {
            mine = rest.split_whitespace().next() == Some(iqn);
        } else if mine {
            if let Some(rest) = l.strip_prefix("Lun:") {
                let n = rest.split_whitespace().next().and_then(|n| n.parse().ok());
                let size = rest
                    .split("Size:")
                    .nth(1)
                    .map(|s| s.trim_end_matches(')').trim().to_owned())
                    .unwrap_or_default();
                if let Some(n) = n {
                    found.push((n, size));
                }
            }
        }
    }
    found
}

/// `(lun, size)` pairs as [`luns_listed`] gives them.
fn sized(pairs: &[(u64, &str)]) -> Vec<(u64, String)> {
    pairs.iter().map(|(l, s)| (*l, (*s).to_owned())).collect()
}

#[test]
fn two_initiators_see_their_own_luns_and_numbers() {
    let d = Daemon::start_with_config(&config(), 2);
    let url = d.portal_url();
    let a = ls(HOST_A, &url);
    a.assert_success();
    assert_eq!(
        luns_listed(&a, IQN),
        sized(&[(0, "47M"), (3, "31M")]),
        "{a}"
    );
    let b = ls(HOST_B, &url);
    b.assert_success();
    assert_eq!(luns_listed(&b, IQN), sized(&[(5, "47M")]), "{b}");
    // An exact name wins over an earlier group's pattern: no map, the
    // target's own LUNs.
    let exact = ls(HOST_EXACT, &url);
    assert_eq!(
        luns_listed(&exact, IQN),
        sized(&[(0, "15M"), (1, "31M"), (2, "47M")]),
        "{exact}"
    );
    let plain = ls(PLAIN, &url);
    assert_eq!(
        luns_listed(&plain, IQN),
        sized(&[(0, "15M"), (1, "31M"), (2, "47M")]),
        "{plain}"
    );
    // Discovery lists the target only to initiators allowed to see it.
    let stranger = ls(STRANGER, &url);
    assert!(
        !stranger.stdout.contains(&format!("Target:{IQN}")),
        "{stranger}"
    );
    run_tool(
        "iscsi-inq",
        &args!["-i", STRANGER, d.url(IQN, 0)],
        TOOL_TIMEOUT,
    )
    .assert_failure();
}

fn isid(n: u8) -> [u8; 6] {
    [0x80, 0, 0, 0, 0x4d, n]
}

fn inquiry(s: &mut Session, lun: u64) -> initiator::CmdResult {
    s.command(lun, &[0x12, 0, 0, 0, 96, 0], &[], 96)
}

#[test]
fn an_unmapped_lun_answers_as_spc4_says() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut s = Session::login(d.portal, IQN, HOST_A, isid(1));
    // Target LUN 1 exists, but host-a does not map anything as LUN 1.
    let r = inquiry(&mut s, 1);
    assert_eq!(r.status, GOOD, "{r}");
    assert_eq!(r.data.first(), Some(&0x7f), "PQ 011b, type 1Fh: {r}");
    let r = inquiry(&mut s, 0);
    assert_eq!(r.data.first(), Some(&0x00), "a mapped LUN is a disk: {r}");
    for lun in [1u64, 2, 4] {
        let r = s.command(lun, &[0; 6], &[], 0);
        assert_eq!(r.status, CHECK_CONDITION, "TUR LUN {lun}: {r}");
        assert_eq!(r.sense_code(), Some((0x05, 0x25, 0x00)), "LUN {lun}: {r}");
    }
    // REPORT LUNS lists the mapped numbers only.
    let r = s.command(0, &[0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(r.status, GOOD, "{r}");
    let listed: Vec<u8> = r
        .data
        .chunks(8)
        .skip(1)
        .filter_map(|c| c.get(1).copied())
        .collect();
    assert_eq!(listed, [0, 3], "{r}");
    // REPORT LUNS answers through an unmapped LUN 0 too (group b).
    let mut b = Session::login(d.portal, IQN, HOST_B, isid(2));
    let r = b.command(0, &[0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(r.status, GOOD, "{r}");
    let listed: Vec<u8> = r
        .data
        .chunks(8)
        .skip(1)
        .filter_map(|c| c.get(1).copied())
        .collect();
    assert_eq!(listed, [5], "{r}");
    // libiscsi sees the same: iscsi-inq of host-a's LUN 1 reports no
    // device connected.
    let out = run_tool(
        "iscsi-inq",
        &args!["-i", HOST_A, d.url(IQN, 1)],
        TOOL_TIMEOUT,
    );
    assert!(
        !out.stdout.contains("Peripheral Qualifier:CONNECTED"),
        "{out}"
    );
    s.logout();
    b.logout();
}

fn write10(s: &mut Session, lun: u64, lba: u32, data: &[u8]) -> initiator::CmdResult {
    let blocks = u16::try_from(data.len() / 512).unwrap_or(1);
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2a;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    s.command(lun, &cdb, data, 0)
}

fn read10(s: &mut Session, lun: u64, lba: u32) -> initiator::CmdResult {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[8] = 1;
    s.command(lun, &cdb, &[], 512)
}

/// MODE SENSE(6) of all pages: the mode parameter header's WP bit.
fn write_protect_bit(s: &mut Session, lun: u64) -> bool {
    let r = s.command(lun, &[0x1a, 0x08, 0x3f, 0, 255, 0], &[], 255);
    assert_eq!(r.status, GOOD, "MODE SENSE LUN {lun}: {r}");
    r.data.get(2).is_some_and(|b| b & 0x80 != 0)
}

#[test]
fn a_read_only_mapping_refuses_writes_and_reports_wp() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(3));
    let block = [0x5au8; 512];
    let r = write10(&mut a, 3, 0, &block);
    assert_eq!(r.status, CHECK_CONDITION, "{r}");
    assert_eq!(r.sense_code(), Some((0x07, 0x27, 0x00)), "{r}");
    assert!(write_protect_bit(&mut a, 3));
    assert_eq!(read10(&mut a, 3, 0).status, GOOD);
    // The same unit is writable through a writable mapping (plain's LUN 1).
    let mut p = Session::login(d.portal, IQN, PLAIN, isid(4));
    assert!(!write_protect_bit(&mut p, 1));
    assert_eq!(write10(&mut p, 1, 0, &block).status, GOOD);
    let r = read10(&mut a, 3, 0);
    assert_eq!(r.data, block, "host-a reads what plain wrote");
    // host-a's LUN 0 is writable.
    assert!(!write_protect_bit(&mut a, 0));
    assert_eq!(write10(&mut a, 0, 0, &block).status, GOOD);
    a.logout();
    p.logout();
}

/// The same on a file LUN, whose writes go through io_uring or the
/// workers rather than the reactor.
#[test]
fn a_read_only_mapping_of_a_file_lun_refuses_writes() {
    let text = format!(
        "[[targets]]\niqn = \"{IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"file\"\npath = \"ro.img\"\nsize = \"16M\"\n\
         [[targets.groups]]\nname = \"ro\"\ninitiators = [\"{HOST_A}\"]\n\
         luns = [{{ lun = 4, source = 0, read_only = true }}]\n"
    );
    let d = Daemon::start_with_config(&text, 1);
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(14));
    let block = [0xa5u8; 512];
    for cdb in [
        [0x2a, 0, 0, 0, 0, 8, 0, 0, 1, 0], // WRITE(10)
        [0x2e, 0, 0, 0, 0, 8, 0, 0, 1, 0], // WRITE AND VERIFY(10)
    ] {
        let r = a.command(4, &cdb, &block, 0);
        assert_eq!(r.sense_code(), Some((0x07, 0x27, 0x00)), "{r}");
    }
    assert!(write_protect_bit(&mut a, 4));
    let mut p = Session::login(d.portal, IQN, PLAIN, isid(15));
    assert_eq!(write10(&mut p, 0, 8, &block).status, GOOD);
    assert_eq!(read10(&mut a, 4, 8).data, block);
    a.logout();
    p.logout();
}

#[test]
fn a_reservation_through_one_mapping_holds_through_another() {
    let d = Daemon::start_with_config(&config(), 2);
    // host-a sees target LUN 2 as LUN 0 (pr.rs works on LUN 0).
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(5));
    let mut p = Session::login(d.portal, IQN, PLAIN, isid(6));
    let mut b = Session::login(d.portal, IQN, HOST_B, isid(7));
    let key = 0xa11ce;
    assert_eq!(
        pr::pr_out(&mut a, pr::REGISTER, 0, 0, key, false).status,
        GOOD
    );
    assert_eq!(
        pr::pr_out(&mut a, pr::RESERVE, pr::WRITE_EXCLUSIVE, key, 0, false).status,
        GOOD
    );
    assert_eq!(
        pr::read_reservation(&mut a),
        Some((key, pr::WRITE_EXCLUSIVE))
    );
    let block = [0x11u8; 512];
    // plain sees it as LUN 2, b as LUN 5: the same unit, reserved.
    for (s, lun) in [(&mut p, 2u64), (&mut b, 5u64)] {
        let r = write10(s, lun, 0, &block);
        assert_eq!(r.status, RESERVATION_CONFLICT, "LUN {lun}: {r}");
        assert_eq!(read10(s, lun, 0).status, GOOD, "reads are allowed");
    }
    // Other units are not reserved.
    assert_eq!(write10(&mut p, 0, 0, &block).status, GOOD);
    assert_eq!(
        write10(&mut a, 0, 0, &block).status,
        GOOD,
        "the holder writes"
    );
    a.logout();
    p.logout();
    b.logout();
}

/// A LOGICAL UNIT RESET through host-a's LUN 0 (the target's LUN 2)
/// resets the one unit: plain and b find its unit attention under their
/// own numbers for it (2 and 5), and nothing on other units; a TMF to an
/// unmapped LUN answers that the LUN does not exist.
#[test]
fn unit_attentions_follow_the_map() {
    let d = Daemon::start_with_config(&config(), 2);
    let mut a = Session::login(d.portal, IQN, HOST_A, isid(11));
    let mut p = Session::login(d.portal, IQN, PLAIN, isid(12));
    let mut b = Session::login(d.portal, IQN, HOST_B, isid(13));
    // Every nexus is known to the target once it has sent a command.
    for lun in [2u64, 1] {
        assert_eq!(p.command(lun, &[0; 6], &[], 0).status, GOOD);
    }
    assert_eq!(b.command(5, &[0; 6], &[], 0).status, GOOD);
    let (resp, _) = a.task_mgmt(TmfCode::LOGICAL_UNIT_RESET, 0, (0, 0));
    assert_eq!(resp, TmfResult::COMPLETE);
    for (s, lun) in [(&mut p, 2u64), (&mut b, 5)] {
        let r = s.command(lun, &[0; 6], &[], 0);
        assert_eq!(r.status, CHECK_CONDITION, "LUN {lun}: {r}");
        assert_eq!(r.sense_code(), Some((0x06, 0x29, 0x03)), "LUN {lun}: {r}");
        assert_eq!(s.command(lun, &[0; 6], &[], 0).status, GOOD);
    }
    assert_eq!(p.command(1, &[0; 6], &[], 0).status, GOOD, "another unit");
    let (resp, _) = a.task_mgmt(TmfCode::LOGICAL_UNIT_RESET, 1, (0, 0));
    assert_eq!(resp, TmfResult::LUN_DOES_NOT_EXIST, "unmapped LUN 1");
    a.logout();
    p.logout();
    b.logout();
}

fn inq_ok(url: &str, initiator: &str) -> bool {
    let out = run_tool("iscsi-inq", &args!["-i", initiator, url], TOOL_TIMEOUT);
    out.success() && out.stdout.lines().any(|l| l.starts_with("Vendor:RUSTGT"))
}

#[test]
fn an_initiators_own_chap_wins_over_the_targets() {
    let d = Daemon::start_with_config(&config(), 2);
    let url = |user: &str, secret: &str| d.chap_url(user, secret, CHAP_IQN, 0);
    // Everyone else: the target's CHAP.
    assert!(inq_ok(&url("all", ALL_SECRET), EVE));
    assert!(!inq_ok(&url("all", "wrong-secret-0000"), EVE));
    assert!(!inq_ok(&url("carol", CAROL_SECRET), EVE));
    // carol: her own one-way CHAP, not the target's.
    assert!(inq_ok(&url("carol", CAROL_SECRET), CAROL));
    assert!(!inq_ok(&url("carol", "wrong-secret-0000"), CAROL));
    assert!(!inq_ok(&url("all", ALL_SECRET), CAROL));
    assert!(!inq_ok(&d.url(CHAP_IQN, 0), CAROL), "no credentials");
    // dave: mutual CHAP of his own.
    let mutual = |secret: &str, target_secret: &str| {
        format!(
            "{}?target_user=maps&target_password={target_secret}",
            url("dave", secret)
        )
    };
    assert!(inq_ok(&mutual(DAVE_SECRET, TARGET_SECRET), DAVE));
    assert!(
        !inq_ok(&mutual(DAVE_SECRET, "not-the-target-secret"), DAVE),
        "the initiator refuses a target that proves another secret"
    );
    assert!(!inq_ok(&mutual("wrong-secret-0000", TARGET_SECRET), DAVE));
    assert!(!inq_ok(&url("all", ALL_SECRET), DAVE));
}

/// `[[discovery.groups]]`: carol discovers with her own CHAP, everyone
/// else with `[discovery.chap]`.
#[test]
fn discovery_chap_per_initiator() {
    let text = format!(
        "[discovery]\nchap = {{ user = \"disco\", secret = \"{ALL_SECRET}\" }}\n\
         [[discovery.groups]]\nname = \"carol\"\ninitiators = [\"{CAROL}\"]\n\
         chap = {{ user = \"carol\", secret = \"{CAROL_SECRET}\" }}\n{}",
        config()
    );
    let d = Daemon::start_with_config(&text, 2);
    let disco = |user: &str, secret: &str, initiator: &str| {
        let url = format!("iscsi://{user}%{secret}@{}", d.portal);
        run_tool("iscsi-ls", &args!["-i", initiator, url], TOOL_TIMEOUT)
    };
    // carol may see `chapmaps`, plain `maps`: a discovery that got in
    // lists one target.
    let listed = |out: &ToolOutput| out.success() && out.stdout.contains("Target:");
    let carol = disco("carol", CAROL_SECRET, CAROL);
    assert!(
        listed(&carol) && carol.stdout.contains(&format!("Target:{CHAP_IQN}")),
        "{carol}"
    );
    assert!(!listed(&disco("carol", "wrong-secret-0000", CAROL)));
    assert!(
        !listed(&disco("disco", ALL_SECRET, CAROL)),
        "the shared secret does not let carol in"
    );
    let plain = disco("disco", ALL_SECRET, PLAIN);
    assert!(
        listed(&plain) && plain.stdout.contains(&format!("Target:{IQN}")),
        "{plain}"
    );
    assert!(!listed(&disco("carol", CAROL_SECRET, PLAIN)));
}

#[test]
fn live_group_changes_are_applied_and_saved() {
    let d = Daemon::start_with_config(&config(), 2);
    let file = d.data_dir().parent().expect("scratch").join("rustgt.toml");
    let mut admin = Admin::connect(&d);
    let url = d.portal_url();
    assert!(luns_listed(&ls(STRANGER, &url), IQN).is_empty());
    // A session of plain, logged in before the change.
    let mut p = Session::login(d.portal, IQN, PLAIN, isid(8));
    assert_eq!(p.command(1, &[0; 6], &[], 0).status, GOOD);

    admin.ok(json!({
        "cmd": "group_add",
        "target": IQN,
        "group": {
            "name": "newcomers",
            "initiators": [STRANGER, PLAIN],
            "luns": [{ "lun": 9, "source": 0 }],
        },
    }));
    let out = ls(STRANGER, &url);
    assert_eq!(luns_listed(&out, IQN), sized(&[(9, "15M")]), "{out}");
    let text = std::fs::read_to_string(&file).expect("config file");
    let doc: toml::Value = toml::from_str(&text).expect("saved file parses");
    let groups = doc["targets"][0]["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 4, "{text}");
    assert_eq!(groups[3]["name"].as_str(), Some("newcomers"), "{text}");
    assert_eq!(groups[3]["luns"][0]["lun"].as_integer(), Some(9), "{text}");
    // Errors name the key; nothing changes.
    let err = admin.err(json!({
        "cmd": "group_add",
        "target": IQN,
        "group": { "name": "bad", "initiators": [EVE], "luns": [{ "lun": 0, "source": 7 }] },
    }));
    assert!(err.contains("groups[4].luns[0].source"), "{err}");
    let err = admin.err(json!({
        "cmd": "group_add",
        "target": IQN,
        "group": { "name": "NEWCOMERS", "initiators": [EVE] },
    }));
    assert!(err.contains("already exists"), "{err}");
    // A LUN a group maps cannot be removed while the mapping stays.
    let err = admin.err(json!({"cmd": "remove_lun", "target": IQN, "lun": 2, "force": true}));
    assert!(err.contains("groups[0].luns[0].source"), "{err}");
    // The CLI shows the groups.
    let shown = cli(&d, &["group", "list", IQN]);
    shown.assert_success();
    assert!(
        shown.stdout.contains("group newcomers") && shown.stdout.contains("lun 9"),
        "{shown}"
    );
    let json_out = cli(&d, &["--json", "group", "list", IQN]);
    json_out.assert_success();
    let listed: serde_json::Value = serde_json::from_str(&json_out.stdout).expect("JSON");
    assert_eq!(listed[3]["name"], "newcomers", "{json_out}");
    assert_eq!(listed[3]["luns"][0]["source"], 0, "{json_out}");
    assert!(
        listed[1]["chap"].is_null() && !json_out.stdout.contains("secret"),
        "{json_out}"
    );
    // plain's session had the target's map: it is asked to log out; a
    // new login sees the new one.
    admin_common::eventually("plain's session asked to log out", || {
        d.stderr()
            .lines()
            .any(|l| l.contains("LUN map changed; session asked to log out") && l.contains(PLAIN))
    });
    let mut q = Session::login(d.portal, IQN, PLAIN, isid(9));
    let r = q.command(9, &[0; 6], &[], 0);
    assert_eq!(r.status, GOOD, "plain's new session sees LUN 9: {r}");
    drop(p);
    q.logout();

    cli(&d, &["group", "remove", IQN, "newcomers"]).assert_success();
    assert!(luns_listed(&ls(STRANGER, &url), IQN).is_empty());
    let text = std::fs::read_to_string(&file).expect("config file");
    assert!(!text.contains("newcomers"), "{text}");
    let doc: toml::Value = toml::from_str(&text).expect("saved file parses");
    assert_eq!(
        doc["targets"][0]["groups"].as_array().map(Vec::len),
        Some(3),
        "{text}"
    );
    // Added through the CLI, with a read-only mapping.
    cli(
        &d,
        &[
            "group",
            "add",
            IQN,
            "cli",
            "--initiator",
            STRANGER,
            "--lun",
            "4=1:ro",
        ],
    )
    .assert_success();
    let out = ls(STRANGER, &url);
    assert_eq!(luns_listed(&out, IQN), sized(&[(4, "31M")]), "{out}");
    let mut s = Session::login(d.portal, IQN, STRANGER, isid(10));
    assert!(write_protect_bit(&mut s, 4));
    s.logout();
    let text = std::fs::read_to_string(&file).expect("config file");
    assert!(text.contains("read_only = true"), "{text}");
}
