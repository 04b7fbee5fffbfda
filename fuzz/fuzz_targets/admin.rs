//! The admin request parser (`rustgt::api::proto`, the daemon's
//! library): any line gives a request or an error message, never a panic,
//! and a request it accepts encodes to a line that parses to the same
//! request.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustgt::api::proto;

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(req) = proto::parse_request(line) {
        let again = serde_json::to_string(&req).expect("a request encodes");
        assert_eq!(
            proto::parse_request(&again).expect("re-encoded request parses"),
            req
        );
    }
});
