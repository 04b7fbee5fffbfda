//! Discovery and identification seen by libiscsi's tools: iscsi-ls
//! (SendTargets), iscsi-inq (INQUIRY and VPD pages), iscsi-readcapacity16.

mod common;

use common::{run_tool, Daemon, DaemonOptions, DEFAULT_IQN, TOOL_TIMEOUT};

fn tool(program: &str, args: &[String]) -> common::ToolOutput {
    let out = run_tool(program, args, TOOL_TIMEOUT);
    out.assert_success();
    out
}

/// The value after `key:` on the first line that starts with `key:`.
fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

#[test]
fn sendtargets_lists_the_default_target_and_its_portal() {
    let d = Daemon::start();
    let out = tool("iscsi-ls", &args![d.portal_url()]);
    let want = format!("Target:{DEFAULT_IQN} Portal:{},1", d.portal);
    assert!(
        out.stdout.lines().any(|l| l.trim() == want),
        "expected {want:?} in:\n{out}"
    );
    let urls = tool("iscsi-ls", &args!["--url", d.portal_url()]);
    assert!(
        urls.stdout
            .contains(&format!("iscsi://{}/{DEFAULT_IQN}/", d.portal)),
        "{urls}"
    );
}

#[test]
fn sendtargets_with_luns_shows_a_disk() {
    let d = Daemon::start();
    let out = tool("iscsi-ls", &args!["-s", d.portal_url()]);
    let lun0 = out
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("Lun:0"))
        .unwrap_or_else(|| panic!("no Lun:0 line: {out}"));
    assert!(lun0.contains("DIRECT_ACCESS"), "{lun0}");
}

#[test]
fn daemon_prints_its_url_and_iscsiadm_hint() {
    let d = Daemon::start();
    assert_eq!(d.urls, vec![d.url(DEFAULT_IQN, 0)]);
    let hint = format!(
        "rustgt: iscsiadm -m discovery -t st -p {p} && iscsiadm -m node -T {DEFAULT_IQN} -p {p} --login",
        p = d.portal
    );
    assert!(d.stdout.contains(&hint), "{:?}", d.stdout);
    let listening = format!("rustgt: listening on {}", d.portal);
    let order: Vec<usize> = [
        listening.as_str(),
        &format!("rustgt: {}", d.url(DEFAULT_IQN, 0)),
        &hint,
    ]
    .iter()
    .map(|l| d.stdout.iter().position(|s| s == l).unwrap_or(usize::MAX))
    .collect();
    assert_eq!(
        order,
        vec![0, 1, 2],
        "startup lines out of order: {:?}",
        d.stdout
    );
}

#[test]
fn standard_inquiry_identifies_rustgt_disk() {
    let d = Daemon::start();
    let out = tool("iscsi-inq", &args![d.url(DEFAULT_IQN, 0)]);
    assert_eq!(field(&out.stdout, "Vendor"), Some("RUSTGT"), "{out}");
    assert_eq!(
        field(&out.stdout, "Peripheral Device Type"),
        Some("DIRECT_ACCESS"),
        "{out}"
    );
    assert_eq!(
        field(&out.stdout, "Peripheral Qualifier"),
        Some("CONNECTED"),
        "{out}"
    );
}

#[test]
fn vpd_pages_serial_and_identification() {
    let d = Daemon::start();
    let url = d.url(DEFAULT_IQN, 0);
    // iscsi-inq takes the page code in decimal: 0 = supported pages.
    let pages = tool("iscsi-inq", &args!["-e", 1, "-c", 0, &url]);
    for page in ["Page:0x80", "Page:0x83"] {
        assert!(
            pages.stdout.lines().any(|l| l.starts_with(page)),
            "{page} missing: {pages}"
        );
    }
    let serial = tool("iscsi-inq", &args!["-e", 1, "-c", 0x80, &url]);
    let value = field(&serial.stdout, "Unit Serial Number")
        .unwrap_or_else(|| panic!("no serial: {serial}"));
    let inner = value.trim_start_matches('[').trim_end_matches(']').trim();
    assert!(!inner.is_empty(), "empty serial: {serial}");
    // The same LUN reports the same serial every time: generated once and
    // saved with the LUN in the daemon's configuration file.
    let again = tool("iscsi-inq", &args!["-e", 1, "-c", 0x80, &url]);
    assert_eq!(field(&again.stdout, "Unit Serial Number"), Some(value));
    let saved = std::fs::read_to_string(d.data_dir().join("rustgt.toml")).expect("config file");
    assert!(
        saved.contains(&format!("serial = \"{inner}\"")),
        "serial {inner} not saved:\n{saved}"
    );

    let ident = tool("iscsi-inq", &args!["-e", 1, "-c", 0x83, &url]);
    assert!(
        ident.stdout.contains("DEVICE DESIGNATOR #0"),
        "no designator: {ident}"
    );
}

#[test]
fn configured_serial_is_reported() {
    let config = format!(
        "[[targets]]\niqn = \"{DEFAULT_IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"16M\"\nserial = \"RUSTGTSERIAL42\"\n"
    );
    let d = Daemon::start_with_config(&config, 1);
    let out = tool(
        "iscsi-inq",
        &args!["-e", 1, "-c", 0x80, d.url(DEFAULT_IQN, 0)],
    );
    let value = field(&out.stdout, "Unit Serial Number").unwrap_or_default();
    assert_eq!(
        value.trim_matches(|c| c == '[' || c == ']').trim(),
        "RUSTGTSERIAL42",
        "{out}"
    );
}

#[test]
fn read_capacity_16_reports_one_gib_of_512_byte_blocks() {
    let d = Daemon::start();
    let out = tool("iscsi-readcapacity16", &args![d.url(DEFAULT_IQN, 0)]);
    assert_eq!(
        field(&out.stdout, "RETURNED LOGICAL BLOCK ADDRESS"),
        Some("2097151"),
        "{out}"
    );
    assert_eq!(
        field(&out.stdout, "LOGICAL BLOCK LENGTH IN BYTES"),
        Some("512"),
        "{out}"
    );
    assert_eq!(
        field(&out.stdout, "Total size"),
        Some("1073741824"),
        "{out}"
    );
}

#[test]
fn read_capacity_16_of_a_4k_ram_lun() {
    let config = format!(
        "[[targets]]\niqn = \"{DEFAULT_IQN}\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"64M\"\nblock_size = 4096\n"
    );
    let d = Daemon::start_with_config(&config, 1);
    let out = tool("iscsi-readcapacity16", &args![d.url(DEFAULT_IQN, 0)]);
    assert_eq!(
        field(&out.stdout, "LOGICAL BLOCK LENGTH IN BYTES"),
        Some("4096"),
        "{out}"
    );
    assert_eq!(
        field(&out.stdout, "RETURNED LOGICAL BLOCK ADDRESS"),
        Some("16383"),
        "{out}"
    );
    assert_eq!(field(&out.stdout, "Total size"), Some("67108864"), "{out}");
}

/// A log that goes to a pipe (or a file) is plain text: no ANSI colour
/// escapes, which would litter a log file or a journal.
#[test]
fn daemon_log_to_a_pipe_has_no_colour_escapes() {
    // The harness sets NO_COLOR=1 for every daemon; empty means unset.
    let d = Daemon::start_with(DaemonOptions {
        env: vec![("NO_COLOR".into(), String::new())],
        ..DaemonOptions::default()
    });
    let out = run_tool("iscsi-inq", &[d.url(DEFAULT_IQN, 0)], TOOL_TIMEOUT);
    out.assert_success();
    let log = d.stderr();
    assert!(log.contains("INFO"), "no log lines to look at: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour escapes in a log written to a pipe: {}",
        d.stderr_tail(5)
    );
}
