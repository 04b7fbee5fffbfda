//! Who is calling on the admin socket: the caller's credentials as the
//! kernel recorded them when it connected (`SO_PEERCRED`, and
//! `SO_PEERGROUPS` for its supplementary groups), the rule deciding who
//! may use the socket, and the group-database lookup of
//! `admin_socket_group`.
//!
//! Layer: daemon only.
//!
//! Guarantees:
//! - the rule ([`AccessRule::allows`]) is a pure function of plain values:
//!   root (uid 0) and the daemon's own effective uid are allowed, and,
//!   when `admin_socket_group` is set, any caller whose effective or
//!   supplementary groups include that group; everybody else is refused;
//! - credentials are the kernel's, taken at `connect(2)`: a caller cannot
//!   claim another identity, and a caller that changes its uid afterwards
//!   keeps the credentials it connected with;
//! - every `unsafe` block is a single libc call with its buffer sizes
//!   stated, and says why it is sound.

use std::ffi::CString;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Most supplementary groups a Linux process can have (`NGROUPS_MAX`).
const MAX_GROUPS: usize = 65536;

/// Largest buffer handed to `getgrnam_r` (a group with very many members).
const MAX_GROUP_BUF: usize = 1 << 20;

/// The credentials of a connected caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    /// Effective gid at connect time.
    pub gid: u32,
    /// Process id at connect time, when the kernel knows it.
    pub pid: Option<i32>,
    /// Supplementary groups at connect time; empty when not looked up
    /// (no `admin_socket_group`, or the caller was allowed by uid).
    pub groups: Vec<u32>,
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "uid {} gid {}", self.uid, self.gid)?;
        match self.pid {
            Some(pid) => write!(f, " pid {pid}"),
            None => write!(f, " pid unknown"),
        }
    }
}

/// Who may use the admin socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessRule {
    /// The daemon's effective uid.
    pub own_uid: u32,
    /// `admin_socket_group`, resolved: its name (for messages) and gid.
    pub group: Option<(String, u32)>,
}

impl AccessRule {
    /// The rule of this process: its own effective uid, plus `group`.
    pub fn for_daemon(group: Option<(String, u32)>) -> AccessRule {
        AccessRule {
            own_uid: effective_uid(),
            group,
        }
    }

    /// Whether the uid alone lets the caller in (then its groups need not
    /// be looked up).
    pub fn allows_uid(&self, uid: u32) -> bool {
        uid == 0 || uid == self.own_uid
    }

    /// Whether `caller` may use the socket.
    pub fn allows(&self, caller: &Caller) -> bool {
        if self.allows_uid(caller.uid) {
            return true;
        }
        match &self.group {
            Some((_, gid)) => caller.gid == *gid || caller.groups.contains(gid),
            None => false,
        }
    }

    /// Whether the groups of a caller refused by uid are worth looking up.
    pub fn needs_groups(&self) -> bool {
        self.group.is_some()
    }

    /// Who is allowed, for the refusal message.
    pub fn describe(&self) -> String {
        let mut s = String::from("root");
        if self.own_uid != 0 {
            s.push_str(&format!(", uid {}", self.own_uid));
        }
        if let Some((name, gid)) = &self.group {
            s.push_str(&format!(", members of group {name} (gid {gid})"));
        }
        s
    }
}

/// The daemon's effective uid.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, touches no memory of ours and
    // cannot fail.
    unsafe { libc::geteuid() }
}

/// The supplementary groups the peer of a connected Unix stream socket had
/// when it connected (`SO_PEERGROUPS`, Linux 4.13 and later).
pub fn peer_groups(fd: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    const GID_SIZE: usize = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    // At most two tries: the first says how much room is needed when the
    // buffer was too small (ERANGE), the second has that room; a third in
    // case the peer gained groups in between is not worth it.
    for _ in 0..3 {
        let bytes = groups.len().saturating_mul(GID_SIZE);
        let mut len = libc::socklen_t::try_from(bytes)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `groups` is a live, initialised buffer of exactly `len`
        // bytes that nothing else borrows; the kernel writes at most `len`
        // bytes into it and stores the size it needs or wrote in `len`.
        // `fd` is a valid descriptor for the duration of the call.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if rc == 0 {
            groups.truncate(len.min(bytes) / GID_SIZE);
            return Ok(groups);
        }
        let err = io::Error::last_os_error();
        let need = len / GID_SIZE;
        if err.raw_os_error() != Some(libc::ERANGE) || need <= groups.len() || need > MAX_GROUPS {
            return Err(err);
        }
        groups.resize(need, 0);
    }
    Err(io::Error::other("the peer's group list kept growing"))
}

/// The gid of group `name` in the group database (`/etc/group`, or NSS),
/// `None` when there is no such group.
pub fn lookup_group(name: &str) -> io::Result<Option<u32>> {
    let cname = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "contains a NUL byte"))?;
    let mut buf: Vec<libc::c_char> = vec![0; 4096];
    loop {
        // SAFETY: an all-zero `struct group` is a valid value (null
        // pointers and zero ids); getgrnam_r overwrites it on success.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `cname` is a NUL-terminated string, `grp` and `found`
        // are live locals, and `buf` is a live buffer of exactly
        // `buf.len()` bytes; getgrnam_r is the reentrant variant and
        // writes only into these. The pointers it leaves in `grp` point
        // into `buf` and are not used after this block: only the gid is
        // read.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &mut found,
            )
        };
        if rc == libc::ERANGE && buf.len() < MAX_GROUP_BUF {
            let bigger = buf.len().saturating_mul(4).min(MAX_GROUP_BUF);
            buf.resize(bigger, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if found.is_null() {
            return Ok(None);
        }
        return Ok(Some(grp.gr_gid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, gid: u32, groups: &[u32]) -> Caller {
        Caller {
            uid,
            gid,
            pid: Some(4242),
            groups: groups.to_vec(),
        }
    }

    #[test]
    fn root_and_own_uid_are_allowed_others_are_not() {
        let rule = AccessRule {
            own_uid: 1000,
            group: None,
        };
        assert!(rule.allows(&caller(0, 0, &[])), "root");
        assert!(rule.allows(&caller(1000, 1000, &[])), "own uid");
        assert!(rule.allows(&caller(1000, 50, &[7])), "own uid, other gid");
        assert!(!rule.allows(&caller(1001, 1000, &[1000])), "other uid");
        assert!(!rule.allows(&caller(65534, 65534, &[])), "nobody");
        assert!(!rule.needs_groups());
    }

    #[test]
    fn group_members_are_allowed_by_effective_or_supplementary_gid() {
        let rule = AccessRule {
            own_uid: 0,
            group: Some(("rustgt".to_owned(), 990)),
        };
        assert!(rule.allows(&caller(0, 0, &[])), "root");
        assert!(rule.allows(&caller(1001, 990, &[])), "effective gid");
        assert!(rule.allows(&caller(1001, 100, &[27, 990])), "supplementary");
        assert!(!rule.allows(&caller(1001, 100, &[27, 991])), "other groups");
        assert!(!rule.allows(&caller(1001, 100, &[])), "no groups");
        assert!(rule.needs_groups());
        assert!(!rule.allows_uid(1001));
        assert_eq!(rule.describe(), "root, members of group rustgt (gid 990)");
    }

    #[test]
    fn group_lookup_finds_root_and_misses_nonsense() {
        assert_eq!(lookup_group("root").expect("lookup"), Some(0));
        assert_eq!(
            lookup_group("rustgt-no-such-group-x9").expect("lookup"),
            None
        );
        assert!(lookup_group("a\0b").is_err());
    }

    #[test]
    fn own_connection_shows_own_credentials() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("pair");
        use std::os::fd::AsFd;
        let groups = peer_groups(a.as_fd()).expect("SO_PEERGROUPS");
        // The peer is this process: its groups are ours.
        // SAFETY: getgroups(0, NULL) only returns the count.
        let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
        assert_eq!(groups.len(), usize::try_from(n).expect("count"));
    }
}
