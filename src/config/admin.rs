//! `admin_socket_group`: the admin socket's group, resolved to a gid when
//! the configuration is read.

use serde::{Deserialize, Serialize};

/// `admin_socket_group`: a group name, resolved to its gid once, when the
/// configuration is read (an unknown group is an error naming the key).
/// Written back as the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminGroup {
    pub name: String,
    pub gid: u32,
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
        match crate::admin::peer::lookup_group(&name) {
            Ok(Some(gid)) => Ok(AdminGroup { name, gid }),
            Ok(None) => Err(D::Error::custom(format!(
                "no group {name:?} in the group database"
            ))),
            Err(e) => Err(D::Error::custom(format!("looking up group {name:?}: {e}"))),
        }
    }
}
