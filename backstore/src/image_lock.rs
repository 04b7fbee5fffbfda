//! One user per image: the locks that keep a second daemon, or a second
//! LUN of the same daemon, off a file or block device a LUN already serves.
//!
//! Two layers:
//! - between processes, an open file description lock (`F_OFD_SETLK`) on
//!   the whole image, exclusive for a writable LUN and shared for a
//!   read-only one, taken on a descriptor of its own that this module keeps
//!   open while any holder lives (closing it releases the lock); another
//!   process's lock makes [`lock_image`] fail at once (no waiting);
//! - within the process, a table of the images locked, by device and
//!   inode, with the holders' names: a lock of the same holder again (the
//!   store of a LUN reopened by a resize, a reload or an admin change while
//!   the old one still runs) shares the entry, and another holder is
//!   refused unless both only read. (OFD locks of two descriptors conflict
//!   even in one process, which is why the lock is taken once per image.)
//!
//! RBD images keep their own exclusive-lock protocol and never come here.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::BackstoreError;

/// Why an image could not be locked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another holder of this process uses the image.
    #[error(
        "image {} is already used by {holder} (as {}); one image backs one LUN \
         (read-only LUNs may share one)",
        path.display(),
        first.display()
    )]
    InUse {
        /// The image as asked for.
        path: PathBuf,
        /// The other holder.
        holder: String,
        /// The path the other holder locked it under.
        first: PathBuf,
    },
    /// Another process holds a conflicting lock.
    #[error(
        "image {} is locked by another process (another rustgt serving it?); \
         two daemons must not serve one image",
        path.display()
    )]
    Elsewhere {
        /// The image.
        path: PathBuf,
    },
    /// The image could not be examined, opened or locked.
    #[error("image {}: {what}: {source}", path.display())]
    Io {
        /// The image.
        path: PathBuf,
        /// What failed.
        what: &'static str,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl From<LockError> for BackstoreError {
    fn from(e: LockError) -> Self {
        BackstoreError::Config(e.to_string())
    }
}

type Result<T, E = LockError> = std::result::Result<T, E>;

fn io_error(path: &Path, what: &'static str) -> impl FnOnce(io::Error) -> LockError {
    let path = path.to_owned();
    move |source| LockError::Io { path, what, source }
}

/// One image locked by this process.
#[derive(Debug)]
struct Entry {
    /// The descriptor that holds the OFD lock.
    file: File,
    /// Whether `file` was opened for writing (an exclusive lock needs it).
    writable: bool,
    /// Whether the lock held now is exclusive.
    exclusive: bool,
    /// The path it was first locked under (for messages).
    path: PathBuf,
    /// Holders and whether each writes; one element per [`ImageLock`].
    holders: Vec<(String, bool)>,
}

type Key = (u64, u64);

/// A held lock on an image; dropping the last holder's releases it.
#[derive(Debug)]
pub struct ImageLock {
    key: Key,
    holder: String,
    write: bool,
}

/// Locks the image at `path` for `holder` (a name for messages, such as
/// "target iqn.… LUN 0"; the same holder may lock the same image again),
/// exclusively if `write`, shared otherwise. Fails with an error naming
/// the image (and the other holder, when it is in this process) if another
/// holder or another process uses it.
pub fn lock_image(path: &Path, holder: &str, write: bool) -> Result<ImageLock> {
    let meta = std::fs::metadata(path).map_err(io_error(path, "cannot stat"))?;
    let key = (meta.dev(), meta.ino());
    let mut t = lock_table();
    if let Some(e) = t.get_mut(&key) {
        let other = e
            .holders
            .iter()
            .find(|(h, w)| h != holder && (write || *w))
            .map(|(h, _)| h.clone());
        if let Some(holder) = other {
            return Err(LockError::InUse {
                path: path.to_owned(),
                holder,
                first: e.path.clone(),
            });
        }
        if write && !e.exclusive {
            if !e.writable {
                return Err(io_error(path, "cannot lock it for writing")(
                    io::Error::from_raw_os_error(libc::EBADF),
                ));
            }
            ofd_lock(&e.file, libc::F_WRLCK as libc::c_short)
                .map_err(|err| locked_elsewhere(path, err))?;
            e.exclusive = true;
        }
        e.holders.push((holder.to_owned(), write));
        return Ok(ImageLock {
            key,
            holder: holder.to_owned(),
            write,
        });
    }
    // Writable if we may (so a read-only holder's lock can be made
    // exclusive later); a writer needs it.
    let (file, writable) = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => (f, true),
        Err(_) if !write => (
            File::open(path).map_err(io_error(path, "cannot open"))?,
            false,
        ),
        Err(e) => return Err(io_error(path, "cannot open")(e)),
    };
    let kind = if write { libc::F_WRLCK } else { libc::F_RDLCK };
    ofd_lock(&file, kind as libc::c_short).map_err(|err| locked_elsewhere(path, err))?;
    t.insert(
        key,
        Entry {
            file,
            writable,
            exclusive: write,
            path: path.to_owned(),
            holders: vec![(holder.to_owned(), write)],
        },
    );
    Ok(ImageLock {
        key,
        holder: holder.to_owned(),
        write,
    })
}

fn lock_table() -> MutexGuard<'static, HashMap<Key, Entry>> {
    static TABLE: std::sync::OnceLock<Mutex<HashMap<Key, Entry>>> = std::sync::OnceLock::new();
    TABLE
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn locked_elsewhere(path: &Path, err: io::Error) -> LockError {
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => LockError::Elsewhere {
            path: path.to_owned(),
        },
        _ => io_error(path, "cannot lock it")(err),
    }
}

/// Sets an OFD lock of `kind` on the whole of `file`, without waiting.
fn ofd_lock(file: &File, kind: libc::c_short) -> io::Result<()> {
    // SAFETY: `flock` is a plain C struct for which all zeroes is a valid
    // value; fcntl(F_OFD_SETLK) reads it through a pointer valid for the
    // call, on a descriptor `file` keeps open, and does not keep it.
    let rc = unsafe {
        let mut fl: libc::flock = std::mem::zeroed();
        fl.l_type = kind;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 0;
        fl.l_len = 0; // the whole file, however it grows
        fl.l_pid = 0; // required for OFD locks
        libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl)
    };
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Drop for ImageLock {
    fn drop(&mut self) {
        let mut t = lock_table();
        let Some(e) = t.get_mut(&self.key) else {
            return;
        };
        if let Some(at) = e
            .holders
            .iter()
            .position(|(h, w)| *h == self.holder && *w == self.write)
        {
            e.holders.remove(at);
        }
        if e.holders.is_empty() {
            // Closing the descriptor releases the lock.
            t.remove(&self.key);
        } else if e.exclusive
            && !e.holders.iter().any(|(_, w)| *w)
            && ofd_lock(&e.file, libc::F_RDLCK as libc::c_short).is_ok()
        {
            // Only readers left: the lock is shared again.
            e.exclusive = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lun.img");
        std::fs::write(&p, [0u8; 4096]).expect("write");
        (dir, p)
    }

    fn other_process_can_lock(p: &Path, kind: libc::c_int) -> bool {
        // Another descriptor conflicts like another process would.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .expect("open");
        ofd_lock(&f, kind as libc::c_short).is_ok()
    }

    #[test]
    fn one_holder_may_lock_again_another_is_refused() {
        let (_d, p) = image();
        let a = lock_image(&p, "target t LUN 0", true).expect("first");
        let again = lock_image(&p, "target t LUN 0", true).expect("same holder");
        let err = lock_image(&p, "target t LUN 1", false).expect_err("other holder");
        let text = err.to_string();
        assert!(text.contains(&p.display().to_string()), "{text}");
        assert!(text.contains("target t LUN 0"), "{text}");
        assert!(!other_process_can_lock(&p, libc::F_RDLCK));
        drop(a);
        assert!(!other_process_can_lock(&p, libc::F_RDLCK), "still held");
        drop(again);
        assert!(other_process_can_lock(&p, libc::F_WRLCK), "released");
    }

    #[test]
    fn readers_share_and_a_writer_upgrades_and_downgrades() {
        let (_d, p) = image();
        let r1 = lock_image(&p, "LUN 1", false).expect("reader");
        let r2 = lock_image(&p, "LUN 2", false).expect("readers share");
        assert!(other_process_can_lock(&p, libc::F_RDLCK));
        assert!(!other_process_can_lock(&p, libc::F_WRLCK));
        assert!(
            lock_image(&p, "LUN 3", true).is_err(),
            "no writer among readers"
        );
        drop(r2);
        let w = lock_image(&p, "LUN 1", true).expect("the reader reopened writable");
        assert!(!other_process_can_lock(&p, libc::F_RDLCK), "exclusive now");
        drop(w);
        assert!(other_process_can_lock(&p, libc::F_RDLCK), "shared again");
        drop(r1);
    }
}
