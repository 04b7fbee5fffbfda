//! iSCSI text key=value data (RFC 7143 §6.1, §6.2), as carried in the data
//! segment of Login and Text PDUs.
//!
//! Layer: pure byte/string codec under the negotiation logic
//! ([`crate::negotiate`], [`crate::chap`]); no protocol state lives here.
//!
//! Guarantees:
//! - parsing never panics and never allocates more than the input size;
//! - keys are checked against the §6.1 character set and length (63), values
//!   must be UTF-8 of at most [`MAX_VALUE_LEN`] bytes;
//! - [`TextAssembler`] bounds the memory used while joining C-bit fragments.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use nom::bytes::complete::{tag, take_till};
use nom::sequence::terminated;
use nom::IResult;

/// An ordered list of key=value pairs, as they appear on the wire.
pub type KeyValues = Vec<(String, String)>;

/// Longest key name (§6.1: "a key name MUST NOT exceed 63 bytes").
pub const MAX_KEY_LEN: usize = 63;

/// Longest value accepted. §6.1 limits most values to 255 bytes but allows up
/// to 8192 for some keys; we accept 8192 for all (be liberal in what we accept).
pub const MAX_VALUE_LEN: usize = 8192;

/// Errors of the text layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// The text does not end with a NUL (every key=value ends with one).
    #[error("text data is not NUL-terminated")]
    Unterminated,
    /// Two NULs in a row: an entry with no key and no value.
    #[error("empty key=value entry at offset {offset}")]
    EmptyEntry {
        /// Byte offset of the entry in the text data.
        offset: usize,
    },
    /// An entry without '='.
    #[error("key=value entry at offset {offset} has no '='")]
    MissingSeparator {
        /// Byte offset of the entry in the text data.
        offset: usize,
    },
    /// An entry that starts with '='.
    #[error("empty key at offset {offset}")]
    EmptyKey {
        /// Byte offset of the entry in the text data.
        offset: usize,
    },
    /// A key longer than [`MAX_KEY_LEN`] bytes.
    #[error("key at offset {offset} is longer than {MAX_KEY_LEN} bytes")]
    KeyTooLong {
        /// Byte offset of the entry in the text data.
        offset: usize,
    },
    /// A key with a character outside the RFC 7143 §6.1 set.
    #[error("key at offset {offset} contains an invalid character")]
    InvalidKeyChar {
        /// Byte offset of the entry in the text data.
        offset: usize,
    },
    /// A value longer than [`MAX_VALUE_LEN`] bytes.
    #[error("value of key {key} is longer than {MAX_VALUE_LEN} bytes")]
    ValueTooLong {
        /// The key whose value it is.
        key: String,
    },
    /// A value that is not UTF-8.
    #[error("value of key {key} is not valid UTF-8")]
    ValueNotUtf8 {
        /// The key whose value it is.
        key: String,
    },
    /// The text, joined across C-bit PDUs, is longer than the limit.
    #[error("text data exceeds {max} bytes")]
    TooLong {
        /// The limit, bytes (the portal's `max_text_len`).
        max: usize,
    },
    /// A binary value (0x hex or 0b base64, RFC 7143 §6.1) that does not decode.
    #[error("invalid binary value")]
    InvalidBinary,
    /// A numerical value (decimal, or 0x hex) that does not parse or fit.
    #[error("invalid numerical value")]
    InvalidNumber,
}

/// §6.1 key characters: letters, digits, '.', '-', '+', '@', '_', plus '#'
/// for the registered extension keys ("X#NodeArchitecture", §13.22).
fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'@' | b'_' | b'#')
}

/// One NUL-terminated entry.
fn entry(input: &[u8]) -> IResult<&[u8], &[u8]> {
    terminated(take_till(|b| b == 0), tag(&[0u8][..]))(input)
}

fn parse_pair(raw: &[u8], offset: usize) -> Result<(String, String), TextError> {
    if raw.is_empty() {
        return Err(TextError::EmptyEntry { offset });
    }
    let eq = raw
        .iter()
        .position(|&b| b == b'=')
        .ok_or(TextError::MissingSeparator { offset })?;
    let (key, value) = raw.split_at(eq);
    let value = value.get(1..).unwrap_or_default();
    if key.is_empty() {
        return Err(TextError::EmptyKey { offset });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(TextError::KeyTooLong { offset });
    }
    if !key.iter().copied().all(is_key_char) {
        return Err(TextError::InvalidKeyChar { offset });
    }
    // The key is ASCII, checked above.
    let key = String::from_utf8_lossy(key).into_owned();
    if value.len() > MAX_VALUE_LEN {
        return Err(TextError::ValueTooLong { key });
    }
    match std::str::from_utf8(value) {
        Ok(v) => Ok((key, v.to_owned())),
        Err(_) => Err(TextError::ValueNotUtf8 { key }),
    }
}

/// Parse a complete text data segment: `key=value\0` repeated. Trailing NUL
/// bytes (padding) are tolerated; every pair, including the last, must be
/// NUL-terminated (§6.1). Duplicate keys are kept: negotiation judges them.
pub fn parse_text(data: &[u8]) -> Result<KeyValues, TextError> {
    let mut out = Vec::new();
    let mut rest = data;
    loop {
        // Only padding left (this stops at the first non-NUL byte).
        if rest.iter().all(|&b| b == 0) {
            return Ok(out);
        }
        let offset = data.len() - rest.len();
        let (after, raw) = entry(rest).map_err(|_| TextError::Unterminated)?;
        out.push(parse_pair(raw, offset)?);
        rest = after;
    }
}

/// Encode pairs as `key=value\0...` (no padding; the PDU codec pads).
pub fn encode_text(pairs: &[(String, String)]) -> Vec<u8> {
    let len = pairs.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    let mut out = Vec::with_capacity(len);
    for (k, v) in pairs {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Joins the data segments of a sequence of PDUs with the C (continue) bit
/// set (§11.10.2, §11.12.2): a key=value pair may straddle PDUs.
#[derive(Debug)]
pub struct TextAssembler {
    max_total: usize,
    buf: Vec<u8>,
}

impl TextAssembler {
    /// `max_total` bounds the joined text; past it [`push`](Self::push) fails.
    pub fn new(max_total: usize) -> Self {
        TextAssembler {
            max_total,
            buf: Vec::new(),
        }
    }

    /// Add one PDU's data. Returns the whole text when `cont` is false (the
    /// last fragment), `None` while more fragments are expected. On
    /// [`TextError::TooLong`] the partial text is dropped.
    pub fn push(&mut self, fragment: &[u8], cont: bool) -> Result<Option<Vec<u8>>, TextError> {
        let total = self.buf.len().saturating_add(fragment.len());
        if total > self.max_total {
            self.reset();
            return Err(TextError::TooLong {
                max: self.max_total,
            });
        }
        self.buf.extend_from_slice(fragment);
        if cont {
            Ok(None)
        } else {
            Ok(Some(std::mem::take(&mut self.buf)))
        }
    }

    /// Drop any partially assembled text.
    pub fn reset(&mut self) {
        self.buf = Vec::new();
    }

    /// Bytes held so far.
    pub fn pending_len(&self) -> usize {
        self.buf.len()
    }
}

/// Splits an encoded response over several PDUs (C bit set on all but the
/// last). Splitting may fall inside a pair, which §6.1 allows.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextSplitter;

impl TextSplitter {
    /// Chunks of at most `max` bytes (`max` 0 is treated as 1). Empty input
    /// gives one empty chunk: a response PDU is still due.
    pub fn split(data: &[u8], max: usize) -> Vec<Vec<u8>> {
        if data.is_empty() {
            return vec![Vec::new()];
        }
        data.chunks(max.max(1)).map(<[u8]>::to_vec).collect()
    }
}

/// Base64 as §6.1 uses it (RFC 4648 alphabet); padding optional on input.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

fn hex_nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Decode a §6.1 binary value: `0x`/`0X` followed by hex digits (an odd
/// count implies a leading zero nibble) or `0b`/`0B` followed by base64.
pub fn decode_binary(v: &str) -> Result<Vec<u8>, TextError> {
    let (prefix, body) = match (v.get(..2), v.get(2..)) {
        (Some(p), Some(b)) => (p, b),
        _ => return Err(TextError::InvalidBinary),
    };
    match prefix {
        "0x" | "0X" => decode_hex(body.as_bytes()),
        "0b" | "0B" => {
            if body.is_empty() {
                return Err(TextError::InvalidBinary);
            }
            BASE64.decode(body).map_err(|_| TextError::InvalidBinary)
        }
        _ => Err(TextError::InvalidBinary),
    }
}

fn decode_hex(digits: &[u8]) -> Result<Vec<u8>, TextError> {
    if digits.is_empty() {
        return Err(TextError::InvalidBinary);
    }
    let mut out = Vec::with_capacity(digits.len().div_ceil(2));
    let (head, tail) = digits.split_at(digits.len() % 2);
    if let Some(&c) = head.first() {
        out.push(hex_nibble(c).ok_or(TextError::InvalidBinary)?);
    }
    for pair in tail.chunks_exact(2) {
        let (hi, lo) = match pair {
            [hi, lo] => (*hi, *lo),
            _ => return Err(TextError::InvalidBinary),
        };
        let hi = hex_nibble(hi).ok_or(TextError::InvalidBinary)?;
        let lo = hex_nibble(lo).ok_or(TextError::InvalidBinary)?;
        out.push((hi << 4) | lo);
    }
    Ok(out)
}

/// Encode bytes as a §6.1 hex constant: `0x` and lowercase digits.
pub fn encode_hex(bytes: &[u8]) -> String {
    let digit = |n: u8| char::from_digit(u32::from(n), 16).unwrap_or('0');
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for &b in bytes {
        s.push(digit(b >> 4));
        s.push(digit(b & 0x0f));
    }
    s
}

/// Parse a §6.1 numerical value: a decimal constant or a `0x`/`0X` hex
/// constant, at most 64 bits.
pub fn parse_number(v: &str) -> Result<u64, TextError> {
    let (digits, radix) = match v.get(..2) {
        Some("0x" | "0X") => (v.get(2..).unwrap_or_default(), 16),
        _ => (v, 10),
    };
    // from_str_radix accepts a leading '+'; §6.1 does not.
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(TextError::InvalidNumber);
    }
    u64::from_str_radix(digits, radix).map_err(|_| TextError::InvalidNumber)
}
