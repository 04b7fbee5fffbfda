//! Copy statuses of one logical unit (SPC-4 §6.18.3): what EXTENDED COPY
//! records per I_T nexus and list identifier and RECEIVE COPY RESULTS
//! reports. Part of the logical unit's state, below the copy manager in
//! `xcopy`.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::sense::{Asc, Sense};
use crate::xcopy_param::{ListIdUsage, ParamList};

/// Copy statuses held per logical unit; the oldest finished ones go first.
const MAX_HELD_STATUSES: usize = 256;

const OPERATION_IN_PROGRESS: Asc = Asc::new(0x00, 0x16);

/// Progress of one EXTENDED COPY, for COPY STATUS.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    pub segments: u16,
    pub bytes: u64,
}

/// COPY MANAGER STATUS values (SPC-4 table 127).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyState {
    Running,
    Done,
    Failed,
}

impl CopyState {
    fn code(self) -> u8 {
        match self {
            CopyState::Running => 0x00,
            CopyState::Done => 0x01,
            CopyState::Failed => 0x02,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    nexus: u64,
    list_id: u8,
    hold: bool,
    state: CopyState,
    progress: Progress,
}

/// Names the status record of one running EXTENDED COPY.
#[derive(Debug)]
pub(crate) struct Ticket {
    nexus: u64,
    list_id: u8,
}

/// Copy statuses of one logical unit, per I_T nexus and list identifier.
#[derive(Debug, Default)]
pub(crate) struct CopyResults {
    records: Mutex<VecDeque<Record>>,
}

impl CopyResults {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Record>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a starting copy; OPERATION IN PROGRESS if its list
    /// identifier is in use by a running copy of the same nexus.
    pub(crate) fn begin(&self, nexus: u64, list: &ParamList) -> Result<Option<Ticket>, Sense> {
        if list.usage == ListIdUsage::None {
            return Ok(None);
        }
        let mut records = self.lock();
        let same = |r: &Record| r.nexus == nexus && r.list_id == list.list_id;
        if records
            .iter()
            .any(|r| same(r) && r.state == CopyState::Running)
        {
            return Err(Sense::illegal(OPERATION_IN_PROGRESS));
        }
        records.retain(|r| !same(r));
        while records.len() >= MAX_HELD_STATUSES {
            match records.iter().position(|r| r.state != CopyState::Running) {
                Some(i) => {
                    records.remove(i);
                }
                None => break,
            }
        }
        records.push_back(Record {
            nexus,
            list_id: list.list_id,
            hold: list.usage == ListIdUsage::Hold,
            state: CopyState::Running,
            progress: Progress::default(),
        });
        Ok(Some(Ticket {
            nexus,
            list_id: list.list_id,
        }))
    }

    pub(crate) fn update(&self, t: &Ticket, progress: Progress, state: CopyState) {
        let mut records = self.lock();
        if let Some(r) = records
            .iter_mut()
            .find(|r| r.nexus == t.nexus && r.list_id == t.list_id)
        {
            r.progress = progress;
            r.state = state;
        }
    }

    /// Marks a copy finished; drops its record unless it is to be held.
    pub(crate) fn finish(&self, t: &Ticket, state: CopyState) {
        let mut records = self.lock();
        if let Some(i) = records
            .iter()
            .position(|r| r.nexus == t.nexus && r.list_id == t.list_id)
        {
            let hold = records.get(i).is_some_and(|r| r.hold);
            if hold {
                if let Some(r) = records.get_mut(i) {
                    r.state = state;
                }
            } else {
                records.remove(i);
            }
        }
    }

    /// The status of a copy; a finished copy's status is reported once.
    pub(crate) fn take_status(&self, nexus: u64, list_id: u8) -> Option<Record> {
        let mut records = self.lock();
        let i = records
            .iter()
            .position(|r| r.nexus == nexus && r.list_id == list_id && r.hold)?;
        let record = *records.get(i)?;
        if record.state != CopyState::Running {
            records.remove(i);
        }
        Some(record)
    }

    /// I_T nexus loss: its held statuses are discarded.
    pub(crate) fn drop_nexus(&self, nexus: u64) {
        self.lock().retain(|r| r.nexus != nexus);
    }
}

/// COPY STATUS parameter data (SPC-4 table 126): the transfer count in the
/// smallest power-of-1024 unit that fits 32 bits.
pub(crate) fn copy_status_data(record: &Record) -> Vec<u8> {
    let mut units = 0u8;
    let mut count = record.progress.bytes;
    while count > u64::from(u32::MAX) && units < 6 {
        count >>= 10;
        units += 1;
    }
    let count = u32::try_from(count).unwrap_or(u32::MAX);
    let mut d = vec![0u8; 12];
    d[..4].copy_from_slice(&8u32.to_be_bytes());
    d[4] = record.state.code();
    d[5..7].copy_from_slice(&record.progress.segments.to_be_bytes());
    d[7] = units;
    d[8..12].copy_from_slice(&count.to_be_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xcopy_param::parse;
    use crate::xcopy_param::tests::{b2b, e4, list, NAA};

    #[test]
    fn copy_status_records() {
        let results = CopyResults::default();
        let p = parse(&list(5, 0, &[e4(&NAA, 0, false)], &[b2b(0, 0, 1, 0, 1)])).expect("valid");
        let t = results.begin(9, &p).expect("free list id").expect("held");
        assert_eq!(
            results.begin(9, &p).err().map(|s| s.asc),
            Some(OPERATION_IN_PROGRESS)
        );
        // Another nexus may use the same list identifier.
        assert!(results.begin(10, &p).is_ok());
        results.update(
            &t,
            Progress {
                segments: 1,
                bytes: 1 << 20,
            },
            CopyState::Running,
        );
        let running = results.take_status(9, 5).expect("running");
        assert_eq!(
            copy_status_data(&running),
            vec![0, 0, 0, 8, 0, 0, 1, 0, 0, 0x10, 0, 0]
        );
        results.finish(&t, CopyState::Done);
        let done = results.take_status(9, 5).expect("held");
        assert_eq!(done.state, CopyState::Done);
        assert!(results.take_status(9, 5).is_none(), "reported once");
        results.drop_nexus(10);
        assert!(results.take_status(10, 5).is_none());
    }

    #[test]
    fn big_transfer_counts_scale_units() {
        let r = Record {
            nexus: 0,
            list_id: 0,
            hold: true,
            state: CopyState::Failed,
            progress: Progress {
                segments: 2,
                bytes: 16 << 30,
            },
        };
        let d = copy_status_data(&r);
        assert_eq!(d[4], 0x02);
        assert_eq!(d[7], 1);
        assert_eq!(&d[8..12], &(16u32 << 20).to_be_bytes());
    }
}
