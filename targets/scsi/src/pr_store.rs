//! The APTPL file: persistent reservation state that survives power loss
//! (SPC-4 §5.13.5), one small TOML file per logical unit.
//!
//! Guarantees:
//! - [`save`] is atomic: the state goes to a temporary file in the same
//!   directory, which is fsynced and renamed over the old file, and the
//!   directory is fsynced; a crash leaves the old or the new state, never a
//!   mix;
//! - [`load`] refuses a file it cannot fully validate (unknown version,
//!   unsupported type, a reservation whose holder is not registered)
//!   instead of guessing: losing a reservation silently could let a fenced
//!   initiator write;
//! - keys are written as hex strings: TOML integers are signed 64-bit.
//!
//! PRgeneration is not saved: it restarts at zero at power on (SPC-4
//! §6.16.2).

// Parses what a peer sent (or a persisted file): no indexing that could
// panic (tests may index).
#![deny(clippy::indexing_slicing)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pr_state::{ItNexus, PrState, PrType, Registration, Reservation, MAX_REGISTRATIONS};

/// File format version written by [`save`].
const VERSION: u32 = 1;

/// Errors reading or writing the APTPL file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrStoreError {
    #[error("persistent reservation state {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("persistent reservation state {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedState {
    version: u32,
    #[serde(default)]
    registrations: Vec<SavedRegistration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reservation: Option<SavedReservation>,
    /// PRgeneration and APTPL: kept in the state the gateways of one
    /// backing share ([`to_shared`]), never in the APTPL file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aptpl: Option<bool>,
    /// The I_T nexus holding an SPC-2 (RESERVE) reservation: only in the
    /// state the gateways of one backing share, never in the APTPL file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spc2: Option<SavedSpc2>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedSpc2 {
    initiator_port: String,
    target_port: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedRegistration {
    /// Reservation key, "0x" and 16 hex digits.
    key: String,
    initiator_port: String,
    target_port: String,
    relative_port_id: u16,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedReservation {
    /// TYPE code (SPC-4 table 212).
    pr_type: u8,
    holder_initiator_port: String,
    holder_target_port: String,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> PrStoreError + '_ {
    move |source| PrStoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, reason: impl Into<String>) -> PrStoreError {
    PrStoreError::Invalid {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn encode(state: &PrState) -> SavedState {
    SavedState {
        version: VERSION,
        registrations: state
            .registrations
            .iter()
            .map(|r| SavedRegistration {
                key: format!("0x{:016x}", r.key),
                initiator_port: r.it.initiator_port.clone(),
                target_port: r.it.target_port.clone(),
                relative_port_id: r.relative_port_id,
            })
            .collect(),
        reservation: state.reservation.as_ref().map(|r| SavedReservation {
            pr_type: r.pr_type.0,
            holder_initiator_port: r.holder.initiator_port.clone(),
            holder_target_port: r.holder.target_port.clone(),
        }),
        generation: None,
        aptpl: None,
        spc2: None,
    }
}

/// The state as the gateways of one backing share it: the APTPL file's
/// format plus PRgeneration, the APTPL bit and the SPC-2 reservation's
/// holder.
pub(crate) fn to_shared(state: &PrState, spc2: Option<&ItNexus>) -> Result<Vec<u8>, String> {
    let mut saved = encode(state);
    saved.generation = Some(state.generation);
    saved.aptpl = Some(state.aptpl);
    saved.spc2 = spc2.map(|it| SavedSpc2 {
        initiator_port: it.initiator_port.clone(),
        target_port: it.target_port.clone(),
    });
    toml::to_string(&saved)
        .map(String::into_bytes)
        .map_err(|e| e.to_string())
}

/// Reads what [`to_shared`] wrote; empty data is the state of a new unit.
pub(crate) fn from_shared(data: &[u8]) -> Result<(PrState, Option<ItNexus>), PrStoreError> {
    let name = Path::new("the shared state");
    if data.is_empty() {
        return Ok((PrState::default(), None));
    }
    let text = std::str::from_utf8(data).map_err(|e| invalid(name, e.to_string()))?;
    let mut saved: SavedState = toml::from_str(text).map_err(|e| invalid(name, e.to_string()))?;
    let generation = saved.generation.unwrap_or(0);
    let aptpl = saved.aptpl.unwrap_or(false);
    let spc2 = saved.spc2.take().map(|h| ItNexus {
        initiator_port: h.initiator_port,
        target_port: h.target_port,
    });
    let mut state = decode(name, saved)?;
    state.generation = generation;
    state.aptpl = aptpl;
    Ok((state, spc2))
}

fn parse_key(s: &str) -> Option<u64> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u64::from_str_radix(hex, 16).ok()
}

fn decode(path: &Path, saved: SavedState) -> Result<PrState, PrStoreError> {
    if saved.version != VERSION {
        return Err(invalid(path, format!("unknown version {}", saved.version)));
    }
    if saved.registrations.len() > MAX_REGISTRATIONS {
        return Err(invalid(path, "too many registrations"));
    }
    let mut state = PrState {
        aptpl: true,
        ..PrState::default()
    };
    for r in saved.registrations {
        let key = parse_key(&r.key).ok_or_else(|| invalid(path, format!("bad key {:?}", r.key)))?;
        let it = ItNexus {
            initiator_port: r.initiator_port,
            target_port: r.target_port,
        };
        if state.registrations.iter().any(|x| x.it == it) {
            return Err(invalid(path, "duplicate registration"));
        }
        state.registrations.push(Registration {
            key,
            it,
            relative_port_id: r.relative_port_id,
        });
    }
    if let Some(res) = saved.reservation {
        let pr_type = PrType(res.pr_type);
        if !pr_type.is_supported() {
            return Err(invalid(path, format!("unsupported type {}", res.pr_type)));
        }
        let holder = ItNexus {
            initiator_port: res.holder_initiator_port,
            target_port: res.holder_target_port,
        };
        // A holder must be registered; an all registrants reservation
        // only needs some registrant.
        let held = if pr_type.all_registrants() {
            !state.registrations.is_empty()
        } else {
            state.registrations.iter().any(|r| r.it == holder)
        };
        if !held {
            return Err(invalid(path, "reservation holder is not registered"));
        }
        state.reservation = Some(Reservation { pr_type, holder });
    }
    Ok(state)
}

/// Reads the saved state; `None` when there is no file.
pub(crate) fn load(path: &Path) -> Result<Option<PrState>, PrStoreError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    let saved: SavedState = toml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
    decode(path, saved).map(Some)
}

/// The temporary file next to `path`.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Fsyncs the directory holding `path`, so a rename or unlink is durable.
fn sync_dir(path: &Path) -> Result<(), PrStoreError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Saves `state` atomically (temporary file, fsync, rename, fsync dir).
pub(crate) fn save(path: &Path, state: &PrState) -> Result<(), PrStoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let mut text = String::from("# rustgt persistent reservations (APTPL); rewritten atomically\n");
    text.push_str(&toml::to_string(&encode(state)).map_err(|e| invalid(path, e.to_string()))?);
    let tmp = temp_path(path);
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err(&tmp)(e));
    }
    fs::rename(&tmp, path).map_err(io_err(path))?;
    sync_dir(path)
}

/// Removes the saved state (APTPL=0), if any.
pub(crate) fn remove(path: &Path) -> Result<(), PrStoreError> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn it(i: &str) -> ItNexus {
        ItNexus {
            initiator_port: format!("iqn.1994-05.com.example:{i},i,0x23d000001"),
            target_port: "iqn.2026-11.org.rustgt:t,t,0x0001".into(),
        }
    }

    fn sample() -> PrState {
        PrState {
            generation: 17,
            aptpl: true,
            registrations: vec![
                Registration {
                    key: u64::MAX,
                    it: it("a"),
                    relative_port_id: 1,
                },
                Registration {
                    key: 0x1234,
                    it: it("b \"quoted\""),
                    relative_port_id: 2,
                },
            ],
            reservation: Some(Reservation {
                pr_type: PrType::EXCLUSIVE_ACCESS_RO,
                holder: it("a"),
            }),
        }
    }

    #[test]
    fn save_load_round_trip_resets_generation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pr").join("lun0.toml");
        assert!(load(&path).expect("no file").is_none());
        save(&path, &sample()).expect("save");
        assert!(!temp_path(&path).exists());
        let back = load(&path).expect("load").expect("state");
        assert_eq!(
            back,
            PrState {
                generation: 0,
                ..sample()
            }
        );
        remove(&path).expect("remove");
        assert!(load(&path).expect("gone").is_none());
        remove(&path).expect("removing twice is fine");
    }

    #[test]
    fn shared_state_round_trip_with_the_spc2_holder() {
        assert_eq!(from_shared(&[]).expect("empty"), (PrState::default(), None));
        let holder = it("c");
        for spc2 in [None, Some(&holder)] {
            let data = to_shared(&sample(), spc2).expect("encode");
            let (pr, back) = from_shared(&data).expect("decode");
            assert_eq!(pr, sample());
            assert_eq!(back.as_ref(), spc2);
        }
    }

    #[test]
    fn refuses_what_it_cannot_validate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.toml");
        let bad = [
            "version = 2\n",
            "version = 1\n[[registrations]]\nkey = \"12\"\ninitiator_port = \"i\"\ntarget_port = \"t\"\nrelative_port_id = 1\n",
            "version = 1\n[reservation]\npr_type = 1\nholder_initiator_port = \"i\"\nholder_target_port = \"t\"\n",
            "version = 1\n[[registrations]]\nkey = \"0x1\"\ninitiator_port = \"i\"\ntarget_port = \"t\"\nrelative_port_id = 1\n[reservation]\npr_type = 2\nholder_initiator_port = \"i\"\nholder_target_port = \"t\"\n",
            "not toml at all [",
            "version = 1\nsurprise = true\n",
        ];
        for text in bad {
            fs::write(&path, text).expect("write");
            assert!(
                matches!(load(&path), Err(PrStoreError::Invalid { .. })),
                "{text}"
            );
        }
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn loading_arbitrary_text_never_panics(text in ".{0,400}") {
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("s.toml");
                fs::write(&path, &text).expect("write");
                let _ = load(&path);
            }

            #[test]
            fn keys_round_trip(keys in proptest::collection::vec(any::<u64>(), 0..8)) {
                let state = PrState {
                    aptpl: true,
                    registrations: keys.iter().enumerate().map(|(i, &key)| Registration {
                        key,
                        it: it(&i.to_string()),
                        relative_port_id: i as u16,
                    }).collect(),
                    ..PrState::default()
                };
                let dir = tempfile::tempdir().expect("tempdir");
                let path = dir.path().join("s.toml");
                save(&path, &state).expect("save");
                prop_assert_eq!(load(&path).expect("load"), Some(state));
            }
        }
    }
}
