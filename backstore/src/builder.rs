//! Builds one LUN's store as the daemon configures it: the engine, an
//! hddsim placement when the engine is `hddsim`, and optionally the LUN's
//! [`IoContext`] around it.
//!
//! Kernel readahead and ours never run together: with a rustgt policy on a
//! buffered file or block device the fd gets POSIX_FADV_RANDOM (Linux stops
//! reading ahead on it); with `kernel` it gets POSIX_FADV_NORMAL and the
//! context passes reads straight through, counting them. (The mmap engine
//! gets MADV_RANDOM / MADV_NORMAL on its mapping instead.)

use std::sync::Arc;

use crate::hddsim::{HddSimBackstore, HddSimOptions};
use crate::ioctx::{DeviceHints, IoContext, IoContextOptions, ReadaheadPolicy};
use crate::open::open;
use crate::{error::Result, spec::BackstoreSpec, spec::EngineKind, store::Backstore};

/// Everything that makes one LUN's store.
#[derive(Debug, Clone, PartialEq)]
pub struct LunStoreSpec {
    /// The engine and what it opens (path, size, block size, flags).
    pub backstore: BackstoreSpec,
    /// Placement on a simulated device; used when the engine is `hddsim`.
    pub hddsim: HddSimOptions,
    /// The LUN's I/O context; `None` hands the bare engine to the SCSI core.
    pub io_context: Option<IoContextOptions>,
    /// `readahead = "auto"`: the context's policy is picked from the engine
    /// ([`auto_policy`]), replacing `io_context.policy`.
    pub readahead_auto: bool,
}

impl LunStoreSpec {
    /// A bare engine with default hddsim placement and no I/O context.
    pub fn new(backstore: BackstoreSpec) -> Self {
        Self {
            backstore,
            hddsim: HddSimOptions::default(),
            io_context: None,
            readahead_auto: false,
        }
    }
}

/// Opens the engine and wraps it in its I/O context, ready for the SCSI
/// core's workers to share.
pub fn build(spec: &LunStoreSpec) -> Result<Arc<dyn Backstore>> {
    let engine = open_engine(spec)?;
    Ok(match attach_context(spec, Arc::clone(&engine))? {
        Some(ctx) => ctx,
        None => engine,
    })
}

/// Opens the bare engine of a LUN (no I/O context).
pub fn open_engine(spec: &LunStoreSpec) -> Result<Arc<dyn Backstore>> {
    let b = &spec.backstore;
    Ok(match b.kind {
        EngineKind::HddSim => Arc::new(HddSimBackstore::from_spec(b, &spec.hddsim)?),
        _ => open(b)?,
    })
}

/// Wraps an open engine in the LUN's I/O context as `spec` says, and tells
/// the engine whether the kernel's readahead stays on: with a rustgt policy
/// it goes off (POSIX_FADV_RANDOM on a buffered fd), so that only one
/// readahead is at work. `None` when the spec has no I/O context.
///
/// `kernel` leaves readahead to Linux: the context then passes reads
/// straight through (counting them), for files and for RAM or null stores
/// that have no readahead at all. Only the simulated disk, which has no
/// page cache, gets the emulated policy.
pub fn attach_context(
    spec: &LunStoreSpec,
    engine: Arc<dyn Backstore>,
) -> Result<Option<Arc<IoContext>>> {
    let Some(mut opts) = spec.io_context else {
        return Ok(None);
    };
    let hddsim = spec.backstore.kind == EngineKind::HddSim;
    if hddsim {
        opts.device = DeviceHints::of_array(&spec.hddsim.array);
    }
    if spec.readahead_auto {
        opts.policy = auto_policy(&spec.backstore.kind, engine.as_ref());
    }
    let kernel = opts.policy == ReadaheadPolicy::Kernel;
    engine.kernel_readahead(kernel)?;
    let ctx = if kernel && !hddsim {
        IoContext::passthrough(engine, &opts)?
    } else {
        IoContext::new(engine, &opts)?
    };
    ctx.set_auto(spec.readahead_auto);
    Ok(Some(Arc::new(ctx)))
}

/// The policy `readahead = "auto"` runs on `engine`: rustgt's `streams`
/// where the backing seeks (the simulated disk; a file or block device on
/// a disk whose sysfs `queue/rotational` is 1, not counting paravirtual
/// disks such as virtio-blk, which say 1 for "cannot tell", and an md or
/// dm device when a disk under it seeks), where one seek costs more
/// than the readahead it saves; `kernel` where the backing is memory-speed
/// (RAM, null, non-rotational or unknown devices), so such LUNs keep the
/// passthrough context and with it the reactor's and io_uring's data path.
pub fn auto_policy(kind: &EngineKind, engine: &dyn Backstore) -> ReadaheadPolicy {
    let seeks = *kind == EngineKind::HddSim || engine.device_key().is_some_and(|d| d.seeks);
    if seeks {
        ReadaheadPolicy::Streams
    } else {
        ReadaheadPolicy::Kernel
    }
}
