//! Configuration errors: each problem names its key path and where the
//! value came from.

use std::fmt;
use std::path::PathBuf;

/// One thing wrong with the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the value came from: a file path, an environment variable, a
    /// command-line option or "built-in defaults".
    pub origin: String,
    /// Key path such as `targets[0].luns[1].block_size`; empty for a whole-file error.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.origin, self.message)
        } else {
            write!(f, "{}: {}: {}", self.origin, self.key, self.message)
        }
    }
}

/// Errors of configuration loading.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", ProblemList(.0))]
    Invalid(Vec<Problem>),
    #[error("cannot write the configuration as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
}

impl ConfigError {
    /// The individual problems (empty for read/serialize errors).
    #[allow(dead_code)] // API for callers that report problems one by one
    pub fn problems(&self) -> &[Problem] {
        match self {
            Self::Invalid(p) => p,
            _ => &[],
        }
    }
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "invalid configuration: {one}"),
            many => {
                write!(f, "invalid configuration ({} problems):", many.len())?;
                for p in many {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Loading

/// One problem as an error: `key` of a value from `origin` (an admin
/// request's field that does not parse).
pub fn invalid(origin: &str, key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(vec![Problem {
        origin: origin.to_owned(),
        key: key.to_owned(),
        message: message.into(),
    }])
}
