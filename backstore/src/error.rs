//! The backstore layer's errors ([`BackstoreError`]) and its [`Result`].

/// Errors of the backstore layer. The SCSI core maps each to sense data in one place.
// Not `#[non_exhaustive]`, unlike the other public error enums: the SCSI
// crate maps every variant to sense data in one exhaustive match
// (`From<BackstoreError> for Sense`), and a new variant must fail to
// compile there rather than fall into a wildcard.
#[derive(Debug, thiserror::Error)]
pub enum BackstoreError {
    /// The engine cannot do this operation (the [`Backstore`](crate::Backstore)
    /// trait's default): ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE.
    #[error("operation not supported by this backstore")]
    Unsupported,
    /// The byte range reaches past the end of the store, or `offset + len`
    /// overflows: ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE.
    #[error("access at byte {offset} length {len} is beyond the end of the store")]
    OutOfRange {
        /// First byte of the refused access.
        offset: u64,
        /// Its length in bytes.
        len: u64,
    },
    /// A write, WRITE SAME or unmap on a read-only store: DATA PROTECT,
    /// WRITE PROTECTED.
    #[error("backstore is read-only")]
    ReadOnly,
    /// The store cannot be opened or used as configured; the message says
    /// why, for the operator. Reaching a command, it is HARDWARE ERROR,
    /// INTERNAL TARGET FAILURE.
    #[error("invalid backstore configuration: {0}")]
    Config(String),
    /// Reading the medium failed: MEDIUM ERROR, UNRECOVERED READ ERROR.
    #[error("read failed: {0}")]
    Read(#[source] std::io::Error),
    /// Writing the medium failed: MEDIUM ERROR, WRITE ERROR; with ENOSPC
    /// (`StorageFull`) DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT.
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    /// Making written data durable failed: reported as a failed write.
    #[error("flush failed: {0}")]
    Flush(#[source] std::io::Error),
    /// Any other I/O error (e.g. opening or sizing the store, deallocating,
    /// an extent query): HARDWARE ERROR, INTERNAL TARGET FAILURE, or the
    /// out-of-space sense above with ENOSPC.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The store refused the I/O because another client owns it now (an
    /// RBD image whose exclusive lock another gateway holds, or this
    /// gateway fenced by a lock break). The SCSI core reports an ALUA
    /// state transition, so the initiator retries on another path.
    #[error("the store is owned by another client: {0}")]
    Fenced(#[source] std::io::Error),
    /// Inside a [`nowait::attempt`](crate::nowait::attempt): the operation would have had to wait.
    /// The caller runs it again where it may block; never sent to a peer.
    #[error("the operation would block")]
    WouldBlock,
}

impl BackstoreError {
    /// The store's client was fenced for good (an RBD client blocklisted
    /// by another gateway's lock break: Ceph's EBLOCKLISTED, ESHUTDOWN on
    /// Linux), not merely refused a lock another client holds (EROFS):
    /// only a new client, a reopened store, can serve again.
    pub fn client_blocklisted(&self) -> bool {
        matches!(self, BackstoreError::Fenced(e) if e.raw_os_error() == Some(libc::ESHUTDOWN))
    }
}

/// The result of a backstore operation.
pub type Result<T> = std::result::Result<T, BackstoreError>;
