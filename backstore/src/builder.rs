//! Builds one LUN's store as the daemon configures it: the engine, an
//! hddsim placement when the engine is `hddsim`, and optionally the LUN's
//! [`IoContext`] around it.
//!
//! Kernel readahead and ours never run together: with a rustgt policy on a
//! buffered file the fd gets POSIX_FADV_RANDOM (Linux stops reading ahead
//! on it); with `kernel` it gets POSIX_FADV_NORMAL and the context passes
//! reads straight through, counting them.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use crate::file::{FileBackstore, FileOptions};
use crate::hddsim::{HddSimBackstore, HddSimOptions};
use crate::ioctx::{DeviceHints, IoContext, IoContextOptions, ReadaheadPolicy};
use crate::{open, Backstore, BackstoreError, BackstoreSpec, EngineKind, Result};

/// Everything that makes one LUN's store.
#[derive(Debug, Clone, PartialEq)]
pub struct LunStoreSpec {
    pub backstore: BackstoreSpec,
    /// Placement on a simulated device; used when the engine is `hddsim`.
    pub hddsim: HddSimOptions,
    /// The LUN's I/O context; `None` hands the bare engine to the SCSI core.
    pub io_context: Option<IoContextOptions>,
}

impl LunStoreSpec {
    /// A bare engine with default hddsim placement and no I/O context.
    pub fn new(backstore: BackstoreSpec) -> Self {
        Self {
            backstore,
            hddsim: HddSimOptions::default(),
            io_context: None,
        }
    }
}

/// Opens the engine and wraps it in its I/O context, ready for the SCSI
/// core's workers to share.
pub fn build(spec: &LunStoreSpec) -> Result<Arc<dyn Backstore>> {
    let b = &spec.backstore;
    let mut buffered_fd: Option<Arc<FileBackstore>> = None;
    let engine: Arc<dyn Backstore> = match b.kind {
        EngineKind::HddSim => Arc::new(HddSimBackstore::from_spec(b, &spec.hddsim)?),
        EngineKind::File => {
            let path = b.path.as_deref().ok_or_else(|| {
                BackstoreError::Config("file backstore: a path is required".into())
            })?;
            let file = Arc::new(FileBackstore::open(
                path,
                &FileOptions {
                    size: b.size,
                    block_size: b.block_size,
                    read_only: b.read_only,
                    thin: b.thin,
                    direct: false,
                },
            )?);
            buffered_fd = Some(Arc::clone(&file));
            file
        }
        _ => open(b)?,
    };
    let Some(mut opts) = spec.io_context else {
        return Ok(engine);
    };
    if b.kind == EngineKind::HddSim {
        opts.device = DeviceHints::of_array(&spec.hddsim.array);
    }
    let kernel = opts.policy == ReadaheadPolicy::Kernel;
    if let Some(file) = &buffered_fd {
        let advice = if kernel {
            libc::POSIX_FADV_NORMAL
        } else {
            libc::POSIX_FADV_RANDOM
        };
        fadvise(file.raw_file(), advice)?;
    }
    // `kernel` leaves readahead to Linux: nothing to do on top of a
    // buffered fd, and nothing to do at all for RAM or null stores. Only the
    // simulated disk, which has no page cache, gets the emulated policy.
    let ctx = if kernel && b.kind != EngineKind::HddSim {
        IoContext::passthrough(engine, &opts)?
    } else {
        IoContext::new(engine, &opts)?
    };
    Ok(Arc::new(ctx))
}

/// posix_fadvise over the whole file.
fn fadvise(file: &File, advice: libc::c_int) -> Result<()> {
    // SAFETY: posix_fadvise only reads its scalar arguments; the fd is
    // borrowed from an open `File` for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(BackstoreError::Io(std::io::Error::from_raw_os_error(rc)))
    }
}
