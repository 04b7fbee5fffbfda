//! Header vetting shared by both framings: what the BHS alone tells
//! (opcode against phase, DataSegmentLength against the negotiated limit)
//! before any data segment is buffered, then the decoded header's opcode-
//! and state-specific checks. A refused header gets a Reject (with its
//! [`PduRefusal`]) or closes the connection.

use super::{Connection, Phase, LOGIN_MAX_DSL};
use crate::negotiate::SessionType;
use crate::pdu::{Opcode, RequestHeader, BHS_LEN, RESERVED_TAG};
use crate::refusal::PduRefusal;

/// Why a PDU header was refused; the connection already acted on it.
pub(super) enum Refused {
    /// The connection is failing: read nothing more.
    Close,
    /// A Reject went out; drop this PDU and go on.
    Rejected,
}

impl Connection {
    /// What the BHS alone tells: only Login during login, and no data
    /// segment over the negotiated limit (checked before the payload is
    /// read, SPDK's rule: never buffer a payload we would refuse).
    pub(super) fn vet_bhs(
        &mut self,
        opcode: Opcode,
        dsl: u32,
        bhs: &[u8; BHS_LEN],
    ) -> Result<(), Refused> {
        let in_login = self.in_login();
        if in_login && opcode != Opcode::LOGIN_REQUEST {
            tracing::warn!(opcode = opcode.0, "non-login PDU during login");
            self.fail();
            return Err(Refused::Close);
        }
        let limit = if in_login {
            LOGIN_MAX_DSL
        } else {
            self.params_target_mrdsl()
        };
        if dsl > limit {
            tracing::warn!(dsl, limit, "DataSegmentLength over the negotiated limit");
            if in_login {
                self.fail();
                return Err(Refused::Close);
            }
            self.reject(PduRefusal::DataSegmentTooLong, bhs);
            return Err(Refused::Rejected);
        }
        Ok(())
    }

    /// Decode the header and apply the opcode- and state-specific checks.
    pub(super) fn vet_header(
        &mut self,
        bhs: &[u8; BHS_LEN],
        ahs: &[u8],
        dsl: u32,
    ) -> Result<RequestHeader, Refused> {
        let in_login = self.in_login();
        let hdr = match RequestHeader::parse(bhs, ahs) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "unparseable PDU header");
                if in_login {
                    self.fail();
                    return Err(Refused::Close);
                }
                self.reject(PduRefusal::of_pdu_error(&e), bhs);
                return Err(Refused::Rejected);
            }
        };
        if !in_login {
            if let Some(refusal) = self.precheck(&hdr, dsl) {
                self.reject(refusal, bhs);
                self.after_precheck_reject(&hdr);
                return Err(Refused::Rejected);
            }
        }
        Ok(hdr)
    }

    pub(super) fn in_login(&self) -> bool {
        matches!(self.phase, Phase::Login(_))
    }

    /// The most the target accepts per PDU: TargetRecvDataSegmentLength in
    /// iSER-assisted mode (RFC 7145 §6.4), else its MaxRecvDataSegmentLength.
    pub(super) fn params_target_mrdsl(&self) -> u32 {
        self.session
            .as_ref()
            .map(|s| {
                if s.params.rdma_extensions {
                    s.params.target_recv_dsl
                } else {
                    s.params.target_max_recv_dsl
                }
            })
            .unwrap_or(LOGIN_MAX_DSL)
            .max(LOGIN_MAX_DSL)
    }

    /// The most the target may send per PDU: InitiatorRecvDataSegmentLength
    /// in iSER-assisted mode (RFC 7145 §6.5), else the initiator's
    /// MaxRecvDataSegmentLength.
    pub(super) fn max_send_dsl(&self) -> u32 {
        self.session
            .as_ref()
            .map(|s| {
                if s.params.rdma_extensions {
                    s.params.initiator_recv_dsl
                } else {
                    s.params.initiator_max_recv_dsl
                }
            })
            .unwrap_or(LOGIN_MAX_DSL)
    }

    /// Opcode- and state-specific checks that need only the header.
    pub(super) fn precheck(&self, hdr: &RequestHeader, dsl: u32) -> Option<PduRefusal> {
        let params = self.session.as_ref().map(|s| &s.params)?;
        let discovery = params.session_type == SessionType::Discovery;
        match hdr {
            RequestHeader::Login(_) => Some(PduRefusal::LoginInFullFeature),
            RequestHeader::ScsiCommand(_) | RequestHeader::TaskMgmt(_) if discovery => {
                Some(PduRefusal::NotInDiscovery)
            }
            RequestHeader::ScsiCommand(c) => {
                if dsl > 0
                    && (!params.immediate_data
                        || !c.write
                        || dsl > params.first_burst_length
                        || dsl > c.expected_data_len)
                {
                    Some(PduRefusal::ImmediateDataRefused)
                } else {
                    None
                }
            }
            RequestHeader::Snack(_) => Some(PduRefusal::SnackNotSupported),
            RequestHeader::NopOut(n) if n.itt == RESERVED_TAG && dsl > 0 => {
                Some(PduRefusal::NopWithData)
            }
            _ => None,
        }
    }

    /// A SCSI command whose header was rejected still consumed its CmdSN.
    pub(super) fn after_precheck_reject(&mut self, hdr: &RequestHeader) {
        if let RequestHeader::ScsiCommand(c) = hdr {
            if !c.immediate && c.cmd_sn == self.exp_cmd_sn {
                self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
                self.max_cmd_sn = self.max_cmd_sn.wrapping_add(1);
            }
        }
    }
}
