//! `admin_socket_group`: the group that may use the admin socket, by name.
//! The configuration only holds the name; the control plane looks it up
//! in the group database when it binds the socket
//! (`crate::control::server::AdminSocket::bind`), so reading a
//! configuration does no I/O beyond its files.

use serde::{Deserialize, Serialize};

/// `admin_socket_group`: a group name (not empty). Written back as is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminGroup {
    pub name: String,
}

impl Serialize for AdminGroup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for AdminGroup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let name = String::deserialize(d)?;
        if name.is_empty() {
            return Err(D::Error::custom("must not be empty"));
        }
        Ok(AdminGroup { name })
    }
}
