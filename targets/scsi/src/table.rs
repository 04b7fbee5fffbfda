//! The one command table: operation code (and service action) to handler,
//! CDB usage data, data direction and dispatch flags.
//!
//! The dispatcher routes and validates CDBs from this table, and REPORT
//! SUPPORTED OPERATION CODES (SPC-4 §6.35, handled here) is generated from
//! it, so the two cannot drift apart. The table sits above every handler
//! it names and below the dispatcher (`exec`). Usage data follows SPC-4 §6.35.3: byte 0 is the
//! operation code, the service action sits in its CDB position, every other
//! byte is the mask of bits the device server evaluates. A bit set in a CDB
//! where the usage data has a zero is rejected with INVALID FIELD IN CDB.

use crate::ctx::Ctx;
use crate::lun::LogicalUnit;
use crate::outcome::{DataDir, Outcome};
use crate::sense::Sense;
use crate::{
    alua, medium_cmd, mode, pr_cmd, provisioning, sanitize, sanitize_cmd, sbc, sbc_ext, spc, xcopy,
};

/// Command handler: runs on a LUN worker (or the target's control thread
/// for commands addressed to a missing LUN).
pub(crate) type Handler = fn(&Ctx<'_>) -> Result<Outcome, Sense>;

/// INQUIRY, REPORT LUNS and REQUEST SENSE neither report nor clear unit
/// attentions (SAM-5 §5.14, SPC-4 §5.14).
pub(crate) const UA_EXEMPT: u8 = 1 << 0;
/// Answered even when the addressed LUN does not exist (SPC-4 §6.4.2,
/// §6.29, §6.33).
pub(crate) const NO_LU: u8 = 1 << 1;
/// Modifies the medium: refused with DATA PROTECT on a read-only LUN.
pub(crate) const MEDIUM_WRITE: u8 = 1 << 2;

/// Bits of CDB byte 1 that hold a service action (SPC-4 §4.2.5.2).
pub(crate) const SERVICE_ACTION_MASK: u8 = 0x1F;

/// One supported command.
#[derive(Debug)]
pub(crate) struct CmdDesc {
    pub opcode: u8,
    /// Service action in CDB byte 1 bits 4..0, for opcodes that have them.
    pub service_action: Option<u8>,
    pub name: &'static str,
    /// CDB usage data; its length is the CDB length.
    pub usage: &'static [u8],
    pub dir: DataDir,
    pub flags: u8,
    /// Recommended command timeout in seconds (RCTD timeouts descriptor).
    pub timeout_secs: u32,
    pub handler: Handler,
}

impl CmdDesc {
    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    pub(crate) fn sa_mask(&self) -> u8 {
        if self.service_action.is_some() {
            SERVICE_ACTION_MASK
        } else {
            0
        }
    }
}

const IO_TIMEOUT: u32 = 30;
const CTL_TIMEOUT: u32 = 10;
const FLUSH_TIMEOUT: u32 = 60;
/// A sanitize runs over the whole medium (and may be paced).
const SANITIZE_TIMEOUT: u32 = 3600;

macro_rules! cmd {
    ($op:expr, $sa:expr, $name:expr, $dir:ident, $flags:expr, $timeout:expr, $handler:path,
     [$($u:expr),* $(,)?]) => {
        CmdDesc {
            opcode: $op,
            service_action: $sa,
            name: $name,
            usage: &[$($u),*],
            dir: DataDir::$dir,
            flags: $flags,
            timeout_secs: $timeout,
            handler: $handler,
        }
    };
}

/// Every supported command, sorted by operation code then service action.
#[rustfmt::skip]
pub(crate) static COMMANDS: &[CmdDesc] = &[
    // SPC-4 §6.47
    cmd!(0x00, None, "TEST UNIT READY", None, 0, CTL_TIMEOUT, spc::test_unit_ready,
         [0x00, 0, 0, 0, 0, 0]),
    // SPC-4 §6.29
    cmd!(0x03, None, "REQUEST SENSE", In, UA_EXEMPT | NO_LU, CTL_TIMEOUT, spc::request_sense,
         [0x03, 0x01, 0, 0, 0xFF, 0]),
    // SBC-3 §5.10
    cmd!(0x08, None, "READ(6)", In, 0, IO_TIMEOUT, sbc::read,
         [0x08, 0x1F, 0xFF, 0xFF, 0xFF, 0]),
    // SBC-3 §5.33
    cmd!(0x0A, None, "WRITE(6)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write,
         [0x0A, 0x1F, 0xFF, 0xFF, 0xFF, 0]),
    // SPC-4 §6.4
    cmd!(0x12, None, "INQUIRY", In, UA_EXEMPT | NO_LU, CTL_TIMEOUT, spc::inquiry,
         [0x12, 0x01, 0xFF, 0xFF, 0xFF, 0]),
    // SPC-4 §6.9
    cmd!(0x15, None, "MODE SELECT(6)", Out, 0, CTL_TIMEOUT, mode::mode_select,
         [0x15, 0x11, 0, 0, 0xFF, 0]),
    // SPC-2 §7.21
    cmd!(0x16, None, "RESERVE(6)", None, 0, CTL_TIMEOUT, pr_cmd::reserve,
         [0x16, 0, 0, 0, 0, 0]),
    // SPC-2 §7.23
    cmd!(0x17, None, "RELEASE(6)", None, 0, CTL_TIMEOUT, pr_cmd::release,
         [0x17, 0, 0, 0, 0, 0]),
    // SPC-4 §6.11
    cmd!(0x1A, None, "MODE SENSE(6)", In, 0, CTL_TIMEOUT, mode::mode_sense,
         [0x1A, 0x08, 0xFF, 0xFF, 0xFF, 0]),
    // SBC-3 §5.25
    cmd!(0x1B, None, "START STOP UNIT", None, 0, FLUSH_TIMEOUT, medium_cmd::start_stop_unit,
         [0x1B, 0x01, 0, 0x0F, 0xF7, 0]),
    // SBC-3 §5.14
    cmd!(0x1E, None, "PREVENT ALLOW MEDIUM REMOVAL", None, 0, CTL_TIMEOUT,
         medium_cmd::prevent_allow_medium_removal,
         [0x1E, 0, 0, 0, 0x03, 0]),
    // SBC-3 §5.15
    cmd!(0x25, None, "READ CAPACITY(10)", In, 0, CTL_TIMEOUT, sbc::read_capacity10,
         [0x25, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, 0]),
    // SBC-3 §5.11
    cmd!(0x28, None, "READ(10)", In, 0, IO_TIMEOUT, sbc::read,
         [0x28, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.34
    cmd!(0x2A, None, "WRITE(10)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write,
         [0x2A, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.37
    cmd!(0x2E, None, "WRITE AND VERIFY(10)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write_and_verify,
         [0x2E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.30
    cmd!(0x2F, None, "VERIFY(10)", Out, 0, IO_TIMEOUT, sbc::verify,
         [0x2F, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.10
    cmd!(0x34, None, "PRE-FETCH(10)", None, 0, IO_TIMEOUT, sbc_ext::prefetch,
         [0x34, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.26 (byte 1: IMMED, and the obsolete SYNC_NV, ignored)
    cmd!(0x35, None, "SYNCHRONIZE CACHE(10)", None, 0, FLUSH_TIMEOUT, sbc::synchronize_cache,
         [0x35, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.18
    cmd!(0x37, None, "READ DEFECT DATA(10)", In, 0, CTL_TIMEOUT, sbc_ext::read_defect_data,
         [0x37, 0, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    // SBC-3 §5.42
    cmd!(0x41, None, "WRITE SAME(10)", Out, MEDIUM_WRITE, FLUSH_TIMEOUT, provisioning::write_same,
         [0x41, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.28
    cmd!(0x42, None, "UNMAP", Out, MEDIUM_WRITE, FLUSH_TIMEOUT, provisioning::unmap,
         [0x42, 0, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, 0]),
    // SBC-3 §5.19: SANITIZE (IMMED, AUSE and the service action in byte 1)
    cmd!(0x48, Some(0x01), "SANITIZE OVERWRITE", Out, MEDIUM_WRITE, SANITIZE_TIMEOUT,
         sanitize_cmd::sanitize, [0x48, 0xA1, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x48, Some(0x02), "SANITIZE BLOCK ERASE", None, MEDIUM_WRITE, SANITIZE_TIMEOUT,
         sanitize_cmd::sanitize, [0x48, 0xA2, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x48, Some(0x03), "SANITIZE CRYPTOGRAPHIC ERASE", None, MEDIUM_WRITE, SANITIZE_TIMEOUT,
         sanitize_cmd::sanitize, [0x48, 0xA3, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x48, Some(0x1F), "SANITIZE EXIT FAILURE MODE", None, MEDIUM_WRITE, CTL_TIMEOUT,
         sanitize_cmd::sanitize, [0x48, 0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    // SPC-4 §6.10
    cmd!(0x55, None, "MODE SELECT(10)", Out, 0, CTL_TIMEOUT, mode::mode_select,
         [0x55, 0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    // SPC-2 §7.22: no third-party reservations (3RDPTY, LONGID)
    cmd!(0x56, None, "RESERVE(10)", None, 0, CTL_TIMEOUT, pr_cmd::reserve,
         [0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    // SPC-2 §7.24
    cmd!(0x57, None, "RELEASE(10)", None, 0, CTL_TIMEOUT, pr_cmd::release,
         [0x57, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    // SPC-4 §6.12
    cmd!(0x5A, None, "MODE SENSE(10)", In, 0, CTL_TIMEOUT, mode::mode_sense,
         [0x5A, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0]),
    // SPC-4 §6.15: PERSISTENT RESERVE IN
    cmd!(0x5E, Some(0x00), "PERSISTENT RESERVE IN / READ KEYS", In, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_in, [0x5E, 0x00, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x5E, Some(0x01), "PERSISTENT RESERVE IN / READ RESERVATION", In, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_in, [0x5E, 0x01, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x5E, Some(0x02), "PERSISTENT RESERVE IN / REPORT CAPABILITIES", In, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_in, [0x5E, 0x02, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    cmd!(0x5E, Some(0x03), "PERSISTENT RESERVE IN / READ FULL STATUS", In, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_in, [0x5E, 0x03, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]),
    // SPC-4 §6.16: PERSISTENT RESERVE OUT (SCOPE/TYPE in byte 2)
    cmd!(0x5F, Some(0x00), "PERSISTENT RESERVE OUT / REGISTER", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x00, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x01), "PERSISTENT RESERVE OUT / RESERVE", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x01, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x02), "PERSISTENT RESERVE OUT / RELEASE", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x02, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x03), "PERSISTENT RESERVE OUT / CLEAR", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x03, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x04), "PERSISTENT RESERVE OUT / PREEMPT", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x04, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x05), "PERSISTENT RESERVE OUT / PREEMPT AND ABORT", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x05, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x06), "PERSISTENT RESERVE OUT / REGISTER AND IGNORE EXISTING KEY", Out, 0,
         CTL_TIMEOUT, pr_cmd::persistent_reserve_out,
         [0x5F, 0x06, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    cmd!(0x5F, Some(0x07), "PERSISTENT RESERVE OUT / REGISTER AND MOVE", Out, 0, CTL_TIMEOUT,
         pr_cmd::persistent_reserve_out, [0x5F, 0x07, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0]),
    // SPC-4 §6.4: THIRD-PARTY COPY OUT / EXTENDED COPY(LID1)
    cmd!(0x83, Some(0x00), "EXTENDED COPY(LID1)", Out, 0, FLUSH_TIMEOUT, xcopy::extended_copy,
         [0x83, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SPC-4 §6.18: THIRD-PARTY COPY IN / RECEIVE COPY RESULTS
    cmd!(0x84, Some(0x00), "RECEIVE COPY STATUS(LID1)", In, 0, CTL_TIMEOUT,
         xcopy::receive_copy_results,
         [0x84, 0x00, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    cmd!(0x84, Some(0x03), "RECEIVE COPY OPERATING PARAMETERS", In, 0, CTL_TIMEOUT,
         xcopy::receive_copy_results,
         [0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SBC-3 §5.13
    cmd!(0x88, None, "READ(16)", In, 0, IO_TIMEOUT, sbc::read,
         [0x88, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.2
    cmd!(0x89, None, "COMPARE AND WRITE", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc_ext::compare_and_write,
         [0x89, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0, 0, 0, 0xFF, 0x1F, 0]),
    // SBC-3 §5.36
    cmd!(0x8A, None, "WRITE(16)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write,
         [0x8A, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.9
    cmd!(0x8B, None, "ORWRITE(16)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc_ext::orwrite,
         [0x8B, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.39
    cmd!(0x8E, None, "WRITE AND VERIFY(16)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write_and_verify,
         [0x8E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.32
    cmd!(0x8F, None, "VERIFY(16)", Out, 0, IO_TIMEOUT, sbc::verify,
         [0x8F, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.11
    cmd!(0x90, None, "PRE-FETCH(16)", None, 0, IO_TIMEOUT, sbc_ext::prefetch,
         [0x90, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.27 (byte 1: IMMED, and the obsolete SYNC_NV, ignored)
    cmd!(0x91, None, "SYNCHRONIZE CACHE(16)", None, 0, FLUSH_TIMEOUT, sbc::synchronize_cache,
         [0x91, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.44 (NDOB: SBC-4 §5.50)
    cmd!(0x93, None, "WRITE SAME(16)", Out, MEDIUM_WRITE, FLUSH_TIMEOUT, provisioning::write_same,
         [0x93, 0x09, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-4 §5.48
    cmd!(0x9C, None, "WRITE ATOMIC(16)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc_ext::write_atomic,
         [0x9C, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0, 0, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.16: SERVICE ACTION IN(16) / READ CAPACITY(16)
    cmd!(0x9E, Some(0x10), "READ CAPACITY(16)", In, 0, CTL_TIMEOUT, sbc::read_capacity16,
         [0x9E, 0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0]),
    // SBC-3 §5.7: SERVICE ACTION IN(16) / GET LBA STATUS
    cmd!(0x9E, Some(0x12), "GET LBA STATUS", In, 0, CTL_TIMEOUT, provisioning::get_lba_status,
         [0x9E, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
          0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SPC-4 §6.33
    cmd!(0xA0, None, "REPORT LUNS", In, UA_EXEMPT | NO_LU, CTL_TIMEOUT, spc::report_luns,
         [0xA0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SPC-4 §6.36: MAINTENANCE IN / REPORT TARGET PORT GROUPS (PARAMETER
    // DATA FORMAT in byte 1 bits 7..5)
    cmd!(0xA3, Some(0x0A), "REPORT TARGET PORT GROUPS", In, 0, CTL_TIMEOUT,
         alua::report_target_port_groups,
         [0xA3, 0xEA, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SPC-4 §6.35: MAINTENANCE IN / REPORT SUPPORTED OPERATION CODES
    cmd!(0xA3, Some(0x0C), "REPORT SUPPORTED OPERATION CODES", In, 0, CTL_TIMEOUT,
         report_supported_opcodes,
         [0xA3, 0x0C, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SPC-4 §6.42 (refused unless the LUN's `alua` allows explicit)
    cmd!(0xA4, Some(0x0A), "SET TARGET PORT GROUPS", Out, 0, CTL_TIMEOUT,
         alua::set_target_port_groups,
         [0xA4, 0x0A, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
    // SBC-3 §5.12
    cmd!(0xA8, None, "READ(12)", In, 0, IO_TIMEOUT, sbc::read,
         [0xA8, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.35
    cmd!(0xAA, None, "WRITE(12)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write,
         [0xAA, 0x18, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.38
    cmd!(0xAE, None, "WRITE AND VERIFY(12)", Out, MEDIUM_WRITE, IO_TIMEOUT, sbc::write_and_verify,
         [0xAE, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.31
    cmd!(0xAF, None, "VERIFY(12)", Out, 0, IO_TIMEOUT, sbc::verify,
         [0xAF, 0x16, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0]),
    // SBC-3 §5.19
    cmd!(0xB7, None, "READ DEFECT DATA(12)", In, 0, CTL_TIMEOUT, sbc_ext::read_defect_data,
         [0xB7, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0]),
];

/// Result of routing a CDB through the table.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lookup {
    Found(&'static CmdDesc),
    /// No entry for this operation code (or an empty CDB).
    UnknownOpcode,
    /// The operation code is known but not with this service action.
    UnknownServiceAction,
}

/// Finds the table entry for a CDB.
pub(crate) fn lookup(cdb: &[u8]) -> Lookup {
    let Some(&opcode) = cdb.first() else {
        return Lookup::UnknownOpcode;
    };
    let sa = cdb.get(1).map(|b| b & SERVICE_ACTION_MASK);
    let mut opcode_known = false;
    for desc in entries_for(opcode) {
        opcode_known = true;
        match desc.service_action {
            None => return Lookup::Found(desc),
            Some(want) if Some(want) == sa => return Lookup::Found(desc),
            Some(_) => {}
        }
    }
    if opcode_known {
        Lookup::UnknownServiceAction
    } else {
        Lookup::UnknownOpcode
    }
}

/// Whether `lu` offers `desc`: BLOCK ERASE and CRYPTOGRAPHIC ERASE exist
/// only where a sanitize can deallocate, SET TARGET PORT GROUPS only
/// with explicit ALUA. REPORT SUPPORTED OPERATION CODES lists only what
/// is offered.
pub(crate) fn available(desc: &CmdDesc, lu: &LogicalUnit) -> bool {
    match (desc.opcode, desc.service_action) {
        (0x48, Some(sanitize::SA_BLOCK_ERASE | sanitize::SA_CRYPTO_ERASE)) => {
            sanitize_cmd::erase_supported(lu)
        }
        (0xA4, Some(0x0A)) => alua::explicit_supported(lu),
        _ => true,
    }
}

/// Entries for `opcode` (several when it has service actions).
/// The table is sorted by operation code: a binary search finds the first.
pub(crate) fn entries_for(opcode: u8) -> impl Iterator<Item = &'static CmdDesc> {
    let first = COMMANDS.partition_point(|d| d.opcode < opcode);
    COMMANDS
        .get(first..)
        .unwrap_or_default()
        .iter()
        .take_while(move |d| d.opcode == opcode)
}

/// SUPPORT field values (SPC-4 table 371).
const SUPPORT_NOT_SUPPORTED: u8 = 0b001;
const SUPPORT_STANDARD: u8 = 0b011;

/// Command timeouts descriptor (SPC-4 §6.35.4): nominal time not given,
/// recommended timeout from the table.
fn timeouts_descriptor(desc: &CmdDesc) -> [u8; 12] {
    let mut d = [0u8; 12];
    d[1] = 0x0A;
    d[8..12].copy_from_slice(&desc.timeout_secs.to_be_bytes());
    d
}

/// All-commands command descriptor (SPC-4 table 369).
fn command_descriptor(desc: &CmdDesc, rctd: bool) -> Vec<u8> {
    let sa = u16::from(desc.service_action.unwrap_or(0)).to_be_bytes();
    let flags = if rctd { 0x02 } else { 0 } | u8::from(desc.service_action.is_some());
    let cdb_len = (desc.usage.len() as u16).to_be_bytes();
    let mut d = vec![
        desc.opcode,
        0,
        sa[0],
        sa[1],
        0,
        flags,
        cdb_len[0],
        cdb_len[1],
    ];
    if rctd {
        d.extend_from_slice(&timeouts_descriptor(desc));
    }
    d
}

/// One-command parameter data (SPC-4 table 370).
fn one_command(desc: Option<&CmdDesc>, rctd: bool) -> Vec<u8> {
    let Some(desc) = desc else {
        return vec![0, SUPPORT_NOT_SUPPORTED, 0, 0];
    };
    let ctdp = if rctd { 0x80 } else { 0 };
    let cdb_len = (desc.usage.len() as u16).to_be_bytes();
    let mut d = vec![0, ctdp | SUPPORT_STANDARD, cdb_len[0], cdb_len[1]];
    d.extend_from_slice(desc.usage);
    if rctd {
        d.extend_from_slice(&timeouts_descriptor(desc));
    }
    d
}

/// REPORT SUPPORTED OPERATION CODES (SPC-4 §6.35), from the command table.
pub(crate) fn report_supported_opcodes(ctx: &Ctx<'_>) -> Result<Outcome, Sense> {
    let lu = ctx.lu()?;
    let cdb = ctx.cdb;
    let rctd = cdb.bit(2, 0x80);
    let options = cdb.byte(2) & 0x07;
    let opcode = cdb.byte(3);
    let sa = cdb.be16(4);
    let alloc_len = u64::from(cdb.be32(6));
    let has_sa = entries_for(opcode).any(|d| d.service_action.is_some());
    let known = entries_for(opcode).next().is_some();
    let data = match options {
        0b000 => {
            let mut list = Vec::new();
            for desc in COMMANDS.iter().filter(|d| available(d, lu)) {
                list.extend(command_descriptor(desc, rctd));
            }
            let mut data = u32::try_from(list.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes()
                .to_vec();
            data.extend(list);
            data
        }
        // 001b: by opcode, which must not have service actions.
        0b001 if has_sa => return Err(Sense::invalid_cdb_field(2, Some(2))),
        0b001 => one_command(entries_for(opcode).next(), rctd),
        // 010b: by opcode and service action, which it must have.
        0b010 if known && !has_sa => return Err(Sense::invalid_cdb_field(2, Some(2))),
        // 011b: by opcode, and by service action if it has them.
        0b010 | 0b011 => {
            let desc = entries_for(opcode)
                .filter(|d| available(d, lu))
                .find(|d| d.service_action.is_none_or(|s| u16::from(s) == sa));
            one_command(desc, rctd)
        }
        _ => return Err(Sense::invalid_cdb_field(2, Some(2))),
    };
    Ok(Outcome::alloc(data, alloc_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_unique_and_self_describing() {
        for pair in COMMANDS.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                (a.opcode, a.service_action) < (b.opcode, b.service_action),
                "{} / {} out of order",
                a.name,
                b.name
            );
        }
        for d in COMMANDS {
            assert_eq!(d.usage.first(), Some(&d.opcode), "{}", d.name);
            assert!(matches!(d.usage.len(), 6 | 10 | 12 | 16), "{}", d.name);
            if let Some(sa) = d.service_action {
                assert_eq!(d.usage.get(1).map(|b| b & SERVICE_ACTION_MASK), Some(sa));
            }
            // The control byte only advertises what we accept there: nothing.
            assert_eq!(d.usage.last(), Some(&0), "{}", d.name);
        }
    }

    #[test]
    fn lookup_routes_by_opcode_and_service_action() {
        assert!(matches!(lookup(&[0x28; 10]), Lookup::Found(d) if d.name == "READ(10)"));
        assert!(matches!(lookup(&[0x9E, 0x10]), Lookup::Found(d) if d.name == "READ CAPACITY(16)"));
        assert!(matches!(
            lookup(&[0x9E, 0x11]),
            Lookup::UnknownServiceAction
        ));
        assert!(matches!(lookup(&[0x9E]), Lookup::UnknownServiceAction));
        assert!(matches!(lookup(&[0xFF]), Lookup::UnknownOpcode));
        assert!(matches!(lookup(&[]), Lookup::UnknownOpcode));
    }

    #[test]
    fn rsoc_descriptors() {
        let rc16 = COMMANDS
            .iter()
            .find(|d| d.opcode == 0x9E)
            .map(|d| command_descriptor(d, true))
            .unwrap_or_default();
        assert_eq!(&rc16[..8], &[0x9E, 0, 0, 0x10, 0, 0x03, 0, 16]);
        assert_eq!(&rc16[8..12], &[0, 0x0A, 0, 0]);
        let tur = COMMANDS
            .first()
            .map(|d| one_command(Some(d), false))
            .unwrap_or_default();
        assert_eq!(tur, vec![0, 0x03, 0, 6, 0, 0, 0, 0, 0, 0]);
        assert_eq!(one_command(None, true), vec![0, 0x01, 0, 0]);
    }
}
