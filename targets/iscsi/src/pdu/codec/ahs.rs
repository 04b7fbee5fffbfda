//! Additional Header Segments (RFC 7143 §11.2.2): the extended CDB and the
//! bidirectional read length a SCSI Command may carry.

use nom::bytes::complete::take;
use nom::number::complete::{be_u16, u8 as byte};
use nom::IResult;

use crate::pdu::error::PduError;

use super::frame::padded_len;

/// Longest CDB [`Request::encode`](crate::pdu::Request::encode) carries (16 in the BHS, the rest in an
/// extended CDB AHS that still fits next to a bidirectional-read AHS).
pub const MAX_CDB_LEN: usize = 1024;
/// AHSType of the Extended CDB AHS (§11.2.2.3).
pub const AHS_TYPE_EXTENDED_CDB: u8 = 1;
/// AHSType of the Expected Bidirectional Read Data Length AHS (§11.2.2.4).
pub const AHS_TYPE_BIDI_READ_LEN: u8 = 2;

// ---------------------------------------------------------------------------
// Additional Header Segments (§11.2.2).
// ---------------------------------------------------------------------------

/// The AHS a SCSI Command may carry.
#[derive(Debug, Default)]
pub(super) struct CommandAhs<'a> {
    /// CDB bytes beyond the first 16.
    pub(super) extended_cdb: Option<&'a [u8]>,
    pub(super) bidi_read_len: Option<u32>,
}

/// One AHS: AHSLength (2), AHSType (1), AHS-specific (AHSLength bytes,
/// starting with byte 3), padding to a 4-byte word (§11.2.2.1).
fn ahs_segment(input: &[u8]) -> IResult<&[u8], (u8, &[u8])> {
    let (input, len) = be_u16(input)?;
    let (input, ahs_type) = byte(input)?;
    let (input, specific) = take(len)(input)?;
    let unpadded = 3 + usize::from(len);
    let (input, _pad) = take(padded_len(unpadded) - unpadded)(input)?;
    Ok((input, (ahs_type, specific)))
}

pub(super) fn parse_command_ahs(mut input: &[u8]) -> Result<CommandAhs<'_>, PduError> {
    let mut ahs = CommandAhs::default();
    while !input.is_empty() {
        let (rest, (ahs_type, specific)) = ahs_segment(input).map_err(|_| PduError::BadAhs)?;
        input = rest;
        // Both defined types start with a reserved byte (§11.2.2.3, §11.2.2.4).
        let body = specific.get(1..).ok_or(PduError::BadAhs)?;
        match ahs_type {
            // An extended CDB AHS is only for CDBs of 17 bytes or more.
            AHS_TYPE_EXTENDED_CDB if ahs.extended_cdb.is_none() && !body.is_empty() => {
                ahs.extended_cdb = Some(body);
            }
            AHS_TYPE_BIDI_READ_LEN if ahs.bidi_read_len.is_none() => {
                let len: [u8; 4] = body.try_into().map_err(|_| PduError::BadAhs)?;
                ahs.bidi_read_len = Some(u32::from_be_bytes(len));
            }
            _ => return Err(PduError::BadAhs),
        }
    }
    Ok(ahs)
}

pub(super) fn push_ahs(out: &mut Vec<u8>, ahs_type: u8, body: &[u8]) {
    let specific_len = 1 + body.len();
    let start = out.len();
    out.extend_from_slice(
        &u16::try_from(specific_len)
            .unwrap_or(u16::MAX)
            .to_be_bytes(),
    );
    out.push(ahs_type);
    out.push(0); // reserved
    out.extend_from_slice(body);
    out.resize(start + padded_len(3 + specific_len), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ahs_rejections() {
        // Extended CDB with no CDB bytes (AHSLength 1 = just the reserved byte).
        assert_eq!(
            parse_command_ahs(&[0, 1, 1, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Unknown AHS type.
        assert_eq!(
            parse_command_ahs(&[0, 1, 7, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Bidi read length of the wrong size.
        assert_eq!(
            parse_command_ahs(&[0, 4, 2, 0, 0, 0, 1, 0]).map(|_| ()),
            Err(PduError::BadAhs)
        );
        // Two bidi AHS.
        let two = [0, 5, 2, 0, 0, 0, 0, 1, 0, 5, 2, 0, 0, 0, 0, 2];
        assert_eq!(parse_command_ahs(&two).map(|_| ()), Err(PduError::BadAhs));
        // Length running past the end.
        assert_eq!(
            parse_command_ahs(&[0, 9, 1, 0, 1, 2, 3, 4]).map(|_| ()),
            Err(PduError::BadAhs)
        );
    }
}
