//! The shape of a store and of what it reports: [`Geometry`], the runs of
//! its allocation map ([`Extent`]) and the device under it ([`DeviceKey`]).

/// Size and shape of a backing store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size in bytes: 512 or 4096.
    pub block_size: u32,
    /// Number of logical blocks.
    pub num_blocks: u64,
    /// Writes are refused with [`BackstoreError::ReadOnly`](crate::BackstoreError::ReadOnly).
    pub read_only: bool,
}

impl Geometry {
    /// Capacity in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks.saturating_mul(u64::from(self.block_size))
    }
}

/// One run of a store's allocation map (see [`Backstore::extents`](crate::Backstore::extents)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the run.
    pub len: u64,
    /// Backed by storage (`true`), or deallocated and reading as zeros.
    pub mapped: bool,
}

/// Names the device under a store (see [`Backstore::device_key`](crate::Backstore::device_key)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceKey {
    /// Equal for stores on the same device, e.g. "block:8:0" or "hddsim:md0".
    pub key: String,
    /// Whether the device seeks (rotational), so turns pay off.
    pub seeks: bool,
}
