//! The admin socket: a Unix stream socket speaking JSON lines
//! ([`crate::api::proto`]). Each client connection is served by its own task,
//! but every request is handed to the daemon's single control task and
//! answered in order, so requests from all clients apply one at a time.
//!
//! Guarantees:
//! - the socket file never exists at its path with a wider mode than
//!   0600 (0660 and the group `admin_socket_group` when that is set): it
//!   is bound inside a fresh private directory (mode 0700), restricted
//!   there, then renamed into place; nothing is left under a temporary
//!   name;
//! - every caller is checked with the kernel's credentials of it
//!   (`SO_PEERCRED`, `SO_PEERGROUPS`) against [`AccessRule`]: a refused
//!   caller gets one error line, is logged with its uid, gid and pid,
//!   and is disconnected before any request of it is read;
//! - requests carry their caller to the control task, which logs every
//!   change (any request that is not a read-only query) with who made it.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::peer::{peer_groups, AccessRule, Caller};
use crate::api::proto::{parse_request, Reply, Request, MAX_REQUEST_LEN};
use crate::config::AdminGroup;

/// How long a refused caller's first request is waited for (and at most
/// how much of it is read) before it is disconnected: enough for a client
/// that writes its request before reading to see the error line instead
/// of a broken pipe.
const REFUSED_LINGER: Duration = Duration::from_secs(1);
const REFUSED_READ_MAX: u64 = 64 << 10;

/// A request on its way to the control task, with where to answer.
#[derive(Debug)]
pub struct Envelope {
    pub request: Request,
    pub reply: oneshot::Sender<Reply>,
    /// Who sent it over the admin socket; `None` for the daemon's own
    /// requests (the metrics endpoint).
    pub caller: Option<Caller>,
}

/// The control task's inbox.
pub type ControlTx = mpsc::Sender<Envelope>;

/// Errors of setting up the socket.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("admin socket {}: another rustgt daemon is already listening there", .0.display())]
    InUse(PathBuf),
    #[error("admin socket {}: the path exists and is not a socket", .0.display())]
    NotASocket(PathBuf),
    #[error("admin_socket_group: no group {0:?} in the group database")]
    NoGroup(String),
    #[error("admin_socket_group: looking up group {name:?}: {source}")]
    GroupLookup {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("admin socket {}: {what}: {source}", path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(io::Error) -> SocketError + 'a {
    move |source| SocketError::Io {
        path: path.to_owned(),
        what,
        source,
    }
}

/// A bound admin socket; the file is removed when this is dropped.
#[derive(Debug)]
pub struct AdminSocket {
    path: PathBuf,
    listener: Option<std::os::unix::net::UnixListener>,
    rule: AccessRule,
}

impl AdminSocket {
    /// Binds `path` with mode 0600, or 0660 owned by `group`. A stale
    /// socket left by a daemon that died is replaced; a live one is an
    /// error. Callers are then checked against root, this process's uid
    /// and `group`.
    pub fn bind(path: &Path, group: Option<&AdminGroup>) -> Result<AdminSocket, SocketError> {
        // The group's gid, from the group database (config types do no
        // I/O; an unknown group stops the daemon here, naming the key).
        let group = match group {
            None => None,
            Some(g) => match super::peer::lookup_group(&g.name) {
                Ok(Some(gid)) => Some((g.name.clone(), gid)),
                Ok(None) => return Err(SocketError::NoGroup(g.name.clone())),
                Err(source) => {
                    return Err(SocketError::GroupLookup {
                        name: g.name.clone(),
                        source,
                    })
                }
            },
        };
        let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
            Some(dir) => dir,
            None => Path::new("."),
        };
        std::fs::create_dir_all(dir).map_err(io_err(path, "creating its directory"))?;
        remove_stale(path)?;
        // Why a private directory: bind(2) creates the socket file with
        // mode 0777 less the umask, and a chmod afterwards leaves a window
        // in which anyone could connect. Setting the umask around bind
        // would close it, but the umask is process-wide and this daemon
        // is multi-threaded: a file created by another thread meanwhile
        // (a backing file, `config save`) would get the wrong mode, and
        // the socket would get a wide one if another thread set it back
        // first. Instead the socket is bound inside a directory that
        // mkdtemp(3)-style creation makes fresh (random name, O_EXCL-like,
        // so nobody can have prepared it) with mode 0700: nobody but this
        // uid and root (both allowed anyway) can reach anything in it.
        // The socket is restricted (and given its group) there, then
        // renamed into place, so at its real path it has its final mode
        // from the first instant, and rename(2) within one filesystem
        // leaves no temporary name behind at the target directory's level.
        let private = tempfile::Builder::new()
            .prefix(".rustgt-admin-")
            .tempdir_in(dir)
            .map_err(io_err(path, "creating a private directory next to it"))?;
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(path, "restricting its private directory"))?;
        let inner = private.path().join("admin.sock");
        let listener =
            std::os::unix::net::UnixListener::bind(&inner).map_err(io_err(path, "binding"))?;
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(mode))
            .map_err(io_err(path, "setting its mode"))?;
        if let Some((_, gid)) = &group {
            std::os::unix::fs::chown(&inner, None, Some(*gid))
                .map_err(io_err(path, "giving it to admin_socket_group"))?;
        }
        std::fs::rename(&inner, path).map_err(io_err(path, "moving it into place"))?;
        // The directory is empty now; a failure to remove it only leaves
        // an empty private directory, so it is reported, not fatal.
        if let Err(e) = private.close() {
            tracing::warn!(path = %path.display(), error = %e, "admin socket: private directory not removed");
        }
        listener
            .set_nonblocking(true)
            .map_err(io_err(path, "setting non-blocking mode"))?;
        Ok(AdminSocket {
            path: path.to_owned(),
            listener: Some(listener),
            rule: AccessRule::for_daemon(group),
        })
    }

    /// Serves clients until the task is dropped; each request goes to
    /// `control`.
    pub async fn serve(mut self, control: ControlTx) {
        let Some(std_listener) = self.listener.take() else {
            return;
        };
        let listener = match UnixListener::from_std(std_listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "admin socket unusable");
                return;
            }
        };
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(admit(stream, self.rule.clone(), control.clone()));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes a socket nobody listens on; refuses to touch a live socket or
/// a file that is not a socket.
/// Fails if a daemon answers on `path` (checked at start-up before
/// anything is opened or bound; [`AdminSocket::bind`] looks again).
pub fn ensure_unused(path: &Path) -> Result<(), SocketError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => Err(SocketError::InUse(path.to_owned())),
            Err(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

fn remove_stale(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(path, "inspecting the path")(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(SocketError::NotASocket(path.to_owned()));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse(path.to_owned())),
        Err(_) => std::fs::remove_file(path).map_err(io_err(path, "removing the stale socket")),
    }
}

/// Checks a new client's credentials, then serves it or turns it away.
async fn admit(stream: UnixStream, rule: AccessRule, control: ControlTx) {
    let cred = match stream.peer_cred() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "admin socket: caller's credentials unknown; disconnected");
            return;
        }
    };
    let mut caller = Caller {
        uid: cred.uid(),
        gid: cred.gid(),
        pid: cred.pid(),
        groups: Vec::new(),
    };
    if !rule.allows_uid(caller.uid) && rule.needs_groups() {
        match peer_groups(stream.as_fd()) {
            Ok(groups) => caller.groups = groups,
            // Without them only the effective gid can match.
            Err(e) => {
                tracing::warn!(%caller, error = %e, "admin socket: caller's supplementary groups unknown")
            }
        }
    }
    if rule.allows(&caller) {
        tracing::debug!(%caller, "admin socket: caller connected");
        serve_client(stream, caller, control).await;
    } else {
        tracing::warn!(
            uid = caller.uid,
            gid = caller.gid,
            pid = caller.pid,
            "admin socket: caller refused (allowed: {})",
            rule.describe()
        );
        refuse(stream, &caller, &rule).await;
    }
}

/// Answers a refused caller with one error line and hangs up. Its input
/// is drained for a moment first (bounded in bytes and time, never
/// parsed), so a client that sends its request before reading sees the
/// error rather than a broken pipe.
async fn refuse(stream: UnixStream, caller: &Caller, rule: &AccessRule) {
    let (rd, mut wr) = stream.into_split();
    let mut out = Reply::failure(format!(
        "permission denied: {caller} may not use the admin socket (allowed: {})",
        rule.describe()
    ))
    .to_line();
    out.push('\n');
    if wr.write_all(out.as_bytes()).await.is_err() {
        return;
    }
    let _ = wr.shutdown().await;
    let mut sink = Vec::new();
    let mut rd = BufReader::new(rd).take(REFUSED_READ_MAX);
    let _ = tokio::time::timeout(REFUSED_LINGER, rd.read_until(b'\n', &mut sink)).await;
}

/// One client: read a line, answer a line, until it hangs up.
async fn serve_client(stream: UnixStream, caller: Caller, control: ControlTx) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = u64::try_from(MAX_REQUEST_LEN).unwrap_or(u64::MAX) + 1;
        let n = match (&mut rd).take(limit).read_until(b'\n', &mut line).await {
            Ok(n) => n,
            Err(_) => return,
        };
        if n == 0 {
            return;
        }
        let too_long = line.last() != Some(&b'\n') && line.len() > MAX_REQUEST_LEN;
        let reply = if too_long {
            Reply::failure(format!(
                "bad request: longer than {MAX_REQUEST_LEN} bytes without a newline"
            ))
        } else {
            match std::str::from_utf8(&line) {
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => match parse_request(text.trim()) {
                    Ok(request) => dispatch(&control, request, &caller).await,
                    Err(e) => Reply::failure(e),
                },
                Err(_) => Reply::failure("bad request: not UTF-8"),
            }
        };
        let mut out = reply.to_line();
        out.push('\n');
        if wr.write_all(out.as_bytes()).await.is_err() || too_long {
            return;
        }
    }
}

async fn dispatch(control: &ControlTx, request: Request, caller: &Caller) -> Reply {
    let (tx, rx) = oneshot::channel();
    let env = Envelope {
        request,
        reply: tx,
        caller: Some(caller.clone()),
    };
    if control.send(env).await.is_err() {
        return Reply::failure("the daemon is shutting down");
    }
    rx.await
        .unwrap_or_else(|_| Reply::failure("the daemon is shutting down"))
}

/// Logs a change request made over the socket with who made it (uid,
/// gid, pid), what it asked for, and what came of it.
pub fn log_change(caller: &Caller, what: &str, reply: &Reply) {
    if reply.ok {
        let result = reply
            .result
            .as_ref()
            .map(|r| r.to_string())
            .unwrap_or_default();
        tracing::info!(
            uid = caller.uid,
            gid = caller.gid,
            pid = caller.pid,
            request = what,
            %result,
            "admin change applied"
        );
    } else {
        tracing::info!(
            uid = caller.uid,
            gid = caller.gid,
            pid = caller.pid,
            request = what,
            error = reply.error.as_deref().unwrap_or(""),
            "admin change refused"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_group_is_refused_naming_the_key_and_nothing_is_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        let group = AdminGroup {
            name: "rustgt-no-such-group-x9".into(),
        };
        let err = AdminSocket::bind(&path, Some(&group)).expect_err("unknown group");
        assert!(matches!(err, SocketError::NoGroup(_)), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("admin_socket_group") && msg.contains("rustgt-no-such-group-x9"),
            "{msg}"
        );
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn socket_is_private_and_answers_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        let sock = AdminSocket::bind(&path, None).expect("binds");
        let mode = std::fs::metadata(&path)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(
            AdminSocket::bind(&path, None),
            Err(SocketError::InUse(_))
        ));

        let (tx, mut rx) = mpsc::channel::<Envelope>(4);
        tokio::spawn(sock.serve(tx));
        tokio::spawn(async move {
            while let Some(env) = rx.recv().await {
                let name = env.request.name();
                let _ = env.reply.send(Reply::success(serde_json::json!(name)));
            }
        });
        let stream = UnixStream::connect(&path).await.expect("connects");
        let (rd, mut wr) = stream.into_split();
        wr.write_all(b"{\"cmd\":\"status\"}\n\n{\"cmd\":\"nope\"}\n{\"cmd\":\"list_portals\"}\n")
            .await
            .expect("send");
        let mut lines = BufReader::new(rd).lines();
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(lines.next_line().await.expect("read").expect("line"));
        }
        assert_eq!(got[0], r#"{"ok":true,"result":"status"}"#);
        assert!(
            got[1].starts_with(r#"{"ok":false,"error":"bad request"#),
            "{}",
            got[1]
        );
        assert_eq!(got[2], r#"{"ok":true,"result":"list_portals"}"#);
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn nothing_is_left_under_a_temporary_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        let sock = AdminSocket::bind(&path, None).expect("binds");
        assert_eq!(names_in(dir.path()), ["admin.sock"]);
        drop(sock);
        assert!(names_in(dir.path()).is_empty());
        // A failed bind leaves nothing behind either.
        std::fs::write(&path, b"not a socket").expect("write");
        assert!(AdminSocket::bind(&path, None).is_err());
        assert_eq!(names_in(dir.path()), ["admin.sock"]);
    }

    #[test]
    fn a_group_gets_mode_0660_and_the_group() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        // Every process may give its files to its own effective group; its
        // name from the group database.
        // SAFETY: getegid(2) takes no arguments and cannot fail.
        let gid = unsafe { libc::getegid() };
        let groups = std::fs::read_to_string("/etc/group").unwrap_or_default();
        let name = groups
            .lines()
            .find_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?;
                (f.nth(1)?.parse::<u32>().ok()? == gid).then(|| name.to_owned())
            })
            .unwrap_or_else(|| panic!("gid {gid} has no name in /etc/group"));
        let _sock = AdminSocket::bind(&path, Some(&AdminGroup { name })).expect("binds");
        let meta = std::fs::metadata(&path).expect("exists");
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        assert_eq!(meta.gid(), gid);
        assert_eq!(names_in(dir.path()), ["admin.sock"]);
    }

    #[tokio::test]
    async fn a_refused_caller_gets_one_error_line_then_eof() {
        let (ours, theirs) = UnixStream::pair().expect("pair");
        let rule = AccessRule {
            own_uid: 1000,
            group: Some(("rustgt".into(), 990)),
        };
        let caller = Caller {
            uid: 1001,
            gid: 100,
            pid: Some(77),
            groups: vec![27],
        };
        let task = tokio::spawn(async move { refuse(ours, &caller, &rule).await });
        let (rd, mut wr) = theirs.into_split();
        // A client that writes first still gets the answer.
        wr.write_all(b"{\"cmd\":\"config_save\"}\n")
            .await
            .expect("send");
        let mut lines = BufReader::new(rd).lines();
        let line = lines.next_line().await.expect("read").expect("a line");
        let reply: Reply = serde_json::from_str(&line).expect("json");
        assert!(!reply.ok);
        let err = reply.error.expect("error");
        assert!(
            err.starts_with("permission denied: uid 1001 gid 100 pid 77"),
            "{err}"
        );
        assert!(err.contains("group rustgt"), "{err}");
        assert_eq!(lines.next_line().await.expect("read"), None, "then EOF");
        task.await.expect("refuse");
    }

    #[test]
    fn stale_socket_is_replaced_and_other_files_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
        assert!(path.exists(), "a stale socket file is left behind");
        let sock = AdminSocket::bind(&path, None).expect("replaces the stale socket");
        drop(sock);
        assert!(!path.exists(), "removed on drop");
        std::fs::write(&path, b"not a socket").expect("write");
        assert!(matches!(
            AdminSocket::bind(&path, None),
            Err(SocketError::NotASocket(_))
        ));
    }
}
