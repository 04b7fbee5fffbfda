//! Loading: the file, `RUSTGT_*` variables and command-line overrides
//! merged by figment, then checked; every problem is attributed to the
//! file, variable or option its value came from.

use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use serde::Deserialize;

use super::check::validate;
use super::error::{ConfigError, Problem};
use super::keypath::{KeyPath, Seg};
use super::top::{default_data_dir, Config, Overrides, DATA_DIR_CONFIG, ENV_PREFIX};

/// Loads, merges and validates the configuration. With `file == None` the
/// default target is served (environment and overrides still apply).
pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
    match file {
        Some(path) => {
            let contents = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_owned(),
                source,
            })?;
            load_text(path, contents, overrides)
        }
        None => load_figment(Figment::new(), None, overrides),
    }
}

/// Like [`load`] with the file's `contents` already read; errors name
/// `path` (the admin `config apply` sends a file's text).
pub fn load_text(
    path: &Path,
    contents: String,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    let figment = Figment::new().merge(TomlFile {
        path: path.to_owned(),
        contents,
    });
    load_figment(figment, Some(path), overrides)
}

/// Where the admin socket of the daemon that `file`, the environment and
/// `overrides` describe is, for `rustgt admin`. Lenient: only `data_dir`
/// and `admin_socket` are read, so a config with other mistakes still
/// leads to its daemon. Without `file`, `<data_dir>/rustgt.toml` is read
/// when it exists, as the daemon does.
pub fn admin_socket_of(file: Option<&Path>, overrides: &Overrides) -> Result<PathBuf, ConfigError> {
    #[derive(Deserialize)]
    struct Just {
        #[serde(default = "default_data_dir")]
        data_dir: PathBuf,
        #[serde(default)]
        admin_socket: Option<PathBuf>,
    }
    let mut figment = Figment::new();
    if let Some(path) = file {
        let contents = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        figment = figment.merge(TomlFile {
            path: path.to_owned(),
            contents,
        });
    }
    figment = figment.merge(env_provider());
    let origins = Origins::new(&figment, file, overrides);
    let just: Just = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(origins.problems_from_figment(e)))?;
    let cfg = Config {
        data_dir: overrides.data_dir.clone().unwrap_or(just.data_dir),
        admin_socket: overrides.admin_socket.clone().or(just.admin_socket),
        ..Config::default()
    };
    // Without --config the daemon reads the data directory's file.
    let kept = cfg.data_dir.join(DATA_DIR_CONFIG);
    if file.is_none() && kept.is_file() {
        return admin_socket_of(Some(&kept), overrides);
    }
    Ok(cfg.admin_socket_path())
}

fn load_figment(
    mut figment: Figment,
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    figment = figment.merge(env_provider());

    let origins = Origins::new(&figment, file, overrides);
    let mut config: Config = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(origins.problems_from_figment(e)))?;

    if file.is_none() {
        config.targets = vec![Config::default_target()];
    }
    if let Some(dir) = &overrides.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(sock) = &overrides.admin_socket {
        config.admin_socket = Some(sock.clone());
    }
    if let Some(listen) = overrides.listen {
        for target in &mut config.targets {
            target.portals = vec![listen];
        }
    }

    let problems = validate(&config);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid(
            problems
                .into_iter()
                .map(|(key, message)| Problem {
                    origin: origins.of(&key),
                    key: key.to_string(),
                    message,
                })
                .collect(),
        ))
    }
}

/// `RUSTGT_*` variables for the keys the environment may set.
fn env_provider() -> Env {
    Env::prefixed(ENV_PREFIX)
        .filter(|k| {
            let k = k.as_str().to_ascii_lowercase();
            k == "data_dir"
                || k == "admin_socket"
                || k == "admin_socket_group"
                || k == "metrics_listen"
                || k.starts_with("iscsi__")
                || k.starts_with("discovery__")
                || k.starts_with("reactor__")
                || k.starts_with("limits__")
        })
        .split("__")
}

/// The config file, parsed by figment's TOML provider but carrying the real
/// file path in its metadata (so errors can name it) without reading it twice.
struct TomlFile {
    path: PathBuf,
    contents: String,
}

impl Provider for TomlFile {
    fn metadata(&self) -> Metadata {
        Metadata::from("TOML file", Source::File(self.path.clone()))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.contents).data()
    }
}

/// Works out where a key's value came from.
struct Origins<'a> {
    figment: &'a Figment,
    merged: Option<Value>,
    file: Option<&'a Path>,
    overrides: &'a Overrides,
}

impl<'a> Origins<'a> {
    fn new(figment: &'a Figment, file: Option<&'a Path>, overrides: &'a Overrides) -> Self {
        Self {
            figment,
            merged: figment.find_value("").ok(),
            file,
            overrides,
        }
    }

    fn fallback(&self) -> String {
        match self.file {
            Some(path) => path.display().to_string(),
            None => "built-in defaults".to_owned(),
        }
    }

    /// Origin of a validated key of the final config.
    fn of(&self, key: &KeyPath) -> String {
        if let Some(opt) = self.override_option(key) {
            return opt.to_owned();
        }
        let Some(root) = &self.merged else {
            return self.fallback();
        };
        // The deepest value that exists on the path tells the provider.
        let mut value = root;
        let mut exact = true;
        for seg in &key.0 {
            let next = match (seg, value) {
                (Seg::Key(k), Value::Dict(_, d)) => d.get(*k),
                (Seg::Index(i), Value::Array(_, a)) => a.get(*i),
                _ => None,
            };
            match next {
                Some(v) => value = v,
                None => {
                    exact = false;
                    break;
                }
            }
        }
        match self.figment.get_metadata(value.tag()) {
            Some(md) if is_env(md) => {
                if exact {
                    env_var_name(key.0.iter().map(Seg::to_string))
                } else {
                    self.fallback()
                }
            }
            Some(md) => describe_source(md).unwrap_or_else(|| self.fallback()),
            None => self.fallback(),
        }
    }

    fn override_option(&self, key: &KeyPath) -> Option<&'static str> {
        match key.0.as_slice() {
            [Seg::Key("data_dir")] if self.overrides.data_dir.is_some() => Some("--data-dir"),
            [Seg::Key("admin_socket")] if self.overrides.admin_socket.is_some() => {
                Some("--admin-socket")
            }
            [Seg::Key("targets"), Seg::Index(_), Seg::Key("portals"), ..]
                if self.overrides.listen.is_some() =>
            {
                Some("--listen")
            }
            _ => None,
        }
    }

    /// Problems from figment's extraction (syntax, types, unknown keys).
    fn problems_from_figment(&self, err: figment::Error) -> Vec<Problem> {
        err.into_iter()
            .map(|e| {
                let mut path = e.path.clone();
                if let figment::error::Kind::UnknownField(field, _) = &e.kind {
                    if path.last() != Some(field) {
                        path.push(field.clone());
                    }
                }
                let origin = match &e.metadata {
                    Some(md) if is_env(md) && !path.is_empty() => {
                        env_var_name(path.iter().cloned())
                    }
                    Some(md) => describe_source(md).unwrap_or_else(|| self.fallback()),
                    None => self.fallback(),
                };
                Problem {
                    origin,
                    key: display_figment_path(&path),
                    message: describe_kind(&e.kind),
                }
            })
            .collect()
    }
}

/// figment's own wording, except for unknown keys where it quotes oddly.
fn describe_kind(kind: &figment::error::Kind) -> String {
    match kind {
        figment::error::Kind::UnknownField(_, expected) => {
            format!("unknown field; expected one of: {}", expected.join(", "))
        }
        other => other.to_string(),
    }
}

fn is_env(md: &Metadata) -> bool {
    md.name.contains("environment")
}

fn describe_source(md: &Metadata) -> Option<String> {
    match &md.source {
        Some(Source::File(path)) => Some(path.display().to_string()),
        _ => None,
    }
}

fn env_var_name(segments: impl Iterator<Item = String>) -> String {
    let parts: Vec<String> = segments.map(|s| s.to_ascii_uppercase()).collect();
    format!("{ENV_PREFIX}{}", parts.join("__"))
}

/// `["targets","0","iqn"]` -> `targets[0].iqn`.
fn display_figment_path(path: &[String]) -> String {
    let mut out = String::new();
    for seg in path {
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(seg);
            out.push(']');
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

/// [`load_text`] in a figment `Jail`, for tests: the jail serializes every
/// test that sets `RUSTGT_*` variables, so none of them leaks into this
/// load (the default-overriding environment is read by every load).
#[cfg(test)]
#[allow(clippy::result_large_err)] // the closure type is figment's
pub fn load_text_jailed(
    path: &Path,
    text: String,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    let mut out = None;
    figment::Jail::expect_with(|_| {
        out = Some(load_text(path, text, overrides));
        Ok(())
    });
    out.unwrap_or_else(|| panic!("the jail ran no load"))
}
