//! [`ScsiError`]: the errors of the SCSI core's management interface
//! (adding LUNs, starting workers), below everything that reports them.

use crate::spc::MAX_LUN;

/// Errors of the SCSI core's management interface.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScsiError {
    /// [`ScsiTarget::add_lun`](crate::ScsiTarget::add_lun): the target
    /// already exports this LUN.
    #[error("LUN {0} already exists")]
    LunExists(u64),
    /// The target exports no such LUN (removing it, changing its capacity).
    #[error("LUN {0} does not exist")]
    NoSuchLun(u64),
    /// The LUN number is above [`MAX_LUN`](crate::MAX_LUN), the largest a
    /// flat-space SAM LUN can carry.
    #[error("LUN {0} is out of range (at most {MAX_LUN})")]
    LunOutOfRange(u64),
    /// The LUN's configuration is unusable: a block size that is not a
    /// multiple of 512, a physical block size that is not a power-of-two
    /// multiple of it, or a persistent reservation file that cannot be read.
    #[error("LUN {lun}: {reason}")]
    InvalidConfig {
        /// The LUN being added.
        lun: u64,
        /// What is wrong, for the operator.
        reason: String,
    },
    /// A worker thread of the LUN could not be started; the LUN is not
    /// exported.
    #[error("LUN {lun}: cannot start a worker thread: {source}")]
    Spawn {
        /// The LUN being added.
        lun: u64,
        /// The error from spawning the thread.
        #[source]
        source: std::io::Error,
    },
    /// [`ScsiTarget::shutdown`](crate::ScsiTarget::shutdown) has run; the
    /// target takes no new LUNs.
    #[error("the target has been shut down")]
    ShutDown,
}
