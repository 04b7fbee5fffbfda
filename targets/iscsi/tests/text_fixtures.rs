//! Text key=value format (RFC 7143 §6.1): fixtures, errors, C-bit assembly.

use proptest::prelude::*;
use rustgt_iscsi::text::{
    decode_binary, encode_hex, encode_text, parse_number, parse_text, KeyValues, TextAssembler,
    TextError, TextSplitter,
};

fn kv(pairs: &[(&str, &str)]) -> KeyValues {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn parses_login_fixture() {
    let data = b"InitiatorName=iqn.1994-05.com.redhat:abc\0SessionType=Normal\0\
TargetName=iqn.2024-01.org.rustgt:disk1\0AuthMethod=CHAP,None\0";
    assert_eq!(
        parse_text(data).expect("parse"),
        kv(&[
            ("InitiatorName", "iqn.1994-05.com.redhat:abc"),
            ("SessionType", "Normal"),
            ("TargetName", "iqn.2024-01.org.rustgt:disk1"),
            ("AuthMethod", "CHAP,None"),
        ])
    );
}

#[test]
fn tolerates_padding_and_empty_input() {
    assert_eq!(
        parse_text(b"A=1\0\0\0\0").expect("padded"),
        kv(&[("A", "1")])
    );
    assert_eq!(parse_text(b"").expect("empty"), KeyValues::new());
    assert_eq!(
        parse_text(b"\0\0\0").expect("padding only"),
        KeyValues::new()
    );
}

#[test]
fn keeps_duplicates_empty_values_and_equals_in_values() {
    assert_eq!(
        parse_text(b"A=1\0A=2\0B=\0C=x=y\0").expect("parse"),
        kv(&[("A", "1"), ("A", "2"), ("B", ""), ("C", "x=y")])
    );
}

#[test]
fn accepts_private_keys_and_utf8_values() {
    assert_eq!(
        parse_text("X-com.example.Foo=1\0X#Bar_baz@x+y=ä€\0".as_bytes()).expect("parse"),
        kv(&[("X-com.example.Foo", "1"), ("X#Bar_baz@x+y", "ä€")])
    );
}

#[test]
fn rejects_malformed_text() {
    assert_eq!(parse_text(b"A=1"), Err(TextError::Unterminated));
    assert_eq!(
        parse_text(b"A=1\0NoEquals\0"),
        Err(TextError::MissingSeparator { offset: 4 })
    );
    assert_eq!(parse_text(b"=1\0"), Err(TextError::EmptyKey { offset: 0 }));
    assert_eq!(
        parse_text(b"A=1\0\0B=2\0"),
        Err(TextError::EmptyEntry { offset: 4 })
    );
    assert_eq!(
        parse_text(b"Bad Key=1\0"),
        Err(TextError::InvalidKeyChar { offset: 0 })
    );
    let long_key = format!("{}=1\0", "K".repeat(64));
    assert_eq!(
        parse_text(long_key.as_bytes()),
        Err(TextError::KeyTooLong { offset: 0 })
    );
    let ok_key = format!("{}=1\0", "K".repeat(63));
    assert!(parse_text(ok_key.as_bytes()).is_ok());
    assert_eq!(
        parse_text(b"A=\xff\xfe\0"),
        Err(TextError::ValueNotUtf8 { key: "A".into() })
    );
}

#[test]
fn value_length_limit_is_8192() {
    let ok = format!("A={}\0", "v".repeat(8192));
    assert!(parse_text(ok.as_bytes()).is_ok());
    let long = format!("A={}\0", "v".repeat(8193));
    assert_eq!(
        parse_text(long.as_bytes()),
        Err(TextError::ValueTooLong { key: "A".into() })
    );
}

#[test]
fn encodes_fixture() {
    let pairs = kv(&[("HeaderDigest", "None"), ("MaxBurstLength", "262144")]);
    assert_eq!(
        encode_text(&pairs),
        b"HeaderDigest=None\0MaxBurstLength=262144\0".to_vec()
    );
    assert_eq!(encode_text(&[]), Vec::<u8>::new());
}

#[test]
fn assembler_joins_fragments_split_inside_a_pair() {
    let mut a = TextAssembler::new(64);
    assert_eq!(a.push(b"MaxBurstLe", true).expect("1"), None);
    assert_eq!(a.push(b"ngth=2621", true).expect("2"), None);
    assert_eq!(a.pending_len(), 19);
    let whole = a.push(b"44\0", false).expect("3").expect("complete");
    assert_eq!(
        parse_text(&whole).expect("parse"),
        kv(&[("MaxBurstLength", "262144")])
    );
    assert_eq!(a.pending_len(), 0, "reset after completion");
}

#[test]
fn assembler_bounds_memory() {
    let mut a = TextAssembler::new(8);
    assert_eq!(a.push(b"12345", true).expect("fits"), None);
    assert_eq!(a.push(b"6789", true), Err(TextError::TooLong { max: 8 }));
    assert_eq!(a.pending_len(), 0, "dropped on overflow");
    // Exactly at the limit is fine.
    assert_eq!(
        a.push(b"12345678", false).expect("fits").map(|v| v.len()),
        Some(8)
    );
    a.push(b"abc", true).expect("fits");
    a.reset();
    assert_eq!(a.pending_len(), 0);
}

#[test]
fn splitter_chunks() {
    let data = b"A=1\0B=22\0";
    let chunks = TextSplitter::split(data, 4);
    assert_eq!(
        chunks,
        vec![b"A=1\0".to_vec(), b"B=22".to_vec(), b"\0".to_vec()]
    );
    assert_eq!(TextSplitter::split(b"", 4), vec![Vec::<u8>::new()]);
    assert_eq!(TextSplitter::split(b"ab", 0).len(), 2, "max 0 acts as 1");
    let joined: Vec<u8> = TextSplitter::split(data, 3).concat();
    assert_eq!(joined, data.to_vec());
}

#[test]
fn binary_values() {
    assert_eq!(decode_binary("0x0102ff").expect("hex"), vec![1, 2, 255]);
    assert_eq!(decode_binary("0XABC").expect("odd hex"), vec![0x0a, 0xbc]);
    assert_eq!(decode_binary("0x1").expect("one digit"), vec![1]);
    assert_eq!(decode_binary("0bAQL/").expect("b64"), vec![1, 2, 255]);
    assert_eq!(decode_binary("0BAQI=").expect("b64 padded"), vec![1, 2]);
    assert_eq!(decode_binary("0BAQI").expect("b64 unpadded"), vec![1, 2]);
    for bad in ["", "0", "0x", "0b", "0xg1", "1234", "0b!!", "x01"] {
        assert_eq!(decode_binary(bad), Err(TextError::InvalidBinary), "{bad:?}");
    }
    assert_eq!(encode_hex(&[0, 0xab, 0x10]), "0x00ab10");
    assert_eq!(encode_hex(&[]), "0x");
}

#[test]
fn numerical_values() {
    assert_eq!(parse_number("262144"), Ok(262_144));
    assert_eq!(parse_number("0x40000"), Ok(262_144));
    assert_eq!(parse_number("0XfF"), Ok(255));
    assert_eq!(parse_number("0"), Ok(0));
    assert_eq!(parse_number("18446744073709551615"), Ok(u64::MAX));
    for bad in [
        "",
        "+1",
        "-1",
        "1.5",
        "0x",
        "abc",
        " 1",
        "18446744073709551616",
    ] {
        assert_eq!(parse_number(bad), Err(TextError::InvalidNumber), "{bad:?}");
    }
}

fn key_strategy() -> impl Strategy<Value = String> {
    "[A-Za-z0-9.+@_#-]{1,63}"
}

fn value_strategy() -> impl Strategy<Value = String> {
    // Any UTF-8 without NUL.
    proptest::collection::vec(any::<char>().prop_filter("no NUL", |c| *c != '\0'), 0..64)
        .prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #[test]
    fn parse_text_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_text(&data);
    }

    #[test]
    fn parse_text_never_panics_on_texty_input(s in "[A-Za-z=\\x00,]{0,128}") {
        let _ = parse_text(s.as_bytes());
    }

    #[test]
    fn encode_then_parse_round_trips(
        pairs in proptest::collection::vec((key_strategy(), value_strategy()), 0..16),
        padding in 0usize..4,
    ) {
        let mut wire = encode_text(&pairs);
        wire.extend(std::iter::repeat_n(0u8, padding));
        prop_assert_eq!(parse_text(&wire).expect("round trip"), pairs);
    }

    #[test]
    fn split_then_assemble_round_trips(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        max in 1usize..64,
    ) {
        let chunks = TextSplitter::split(&data, max);
        prop_assert!(chunks.iter().all(|c| c.len() <= max));
        let mut a = TextAssembler::new(300);
        let last = chunks.len() - 1;
        let mut out = None;
        for (i, c) in chunks.iter().enumerate() {
            out = a.push(c, i != last).expect("within bound");
        }
        prop_assert_eq!(out.expect("complete"), data);
    }

    #[test]
    fn binary_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..64)) {
        prop_assert_eq!(decode_binary(&encode_hex(&bytes)).expect("hex"), bytes);
    }

    #[test]
    fn decode_binary_never_panics(s in "\\PC{0,40}") {
        let _ = decode_binary(&s);
        let _ = parse_number(&s);
    }
}
