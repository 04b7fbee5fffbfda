//! Keeping the configuration file the running state: every change made
//! over the admin socket (and the identities generated at start) is
//! written into the file the daemon was started with ([`edit`]: only the
//! keys that changed, comments kept) and the file replaced atomically
//! ([`atomic`]).

pub mod atomic;
pub mod edit;
mod groups;

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
/// by hand and has not reloaded yet is kept. A symbolic link is followed:
/// the file it names is replaced, the link stays.
pub fn save(file: &Path, old: &Config, new: &Config) -> Result<(), SaveError> {
    let real = std::fs::canonicalize(file).ok();
    let file = real.as_deref().unwrap_or(file);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linked_file_is_updated_and_the_link_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let real = dir.path().join("real.toml");
        let link = dir.path().join("rustgt.toml");
        let text = "# mine\n[[targets]]\niqn = \"iqn.2026-11.org.example:a\"\n";
        std::fs::write(&real, text).expect("write");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let old =
            crate::config::load(Some(&link), &crate::config::Overrides::default()).expect("loads");
        let mut new = old.clone();
        if let Some(t) = new.targets.first_mut() {
            t.acl.push("iqn.2026-11.org.example:host".into());
        }
        save(&link, &old, &new).expect("saved");
        assert!(std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink());
        let saved = std::fs::read_to_string(&real).expect("read");
        assert!(saved.starts_with("# mine\n"), "{saved}");
        assert!(saved.contains("iqn.2026-11.org.example:host"), "{saved}");
    }
}
