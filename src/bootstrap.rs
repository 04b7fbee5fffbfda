//! Which configuration the daemon starts with, and the identities it
//! makes at first start (see [`crate::identity`]).
//!
//! With `--config FILE` that file. Without it, `<data_dir>/rustgt.toml`:
//! written at first start with the default target, named for this host,
//! and read at every later start (SIGHUP re-applies it and admin changes
//! are saved to it). With persistence off and no such file, the built-in
//! default target is served under a name derived from the data
//! directory's machine id, and nothing is written but that id.

use std::path::{Path, PathBuf};

use crate::config::{self, Config, ConfigError, Overrides, DATA_DIR_CONFIG};
use crate::identity::{self, IdentityError, Source};
use crate::persist::{self, SaveError};

/// The first lines of the file written at first start.
const HEADER: &str = "\
# rustgt configuration, written at first start (see etc/rustgt.toml for
# every key). The target name and the LUN's serial and wwn were made for
# this host: keep them, so initiators keep recognising the disk. Changes
# made with `rustgt admin` are saved here; comments are kept.

";

/// Why the daemon cannot start with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(transparent)]
    Save(#[from] SaveError),
    #[error("creating data directory {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the daemon starts with.
#[derive(Debug)]
pub struct Start {
    pub cfg: Config,
    /// The configuration file, if any.
    pub file: Option<PathBuf>,
    /// Whether changes are written to `file`.
    pub persist: bool,
}

/// Loads the configuration (see the module docs), giving LUNs without a
/// serial or wwn theirs and saving them when the file may be written.
pub fn prepare(
    config: Option<&Path>,
    overrides: &Overrides,
    no_persist: bool,
) -> Result<Start, BootError> {
    let file = match config {
        Some(p) => Some(p.to_owned()),
        None => data_config(overrides, no_persist)?,
    };
    let mut cfg = config::load(file.as_deref(), overrides)?;
    let persist = file.is_some() && cfg.persist && !no_persist;
    let source = if persist {
        Source::Random
    } else {
        Source::Derived(identity::machine_id(&cfg.data_dir)?)
    };
    if file.is_none() {
        for t in &mut cfg.targets {
            t.iqn = identity::default_iqn(source)?;
        }
    }
    let before = cfg.clone();
    let mut filled = identity::fill(&mut cfg, None, source)?;
    let mut derived = !persist;
    if let (Some(f), true) = (&file, persist && !filled.is_empty()) {
        match persist::save(f, &before, &cfg) {
            Ok(()) => {
                tracing::info!(file = %f.display(), luns = ?filled, "LUN serial and wwn generated and saved")
            }
            Err(e) => {
                // Random ones that are not saved would change at every
                // start: derive them instead.
                tracing::error!(error = %e, "LUN identities cannot be saved");
                cfg = before;
                let id = identity::machine_id(&cfg.data_dir)?;
                filled = identity::fill(&mut cfg, None, Source::Derived(id))?;
                derived = true;
            }
        }
    }
    if derived && !filled.is_empty() {
        tracing::warn!(
            luns = ?filled,
            "LUN serial and wwn not saved: derived from the data directory's machine id; \
             set `serial` and `wwn` in the configuration to keep them wherever it is used \
             (persistence off, or the file cannot be written)"
        );
    }
    Ok(Start { cfg, file, persist })
}

/// `<data_dir>/rustgt.toml`, written first if missing and allowed.
fn data_config(overrides: &Overrides, no_persist: bool) -> Result<Option<PathBuf>, BootError> {
    let base = config::load(None, overrides)?;
    let path = base.data_dir.join(DATA_DIR_CONFIG);
    if path.exists() {
        return Ok(Some(path));
    }
    if no_persist {
        return Ok(None);
    }
    std::fs::create_dir_all(&base.data_dir).map_err(|source| BootError::DataDir {
        path: base.data_dir.clone(),
        source,
    })?;
    let mut target = Config::default_target();
    target.iqn = identity::default_iqn(Source::Random)?;
    let empty = Config {
        targets: Vec::new(),
        ..Config::default()
    };
    let mut full = Config {
        targets: vec![target],
        ..Config::default()
    };
    identity::fill(&mut full, None, Source::Random)?;
    let body = persist::edit::update("", &empty, &full).map_err(|source| SaveError::Edit {
        path: path.clone(),
        source,
    })?;
    let text = format!("{HEADER}{body}");
    persist::atomic::write_atomic(&path, text.as_bytes()).map_err(|source| SaveError::Write {
        path: path.clone(),
        source,
    })?;
    tracing::info!(file = %path.display(), target = %full.targets.first().map(|t| t.iqn.as_str()).unwrap_or_default(), "first start: configuration written");
    Ok(Some(path))
}
