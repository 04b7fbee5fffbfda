//! `rustgt admin`: the command line client of the admin socket.
//!
//! Each invocation sends one request line (two for `--interval` stats)
//! and prints the result as a table, or as JSON with `--json`. Exit
//! status: 0 done, 1 the daemon refused the request (its error is printed
//! on stderr), 2 the daemon could not be reached or the arguments are bad.
//!
//! Layout: `args` is the command line, `socket` the connection to the
//! daemon, `commands` what each command sends and prints, [`render`] the
//! tables. It speaks [`crate::api`] and knows nothing of the daemon's
//! control plane.

mod args;
mod commands;
mod qos;
pub mod render;
mod socket;

use std::io::Write;
use std::path::Path;

pub use args::AdminArgs;
use socket::{Client, Failure};

use crate::config::Overrides;

/// Runs `rustgt admin ...`; returns the process exit status.
pub fn run(args: &AdminArgs, config: Option<&Path>, overrides: &Overrides) -> i32 {
    match run_inner(args, config, overrides) {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("rustgt admin: {}", f.message);
            f.code
        }
    }
}

fn run_inner(
    args: &AdminArgs,
    config: Option<&Path>,
    overrides: &Overrides,
) -> Result<(), Failure> {
    let socket = match &args.socket {
        Some(s) => s.clone(),
        None => {
            let found = crate::config::admin_socket_of(config, overrides)
                .map_err(|e| Failure::usage(format!("cannot find the admin socket: {e}")))?;
            let named = config.is_some()
                || overrides.data_dir.is_some()
                || overrides.admin_socket.is_some()
                || ["RUSTGT_ADMIN_SOCKET", "RUSTGT_DATA_DIR"]
                    .iter()
                    .any(|v| std::env::var_os(v).is_some());
            or_packaged(found, named, Path::new(PACKAGED_SOCKET))
        }
    };
    let mut client = Client::connect(&socket)?;
    let out = &mut std::io::stdout().lock();
    commands::execute(&mut client, args, out)?;
    out.flush()
        .map_err(|e| Failure::usage(format!("stdout: {e}")))
}

/// The admin socket of the packaged daemon (its unit's
/// RuntimeDirectory=rustgt, the packaged /etc/rustgt/rustgt.toml).
const PACKAGED_SOCKET: &str = "/run/rustgt/admin.sock";

/// The socket `rustgt admin` talks to: the one `found` like the daemon
/// finds its own, unless nothing `named` one (no option, no environment
/// variable), it does not exist and the packaged daemon's does.
fn or_packaged(found: std::path::PathBuf, named: bool, packaged: &Path) -> std::path::PathBuf {
    if !named && !found.exists() && packaged.exists() {
        packaged.to_owned()
    } else {
        found
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::{json, Map};

    use super::args::{AdminCommand, ConfigCmd, LunCmd};
    use super::commands::{from_fields, trigger_fields, write_private};
    use super::*;
    use crate::config::LunSettings;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: AdminArgs,
    }

    fn parse(args: &[&str]) -> AdminArgs {
        Wrap::try_parse_from(std::iter::once("admin").chain(args.iter().copied()))
            .map(|w| w.args)
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    #[test]
    fn the_packaged_socket_serves_only_when_nothing_names_one_and_the_default_is_missing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let packaged = dir.path().join("run-admin.sock");
        let default = dir.path().join("rustgt-data/admin.sock");
        // Neither exists: the default, so the error names it.
        assert_eq!(or_packaged(default.clone(), false, &packaged), default);
        std::fs::write(&packaged, b"").expect("packaged");
        assert_eq!(or_packaged(default.clone(), false, &packaged), packaged);
        // An option or environment variable named the socket: kept.
        assert_eq!(or_packaged(default.clone(), true, &packaged), default);
        // The default one exists: it wins.
        std::fs::create_dir_all(dir.path().join("rustgt-data")).expect("mkdir");
        std::fs::write(&default, b"").expect("default");
        assert_eq!(or_packaged(default.clone(), false, &packaged), default);
    }

    #[test]
    fn commands_parse() {
        let a = parse(&[
            "--json",
            "-s",
            "/tmp/x.sock",
            "lun",
            "remove",
            "iqn.a",
            "3",
            "--force",
        ]);
        assert!(a.json);
        assert_eq!(a.socket, Some(PathBuf::from("/tmp/x.sock")));
        assert_eq!(
            a.command,
            AdminCommand::Lun(LunCmd::Remove {
                iqn: "iqn.a".into(),
                id: 3,
                force: true
            })
        );
        let a = parse(&["lun", "resize", "iqn.a", "1"]);
        assert!(matches!(
            a.command,
            AdminCommand::Lun(LunCmd::Resize { size: None, .. })
        ));
        let a = parse(&["config", "apply", "new.toml", "--dry-run"]);
        assert!(matches!(
            a.command,
            AdminCommand::Config(ConfigCmd::Apply {
                dry_run: true,
                force: false,
                ..
            })
        ));
        assert!(Wrap::try_parse_from(["admin", "acl", "set", "iqn.a"]).is_err());
        assert!(Wrap::try_parse_from([
            "admin",
            "chap",
            "set",
            "--user",
            "u",
            "--secret-file",
            "f",
            "--mutual-user",
            "m"
        ])
        .is_err());
    }

    /// The values shell completion is offered (clap's possible values).
    fn possible(path: &[&str], arg: &str) -> Vec<String> {
        use clap::CommandFactory;
        let mut cmd = Wrap::command();
        for p in path {
            cmd = cmd
                .find_subcommand(p)
                .unwrap_or_else(|| panic!("no subcommand {p}"))
                .clone();
        }
        let a = cmd
            .get_arguments()
            .find(|a| a.get_id() == arg)
            .unwrap_or_else(|| panic!("no argument {arg}"));
        a.get_possible_values()
            .iter()
            .map(|v| v.get_name().to_owned())
            .collect()
    }

    #[test]
    fn enumerated_values_are_offered_for_completion() {
        let b = possible(&["lun", "add"], "backstore");
        assert!(
            b.contains(&"mmap".to_owned()) && b.contains(&"rbd".to_owned()),
            "{b:?}"
        );
        assert_eq!(possible(&["lun", "add"], "block_size"), ["512", "4096"]);
        let r = possible(&["lun", "readahead"], "policy");
        assert!(
            r.contains(&"auto".to_owned()) && r.contains(&"streams".to_owned()),
            "{r:?}"
        );
        let set = possible(&["lun", "set"], "settings");
        for v in [
            "readahead=streams",
            "read_only=true",
            "io_context=per-worker",
            "workers=",
        ] {
            assert!(set.contains(&v.to_owned()), "{v} not in {set:?}");
        }
        assert!(
            !set.iter().any(|v| v.starts_with("serial=")),
            "refused keys are not offered"
        );
        let t = possible(&["target", "set"], "settings");
        assert!(
            t.contains(&"acl=".to_owned()) && !t.contains(&"chap=".to_owned()),
            "{t:?}"
        );
        // Values outside the lists are refused on the command line.
        assert!(Wrap::try_parse_from(["admin", "lun", "readahead", "iqn.a", "0", "fast"]).is_err());
        let a = parse(&[
            "lun",
            "set",
            "iqn.a",
            "0",
            "readahead=streams",
            "workers=",
            "--force",
        ]);
        assert!(matches!(
            a.command,
            AdminCommand::Lun(LunCmd::Set { ref settings, force: true, .. })
                if settings == &[("readahead".to_owned(), "streams".to_owned()), ("workers".to_owned(), String::new())]
        ));
        assert!(Wrap::try_parse_from(["admin", "lun", "set", "iqn.a", "0", "readahead"]).is_err());
    }

    #[test]
    fn lun_add_fields_become_config_settings_with_defaults() {
        let mut m = Map::new();
        m.insert("id".into(), json!(2));
        m.insert("backstore".into(), json!("ram"));
        m.insert("size".into(), json!("16M"));
        let l: LunSettings = from_fields(m).expect("valid");
        assert_eq!((l.id, l.block_size), (2, 512));
        let mut bad = Map::new();
        bad.insert("id".into(), json!(2));
        assert!(
            from_fields::<LunSettings>(bad).is_err(),
            "backstore is required"
        );
    }

    #[test]
    fn fault_triggers_parse_into_fields() {
        assert!(trigger_fields("hang", "always").expect("always").is_empty());
        assert!(trigger_fields("hang", "").expect("empty").is_empty());
        let m = trigger_fields("delay", "time=5ms, lba=10-20,every=2,probability=0.25")
            .expect("fields");
        assert_eq!(m.get("time"), Some(&json!("5ms")));
        assert_eq!(m.get("lba"), Some(&json!("10-20")));
        assert_eq!(m.get("every"), Some(&json!(2)));
        assert_eq!(m.get("probability"), Some(&json!(0.25)));
        assert!(trigger_fields("hang", "lba").is_err());
        assert!(trigger_fields("hang", "every=x").is_err());
        let a = parse(&[
            "lun",
            "fault",
            "iqn.a",
            "1",
            "--hang",
            "lba=5",
            "--read-error",
            "always",
        ]);
        assert!(matches!(
            a.command,
            AdminCommand::Lun(LunCmd::Fault {
                hang: Some(_),
                read_error: Some(_),
                off: false,
                ..
            })
        ));
    }

    #[test]
    fn saved_config_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("saved.toml");
        write_private(&path, "data_dir = \"/x\"\n").expect("writes");
        let meta = std::fs::metadata(&path).expect("exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).expect("reads"),
            "data_dir = \"/x\"\n"
        );
    }
}
