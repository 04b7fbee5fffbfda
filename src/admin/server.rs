//! The admin socket: a Unix stream socket, mode 0600, speaking JSON lines
//! ([`super::proto`]). Each client connection is served by its own task,
//! but every request is handed to the daemon's single control task and
//! answered in order, so requests from all clients apply one at a time.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::proto::{parse_request, Reply, Request, MAX_REQUEST_LEN};

/// A request on its way to the control task, with where to answer.
#[derive(Debug)]
pub struct Envelope {
    pub request: Request,
    pub reply: oneshot::Sender<Reply>,
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
}

impl AdminSocket {
    /// Binds `path` with mode 0600. A stale socket left by a daemon that
    /// died is replaced; a live one is an error.
    pub fn bind(path: &Path) -> Result<AdminSocket, SocketError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_err(path, "creating its directory"))?;
        }
        remove_stale(path)?;
        // Bind under a temporary name, restrict it, then move it into
        // place: the socket is never reachable with a wider mode.
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&tmp);
        let listener =
            std::os::unix::net::UnixListener::bind(&tmp).map_err(io_err(path, "binding"))?;
        let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_err(path, "setting mode 0600")(e));
        }
        listener
            .set_nonblocking(true)
            .map_err(io_err(path, "setting non-blocking mode"))?;
        Ok(AdminSocket {
            path: path.to_owned(),
            listener: Some(listener),
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
                    tokio::spawn(serve_client(stream, control.clone()));
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

/// One client: read a line, answer a line, until it hangs up.
async fn serve_client(stream: UnixStream, control: ControlTx) {
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
                    Ok(request) => dispatch(&control, request).await,
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

async fn dispatch(control: &ControlTx, request: Request) -> Reply {
    let (tx, rx) = oneshot::channel();
    let env = Envelope { request, reply: tx };
    if control.send(env).await.is_err() {
        return Reply::failure("the daemon is shutting down");
    }
    rx.await
        .unwrap_or_else(|_| Reply::failure("the daemon is shutting down"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn socket_is_private_and_answers_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        let sock = AdminSocket::bind(&path).expect("binds");
        let mode = std::fs::metadata(&path)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(matches!(
            AdminSocket::bind(&path),
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

    #[test]
    fn stale_socket_is_replaced_and_other_files_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
        assert!(path.exists(), "a stale socket file is left behind");
        let sock = AdminSocket::bind(&path).expect("replaces the stale socket");
        drop(sock);
        assert!(!path.exists(), "removed on drop");
        std::fs::write(&path, b"not a socket").expect("write");
        assert!(matches!(
            AdminSocket::bind(&path),
            Err(SocketError::NotASocket(_))
        ));
    }
}
