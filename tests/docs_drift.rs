//! The docs say what the code does, and the next drift fails here:
//!
//! - every key `etc/rustgt.toml` sets, or shows commented out as
//!   `# key = value` (or in a `# [table]` example), is a key of the
//!   configuration schema, and every key of the schema appears there. The
//!   schema is taken from the daemon's own config types: each table
//!   rejects unknown keys (`deny_unknown_fields`), and the error for a
//!   probe key lists the table's keys; probing each key as a table finds
//!   the nested tables;
//! - every option and subcommand `rustgt --help` lists appears in README.md
//!   or docs/admin.md, and every `rustgt admin` subcommand, with each of
//!   its options, in docs/admin.md's rows for that command.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{run_tool_env, ToolOutput};

const PROBE: &str = "zz_docs_drift_probe";

fn repo(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn rustgt(args: &[&str]) -> ToolOutput {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    run_tool_env(
        env!("CARGO_BIN_EXE_rustgt"),
        &args,
        &[("RUST_BACKTRACE", "0"), ("RUST_LIB_BACKTRACE", "0")],
        Duration::from_secs(30),
    )
}

// ---------------------------------------------------------------------------
// The schema, from the config types
// ---------------------------------------------------------------------------

/// A table path: key segments, each marked when it is an array of tables.
type TablePath = Vec<(String, bool)>;

fn dotted(path: &TablePath) -> String {
    path.iter()
        .map(|(s, _)| s.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// Probe TOML: the tables of `path` declared, `PROBE = 1` in the last.
fn probe_text(path: &TablePath) -> String {
    let mut text = String::new();
    for i in 1..=path.len() {
        let name = dotted(&path[..i].to_vec());
        if path[i - 1].1 {
            text.push_str(&format!("[[{name}]]\n"));
        } else {
            text.push_str(&format!("[{name}]\n"));
        }
    }
    text.push_str(&format!("{PROBE} = 1\n"));
    text
}

/// Starts the daemon on a config with the probe key in `path`; returns
/// the table's keys when the daemon names the probe as an unknown key
/// (so `path` is a table of the schema), else `None`.
fn keys_of(dir: &Path, path: &TablePath) -> Option<Vec<String>> {
    let file = dir.join("probe.toml");
    std::fs::write(&file, probe_text(path)).expect("write probe");
    let data = dir.join("data");
    let out = rustgt(&[
        "--config",
        &file.display().to_string(),
        "--data-dir",
        &data.display().to_string(),
        "--listen",
        "127.0.0.1:0",
        "--no-persist",
    ]);
    assert!(!out.success(), "a probe config must be refused: {out}");
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains(&format!("{PROBE}: unknown field")))?;
    let list = line
        .split("expected one of:")
        .nth(1)
        .or_else(|| line.split("expected").nth(1))
        .unwrap_or_else(|| panic!("no key list in {line:?}"));
    Some(
        list.split(',')
            .map(|k| k.trim().trim_matches('`').to_owned())
            .filter(|k| !k.is_empty())
            .collect(),
    )
}

/// Every table of the schema (by dotted path) with its keys.
fn schema() -> BTreeMap<String, Vec<String>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut out = BTreeMap::new();
    let mut todo: Vec<TablePath> = vec![Vec::new()];
    while let Some(path) = todo.pop() {
        assert!(out.len() < 100, "runaway schema walk at {}", dotted(&path));
        let keys = keys_of(dir.path(), &path)
            .unwrap_or_else(|| panic!("{} is not a table", dotted(&path)));
        for k in &keys {
            // A type that holds itself (QoS limits hold per-initiator
            // limits of the same type; the config check refuses the
            // nesting) is walked once.
            if path.iter().any(|(s, _)| s == k) {
                continue;
            }
            for array in [false, true] {
                let mut sub = path.clone();
                sub.push((k.clone(), array));
                if keys_of(dir.path(), &sub).is_some() {
                    todo.push(sub);
                    break;
                }
            }
        }
        out.insert(dotted(&path), keys);
    }
    out
}

// ---------------------------------------------------------------------------
// The keys etc/rustgt.toml shows
// ---------------------------------------------------------------------------

/// (table, key) pairs set or shown commented out in the example file. A
/// commented-out line is `# key = value` (one space after `#`, a value
/// that parses as TOML); indented `#   key = value` lines are prose.
fn example_keys(text: &str) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut table = String::new();
    for raw in text.lines() {
        let line = match raw.strip_prefix("# ") {
            Some(rest) if !rest.starts_with(' ') => rest,
            Some(_) => continue,
            None if raw.starts_with('#') => continue,
            None => raw,
        };
        let line = line.trim_end();
        if let Some(h) = header(line) {
            let (parent, last) = match h.rsplit_once('.') {
                Some((p, l)) => (p.to_owned(), l.to_owned()),
                None => (String::new(), h.clone()),
            };
            out.insert((parent, last));
            table = h;
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        let Ok(parsed) = toml::from_str::<toml::Table>(line) else {
            assert!(
                raw.starts_with('#'),
                "etc/rustgt.toml: cannot read the line {raw:?}"
            );
            continue;
        };
        collect(&table, &parsed, &mut out);
    }
    out
}

/// `[a.b]` / `[[a.b]]` -> "a.b".
fn header(line: &str) -> Option<String> {
    let inner = line.strip_prefix('[')?;
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    let end = inner.find(']')?;
    let name = &inner[..end];
    let rest = inner[end..].trim_start_matches(']').trim();
    (rest.is_empty() || rest.starts_with('#'))
        .then(|| name.trim().to_owned())
        .filter(|n| !n.is_empty())
}

fn collect(table: &str, t: &toml::Table, out: &mut BTreeSet<(String, String)>) {
    for (k, v) in t {
        out.insert((table.to_owned(), k.clone()));
        if let toml::Value::Table(inner) = v {
            let sub = if table.is_empty() {
                k.clone()
            } else {
                format!("{table}.{k}")
            };
            collect(&sub, inner, out);
        }
    }
}

#[test]
fn example_config_and_schema_have_the_same_keys() {
    let schema = schema();
    for t in [
        "",
        "iscsi",
        "limits",
        "targets",
        "targets.luns",
        "targets.luns.rbd",
    ] {
        assert!(
            schema.contains_key(t),
            "schema walk missed {t:?}: {schema:?}"
        );
    }
    let example = example_keys(&repo("etc/rustgt.toml"));

    let unknown: Vec<String> = example
        .iter()
        .filter(|(t, k)| !schema.get(t).is_some_and(|keys| keys.contains(k)))
        .map(|(t, k)| format!("{t}.{k}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "etc/rustgt.toml shows keys the daemon does not know: {unknown:?}"
    );

    // Tables of one type (a target's and discovery's chap, the fault
    // triggers) share their keys: shown in one, they are documented.
    let mut missing = Vec::new();
    for (t, keys) in &schema {
        for k in keys {
            let shown = schema
                .iter()
                .filter(|(_, same)| *same == keys)
                .any(|(t2, _)| example.contains(&(t2.clone(), k.clone())));
            if !shown {
                missing.push(if t.is_empty() {
                    k.clone()
                } else {
                    format!("{t}.{k}")
                });
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the daemon knows that etc/rustgt.toml does not show: {missing:?}"
    );
}

// ---------------------------------------------------------------------------
// Environment variables
// ---------------------------------------------------------------------------

/// Whether the daemon reads top-level key `key` (a table when `table`)
/// from `RUSTGT_*`: a value of the wrong type there is named as the
/// variable's mistake. The config file itself has a mistake the checks
/// after reading find, so the daemon never starts.
fn env_reads(dir: &Path, key: &str, table: bool) -> bool {
    let file = dir.join("env.toml");
    std::fs::write(
        &file,
        "[[targets]]\niqn = \"iqn.2026-11.org.rustgt:env\"\n\
         [[targets.luns]]\nid = 0\nbackstore = \"ram\"\nsize = \"1M\"\nblock_size = 1000\n",
    )
    .expect("write");
    let var = if table {
        format!(
            "RUSTGT_{}__{}",
            key.to_ascii_uppercase(),
            PROBE.to_ascii_uppercase()
        )
    } else {
        format!("RUSTGT_{}", key.to_ascii_uppercase())
    };
    let data = dir.join("data").display().to_string();
    let args: Vec<String> = [
        "--config",
        &file.display().to_string(),
        "--data-dir",
        &data,
        "--no-persist",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let out = run_tool_env(
        env!("CARGO_BIN_EXE_rustgt"),
        &args,
        &[
            ("RUST_BACKTRACE", "0"),
            ("RUST_LIB_BACKTRACE", "0"),
            (var.as_str(), "[1, 2]"),
        ],
        Duration::from_secs(30),
    );
    assert!(!out.success(), "the probe config must be refused: {out}");
    out.stderr.contains(&var)
}

/// Whether `text` names key `k` (as `[k]` for a table), not as part of a
/// longer key.
fn names_key(text: &str, k: &str, table: bool) -> bool {
    if table {
        return text.contains(&format!("[{k}]"));
    }
    text.match_indices(k).any(|(at, _)| {
        let before = text[..at].chars().last();
        let after = text[at + k.len()..].chars().next();
        let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        !word(before) && !word(after)
    })
}

/// The lines of `text` from the first containing `from` up to the first
/// after it containing `to`.
fn passage(text: &str, from: &str, to: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.contains(from))
        .unwrap_or_else(|| panic!("no line with {from:?}"));
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.contains(to))
        .map_or(lines.len(), |e| start + 1 + e);
    lines[start..end].join("\n")
}

#[test]
fn documented_environment_variables_are_the_ones_read() {
    let schema = schema_top();
    let dir = tempfile::tempdir().expect("tempdir");
    let readme = passage(&repo("README.md"), "Environment variables cover", "```");
    let example = passage(&repo("etc/rustgt.toml"), "Environment:", "Command line:");
    let mut wrong = Vec::new();
    let mut read = Vec::new();
    for (k, table) in &schema {
        if k == "targets" {
            continue;
        }
        let reads = env_reads(dir.path(), k, *table);
        if reads {
            read.push(k.clone());
        }
        for (doc, text) in [("README.md", &readme), ("etc/rustgt.toml", &example)] {
            if names_key(text, k, *table) != reads {
                wrong.push(format!(
                    "{doc} {} {k} among the RUSTGT_* keys, the daemon {} it from the environment",
                    if reads { "omits" } else { "lists" },
                    if reads { "reads" } else { "does not read" }
                ));
            }
        }
    }
    assert!(read.contains(&"data_dir".to_owned()), "{read:?}");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The top-level keys of the schema, each marked when it is a table.
fn schema_top() -> Vec<(String, bool)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = keys_of(dir.path(), &Vec::new()).expect("the top level is a table");
    keys.into_iter()
        .map(|k| {
            let table = keys_of(dir.path(), &vec![(k.clone(), false)]).is_some();
            (k, table)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// --help and the docs
// ---------------------------------------------------------------------------

/// Long options and subcommands of one `--help` text.
fn help_of(args: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut all = args.to_vec();
    all.push("--help");
    let out = rustgt(&all);
    out.assert_success();
    let (mut opts, mut cmds) = (Vec::new(), Vec::new());
    let mut section = "";
    for line in out.stdout.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match section {
            "Commands" if indent == 2 => {
                let name = trimmed.split_whitespace().next().unwrap_or_default();
                if name != "help" {
                    cmds.push(name.to_owned());
                }
            }
            "Options" if indent == 2 || indent == 6 => {
                let long = trimmed
                    .split([' ', ','])
                    .find(|w| w.starts_with("--"))
                    .unwrap_or_default();
                if !long.is_empty() && long != "--help" && long != "--version" {
                    opts.push(long.to_owned());
                }
            }
            _ => {}
        }
    }
    (opts, cmds)
}

#[test]
fn every_option_and_subcommand_is_documented() {
    let readme = repo("README.md");
    let admin_md = repo("docs/admin.md");
    let mut missing = Vec::new();

    let (opts, cmds) = help_of(&[]);
    assert!(opts.contains(&"--config".to_owned()), "{opts:?}");
    for o in &opts {
        if !readme.contains(o.as_str()) && !admin_md.contains(o.as_str()) {
            missing.push(format!("rustgt {o} (README.md or docs/admin.md)"));
        }
    }
    for c in &cmds {
        if !readme.contains(&format!("rustgt {c}")) {
            missing.push(format!("rustgt {c} (README.md)"));
        }
    }

    let (opts, cmds) = help_of(&["admin"]);
    assert!(cmds.contains(&"lun".to_owned()), "{cmds:?}");
    for o in &opts {
        if !admin_md.contains(o.as_str()) {
            missing.push(format!("rustgt admin {o} (docs/admin.md)"));
        }
    }
    // Each command's rows: the lines of docs/admin.md naming it in code.
    let mut leaves: Vec<String> = Vec::new();
    for c in &cmds {
        let (_, subs) = help_of(&["admin", c]);
        if subs.is_empty() {
            leaves.push(c.clone());
        } else {
            leaves.extend(subs.iter().map(|s| format!("{c} {s}")));
        }
    }
    for cmd in &leaves {
        let rows: Vec<&str> = admin_md
            .lines()
            .filter(|l| {
                l.contains(&format!("`{cmd} "))
                    || l.contains(&format!("`{cmd}`"))
                    || l.contains(&format!("`{cmd} ["))
            })
            .collect();
        if rows.is_empty() {
            missing.push(format!("rustgt admin {cmd} (docs/admin.md)"));
            continue;
        }
        let mut args = vec!["admin"];
        args.extend(cmd.split(' '));
        let (opts, _) = help_of(&args);
        for o in opts {
            if !rows.iter().any(|r| r.contains(o.as_str())) {
                missing.push(format!("rustgt admin {cmd} {o} (its row in docs/admin.md)"));
            }
        }
    }
    assert!(
        leaves.iter().any(|l| l == "lun set") && leaves.iter().any(|l| l == "ls"),
        "{leaves:?}"
    );
    assert!(missing.is_empty(), "undocumented: {missing:#?}");
}

/// Every path README's feature table cites exists, and every guest check
/// it names (`guest NAME`, `guest PREFIX*`, `guest PREFIX-*`) is one
/// tests/vm/guest/checks.sh runs.
#[test]
fn feature_table_cites_what_exists() {
    let readme = repo("README.md");
    let table = passage(&readme, "## Features", "## Quick start");
    let checks = repo("tests/vm/guest/checks.sh");
    let names: Vec<&str> = checks
        .lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(name, _)| name)
        .filter(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
        .collect();
    let mut rows = 0;
    let mut missing = Vec::new();
    for line in table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
    {
        let Some(cited) = line.rsplit('|').nth(1) else {
            continue;
        };
        if cited.trim() == "shown by" {
            continue;
        }
        rows += 1;
        let ticked: Vec<&str> = cited.split('`').skip(1).step_by(2).collect();
        for path in ticked.iter().filter(|t| {
            t.starts_with("tests/") || t.starts_with("targets/") || t.starts_with("backstore/")
        }) {
            if !Path::new(env!("CARGO_MANIFEST_DIR")).join(path).exists() {
                missing.push(format!("path {path}"));
            }
        }
        for part in cited.split(',') {
            let part = part.trim();
            let Some(check) = part.strip_prefix("guest ") else {
                continue;
            };
            let check = match check.strip_prefix('`') {
                Some(rest) => rest.split('`').next().unwrap_or(rest),
                None => check.split_whitespace().next().unwrap_or(check),
            };
            let hit = match check.strip_suffix('*') {
                Some(prefix) => names.iter().any(|n| n.starts_with(prefix)),
                None => names.contains(&check),
            };
            if !hit {
                missing.push(format!("guest check {check}"));
            }
        }
    }
    assert!(
        rows >= 15,
        "README's feature table has {rows} rows:\n{table}"
    );
    assert!(
        missing.is_empty(),
        "README's feature table cites what does not exist: {missing:?}"
    );
}
