//! [`ScsiError`]: the errors of the SCSI core's management interface
//! (adding LUNs, starting workers), below everything that reports them.

use crate::spc::MAX_LUN;

/// Errors of the SCSI core's management interface.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScsiError {
    #[error("LUN {0} already exists")]
    LunExists(u64),
    #[error("LUN {0} does not exist")]
    NoSuchLun(u64),
    #[error("LUN {0} is out of range (at most {MAX_LUN})")]
    LunOutOfRange(u64),
    #[error("LUN {lun}: {reason}")]
    InvalidConfig { lun: u64, reason: String },
    #[error("LUN {lun}: cannot start a worker thread: {source}")]
    Spawn {
        lun: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("the target has been shut down")]
    ShutDown,
}
