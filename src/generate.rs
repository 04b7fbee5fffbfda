//! `rustgt generate man|completions DIR`: the manual pages and shell
//! completions the Debian package ships (debian/build-deb), made from the
//! clap definitions of [`crate::cli::Cli`] and the annotated
//! `etc/rustgt.toml`.
//!
//! A build step, not a user command: `main` hands the arguments over
//! before the real command line is parsed, so `generate` appears neither
//! in `--help` nor in the pages and completions it writes (clap_complete
//! would offer a hidden subcommand). It lives in the binary because the
//! command line it describes does: a build script cannot reach the clap
//! types of a binary crate.
//!
//! - `man DIR`: `rustgt.8` (the daemon), one `rustgt-<sub>.8` page per
//!   subcommand (`rustgt-admin-lun-add.8`, ...), and `rustgt.toml.5`
//!   rendered from the comments of `etc/rustgt.toml` (embedded at build).
//! - `completions DIR`: `rustgt.bash`, `_rustgt` (zsh) and `rustgt.fish`.

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser, Subcommand};
use roff::{bold, italic, roman, Inline, Roff};

/// The annotated example configuration, source of rustgt.toml(5).
const EXAMPLE_CONFIG: &str = include_str!("../etc/rustgt.toml");

/// The manual's name in the pages' header.
const MANUAL: &str = "rustgt";

#[derive(Debug, Parser)]
#[command(
    name = "rustgt generate",
    about = "Write manual pages or shell completions"
)]
struct GenerateCli {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// rustgt.8, rustgt-SUBCOMMAND.8 and rustgt.toml.5 into DIR.
    Man { dir: PathBuf },
    /// rustgt.bash, _rustgt (zsh) and rustgt.fish into DIR.
    Completions { dir: PathBuf },
}

/// When the first argument is `generate`, does it and returns the exit
/// status; otherwise `None` (the daemon's command line is parsed as usual).
pub fn run_if_asked() -> Option<i32> {
    let mut args = std::env::args_os();
    let argv0 = args.next()?;
    let first = args.next()?;
    if first != "generate" {
        return None;
    }
    let cli = GenerateCli::parse_from(std::iter::once(argv0).chain(args));
    let done = match &cli.what {
        What::Man { dir } => man_pages(dir),
        What::Completions { dir } => completions(dir),
    };
    Some(match done {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            0
        }
        Err(e) => {
            eprintln!("rustgt generate: {e}");
            1
        }
    })
}

/// Why a page or completion file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct GenerateError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

fn write_file(path: PathBuf, body: &[u8]) -> Result<PathBuf, GenerateError> {
    std::fs::write(&path, body).map_err(|source| GenerateError {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

fn create_dir(dir: &Path) -> Result<(), GenerateError> {
    std::fs::create_dir_all(dir).map_err(|source| GenerateError {
        path: dir.to_owned(),
        source,
    })
}

/// The command line the pages and completions describe.
fn command() -> clap::Command {
    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// Writes every manual page into `dir`; returns their paths.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>, GenerateError> {
    create_dir(dir)?;
    let mut out = Vec::new();
    for (name, body) in command_pages() {
        out.push(write_file(dir.join(name), body.as_bytes())?);
    }
    out.push(write_file(
        dir.join("rustgt.toml.5"),
        config_page(EXAMPLE_CONFIG).as_bytes(),
    )?);
    Ok(out)
}

/// rustgt.8 and one page per subcommand, as (file name, roff text).
fn command_pages() -> Vec<(String, String)> {
    let mut pages = Vec::new();
    let top = command();
    let version = top.get_version().unwrap_or_default().to_owned();
    fn walk(cmd: &clap::Command, version: &str, top: bool, pages: &mut Vec<(String, String)>) {
        let name = cmd.get_display_name().unwrap_or(cmd.get_name()).to_owned();
        let man = clap_mangen::Man::new(cmd.clone())
            .title(name.to_uppercase())
            .section("8")
            .source(format!("rustgt {version}"))
            .manual(MANUAL);
        let mut buf = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = man.render(&mut buf);
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if top {
            text.push_str(&daemon_sections());
        } else {
            text.push_str(&see_also(&["rustgt(8)", "rustgt.toml(5)"]));
        }
        pages.push((format!("{name}.8"), text));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, version, false, pages);
        }
    }
    walk(&top, &version, true, &mut pages);
    pages
}

/// A SEE ALSO section naming `pages`.
fn see_also(pages: &[&str]) -> String {
    let mut r = Roff::new();
    r.control("SH", ["SEE ALSO"]);
    r.text(vec![roman(pages.join(", "))]);
    r.to_roff()
}

fn para(r: &mut Roff, text: &str) {
    r.control("PP", []);
    r.text(vec![roman(text)]);
}

fn tagged(r: &mut Roff, tag: Vec<Inline>, text: &str) {
    r.control("TP", []);
    r.text(tag);
    r.text(vec![roman(text)]);
}

/// What rustgt(8) says beyond the options: signals, environment, files,
/// the packaged service.
fn daemon_sections() -> String {
    let mut r = Roff::new();
    r.control("SH", ["SIGNALS"]);
    tagged(
        &mut r,
        vec![bold("SIGHUP")],
        "Re-read the configuration file and apply the difference live \
         (what systemctl reload does); refused while the running state has \
         changes the file lacks (persist = false), unless forced with \
         rustgt admin config reload --force.",
    );
    tagged(
        &mut r,
        vec![bold("SIGTERM"), roman(", "), bold("SIGINT")],
        "Ask connected initiators to log out, wait for them briefly, exit 0.",
    );
    r.control("SH", ["ENVIRONMENT"]);
    tagged(
        &mut r,
        vec![bold("RUSTGT_CONFIG")],
        "The configuration file, as --config.",
    );
    tagged(
        &mut r,
        vec![bold("RUSTGT_LOG")],
        "The log filter, as --log.",
    );
    tagged(
        &mut r,
        vec![bold("RUSTGT_ADMIN_SOCKET")],
        "The admin socket, as admin_socket in the file.",
    );
    tagged(
        &mut r,
        vec![
            bold("RUSTGT_"),
            italic("KEY"),
            roman(", "),
            bold("RUSTGT_"),
            italic("TABLE"),
            bold("__"),
            italic("KEY"),
        ],
        "Configuration keys (data_dir, admin_socket_group, metrics_listen and the \
         [iscsi], [discovery], [reactor] and [limits] tables); see rustgt.toml(5).",
    );
    tagged(
        &mut r,
        vec![bold("NOTIFY_SOCKET")],
        "Set by systemd for Type=notify: the daemon sends READY=1 once its portals \
         are bound, RELOADING=1 and READY=1 around a SIGHUP reload, STOPPING=1 when \
         it stops.",
    );
    tagged(
        &mut r,
        vec![bold("JOURNAL_STREAM")],
        "Set by systemd when standard error goes to the journal: each log line then \
         starts with its syslog priority (<3> error, <4> warning, <6> info, <7> \
         debug and trace) and carries no timestamp of its own.",
    );
    r.control("SH", ["FILES"]);
    tagged(
        &mut r,
        vec![italic("/etc/rustgt/rustgt.toml")],
        "The configuration of the packaged service; admin changes are saved to it \
         (persist = true).",
    );
    tagged(
        &mut r,
        vec![italic("/var/lib/rustgt")],
        "The packaged service's data directory: backing files given by relative \
         paths, persistent reservations, the lock file.",
    );
    tagged(
        &mut r,
        vec![italic("/run/rustgt/admin.sock")],
        "The packaged service's admin socket (mode 0660, group rustgt); rustgt admin \
         uses it when no option names a socket and ./rustgt-data/admin.sock does not exist.",
    );
    tagged(
        &mut r,
        vec![italic("/usr/share/doc/rustgt/examples/rustgt.toml")],
        "Every configuration key with its default and meaning.",
    );
    para(
        &mut r,
        "The package runs the daemon as the systemd unit rustgt.service \
         (systemctl reload rustgt sends SIGHUP). Members of the group rustgt may \
         use rustgt admin.",
    );
    r.control("SH", ["SEE ALSO"]);
    r.text(vec![roman(
        "rustgt.toml(5), rustgt-admin(8), rustgt-bench(8), systemctl(1), iscsiadm(8), \
         iscsi-inq(1)",
    )]);
    r.to_roff()
}

/// Writes the bash, zsh and fish completions into `dir`.
pub fn completions(dir: &Path) -> Result<Vec<PathBuf>, GenerateError> {
    use clap_complete::Shell;
    create_dir(dir)?;
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = command();
        let path =
            clap_complete::generate_to(shell, &mut cmd, "rustgt", dir).map_err(|source| {
                GenerateError {
                    path: dir.to_owned(),
                    source,
                }
            })?;
        out.push(path);
    }
    Ok(out)
}

/// One piece of the annotated configuration, in file order.
#[derive(Debug, PartialEq)]
enum Piece {
    /// A table header, the first time it appears: `[iscsi]`, `[[targets]]`.
    Table(String),
    /// A comment with the keys it describes (none: a paragraph of its own).
    Keys {
        comment: Vec<String>,
        keys: Vec<String>,
    },
    /// A further example of a table seen before, shown as it stands.
    Example {
        comment: Vec<String>,
        lines: Vec<String>,
    },
}

/// Splits the annotated configuration into [`Piece`]s: a comment block
/// belongs to the keys right under it; a repeated table header starts an
/// example that runs to the next blank line.
fn pieces(text: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut comment: Vec<String> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    let mut example: Option<(Vec<String>, Vec<String>)> = None;
    let flush = |out: &mut Vec<Piece>, comment: &mut Vec<String>, keys: &mut Vec<String>| {
        if !comment.is_empty() || !keys.is_empty() {
            out.push(Piece::Keys {
                comment: std::mem::take(comment),
                keys: std::mem::take(keys),
            });
        }
    };
    // Whether the line before was a key (set or commented out).
    let mut after_key = false;
    for line in text.lines() {
        let t = line.trim();
        let was_key = std::mem::replace(&mut after_key, false);
        if let Some(c) = t.strip_prefix('#') {
            if c.trim_start().starts_with("---") {
                continue;
            }
            let c = c.strip_prefix(' ').unwrap_or(c).to_owned();
            if let Some((_, lines)) = &mut example {
                lines.push(format!("# {c}").trim_end().to_owned());
                continue;
            }
            // A key commented out under its description, or an example
            // value under a key, is a key of the block; one under an
            // example line is part of the example.
            if key_line(&c)
                && (was_key || (keys.is_empty() && comment.last().is_some_and(|l| !literal(l))))
            {
                keys.push(format!("# {c}"));
                after_key = true;
                continue;
            }
            if !keys.is_empty() {
                flush(&mut out, &mut comment, &mut keys);
            }
            comment.push(c);
        } else if t.is_empty() {
            // A blank line ends an example and a block.
            if let Some((c, lines)) = example.take() {
                out.push(Piece::Example { comment: c, lines });
            }
            flush(&mut out, &mut comment, &mut keys);
        } else if t.starts_with('[') {
            if let Some((c, lines)) = example.take() {
                out.push(Piece::Example { comment: c, lines });
            }
            if seen.insert(t.to_owned()) {
                // The boxed comment above a table describes it.
                let above = std::mem::take(&mut comment);
                flush(&mut out, &mut Vec::new(), &mut keys);
                out.push(Piece::Table(t.to_owned()));
                if !above.is_empty() {
                    out.push(Piece::Keys {
                        comment: above,
                        keys: Vec::new(),
                    });
                }
            } else {
                flush(&mut out, &mut Vec::new(), &mut keys);
                example = Some((std::mem::take(&mut comment), vec![t.to_owned()]));
            }
        } else if let Some((_, lines)) = &mut example {
            lines.push(t.to_owned());
        } else {
            keys.push(t.to_owned());
            after_key = true;
        }
    }
    if let Some((c, lines)) = example.take() {
        out.push(Piece::Example { comment: c, lines });
    }
    flush(&mut out, &mut comment, &mut keys);
    out
}

/// `key = value`.
fn key_line(line: &str) -> bool {
    line.split_once(" = ").is_some_and(|(k, _)| {
        !k.is_empty()
            && k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
    })
}

/// A comment line that is an example or a list item rather than prose:
/// shown as it stands.
fn literal(line: &str) -> bool {
    line.starts_with("  ") || line.starts_with('[') || key_line(line)
}

/// Comment lines as roff: prose filled, literal lines in no-fill blocks.
fn comment_text(r: &mut Roff, lines: &[String]) {
    let mut in_literal = false;
    for line in lines {
        let lit = literal(line);
        if lit && !in_literal {
            r.control("nf", []);
            in_literal = true;
        } else if !lit && in_literal {
            r.control("fi", []);
            in_literal = false;
        }
        if line.is_empty() {
            r.control("sp", []);
        } else {
            r.text(vec![roman(line.as_str())]);
        }
    }
    if in_literal {
        r.control("fi", []);
    }
}

/// rustgt.toml(5) from the annotated configuration `text`.
fn config_page(text: &str) -> String {
    let mut r = Roff::new();
    let version = env!("CARGO_PKG_VERSION");
    r.control(
        "TH",
        ["RUSTGT.TOML", "5", "", &format!("rustgt {version}"), MANUAL],
    );
    r.control("SH", ["NAME"]);
    r.text(vec![roman(
        "rustgt.toml - configuration of the rustgt iSCSI and iSER target daemon",
    )]);
    r.control("SH", ["SYNOPSIS"]);
    r.text(vec![italic("/etc/rustgt/rustgt.toml")]);
    r.control("SH", ["DESCRIPTION"]);
    r.text(vec![roman(
        "rustgt(8) reads its targets, LUNs and settings from a TOML file. \
         What follows is the annotated example configuration \
         (/usr/share/doc/rustgt/examples/rustgt.toml): every key with its \
         default value and meaning, table by table.",
    )]);
    let mut heading = false;
    for piece in pieces(text) {
        match piece {
            Piece::Table(t) => {
                r.control("SH", [t.as_str()]);
                heading = true;
            }
            Piece::Keys { comment, keys } if keys.is_empty() => {
                if !heading {
                    r.control("SH", ["TOP-LEVEL KEYS"]);
                    heading = true;
                }
                r.control("PP", []);
                comment_text(&mut r, &comment);
            }
            Piece::Keys { comment, keys } => {
                if !heading {
                    r.control("SH", ["TOP-LEVEL KEYS"]);
                    heading = true;
                }
                // One tag per key: .TQ (groff) adds a tag to the item.
                for (i, k) in keys.iter().enumerate() {
                    r.control(if i == 0 { "TP" } else { "TQ" }, []);
                    r.text(vec![bold(k.as_str())]);
                }
                comment_text(&mut r, &comment);
            }
            Piece::Example { comment, lines } => {
                r.control("PP", []);
                comment_text(&mut r, &comment);
                r.control("PP", []);
                r.control("nf", []);
                for l in &lines {
                    r.text(vec![roman(l.as_str())]);
                }
                r.control("fi", []);
            }
        }
    }
    r.control("SH", ["SEE ALSO"]);
    r.text(vec![roman("rustgt(8), rustgt-admin(8)")]);
    r.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_the_daemon_and_its_subcommands_but_not_generate() {
        let pages = command_pages();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        for want in [
            "rustgt.8",
            "rustgt-admin.8",
            "rustgt-admin-lun-add.8",
            "rustgt-bench.8",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("generate")), "{names:?}");
        let (_, top) = &pages[0];
        assert!(
            top.starts_with(".ie") || top.contains(".TH RUSTGT 8"),
            "{top}"
        );
        assert!(top.contains(".TH RUSTGT 8"), "{top}");
        for want in [
            "\\-\\-config",
            "SIGHUP",
            "JOURNAL_STREAM",
            "/run/rustgt/admin.sock",
        ] {
            assert!(top.contains(want), "rustgt.8 lacks {want}");
        }
        assert!(
            !top.contains("rustgt\\-generate") && !top.contains("generate("),
            "rustgt.8 names the build step"
        );
    }

    #[test]
    fn config_page_has_every_table_and_key_of_the_example() {
        let page = config_page(EXAMPLE_CONFIG);
        assert!(page.contains(".TH RUSTGT.TOML 5"), "{page}");
        for table in [
            "[iscsi]",
            "[limits]",
            "[reactor]",
            "[discovery]",
            "[[targets]]",
            "[[targets.luns]]",
        ] {
            assert!(page.contains(&format!(".SH {table}")), "no section {table}");
        }
        // Every key line of the example is in the page.
        for line in EXAMPLE_CONFIG.lines() {
            let t = line.trim();
            if t.starts_with('#') || t.starts_with('[') || t.is_empty() {
                continue;
            }
            let key = t.split(" = ").next().unwrap_or(t);
            assert!(page.contains(key), "key {key} missing");
        }
        // roff takes a line starting with '.' or '\'' as a request: only
        // the generator's own requests may.
        for line in page.lines() {
            if let Some(req) = line.strip_prefix('.') {
                let name = req.split_whitespace().next().unwrap_or("");
                assert!(
                    ["TH", "SH", "PP", "TP", "TQ", "nf", "fi", "sp", "ie", "el", "ds"]
                        .contains(&name),
                    "stray request: {line}"
                );
            }
        }
    }

    #[test]
    fn pieces_attach_comments_to_keys_and_keep_repeated_tables_as_examples() {
        let text = "# top\ntop = 1\n# top = 2\n\n# (optional) o\n# o = 1\n# ---\n# Box\n# ---\n[t]\n# doc\n#   \"lit\"\nk = 2\n# ex:\n# [x]\n# y = 1\n\n[[l]]\nid = 0\n# again\n[[l]]\nid = 1\n";
        assert_eq!(
            pieces(text),
            vec![
                Piece::Keys {
                    comment: vec!["top".into()],
                    keys: vec!["top = 1".into(), "# top = 2".into()]
                },
                Piece::Keys {
                    comment: vec!["(optional) o".into()],
                    keys: vec!["# o = 1".into()]
                },
                Piece::Table("[t]".into()),
                Piece::Keys {
                    comment: vec!["Box".into()],
                    keys: vec![]
                },
                Piece::Keys {
                    comment: vec!["doc".into(), "  \"lit\"".into()],
                    keys: vec!["k = 2".into()]
                },
                Piece::Keys {
                    comment: vec!["ex:".into(), "[x]".into(), "y = 1".into()],
                    keys: vec![]
                },
                Piece::Table("[[l]]".into()),
                Piece::Keys {
                    comment: vec![],
                    keys: vec!["id = 0".into()]
                },
                Piece::Example {
                    comment: vec!["again".into()],
                    lines: vec!["[[l]]".into(), "id = 1".into()]
                },
            ]
        );
    }

    #[test]
    fn completions_name_the_subcommands_but_not_generate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = completions(dir.path()).expect("written");
        assert_eq!(files.len(), 3);
        let bash = std::fs::read_to_string(dir.path().join("rustgt.bash")).expect("bash");
        assert!(
            bash.contains("admin") && bash.contains("readahead"),
            "bash completion"
        );
        assert!(
            !bash.contains("generate"),
            "bash completion offers generate"
        );
        assert!(dir.path().join("_rustgt").is_file() && dir.path().join("rustgt.fish").is_file());
    }

    #[test]
    fn man_pages_are_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = man_pages(dir.path()).expect("written");
        assert!(files.iter().any(|f| f.ends_with("rustgt.toml.5")));
        assert!(files.iter().any(|f| f.ends_with("rustgt.8")));
    }
}
