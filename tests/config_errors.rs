//! A bad configuration stops the daemon before it listens: non-zero exit,
//! and stderr names the offending key and where it came from.

mod common;

use std::path::Path;

use common::{run_tool_env, ToolOutput, TOOL_TIMEOUT};

fn rustgt(args: &[String], env: &[(&str, &str)]) -> ToolOutput {
    run_tool_env(env!("CARGO_BIN_EXE_rustgt"), args, env, TOOL_TIMEOUT)
}

/// Starts rustgt with `body` as its config; asserts it fails naming `key`
/// and the file.
fn assert_rejected(body: &str, key: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, body).expect("write");
    let data = dir.path().join("data");
    let out = rustgt(
        &args![
            "--config",
            path.display(),
            "--data-dir",
            data.display(),
            "--listen",
            "127.0.0.1:0"
        ],
        &[],
    );
    out.assert_failure();
    assert!(out.stderr.contains(key), "stderr should name {key}: {out}");
    assert!(
        out.stderr.contains(&path.display().to_string()),
        "stderr should name the file: {out}"
    );
    assert!(
        !out.stdout.contains("listening on"),
        "must not serve: {out}"
    );
}

fn target(lun_extra: &str) -> String {
    format!(
        "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:t\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\n{lun_extra}\n"
    )
}

#[test]
fn misspelt_key() {
    assert_rejected("[iscsi]\nqueue_dept = 64\n", "iscsi.queue_dept");
}

#[test]
fn unsupported_block_size() {
    assert_rejected(
        &target("block_size = 1000"),
        "targets[0].luns[0].block_size",
    );
}

#[test]
fn malformed_target_name() {
    assert_rejected(
        &target("").replace("iqn.2026-11.org.rustgt:t", "my-target"),
        "targets[0].iqn",
    );
}

#[test]
fn first_burst_larger_than_max_burst() {
    assert_rejected(
        "[iscsi]\nfirst_burst_length = 2097152\nmax_burst_length = 1048576\n",
        "iscsi.first_burst_length",
    );
}

#[test]
fn short_chap_secret() {
    let body = target("").replace(
        "iqn = \"iqn.2026-11.org.rustgt:t\"\n",
        "iqn = \"iqn.2026-11.org.rustgt:t\"\nchap = { user = \"u\", secret = \"short\" }\n",
    );
    assert_rejected(&body, "targets[0].chap.secret");
}

#[test]
fn toml_syntax_error() {
    assert_rejected("[iscsi\nqueue_depth = 1\n", "TOML parse error");
}

#[test]
fn missing_config_file() {
    let path = Path::new("/nonexistent/rustgt-test/rustgt.toml");
    let out = rustgt(&args!["--config", path.display()], &[]);
    out.assert_failure();
    assert!(out.stderr.contains(&path.display().to_string()), "{out}");
}

#[test]
fn bad_environment_override_names_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = rustgt(
        &args!["--data-dir", data.display(), "--listen", "127.0.0.1:0"],
        &[("RUSTGT_ISCSI__QUEUE_DEPTH", "0")],
    );
    out.assert_failure();
    assert!(out.stderr.contains("RUSTGT_ISCSI__QUEUE_DEPTH"), "{out}");
    assert!(out.stderr.contains("iscsi.queue_depth"), "{out}");
}

#[test]
fn bad_listen_address_is_a_usage_error() {
    let out = rustgt(&args!["--listen", "127.0.0.1"], &[]);
    out.assert_failure();
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap usage errors exit 2: {out}"
    );
    assert!(out.stderr.contains("--listen"), "{out}");
}

#[test]
fn bad_readahead_io_settings_name_their_keys() {
    assert_rejected(
        &target("device_slice = \"sometimes\""),
        "targets[0].luns[0].device_slice",
    );
    assert_rejected(
        &target("readahead_io_threads = 0"),
        "targets[0].luns[0].readahead_io_threads",
    );
    assert_rejected(
        &target("readahead_io_max = \"1G\""),
        "targets[0].luns[0].readahead_io_max",
    );
}

fn rbd_lun(extra: &str) -> String {
    format!(
        "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:t\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"rbd\"\n{extra}\n"
    )
}

#[test]
fn rbd_lun_without_its_image() {
    assert_rejected(&rbd_lun(""), "targets[0].luns[0].rbd");
}

#[test]
fn rbd_lun_with_a_size_of_its_own() {
    assert_rejected(
        &rbd_lun("size = \"1G\"\n[targets.luns.rbd]\npool = \"rbd\"\nimage = \"a\""),
        "targets[0].luns[0].size",
    );
}

#[test]
fn rbd_image_name_with_a_slash() {
    assert_rejected(
        &rbd_lun("[targets.luns.rbd]\npool = \"rbd\"\nimage = \"a/b\""),
        "targets[0].luns[0].rbd.image",
    );
}

#[test]
fn rbd_timeout_out_of_range() {
    assert_rejected(
        &rbd_lun("[targets.luns.rbd]\npool = \"rbd\"\nimage = \"a\"\nop_timeout_secs = 0"),
        "targets[0].luns[0].rbd.op_timeout_secs",
    );
}

#[test]
fn rbd_table_on_another_backstore() {
    assert_rejected(
        &target("[targets.luns.rbd]\npool = \"rbd\"\nimage = \"a\""),
        "targets[0].luns[0].rbd",
    );
}

#[test]
fn alua_unknown_mode() {
    assert_rejected(&target("alua = \"sideways\""), "targets[0].luns[0].alua");
}

#[test]
fn explicit_alua_on_gateways_read_only() {
    // Explicit ALUA is accepted on gateways' LUNs; a read-only one still
    // cannot take part in their shared state.
    assert_rejected(
        "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:t\"\nport_groups = [1, 2]\n\
         [[targets.luns]]\nid = 0\nbackstore = \"rbd\"\nalua = \"explicit\"\n\
         read_only = true\n\
         [targets.luns.rbd]\npool = \"rbd\"\nimage = \"a\"\n",
        "targets[0].luns[0].read_only",
    );
}
