//! Login / Text key=value text: the parser, the multi-PDU assembler, binary
//! and numeric values. Whatever parses must encode and parse back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt_iscsi::text::{
    decode_binary, encode_hex, encode_text, parse_number, parse_text, TextAssembler, TextSplitter,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(pairs) = parse_text(data) {
        let again = encode_text(&pairs);
        assert_eq!(parse_text(&again).expect("re-encoded text parses"), pairs);
        for (_, v) in &pairs {
            match decode_binary(v) {
                Ok(bytes) if !bytes.is_empty() => {
                    let hex = encode_hex(&bytes);
                    assert_eq!(decode_binary(&hex).expect("hex re-decodes"), bytes);
                }
                _ => {}
            }
            let _ = parse_number(v);
        }
        // Split at an input-chosen size and join again.
        let max = usize::from(data.first().copied().unwrap_or(1)).max(1);
        let parts = TextSplitter::split(&again, max);
        let mut asm = TextAssembler::new(again.len());
        let mut joined = None;
        for (i, p) in parts.iter().enumerate() {
            assert!(p.len() <= max);
            joined = asm.push(p, i + 1 < parts.len()).expect("fits");
        }
        if !parts.is_empty() {
            assert_eq!(joined.expect("last part ends the text"), again);
        }
    }
    // Fragments cut at every 0xff byte through a small assembler.
    let mut asm = TextAssembler::new(256);
    let mut frags = data.split(|&b| b == 0xff).peekable();
    let mut n = 0;
    while let Some(f) = frags.next() {
        n += 1;
        if n > 64 {
            break;
        }
        if let Ok(Some(text)) = asm.push(f, frags.peek().is_some()) {
            let _ = parse_text(&text);
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = decode_binary(s);
        let _ = parse_number(s);
    }
});
