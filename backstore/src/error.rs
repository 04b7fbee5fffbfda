//! The backstore layer's errors ([`BackstoreError`]) and its [`Result`].

/// Errors of the backstore layer. The SCSI core maps each to sense data in one place.
// Not `#[non_exhaustive]`, unlike the other public error enums: the SCSI
// crate maps every variant to sense data in one exhaustive match
// (`From<BackstoreError> for Sense`), and a new variant must fail to
// compile there rather than fall into a wildcard.
#[derive(Debug, thiserror::Error)]
pub enum BackstoreError {
    #[error("operation not supported by this backstore")]
    Unsupported,
    #[error("access at byte {offset} length {len} is beyond the end of the store")]
    OutOfRange { offset: u64, len: u64 },
    #[error("backstore is read-only")]
    ReadOnly,
    #[error("invalid backstore configuration: {0}")]
    Config(String),
    #[error("read failed: {0}")]
    Read(#[source] std::io::Error),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("flush failed: {0}")]
    Flush(#[source] std::io::Error),
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

pub type Result<T> = std::result::Result<T, BackstoreError>;
