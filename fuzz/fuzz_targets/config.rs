//! The TOML config loader (`src/config/` of the daemon, which is a binary
//! crate with no library target: the module is compiled into this target as
//! a module, with the one item of `crate::admin` it names). Any text gives a
//! config or an error, never a panic; a config it accepts passes `check`
//! again and survives a TOML round trip.
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

#[path = "../../src/config/mod.rs"]
mod config;

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let overrides = config::Overrides::default();
    match config::load_text(path, text.to_owned(), &overrides) {
        Ok(cfg) => {
            config::check(&cfg, "fuzz").expect("a loaded config passes check");
            if let Ok(again) = toml::to_string(&cfg) {
                let back = config::load_text(path, again, &overrides)
                    .expect("a loaded config, written as TOML, loads again");
                assert_eq!(back, cfg);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    let _ = config::admin_socket_of(None, &overrides);
});
