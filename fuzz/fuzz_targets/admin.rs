//! The admin request parser (`src/admin/proto.rs` of the daemon, compiled
//! into this target as a module with the modules it names, since the daemon
//! has no library target): any line gives a request or an error message,
//! never a panic, and a request it accepts encodes to a line that parses
//! to the same request.
#![no_main]
#![allow(dead_code, unused_imports)]

mod admin {
    /// Mirrors `rustgt::admin::DEFAULT_SOCKET_NAME` (src/admin/mod.rs).
    pub const DEFAULT_SOCKET_NAME: &str = "admin.sock";

    /// Stands in for `rustgt::admin::peer` (src/admin/peer.rs), which the
    /// loader asks for `admin_socket_group`: no group database here, so
    /// every group name is unknown (the loader's error path).
    pub mod peer {
        pub fn lookup_group(_name: &str) -> std::io::Result<Option<u32>> {
            Ok(None)
        }
    }
}

// At the crate root rather than inside `admin` (a `#[path]` in an inline
// module resolves from a directory that does not exist here); proto.rs
// names its sibling as `super::stats`, which this resolves too.
#[path = "../../src/admin/proto.rs"]
mod proto;
#[path = "../../src/admin/stats.rs"]
mod stats;

#[path = "../../src/config/mod.rs"]
mod config;

use libfuzzer_sys::fuzz_target;

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
