//! One connection to the daemon's admin socket, and the failure of a
//! client run with its exit status.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::api::proto::{Reply, Request};

/// How long the client waits for an answer (a `config apply` may open
/// many backing files).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);

/// Failure of a client run, with its exit status.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) code: i32,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
}

/// One connection to the daemon.
pub(super) struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    socket: PathBuf,
}

impl Client {
    pub(super) fn connect(socket: &Path) -> Result<Client, Failure> {
        let stream = UnixStream::connect(socket).map_err(|e| {
            Failure::usage(format!(
                "cannot connect to the admin socket {}: {e} (is the daemon running? \
                 --socket, --config or --data-dir tell where its socket is)",
                socket.display()
            ))
        })?;
        let _ = stream.set_read_timeout(Some(REPLY_TIMEOUT));
        let writer = stream
            .try_clone()
            .map_err(|e| Failure::usage(format!("admin socket: {e}")))?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            socket: socket.to_owned(),
        })
    }

    pub(super) fn send_line(&mut self, line: &str) -> Result<Reply, Failure> {
        let io = |e: std::io::Error| {
            Failure::usage(format!("admin socket {}: {e}", self.socket.display()))
        };
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(io)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(io)?;
        if n == 0 {
            return Err(Failure::usage(
                "the daemon closed the admin connection without answering",
            ));
        }
        serde_json::from_str(answer.trim_end())
            .map_err(|e| Failure::usage(format!("unreadable reply from the daemon: {e}")))
    }

    /// Sends `req`; the result on success, the daemon's error as a Failure.
    pub(super) fn call(&mut self, req: &Request) -> Result<Value, Failure> {
        let line = serde_json::to_string(req)
            .map_err(|e| Failure::usage(format!("cannot encode the request: {e}")))?;
        let reply = self.send_line(&line)?;
        match (reply.ok, reply.result, reply.error) {
            (true, Some(v), _) => Ok(v),
            (true, None, _) => Ok(Value::Null),
            (false, _, e) => Err(Failure {
                code: 1,
                message: e.unwrap_or_else(|| "the daemon refused the request".to_owned()),
            }),
        }
    }

    pub(super) fn call_as<T: DeserializeOwned>(
        &mut self,
        req: &Request,
    ) -> Result<(Value, T), Failure> {
        let v = self.call(req)?;
        let t = serde_json::from_value(v.clone())
            .map_err(|e| Failure::usage(format!("unexpected result shape: {e}")))?;
        Ok((v, t))
    }
}
