//! CHAP (one-way and mutual), discovery CHAP and initiator ACLs, checked by
//! logging in with libiscsi's iscsi-inq / iscsi-ls.

mod common;

use common::{run_tool, Daemon, TOOL_TIMEOUT};

const CHAP_IQN: &str = "iqn.2026-11.org.rustgt:chap";
const MUTUAL_IQN: &str = "iqn.2026-11.org.rustgt:mutual";
const ACL_IQN: &str = "iqn.2026-11.org.rustgt:acl";
const USER: &str = "alice";
const SECRET: &str = "alice-secret-0123";
const TARGET_USER: &str = "rustgt-target";
const TARGET_SECRET: &str = "target-secret-4567";
const ALLOWED: &str = "iqn.2026-11.org.rustgt.test:allowed";
const DENIED: &str = "iqn.2026-11.org.rustgt.test:denied";

fn ram_lun() -> &'static str {
    "[[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n"
}

/// Three targets: one-way CHAP, mutual CHAP, ACL.
fn auth_config() -> String {
    format!(
        "[[targets]]\niqn = \"{CHAP_IQN}\"\n\
         chap = {{ user = \"{USER}\", secret = \"{SECRET}\" }}\n{lun}\
         [[targets]]\niqn = \"{MUTUAL_IQN}\"\n\
         chap = {{ user = \"{USER}\", secret = \"{SECRET}\", \
                  mutual_user = \"{TARGET_USER}\", mutual_secret = \"{TARGET_SECRET}\" }}\n{lun}\
         [[targets]]\niqn = \"{ACL_IQN}\"\nacl = [\"{ALLOWED}\"]\n{lun}",
        lun = ram_lun()
    )
}

fn inq(args: &[String]) -> common::ToolOutput {
    run_tool("iscsi-inq", args, TOOL_TIMEOUT)
}

/// Logged in and got a real INQUIRY answer.
fn assert_inquiry_ok(out: &common::ToolOutput) {
    out.assert_success();
    assert!(
        out.stdout.lines().any(|l| l.starts_with("Vendor:RUSTGT")),
        "no INQUIRY data: {out}"
    );
}

#[test]
fn chap_target_requires_the_right_secret() {
    let d = Daemon::start_with_config(&auth_config(), 3);
    // No credentials: the target demands CHAP, the login fails.
    inq(&args![d.url(CHAP_IQN, 0)]).assert_failure();
    // Right credentials.
    assert_inquiry_ok(&inq(&args![d.chap_url(USER, SECRET, CHAP_IQN, 0)]));
    // Wrong secret, and wrong user with the right secret.
    inq(&args![d.chap_url(USER, "wrong-secret-0000", CHAP_IQN, 0)]).assert_failure();
    inq(&args![d.chap_url("mallory", SECRET, CHAP_IQN, 0)]).assert_failure();
    // Credentials of one target do not open a target without CHAP rules
    // being bypassed: the ACL target still answers a plain login from an
    // allowed initiator only.
    assert_inquiry_ok(&inq(&args!["-i", ALLOWED, d.url(ACL_IQN, 0)]));
}

#[test]
fn mutual_chap_authenticates_the_target_too() {
    let d = Daemon::start_with_config(&auth_config(), 3);
    let base = d.chap_url(USER, SECRET, MUTUAL_IQN, 0);
    let good = format!("{base}?target_user={TARGET_USER}&target_password={TARGET_SECRET}");
    assert_inquiry_ok(&inq(&args![good]));
    // The initiator rejects a target that answers with another secret.
    let bad = format!("{base}?target_user={TARGET_USER}&target_password=not-the-target-secret");
    inq(&args![bad]).assert_failure();
    // Without credentials at all: refused.
    inq(&args![d.url(MUTUAL_IQN, 0)]).assert_failure();
}

#[test]
fn acl_refuses_initiators_not_listed() {
    let d = Daemon::start_with_config(&auth_config(), 3);
    assert_inquiry_ok(&inq(&args!["-i", ALLOWED, d.url(ACL_IQN, 0)]));
    inq(&args!["-i", DENIED, d.url(ACL_IQN, 0)]).assert_failure();
    // libiscsi's own default name is not listed either.
    inq(&args![d.url(ACL_IQN, 0)]).assert_failure();
}

#[test]
fn discovery_chap() {
    let config = format!(
        "[discovery.chap]\nuser = \"disco\"\nsecret = \"discovery-secret-89\"\n\
         [[targets]]\niqn = \"{CHAP_IQN}\"\n{}",
        ram_lun()
    );
    let d = Daemon::start_with_config(&config, 1);
    run_tool("iscsi-ls", &args![d.portal_url()], TOOL_TIMEOUT).assert_failure();
    let wrong = format!("iscsi://disco%wrong-secret-000@{}", d.portal);
    run_tool("iscsi-ls", &args![wrong], TOOL_TIMEOUT).assert_failure();
    let right = format!("iscsi://disco%discovery-secret-89@{}", d.portal);
    let out = run_tool("iscsi-ls", &args![right], TOOL_TIMEOUT);
    out.assert_success();
    assert!(
        out.stdout
            .contains(&format!("Target:{CHAP_IQN} Portal:{},1", d.portal)),
        "{out}"
    );
}
