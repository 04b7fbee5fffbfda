//! RFC 1982 serial-number arithmetic on 32-bit sequence numbers (CmdSN,
//! StatSN, DataSN).

/// RFC 1982 serial comparison on 32-bit sequence numbers: `a < b`.
pub fn sn_lt(a: u32, b: u32) -> bool {
    a != b && (b.wrapping_sub(a) as i32) > 0
}

/// `a <= b` in serial arithmetic.
pub fn sn_le(a: u32, b: u32) -> bool {
    a == b || sn_lt(a, b)
}
