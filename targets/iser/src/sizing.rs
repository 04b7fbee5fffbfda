//! How big one iSER connection's queues and buffers are, from the portal
//! configuration, the driver settings, the device's limits and what the
//! initiator's connection request carried. Pure arithmetic, no verbs.
//!
//! The rules (RFC 7145 §8 flow control):
//! - receives: one per unexpected PDU the initiator may send, which the
//!   target declares as MaxOutstandingUnexpectedPDUs (§6.7). When the
//!   configuration leaves it at 0 (no limit), the CmdSN window bounds it:
//!   the queue depth, plus unsolicited Data-Out PDUs when InitialR2T=No,
//!   plus room for immediate commands (NOP-Out, task management, logout);
//! - sends: a response for every command of the window plus the same
//!   room; RDMA Writes and Reads each hold one data buffer, so the send
//!   queue never needs more than send slots + data buffers;
//! - one completion queue serves both queues;
//! - RDMA Reads in flight: at most the initiator depth the connection
//!   manager offered (the initiator's responder resources) and the device
//!   allows (§8.2).

#![forbid(unsafe_code)]

use rustgt_iscsi::iser::ISER_HEADER_LEN;
use rustgt_iscsi::pdu::BHS_LEN;
use rustgt_iscsi::PortalConfig;

/// Room beyond the CmdSN window for immediate PDUs each way.
pub const CONTROL_SLACK: u32 = 16;
/// Longest AHS a PDU can carry (255 four-byte words, RFC 7143 §11.2.1.4).
const MAX_AHS_LEN: usize = 1020;
/// Largest data segment during login (RFC 7143 §13.12 default) and the
/// least any receive buffer holds.
const LOGIN_DSL: usize = 8192;
/// Receive and send buffers are rounded up to this.
const ALIGN: usize = 64;

/// Knobs of the driver that the iSCSI configuration does not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IserSettings {
    /// Size of one registered data buffer: the longest single RDMA Write or
    /// Read. At least 4096.
    pub chunk_size: u32,
    /// Data buffers per connection; they bound the RDMA data in flight.
    pub data_chunks: u32,
    /// Upper bound on RDMA Reads in flight per connection.
    pub max_read_depth: u32,
}

impl Default for IserSettings {
    fn default() -> Self {
        IserSettings {
            chunk_size: 256 << 10,
            data_chunks: 32,
            max_read_depth: 16,
        }
    }
}

/// What the device allows (from `ibv_query_device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Work requests a queue of a QP may hold.
    pub max_qp_wr: u32,
    /// Entries a completion queue may hold.
    pub max_cqe: u32,
    /// RDMA Reads the device may have outstanding as requester per QP.
    pub max_qp_init_rd_atom: u32,
    /// RDMA Reads the device may serve as responder per QP.
    pub max_qp_rd_atom: u32,
    /// Memory management extensions: Send with Invalidate is possible.
    pub can_invalidate: bool,
}

/// From the initiator's connection request, seen from the target (the
/// connection manager swaps the two so that they read as ours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerResources {
    /// RDMA Reads we may have outstanding (the initiator's responder
    /// resources).
    pub initiator_depth: u8,
    /// RDMA Reads the initiator may send us.
    pub responder_resources: u8,
}

/// The sizes of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Receive work requests posted (and buffers registered).
    pub recv_depth: u32,
    /// Bytes of each receive buffer.
    pub recv_size: usize,
    /// Send buffers for control-type PDUs.
    pub send_slots: u32,
    /// Bytes of each send buffer.
    pub send_size: usize,
    /// Chunks of the registered data pool.
    pub data_chunks: u32,
    /// Bytes of each data chunk.
    pub chunk_size: u32,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Completion queue entries.
    pub cq_depth: u32,
    /// RDMA Reads in flight (accept's initiator depth).
    pub read_depth: u32,
    /// Accept's responder resources.
    pub responder_resources: u32,
}

/// The configuration as an iSER connection runs it (the port's shared one,
/// adapted per connection): it declares as many unexpected PDUs as it
/// posts receives for (RFC 7145 §6.7).
pub fn iser_config(mut cfg: PortalConfig) -> PortalConfig {
    cfg.limits.max_outstanding_unexpected_pdus = unexpected_pdus(&cfg);
    cfg
}

/// MaxOutstandingUnexpectedPDUs the target declares for `cfg`: the
/// configured value, or when that is 0 (no limit), what the CmdSN window
/// bounds. Never 1 (RFC 7145 §6.7: 0 or at least 2).
pub fn unexpected_pdus(cfg: &PortalConfig) -> u32 {
    let l = &cfg.limits;
    if l.max_outstanding_unexpected_pdus > 0 {
        return l.max_outstanding_unexpected_pdus.max(2);
    }
    let depth = cfg.queue_depth.max(1);
    let unsolicited_per_cmd = if l.initial_r2t {
        0
    } else {
        l.first_burst_length
            .div_ceil(l.target_recv_data_segment_length.max(512))
    };
    depth
        .saturating_mul(1 + unsolicited_per_cmd)
        .saturating_add(CONTROL_SLACK)
}

/// Size every queue and buffer of a connection.
pub fn plan(
    cfg: &PortalConfig,
    settings: &IserSettings,
    dev: &DeviceLimits,
    peer: PeerResources,
) -> Plan {
    let max_wr = dev.max_qp_wr.max(2);
    let recv_depth = unexpected_pdus(cfg).clamp(2, max_wr);
    let trdsl = (cfg.limits.target_recv_data_segment_length as usize).max(LOGIN_DSL);
    let recv_size = round_up(ISER_HEADER_LEN + BHS_LEN + MAX_AHS_LEN + trdsl + 4);
    let send_slots = cfg.queue_depth.max(1).saturating_add(CONTROL_SLACK);
    let send_size = round_up(ISER_HEADER_LEN + BHS_LEN + LOGIN_DSL + 4);
    let data_chunks = settings.data_chunks.max(1);
    let chunk_size = settings.chunk_size.max(4096);
    let sq_depth = send_slots.saturating_add(data_chunks).min(max_wr);
    let cq_depth = recv_depth.saturating_add(sq_depth).min(dev.max_cqe.max(1));
    let read_depth = u32::from(peer.initiator_depth)
        .min(dev.max_qp_init_rd_atom)
        .min(settings.max_read_depth)
        .max(1);
    let responder_resources = u32::from(peer.responder_resources).min(dev.max_qp_rd_atom);
    Plan {
        recv_depth,
        recv_size,
        send_slots,
        send_size,
        data_chunks,
        chunk_size,
        sq_depth,
        cq_depth,
        read_depth,
        responder_resources,
    }
}

fn round_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustgt_iscsi::negotiate::Limits;

    fn dev() -> DeviceLimits {
        DeviceLimits {
            max_qp_wr: 16384,
            max_cqe: 32768,
            max_qp_init_rd_atom: 128,
            max_qp_rd_atom: 128,
            can_invalidate: true,
        }
    }

    fn cfg(queue_depth: u32, limits: Limits) -> PortalConfig {
        PortalConfig {
            queue_depth,
            limits,
            ..PortalConfig::default()
        }
    }

    const PEER: PeerResources = PeerResources {
        initiator_depth: 64,
        responder_resources: 1,
    };

    #[test]
    fn receives_follow_the_window_or_the_declared_limit() {
        let c = cfg(128, Limits::default());
        assert_eq!(unexpected_pdus(&c), 128 + CONTROL_SLACK);
        // InitialR2T=No: up to FirstBurstLength / TargetRecvDSL more per command.
        let c = cfg(
            32,
            Limits {
                initial_r2t: false,
                first_burst_length: 65536,
                target_recv_data_segment_length: 8192,
                ..Limits::default()
            },
        );
        assert_eq!(unexpected_pdus(&c), 32 * 9 + CONTROL_SLACK);
        let c = cfg(
            32,
            Limits {
                max_outstanding_unexpected_pdus: 50,
                ..Limits::default()
            },
        );
        assert_eq!(unexpected_pdus(&c), 50);
        let p = plan(&c, &IserSettings::default(), &dev(), PEER);
        assert_eq!(p.recv_depth, 50);
    }

    #[test]
    fn queues_follow_the_queue_depth_and_device_limits() {
        let s = IserSettings::default();
        let p = plan(&cfg(128, Limits::default()), &s, &dev(), PEER);
        assert_eq!(p.send_slots, 144);
        assert_eq!(p.sq_depth, 144 + 32);
        assert_eq!(p.cq_depth, p.recv_depth + p.sq_depth);
        assert_eq!(p.chunk_size, 256 << 10);
        // A small device clamps everything.
        let small = DeviceLimits {
            max_qp_wr: 64,
            max_cqe: 100,
            ..dev()
        };
        let p = plan(&cfg(128, Limits::default()), &s, &small, PEER);
        assert_eq!((p.recv_depth, p.sq_depth, p.cq_depth), (64, 64, 100));
    }

    #[test]
    fn read_depth_is_bounded_by_peer_device_and_settings() {
        let s = IserSettings::default();
        let c = cfg(16, Limits::default());
        assert_eq!(plan(&c, &s, &dev(), PEER).read_depth, 16);
        let few = PeerResources {
            initiator_depth: 4,
            responder_resources: 0,
        };
        let p = plan(&c, &s, &dev(), few);
        assert_eq!((p.read_depth, p.responder_resources), (4, 0));
        let rxe_like = DeviceLimits {
            max_qp_init_rd_atom: 2,
            ..dev()
        };
        assert_eq!(plan(&c, &s, &rxe_like, PEER).read_depth, 2);
        // Never 0: a write must be able to make progress.
        let none = PeerResources {
            initiator_depth: 0,
            responder_resources: 0,
        };
        assert_eq!(plan(&c, &s, &dev(), none).read_depth, 1);
    }

    #[test]
    fn receive_buffers_hold_the_largest_acceptable_pdu() {
        let c = cfg(
            8,
            Limits {
                target_recv_data_segment_length: 65536,
                ..Limits::default()
            },
        );
        let p = plan(&c, &IserSettings::default(), &dev(), PEER);
        assert!(p.recv_size >= ISER_HEADER_LEN + BHS_LEN + MAX_AHS_LEN + 65536);
        assert_eq!(p.recv_size % ALIGN, 0);
        // Login PDUs (8 KiB) always fit, whatever is configured.
        let c = cfg(
            8,
            Limits {
                target_recv_data_segment_length: 512,
                ..Limits::default()
            },
        );
        let p = plan(&c, &IserSettings::default(), &dev(), PEER);
        assert!(p.recv_size >= ISER_HEADER_LEN + BHS_LEN + 8192);
        assert!(p.send_size >= ISER_HEADER_LEN + BHS_LEN + 8192);
    }

    #[test]
    fn iser_config_declares_the_receives_and_keeps_the_rest() {
        let shared = cfg(32, Limits::default());
        let mine = iser_config(shared.clone());
        assert_eq!(
            mine.limits.max_outstanding_unexpected_pdus,
            unexpected_pdus(&shared)
        );
        assert!(mine.limits.max_outstanding_unexpected_pdus >= 2);
        assert_eq!(mine.queue_depth, shared.queue_depth);
        assert_eq!(mine.limits.max_burst_length, shared.limits.max_burst_length);
    }
}
