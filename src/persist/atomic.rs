//! Replacing a file atomically: the new text goes to a temporary file in
//! the same directory (created with `O_EXCL`, mode 0600), is synced,
//! renamed over the old file, and the directory is synced, so a crash
//! leaves the old file or the new one, never a mix or nothing.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Writes `contents` to `path` atomically (see the module docs).
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} names no file", path.display()),
            )
        })?;
    // A leftover of a crashed writer is a name collision, not a reason to
    // fail: try a few names.
    let mut last = None;
    for attempt in 0..16u32 {
        let tmp = dir.join(format!(".{name}.{}.{attempt}.tmp", std::process::id()));
        let file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let done = fill(file, contents).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        return File::open(&dir).and_then(|d| d.sync_all());
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary file name was free")))
}

fn fill(mut file: File, contents: &[u8]) -> std::io::Result<()> {
    file.write_all(contents)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_the_file_with_mode_0600_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("rustgt.toml");
        std::fs::write(&path, "old").expect("write");
        write_atomic(&path, b"new text\n").expect("atomic write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new text\n");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("rustgt.toml")]);
    }

    #[test]
    fn creates_a_missing_file_and_skips_a_stale_temporary() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("new.toml");
        let stale = dir
            .path()
            .join(format!(".new.toml.{}.0.tmp", std::process::id()));
        std::fs::write(&stale, "stale").expect("stale");
        write_atomic(&path, b"x = 1\n").expect("atomic write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "x = 1\n");
        assert_eq!(std::fs::read_to_string(&stale).expect("stale"), "stale");
    }

    #[test]
    fn a_missing_directory_fails_and_changes_nothing() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("no").join("such.toml");
        assert!(write_atomic(&path, b"x").is_err());
        assert!(!path.exists());
    }
}
