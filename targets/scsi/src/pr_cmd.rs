//! PERSISTENT RESERVE IN/OUT (SPC-4 §6.15, §6.16) and RESERVE/RELEASE
//! (SPC-2 §7.21-§7.24): CDBs, parameter lists and parameter data, plus the
//! [`access`] class of every command for the reservation conflict check.
//!
//! The decisions themselves are in `pr`; this module parses, calls it and
//! turns its [`Effects`] into unit attentions for the connected nexuses of
//! each affected I_T nexus (and task aborts for PREEMPT AND ABORT).
//!
//! Capabilities reported (REPORT CAPABILITIES): CRH=1 (the SPC-4 §5.13.3
//! RESERVE/RELEASE exceptions), SIP_C=0 and ATP_C=0 (SPEC_I_PT and
//! ALL_TG_PT are refused with INVALID FIELD IN PARAMETER LIST), PTPL_C=1
//! only when the logical unit has a state file, all six types.

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use crate::cmd::{Nexus, Status};
use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::outcome::Outcome;
use crate::pr::Access;
use crate::pr_state::{Effects, ItNexus, PrState, PrType, Refusal, Registration};
use crate::sense::{Asc, Sense};

/// PERSISTENT RESERVE IN service actions (SPC-4 table 202).
mod pr_in {
    pub const READ_KEYS: u8 = 0x00;
    pub const READ_RESERVATION: u8 = 0x01;
    pub const REPORT_CAPABILITIES: u8 = 0x02;
    pub const READ_FULL_STATUS: u8 = 0x03;
}

/// PERSISTENT RESERVE OUT service actions (SPC-4 table 208).
mod pr_out {
    pub const REGISTER: u8 = 0x00;
    pub const RESERVE: u8 = 0x01;
    pub const RELEASE: u8 = 0x02;
    pub const CLEAR: u8 = 0x03;
    pub const PREEMPT: u8 = 0x04;
    pub const PREEMPT_AND_ABORT: u8 = 0x05;
    pub const REGISTER_AND_IGNORE_EXISTING_KEY: u8 = 0x06;
    pub const REGISTER_AND_MOVE: u8 = 0x07;
}

/// Length of the basic PERSISTENT RESERVE OUT parameter list (SPC-4 §6.16.3).
const BASIC_PARAM_LEN: usize = 24;

/// SPC-4 §7.6.1 protocol identifier of iSCSI.
const PROTOCOL_ISCSI: u8 = 0x5;

/// The only SCOPE this device server implements (SPC-4 §6.16.3.2).
const LU_SCOPE: u8 = 0x0;

/// PERSISTENT RESERVATION TYPE MASK (SPC-4 table 214): all six types.
const TYPE_MASK: [u8; 2] = [0xEA, 0x01];

/// REPORT CAPABILITIES byte 2 and byte 3 bits (SPC-4 table 213).
const CRH: u8 = 0x10;
const PTPL_C: u8 = 0x01;
const TMV: u8 = 0x80;
/// ALLOW COMMANDS 011b: TEST UNIT READY passes write exclusive and
/// exclusive access reservations; MODE SENSE, READ BUFFER, RECEIVE COPY
/// RESULTS, RECEIVE DIAGNOSTIC RESULTS, REPORT SUPPORTED OPERATION CODES
/// and REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS pass write exclusive ones.
const ALLOW_COMMANDS: u8 = 0b011 << 4;
const PTPL_A: u8 = 0x01;

/// The reservation class of a command (SPC-4 tables 45/46, SBC-3 table 13).
/// Commands this table does not name are treated as writes, the safe side.
pub(crate) fn access(cdb: &[u8]) -> Access {
    let byte = |i: usize| cdb.get(i).copied().unwrap_or(0);
    let sa = byte(1) & 0x1F;
    match byte(0) {
        0x00 => Access::TestUnitReady,
        // REQUEST SENSE, INQUIRY, LOG SENSE, READ CAPACITY(10), REPORT LUNS
        0x03 | 0x12 | 0x4D | 0x25 | 0xA0 => Access::Always,
        // START STOP UNIT with START=1 and POWER CONDITION=0
        0x1B if byte(4) & 0xF1 == 0x01 => Access::Always,
        // PREVENT ALLOW MEDIUM REMOVAL with PREVENT=00b
        0x1E if byte(4) & 0x03 == 0 => Access::Always,
        // SERVICE ACTION IN(16): READ CAPACITY(16) / GET LBA STATUS
        0x9E if sa == 0x10 => Access::Always,
        0x9E if sa == 0x12 => Access::Read,
        // MAINTENANCE IN: REPORT IDENTIFYING INFORMATION, TARGET PORT
        // GROUPS, ALIASES, PRIORITY, TIMESTAMP; the other reports read.
        0xA3 if matches!(sa, 0x05 | 0x0A | 0x0B | 0x0E | 0x0F) => Access::Always,
        0xA3 => Access::Read,
        // READ MEDIA SERIAL NUMBER
        0xAB if sa == 0x01 => Access::Always,
        0x5E | 0x5F => Access::Persistent,
        0x16 | 0x17 | 0x56 | 0x57 => Access::Spc2,
        // READ(6/10/12/16), VERIFY(10/12/16), PRE-FETCH(10/16), MODE
        // SENSE(6/10), READ BUFFER, RECEIVE DIAGNOSTIC RESULTS, READ DEFECT
        // DATA(10/12), RECEIVE COPY RESULTS, READ ATTRIBUTE, SECURITY
        // PROTOCOL IN
        0x08 | 0x28 | 0xA8 | 0x88 | 0x2F | 0xAF | 0x8F | 0x34 | 0x90 | 0x1A | 0x5A | 0x3C
        | 0x1C | 0x37 | 0xB7 | 0x84 | 0x8C | 0xA2 => Access::Read,
        _ => Access::Write,
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    let get = |i: usize| b.get(at + i).copied().unwrap_or(0);
    u16::from_be_bytes([get(0), get(1)])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, 1, 2, 3].map(|i| b.get(at + i).copied().unwrap_or(0)))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes([0, 1, 2, 3, 4, 5, 6, 7].map(|i| b.get(at + i).copied().unwrap_or(0)))
}

/// PRGENERATION and ADDITIONAL LENGTH header (SPC-4 §6.15.2).
fn header(generation: u32, body: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + body.len());
    d.extend_from_slice(&generation.to_be_bytes());
    d.extend_from_slice(&u32::try_from(body.len()).unwrap_or(u32::MAX).to_be_bytes());
    d.extend_from_slice(body);
    d
}

/// READ KEYS parameter data (SPC-4 §6.15.2).
pub(crate) fn read_keys(s: &PrState) -> Vec<u8> {
    let keys: Vec<u8> = s
        .registrations
        .iter()
        .flat_map(|r| r.key.to_be_bytes())
        .collect();
    header(s.generation, &keys)
}

/// READ RESERVATION parameter data (SPC-4 §6.15.3).
pub(crate) fn read_reservation(s: &PrState) -> Vec<u8> {
    let Some(res) = &s.reservation else {
        return header(s.generation, &[]);
    };
    let mut body = [0u8; 16];
    body[..8].copy_from_slice(&s.reservation_key().to_be_bytes());
    body[13] = (LU_SCOPE << 4) | (res.pr_type.0 & 0x0F);
    header(s.generation, &body)
}

/// REPORT CAPABILITIES parameter data (SPC-4 §6.15.4).
pub(crate) fn report_capabilities(s: &PrState, can_persist: bool) -> Vec<u8> {
    let ptpl_c = if can_persist { PTPL_C } else { 0 };
    let ptpl_a = if s.aptpl { PTPL_A } else { 0 };
    vec![
        0x00,
        0x08,
        CRH | ptpl_c,
        TMV | ALLOW_COMMANDS | ptpl_a,
        TYPE_MASK[0],
        TYPE_MASK[1],
        0,
        0,
    ]
}

/// An iSCSI TransportID (SPC-4 §7.6.4.6): format 01b (name, ",i,0x",
/// ISID) for an initiator port name of that form, else format 00b; the
/// string is NUL-terminated and padded to a multiple of four, 20 bytes at
/// least.
pub(crate) fn transport_id(initiator_port: &str) -> Vec<u8> {
    let format = if initiator_port.contains(",i,0x") {
        0x40
    } else {
        0x00
    };
    let mut name: Vec<u8> = initiator_port.bytes().take(0xFFF0).collect();
    name.push(0);
    while name.len() % 4 != 0 || name.len() < 16 {
        name.push(0);
    }
    let len = u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes();
    let mut d = vec![format | PROTOCOL_ISCSI, 0, len[0], len[1]];
    d.extend(name);
    d
}

/// READ FULL STATUS parameter data (SPC-4 §6.15.5).
pub(crate) fn read_full_status(s: &PrState) -> Vec<u8> {
    let mut body = Vec::new();
    for reg in &s.registrations {
        let tid = transport_id(&reg.it.initiator_port);
        let mut d = [0u8; 24];
        d[..8].copy_from_slice(&reg.key.to_be_bytes());
        if let Some(res) = s.reservation.as_ref().filter(|_| s.holds(reg)) {
            d[12] = 0x01; // R_HOLDER
            d[13] = (LU_SCOPE << 4) | (res.pr_type.0 & 0x0F);
        }
        d[18..20].copy_from_slice(&reg.relative_port_id.to_be_bytes());
        d[20..24].copy_from_slice(&u32::try_from(tid.len()).unwrap_or(0).to_be_bytes());
        body.extend_from_slice(&d);
        body.extend(tid);
    }
    header(s.generation, &body)
}

/// PERSISTENT RESERVE IN (SPC-4 §6.15).
pub(crate) fn persistent_reserve_in(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let alloc_len = u64::from(ctx.cdb.be16(7));
    let state = lu.pr.snapshot();
    let data = match ctx.cdb.byte(1) & 0x1F {
        pr_in::READ_KEYS => read_keys(&state),
        pr_in::READ_RESERVATION => read_reservation(&state),
        pr_in::REPORT_CAPABILITIES => report_capabilities(&state, lu.pr.can_persist()),
        pr_in::READ_FULL_STATUS => read_full_status(&state),
        _ => return Err(Sense::invalid_cdb_field(1, Some(4))),
    };
    Ok(Outcome::alloc(data, alloc_len))
}

/// The fields of a PERSISTENT RESERVE OUT parameter list.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Params {
    rk: u64,
    sark: u64,
    aptpl: bool,
    /// REGISTER AND MOVE only: UNREG, RELATIVE TARGET PORT IDENTIFIER and
    /// the destination TransportID.
    unreg: bool,
    relative_port_id: u16,
    transport_id: Option<TransportId>,
}

/// A destination initiator named by an iSCSI TransportID.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TransportId {
    /// Format 00b: an iSCSI name (any of its initiator ports).
    Name(String),
    /// Format 01b: one initiator port, `name,i,0x<isid>`.
    Port(String),
}

fn length_error() -> Sense {
    Sense::illegal(Asc::PARAMETER_LIST_LENGTH_ERROR)
}

/// Parses the parameter list of service action `sa` (SPC-4 §6.16.3,
/// §6.16.4). `can_persist` says whether APTPL=1 can be honoured.
fn parse_params(sa: u8, data: &[u8], can_persist: bool) -> Result<Params, Sense> {
    if data.len() < BASIC_PARAM_LEN {
        return Err(length_error());
    }
    let mut p = Params {
        rk: be64(data, 0),
        sark: be64(data, 8),
        aptpl: false,
        unreg: false,
        relative_port_id: 0,
        transport_id: None,
    };
    let registers = matches!(
        sa,
        pr_out::REGISTER | pr_out::REGISTER_AND_IGNORE_EXISTING_KEY | pr_out::REGISTER_AND_MOVE
    );
    let aptpl_at = if sa == pr_out::REGISTER_AND_MOVE {
        let flags = data.get(17).copied().unwrap_or(0);
        p.unreg = flags & 0x02 != 0;
        p.relative_port_id = be16(data, 18);
        let tid_len = usize::try_from(be32(data, 20)).unwrap_or(usize::MAX);
        let tid = BASIC_PARAM_LEN
            .checked_add(tid_len)
            .and_then(|end| data.get(BASIC_PARAM_LEN..end))
            .ok_or_else(length_error)?;
        p.transport_id = Some(parse_transport_id(tid)?);
        17
    } else {
        let flags = data.get(20).copied().unwrap_or(0);
        if flags & 0x08 != 0 {
            // SPEC_I_PT: not supported (SIP_C=0), and invalid outside REGISTER.
            return Err(Sense::invalid_param_field(20, Some(3)));
        }
        if data.len() != BASIC_PARAM_LEN {
            return Err(length_error());
        }
        if registers && flags & 0x04 != 0 {
            // ALL_TG_PT: not supported (ATP_C=0).
            return Err(Sense::invalid_param_field(20, Some(2)));
        }
        20
    };
    if registers {
        p.aptpl = data.get(aptpl_at).is_some_and(|b| b & 0x01 != 0);
        if p.aptpl && !can_persist {
            return Err(Sense::invalid_param_field(aptpl_at, Some(0)));
        }
    }
    Ok(p)
}

/// Parses an iSCSI TransportID (SPC-4 §7.6.4.6); it starts at byte 24 of
/// the REGISTER AND MOVE parameter list, which field pointers refer to.
fn parse_transport_id(tid: &[u8]) -> Result<TransportId, Sense> {
    const AT: usize = BASIC_PARAM_LEN;
    let b0 = tid.first().copied().unwrap_or(0);
    if b0 & 0x0F != PROTOCOL_ISCSI {
        return Err(Sense::invalid_param_field(AT, Some(3)));
    }
    let len = usize::from(be16(tid, 2));
    let raw = tid
        .get(4..4 + len)
        .ok_or(Sense::invalid_param_field(AT + 2, None))?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    let text = std::str::from_utf8(raw.get(..end).unwrap_or_default())
        .map_err(|_| Sense::invalid_param_field(AT + 4, None))?;
    match b0 >> 6 {
        0b00 if !text.is_empty() && !text.contains(',') => Ok(TransportId::Name(text.to_string())),
        0b01 => normalize_port(text)
            .map(TransportId::Port)
            .ok_or(Sense::invalid_param_field(AT + 4, None)),
        _ => Err(Sense::invalid_param_field(AT, Some(7))),
    }
}

/// `name,i,0x<isid>` with the ISID as 12 lowercase hex digits, the form
/// the iSCSI front end uses for initiator port names.
fn normalize_port(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let at = lower.find(",i,0x")?;
    let (name, isid) = (text.get(..at)?, lower.get(at + 5..)?);
    let isid = u64::from_str_radix(isid, 16)
        .ok()
        .filter(|&v| v < 1 << 48)?;
    (!name.is_empty()).then(|| format!("{name},i,0x{isid:012x}"))
}

/// The I_T nexus a REGISTER AND MOVE names: the target port comes from
/// the relative port identifier, a format 00b TransportID is resolved to a
/// connected initiator port of that name.
fn move_destination(ctx: &Ctx<'_>, lu: &LogicalUnit, p: &Params) -> Result<Registration, Sense> {
    let me = &ctx.cmd.nexus;
    let rel = p.relative_port_id;
    let known = ctx.target.nexus_list();
    let target_port = if me.relative_port_id == rel {
        Some(me.target_port.clone())
    } else {
        known
            .iter()
            .find(|n| n.relative_port_id == rel)
            .map(|n| n.target_port.clone())
            .or_else(|| {
                lu.pr
                    .snapshot()
                    .registrations
                    .into_iter()
                    .find(|r| r.relative_port_id == rel)
                    .map(|r| r.it.target_port)
            })
    }
    .ok_or(Sense::invalid_param_field(18, None))?;
    let initiator_port = match &p.transport_id {
        Some(TransportId::Port(port)) => port.clone(),
        Some(TransportId::Name(name)) => {
            let prefix = format!("{name},i,0x");
            known
                .iter()
                .find(|n| n.target_port == target_port && n.initiator_port.starts_with(&prefix))
                .map(|n| n.initiator_port.clone())
                .ok_or(Sense::invalid_param_field(BASIC_PARAM_LEN + 4, None))?
        }
        None => return Err(length_error()),
    };
    Ok(Registration {
        key: 0,
        it: ItNexus {
            initiator_port,
            target_port,
        },
        relative_port_id: rel,
    })
}

/// The TYPE of a RESERVE, RELEASE or PREEMPT (SCOPE must be LU_SCOPE).
fn scope_and_type(ctx: &Ctx<'_>) -> Result<PrType, Sense> {
    let b = ctx.cdb.byte(2);
    if b >> 4 != LU_SCOPE {
        return Err(Sense::invalid_cdb_field(2, Some(7)));
    }
    let pr_type = PrType(b & 0x0F);
    if !pr_type.is_supported() {
        return Err(Sense::invalid_cdb_field(2, Some(3)));
    }
    Ok(pr_type)
}

/// PERSISTENT RESERVE OUT (SPC-4 §6.16).
pub(crate) fn persistent_reserve_out(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let sa = ctx.cdb.byte(1) & 0x1F;
    let param_len = usize::try_from(ctx.cdb.be32(5)).unwrap_or(usize::MAX);
    let data = ctx
        .cmd
        .data_out
        .get(..param_len)
        .unwrap_or(&ctx.cmd.data_out);
    if data.len() < param_len {
        return Err(length_error());
    }
    let p = parse_params(sa, data, lu.pr.can_persist())?;
    let me: &Nexus = &ctx.cmd.nexus;
    let result = match sa {
        pr_out::REGISTER => lu
            .pr
            .update(|s| s.register(me, p.rk, p.sark, false, p.aptpl)),
        pr_out::REGISTER_AND_IGNORE_EXISTING_KEY => lu
            .pr
            .update(|s| s.register(me, p.rk, p.sark, true, p.aptpl)),
        pr_out::RESERVE => {
            let pr_type = scope_and_type(ctx)?;
            lu.pr
                .update(|s| s.reserve(me, p.rk, pr_type).map(|()| Effects::default()))
        }
        pr_out::RELEASE => {
            let pr_type = scope_and_type(ctx)?;
            lu.pr.update(|s| s.release(me, p.rk, pr_type))
        }
        pr_out::CLEAR => lu.pr.update(|s| s.clear(me, p.rk)),
        pr_out::PREEMPT | pr_out::PREEMPT_AND_ABORT => {
            let pr_type = scope_and_type(ctx)?;
            lu.pr.update(|s| s.preempt(me, p.rk, p.sark, pr_type))
        }
        pr_out::REGISTER_AND_MOVE => {
            let dest = move_destination(ctx, lu, &p)?;
            lu.pr
                .update(|s| s.register_and_move(me, p.rk, p.sark, dest.clone(), p.unreg, p.aptpl))
        }
        _ => return Err(Sense::invalid_cdb_field(1, Some(4))),
    };
    match result {
        Ok(effects) => {
            let abort = sa == pr_out::PREEMPT_AND_ABORT;
            if lu.pr.is_shared() {
                // Every other gateway re-reads the state and applies its
                // share of the effects before this command completes.
                crate::cluster::announce(lu, &crate::cluster::Event::reservations(&effects, abort));
            }
            apply_effects(ctx, lu, effects, abort);
            Ok(Outcome::data_out(param_len as u64))
        }
        Err(Refusal::Conflict) => Ok(Outcome::status(Status::RESERVATION_CONFLICT)),
        Err(Refusal::Sense(sense)) => Err(sense),
    }
}

/// Establishes the unit attentions a change owes on every connected nexus
/// of each I_T nexus, and for PREEMPT AND ABORT aborts the preempted
/// nexuses' tasks on this logical unit (SPC-4 §5.13.11.5; TAS=0).
fn apply_effects(ctx: &Ctx<'_>, lu: &LogicalUnit, effects: Effects, abort: bool) {
    let known = ctx.target.nexus_list();
    let ids_of =
        |it: &ItNexus| -> Vec<u64> { known.iter().filter(|n| it.is(n)).map(|n| n.id).collect() };
    if abort && !effects.preempted.is_empty() {
        let ids: Vec<u64> = effects.preempted.iter().flat_map(&ids_of).collect();
        let aborted = lu.tasks.abort_matching(|k| ids.contains(&k.nexus));
        lu.tasks.wait_gone(&aborted);
    }
    for (it, asc) in &effects.uas {
        lu.establish_ua(ids_of(it), *asc, None);
    }
}

/// Maps a reservation refusal to a command outcome.
fn outcome(result: Result<(), Refusal>) -> Result<Outcome, Sense> {
    match result {
        Ok(()) => Ok(Outcome::none()),
        Err(Refusal::Conflict) => Ok(Outcome::status(Status::RESERVATION_CONFLICT)),
        Err(Refusal::Sense(sense)) => Err(sense),
    }
}

/// RESERVE(6) and RESERVE(10) (SPC-2 §7.21, §7.22); third-party and
/// extent reservations are refused by the CDB usage data.
pub(crate) fn reserve(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    spc2_outcome(lu, lu.pr.spc2_reserve(&ctx.cmd.nexus))
}

/// RELEASE(6) and RELEASE(10) (SPC-2 §7.23, §7.24).
pub(crate) fn release(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    spc2_outcome(lu, lu.pr.spc2_release(&ctx.cmd.nexus))
}

/// The outcome of RESERVE or RELEASE; a change of the state the gateways
/// of a shared backing hold is announced first, so every gateway enforces
/// it before the command completes.
fn spc2_outcome(lu: &LogicalUnit, done: Result<bool, Refusal>) -> Result<Outcome, Sense> {
    if done == Ok(true) {
        crate::cluster::announce(lu, &crate::cluster::Event::reservations_changed());
    }
    outcome(done.map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pr_state::{Registration, Reservation};

    fn it(i: &str) -> ItNexus {
        ItNexus {
            initiator_port: format!("iqn.2026-01.test:{i},i,0x00023d000001"),
            target_port: "iqn.2026-11.org.rustgt:t,t,0x0001".into(),
        }
    }

    fn state() -> PrState {
        PrState {
            generation: 0x0102_0304,
            aptpl: false,
            registrations: vec![
                Registration {
                    key: 0x1111_2222_3333_4444,
                    it: it("a"),
                    relative_port_id: 1,
                },
                Registration {
                    key: 0x55,
                    it: it("b"),
                    relative_port_id: 2,
                },
            ],
            reservation: Some(Reservation {
                pr_type: PrType::WRITE_EXCLUSIVE_RO,
                holder: it("b"),
            }),
        }
    }

    #[test]
    fn read_keys_layout() {
        let d = read_keys(&state());
        assert_eq!(&d[..8], &[1, 2, 3, 4, 0, 0, 0, 16]);
        assert_eq!(&d[8..16], &0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!(&d[16..24], &0x55u64.to_be_bytes());
        assert_eq!(read_keys(&PrState::default()), vec![0; 8]);
    }

    #[test]
    fn read_reservation_layout() {
        let d = read_reservation(&state());
        assert_eq!(d.len(), 24);
        assert_eq!(&d[4..8], &[0, 0, 0, 0x10]);
        assert_eq!(&d[8..16], &0x55u64.to_be_bytes());
        assert_eq!(d[21], 0x05);
        let none = read_reservation(&PrState::default());
        assert_eq!(none, vec![0; 8]);
    }

    #[test]
    fn report_capabilities_layout() {
        let d = report_capabilities(&PrState::default(), false);
        assert_eq!(d, vec![0, 8, 0x10, 0xB0, 0xEA, 0x01, 0, 0]);
        let s = PrState {
            aptpl: true,
            ..PrState::default()
        };
        assert_eq!(report_capabilities(&s, true)[2..4], [0x11, 0xB1]);
    }

    #[test]
    fn read_full_status_layout() {
        let d = read_full_status(&state());
        let tid_a = transport_id(&it("a").initiator_port);
        assert_eq!(tid_a.len() % 4, 0);
        assert_eq!(tid_a[0], 0x45);
        assert_eq!(
            usize::from(u16::from_be_bytes([tid_a[2], tid_a[3]])),
            tid_a.len() - 4
        );
        // First descriptor: not the holder.
        let first = &d[8..8 + 24];
        assert_eq!(&first[..8], &0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!((first[12], first[13]), (0, 0));
        assert_eq!(&first[18..20], &[0, 1]);
        assert_eq!(be32(first, 20) as usize, tid_a.len());
        assert_eq!(&d[32..32 + tid_a.len()], tid_a.as_slice());
        // Second: the holder with scope/type.
        let second = &d[32 + tid_a.len()..];
        assert_eq!((second[12], second[13]), (0x01, 0x05));
        assert_eq!(be32(&d, 4) as usize, d.len() - 8);
        // A short name still gives a 20-byte TransportID.
        assert_eq!(transport_id("iqn.x").len(), 20);
        assert_eq!(transport_id("iqn.x")[0], 0x05);
    }

    fn basic(rk: u64, sark: u64, flags: u8) -> Vec<u8> {
        let mut d = vec![0u8; 24];
        d[..8].copy_from_slice(&rk.to_be_bytes());
        d[8..16].copy_from_slice(&sark.to_be_bytes());
        d[20] = flags;
        d
    }

    #[test]
    fn parameter_list_checks() {
        let p = parse_params(pr_out::REGISTER, &basic(1, 2, 0), false).expect("ok");
        assert_eq!((p.rk, p.sark, p.aptpl), (1, 2, false));
        let asc = |r: Result<Params, Sense>| r.expect_err("must fail").asc;
        assert_eq!(
            asc(parse_params(pr_out::REGISTER, &[0; 23], true)),
            Asc::PARAMETER_LIST_LENGTH_ERROR
        );
        assert_eq!(
            asc(parse_params(pr_out::RESERVE, &[0; 28], true)),
            Asc::PARAMETER_LIST_LENGTH_ERROR
        );
        let spec_i_pt =
            parse_params(pr_out::REGISTER, &basic(0, 1, 0x08), true).expect_err("SPEC_I_PT");
        assert_eq!(
            spec_i_pt.field.map(|f| (f.byte, f.bit)),
            Some((20, Some(3)))
        );
        let all_tg_pt =
            parse_params(pr_out::REGISTER, &basic(0, 1, 0x04), true).expect_err("ALL_TG_PT");
        assert_eq!(
            all_tg_pt.field.map(|f| (f.byte, f.bit)),
            Some((20, Some(2)))
        );
        // ALL_TG_PT and APTPL are ignored outside the register actions.
        assert!(parse_params(pr_out::RESERVE, &basic(1, 0, 0x05), false).is_ok());
        // APTPL=1 needs persistence.
        let aptpl = parse_params(pr_out::REGISTER, &basic(0, 1, 0x01), false).expect_err("APTPL");
        assert_eq!(aptpl.asc, Asc::INVALID_FIELD_IN_PARAMETER_LIST);
        assert!(parse_params(pr_out::REGISTER, &basic(0, 1, 0x01), true).is_ok_and(|p| p.aptpl));
    }

    #[test]
    fn register_and_move_parameters() {
        let port = "iqn.2026-01.test:b,i,0x00023D000001";
        let mut tid = transport_id(port);
        let mut d = basic(1, 2, 0);
        d[17] = 0x02;
        d[18..20].copy_from_slice(&7u16.to_be_bytes());
        d[20..24].copy_from_slice(&(tid.len() as u32).to_be_bytes());
        d.extend_from_slice(&tid);
        let p = parse_params(pr_out::REGISTER_AND_MOVE, &d, false).expect("ok");
        assert!(p.unreg);
        assert_eq!(p.relative_port_id, 7);
        assert_eq!(
            p.transport_id,
            Some(TransportId::Port(
                "iqn.2026-01.test:b,i,0x00023d000001".into()
            ))
        );
        // Format 00b: a bare name.
        tid = transport_id("iqn.2026-01.test:b");
        d.truncate(24);
        d[20..24].copy_from_slice(&(tid.len() as u32).to_be_bytes());
        d.extend_from_slice(&tid);
        let p = parse_params(pr_out::REGISTER_AND_MOVE, &d, false).expect("ok");
        assert_eq!(
            p.transport_id,
            Some(TransportId::Name("iqn.2026-01.test:b".into()))
        );
        // TransportID longer than the list, or not iSCSI.
        let mut short = d.clone();
        short.truncate(30);
        assert_eq!(
            parse_params(pr_out::REGISTER_AND_MOVE, &short, false)
                .expect_err("short")
                .asc,
            Asc::PARAMETER_LIST_LENGTH_ERROR
        );
        let mut fc = d.clone();
        fc[24] = 0x00;
        assert!(parse_params(pr_out::REGISTER_AND_MOVE, &fc, false).is_err());
    }

    #[test]
    fn access_classes() {
        assert_eq!(access(&[0x00; 6]), Access::TestUnitReady);
        assert_eq!(access(&[0x12, 0, 0, 0, 96, 0]), Access::Always);
        assert_eq!(access(&[0x28; 10]), Access::Read);
        assert_eq!(access(&[0x2A; 10]), Access::Write);
        assert_eq!(access(&[0x35; 10]), Access::Write);
        assert_eq!(access(&[0x1B, 0, 0, 0, 0x01, 0]), Access::Always);
        assert_eq!(access(&[0x1B, 0, 0, 0, 0x00, 0]), Access::Write);
        assert_eq!(access(&[0x1B, 0, 0, 0, 0x11, 0]), Access::Write);
        assert_eq!(access(&[0x9E, 0x10]), Access::Always);
        assert_eq!(access(&[0x9E, 0x12]), Access::Read);
        assert_eq!(access(&[0xA3, 0x0A]), Access::Always);
        assert_eq!(access(&[0xA3, 0x0C]), Access::Read);
        assert_eq!(access(&[0x5F, 0x01]), Access::Persistent);
        assert_eq!(access(&[0x16; 6]), Access::Spc2);
        assert_eq!(access(&[]), Access::TestUnitReady);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parameter_parsing_never_panics(
                sa in 0u8..8,
                data in proptest::collection::vec(any::<u8>(), 0..96),
                can_persist: bool,
            ) {
                if let Ok(p) = parse_params(sa, &data, can_persist) {
                    prop_assert!(data.len() >= BASIC_PARAM_LEN);
                    prop_assert!(!p.aptpl || can_persist);
                }
            }

            #[test]
            fn transport_ids_round_trip(name in "[a-z0-9.:-]{1,60}", isid in 0u64..(1 << 48)) {
                let port = format!("{name},i,0x{isid:012x}");
                let tid = transport_id(&port);
                prop_assert_eq!(parse_transport_id(&tid), Ok(TransportId::Port(port)));
                prop_assert_eq!(parse_transport_id(&transport_id(&name)), Ok(TransportId::Name(name)));
            }

            #[test]
            fn access_is_total(cdb in proptest::collection::vec(any::<u8>(), 0..16)) {
                let _ = access(&cdb);
            }
        }
    }
}
