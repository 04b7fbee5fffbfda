//! Keeping the configuration file the running state: every change made
//! over the admin socket (and the identities generated at start) is
//! written into the file the daemon was started with ([`edit`]: only the
//! keys that changed, comments kept) and the file replaced atomically
//! ([`atomic`]).

pub mod atomic;
pub mod edit;

use std::path::{Path, PathBuf};

use crate::config::Config;

/// Why a change could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot update {}: {source}", path.display())]
    Edit {
        path: PathBuf,
        #[source]
        source: edit::EditError,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes the change from `old` to `new` into `file` (created when
/// missing). The file is read again each time, so an edit the admin made
/// by hand and has not reloaded yet is kept.
pub fn save(file: &Path, old: &Config, new: &Config) -> Result<(), SaveError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(SaveError::Read {
                path: file.to_owned(),
                source,
            })
        }
    };
    let updated = edit::update(&text, old, new).map_err(|source| SaveError::Edit {
        path: file.to_owned(),
        source,
    })?;
    if updated == text && file.exists() {
        return Ok(());
    }
    atomic::write_atomic(file, updated.as_bytes()).map_err(|source| SaveError::Write {
        path: file.to_owned(),
        source,
    })
}
