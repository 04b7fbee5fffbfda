//! Opening the store a [`BackstoreSpec`] describes: the one place that
//! knows every engine's constructor.

use std::path::Path;
use std::sync::Arc;

use crate::blockdev::{BlockDevBackstore, BlockDevOptions};
use crate::common::validate_block_size;
use crate::error::{BackstoreError, Result};
use crate::file::{FileBackstore, FileOptions};
use crate::mmap::MmapBackstore;
use crate::null::NullBackstore;
use crate::ram::RamBackstore;
#[cfg(feature = "rbd")]
use crate::rbd::RbdOptions;
use crate::spec::{BackstoreSpec, EngineKind};
use crate::store::Backstore;

/// The file engine's options for a spec (buffered I/O), shared by the
/// file and mmap engines.
fn file_options(spec: &BackstoreSpec) -> FileOptions {
    FileOptions {
        size: spec.size,
        block_size: spec.block_size,
        read_only: spec.read_only,
        thin: spec.thin,
        direct: false,
    }
}

/// Opens the store `spec` describes, ready to share between worker threads.
pub fn open(spec: &BackstoreSpec) -> Result<Arc<dyn Backstore>> {
    if !(spec.kind == EngineKind::BlockDev && spec.block_size == 0) {
        validate_block_size(spec.block_size)?;
    }
    if spec.size == Some(0) {
        return Err(BackstoreError::Config(format!(
            "{} backstore: size must not be zero",
            spec.kind
        )));
    }
    let store: Arc<dyn Backstore> = match spec.kind {
        EngineKind::File => Arc::new(FileBackstore::open(need_path(spec)?, &file_options(spec))?),
        EngineKind::Mmap => Arc::new(MmapBackstore::open(need_path(spec)?, &file_options(spec))?),
        EngineKind::BlockDev => Arc::new(BlockDevBackstore::open(
            need_path(spec)?,
            &BlockDevOptions {
                block_size: (spec.block_size != 0).then_some(spec.block_size),
                size: spec.size,
                read_only: spec.read_only,
                thin: spec.thin,
                direct: false,
            },
        )?),
        EngineKind::Ram => Arc::new(RamBackstore::new(
            need_size(spec)?,
            spec.block_size,
            spec.read_only,
        )?),
        EngineKind::Null => Arc::new(NullBackstore::new(
            need_size(spec)?,
            spec.block_size,
            spec.read_only,
        )?),
        EngineKind::HddSim => Arc::new(crate::hddsim::engine::HddSimBackstore::from_spec(
            spec,
            &crate::hddsim::engine::HddSimOptions::default(),
        )?),
        EngineKind::Rbd => open_rbd(spec)?,
    };
    Ok(store)
}

#[cfg(feature = "rbd")]
fn open_rbd(spec: &BackstoreSpec) -> Result<Arc<dyn Backstore>> {
    let opts = spec.rbd.as_ref().ok_or_else(|| {
        BackstoreError::Config("rbd backstore: the image (pool, image) is required".into())
    })?;
    if spec.path.is_some() || spec.size.is_some() {
        return Err(BackstoreError::Config(
            "rbd backstore takes no path and no size: the image's size is the LUN's".into(),
        ));
    }
    let opts = RbdOptions {
        block_size: spec.block_size,
        read_only: spec.read_only,
        ..opts.clone()
    };
    Ok(Arc::new(crate::rbd::RbdBackstore::open(&opts)?))
}

#[cfg(not(feature = "rbd"))]
fn open_rbd(_spec: &BackstoreSpec) -> Result<Arc<dyn Backstore>> {
    Err(BackstoreError::Config(
        "this rustgt was built without RBD support (build with the cargo feature `rbd`)".into(),
    ))
}

fn need_path(spec: &BackstoreSpec) -> Result<&Path> {
    spec.path.as_deref().ok_or_else(|| {
        BackstoreError::Config(format!("{} backstore: a path is required", spec.kind))
    })
}

fn need_size(spec: &BackstoreSpec) -> Result<u64> {
    if let Some(path) = &spec.path {
        return Err(BackstoreError::Config(format!(
            "{} backstore takes no path (got {})",
            spec.kind,
            path.display()
        )));
    }
    spec.size.ok_or_else(|| {
        BackstoreError::Config(format!("{} backstore: a size is required", spec.kind))
    })
}
