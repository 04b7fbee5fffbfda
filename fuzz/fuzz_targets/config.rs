//! The TOML config loader (`rustgt::config`, the daemon's library). Any
//! text gives a config or an error, never a panic; a config it accepts
//! passes `check` again and survives a TOML round trip.
#![no_main]

use rustgt::config;
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
