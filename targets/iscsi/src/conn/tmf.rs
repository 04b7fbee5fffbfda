//! Task management (RFC 7143 §11.5, §11.6): mapping requests to SCSI
//! task-management functions, ending writes still collecting data, and
//! bounding how many run and wait per connection.

use rustgt_scsi::{TmfFunction, TmfResponse};

use super::rdma::Deferred;
use super::{Connection, Event, QueuedTmf, MAX_TMFS_QUEUED, MAX_TMFS_RUNNING};
use crate::pdu::{decode_lun, Reply, TaskMgmtRequest, TaskMgmtResponse, TmfCode, TmfResult};

impl Connection {
    pub(super) fn handle_tmf(&mut self, t: TaskMgmtRequest) {
        if !self.accept_cmd_sn(t.immediate, t.cmd_sn) {
            return;
        }
        let lun = decode_lun(t.lun);
        let function = match t.function {
            TmfCode::ABORT_TASK => {
                // A read waiting for the budget never reached the SCSI
                // core either.
                if let Some((c, _, _)) = self.reads_waiting.get(&t.referenced_tag) {
                    if decode_lun(c.lun) == lun {
                        let imm = c.immediate;
                        self.reads_waiting.remove(&t.referenced_tag);
                        self.retire(imm);
                        self.send_tmf_response(t.itt, TmfResult::COMPLETE, t.immediate);
                        return;
                    }
                }
                // A write still collecting data never reached the SCSI core.
                if let Some(w) = self.writes.get(&t.referenced_tag) {
                    if decode_lun(w.cmd.lun) == lun {
                        let imm = w.cmd.immediate;
                        self.writes.remove(&t.referenced_tag);
                        self.retire(imm);
                        let reads = self.reads_for(&[t.referenced_tag]);
                        let then = Deferred::Tmf {
                            itt: t.itt,
                            result: TmfResult::COMPLETE,
                            immediate: t.immediate,
                        };
                        self.after_reads(reads, then);
                        return;
                    }
                }
                TmfFunction::AbortTask {
                    tag: u64::from(t.referenced_tag),
                }
            }
            TmfCode::ABORT_TASK_SET => TmfFunction::AbortTaskSet,
            TmfCode::CLEAR_TASK_SET => TmfFunction::ClearTaskSet,
            TmfCode::CLEAR_ACA => TmfFunction::ClearAca,
            TmfCode::LOGICAL_UNIT_RESET => TmfFunction::LogicalUnitReset,
            TmfCode::TARGET_WARM_RESET => TmfFunction::TargetWarmReset,
            TmfCode::TARGET_COLD_RESET => TmfFunction::TargetColdReset,
            TmfCode::TASK_REASSIGN => {
                // Needs ERL 2 (§11.5.1).
                self.send_tmf_response(t.itt, TmfResult::REASSIGNMENT_NOT_SUPPORTED, t.immediate);
                return;
            }
            _ => {
                self.send_tmf_response(t.itt, TmfResult::REJECTED, t.immediate);
                return;
            }
        };
        // Bounded: past the running slots and the queue, the request is
        // rejected before it has any effect.
        if self.tmfs.len() >= MAX_TMFS_RUNNING && self.tmf_queue.len() >= MAX_TMFS_QUEUED {
            self.tmfs_rejected = self.tmfs_rejected.saturating_add(1);
            if self.tmfs_rejected == 1 {
                tracing::warn!(
                    running = MAX_TMFS_RUNNING,
                    queued = MAX_TMFS_QUEUED,
                    "task-management requests over the per-connection bound: answering Function Rejected"
                );
            }
            self.send_tmf_response(t.itt, TmfResult::REJECTED, t.immediate);
            return;
        }
        if matches!(
            function,
            TmfFunction::AbortTaskSet
                | TmfFunction::ClearTaskSet
                | TmfFunction::LogicalUnitReset
                | TmfFunction::TargetWarmReset
                | TmfFunction::TargetColdReset
        ) {
            // Writes still collecting data on the affected LUN(s) die here.
            let all = matches!(
                function,
                TmfFunction::TargetWarmReset | TmfFunction::TargetColdReset
            );
            let dead: Vec<(u32, bool)> = self
                .writes
                .iter()
                .filter(|(_, w)| all || decode_lun(w.cmd.lun) == lun)
                .map(|(itt, w)| (*itt, w.cmd.immediate))
                .collect();
            let itts: Vec<u32> = dead.iter().map(|(itt, _)| *itt).collect();
            for (itt, imm) in dead {
                self.writes.remove(&itt);
                self.retire(imm);
            }
            let waiting: Vec<(u32, bool)> = self
                .reads_waiting
                .iter()
                .filter(|(_, (c, _, _))| all || decode_lun(c.lun) == lun)
                .map(|(itt, (c, _, _))| (*itt, c.immediate))
                .collect();
            for (itt, imm) in waiting {
                self.reads_waiting.remove(&itt);
                self.retire(imm);
            }
            let reads = self.reads_for(&itts);
            self.fence_tmf(t.itt, reads);
        }
        self.tmf_queue.push_back(QueuedTmf {
            itt: t.itt,
            immediate: t.immediate,
            lun,
            function,
        });
        self.start_tmfs();
    }

    /// Hands queued task-management requests to the driver while running
    /// slots are free.
    pub(super) fn start_tmfs(&mut self) {
        while self.tmfs.len() < MAX_TMFS_RUNNING {
            let Some(q) = self.tmf_queue.pop_front() else {
                break;
            };
            self.tmfs.insert(q.itt, q.immediate);
            self.events.push_back(Event::TaskMgmt {
                itt: q.itt,
                lun: q.lun,
                function: q.function,
            });
        }
    }

    /// Task-management requests running and waiting (for tests and stats).
    pub fn tmfs_pending(&self) -> (usize, usize) {
        (self.tmfs.len(), self.tmf_queue.len())
    }

    /// The SCSI core's answer to a task-management request.
    pub fn tmf_done(&mut self, itt: u32, resp: TmfResponse) {
        let Some(immediate) = self.tmfs.remove(&itt) else {
            return;
        };
        self.start_tmfs();
        let result = match resp {
            TmfResponse::FunctionComplete | TmfResponse::FunctionSucceeded => TmfResult::COMPLETE,
            // With one connection per session every command below ExpCmdSN
            // was received, so the §11.5.1 "consider it received" case for
            // in-window RefCmdSN cannot arise: not found means done.
            TmfResponse::TaskNotFound => TmfResult::TASK_DOES_NOT_EXIST,
            TmfResponse::IncorrectLun => TmfResult::LUN_DOES_NOT_EXIST,
            TmfResponse::NotSupported => TmfResult::NOT_SUPPORTED,
            TmfResponse::FunctionRejected => TmfResult::REJECTED,
        };
        // A non-immediate request gives its CmdSN window slot back now.
        let reads = self.take_tmf_fence(itt);
        let then = Deferred::Tmf {
            itt,
            result,
            immediate,
        };
        self.after_reads(reads, then);
    }

    pub(super) fn send_tmf_response(&mut self, itt: u32, result: TmfResult, immediate: bool) {
        self.retire(immediate);
        let r = TaskMgmtResponse {
            response: result,
            itt,
            stat_sn: self.next_stat_sn(),
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self.max_cmd_sn,
        };
        self.send(Reply::TaskMgmtResponse(r));
    }
}
