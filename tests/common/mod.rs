//! Shared helpers of the black-box tests: start the real `rustgt` binary on
//! an ephemeral loopback port with a scratch data directory, and run real
//! initiators (libiscsi's tools, qemu-io) against it.
//!
//! Every wait is bounded (daemon start 30 s, each tool its own limit) so a
//! hung daemon fails a test instead of hanging CI; no assertion depends on
//! how long anything took.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Name of the default target in the tests: without a config file the
/// daemon serves `<data_dir>/rustgt.toml`, which [`Daemon::start_with`]
/// writes with this name (a real first start names the target for the
/// host; [`DaemonOptions::fresh`] tests that).
pub const DEFAULT_IQN: &str = "iqn.2026-11.org.rustgt:default";

/// The default target as the tests pin it in `<data_dir>/rustgt.toml`.
pub const DEFAULT_CONFIG: &str = r#"[[targets]]
iqn = "iqn.2026-11.org.rustgt:default"

[[targets.luns]]
id = 0
backstore = "file"
path = "lun0.img"
size = "1G"
readahead = "kernel"
"#;
/// libiscsi's default initiator name (iscsi-test-cu -i default).
pub const LIBISCSI_INITIATOR: &str = "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test";

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound of one initiator tool run.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// Environment variables that would change the daemon or libiscsi behind a
/// test's back.
const SCRUBBED_ENV: &[&str] = &[
    "RUSTGT_CONFIG",
    "RUSTGT_LOG",
    "RUSTGT_DATA_DIR",
    "LIBISCSI_CHAP_USERNAME",
    "LIBISCSI_CHAP_PASSWORD",
    "LIBISCSI_CHAP_TARGET_USERNAME",
    "LIBISCSI_CHAP_TARGET_PASSWORD",
    "LIBISCSI_DEBUG",
];

/// How to start a daemon.
#[derive(Debug, Default)]
pub struct DaemonOptions {
    /// TOML written to `<tmp>/rustgt.toml` and passed with `--config`.
    /// `{data_dir}` in it is replaced by the scratch data directory.
    pub config: Option<String>,
    /// Number of targets the config defines (URL lines to wait for); 1 if unset.
    pub targets: Option<usize>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Serve the portals the config lists instead of `--listen 127.0.0.1:0`
    /// (several portals, e.g. for multipath; use port 0 on distinct
    /// loopback addresses such as 127.0.0.1 and 127.0.0.2).
    pub keep_portals: bool,
    /// Reuse this scratch directory (data dir and config) instead of a
    /// fresh one: a restart on the same files, e.g. from
    /// [`Daemon::stop_keep_files`].
    pub scratch: Option<tempfile::TempDir>,
    /// Without `config`: start as on a new host, with no
    /// `<data_dir>/rustgt.toml` written beforehand (the daemon makes its
    /// own, with a target named for the host).
    pub fresh: bool,
    /// Extra command-line arguments (e.g. `--no-persist`).
    pub args: Vec<String>,
}

/// A child process and, once reaped, its exit status (after which its pid
/// must never be signalled again: it may belong to someone else).
#[derive(Debug)]
struct Proc {
    child: Child,
    exited: Option<ExitStatus>,
}

impl Proc {
    fn poll(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// SIGTERM, bounded wait, then SIGKILL. `None` if it had to be killed.
    fn terminate(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.poll() {
            return Some(status);
        }
        signal(&self.child, libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = self.poll() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
        None
    }
}

/// A running `rustgt` process, stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct Daemon {
    proc: Mutex<Option<Proc>>,
    /// Scratch directory holding the data dir and config; removed on drop.
    scratch: tempfile::TempDir,
    /// The bound portal (port resolved); the first one when there are several.
    pub portal: SocketAddr,
    /// Every bound portal, in the order the daemon printed them.
    pub portals: Vec<SocketAddr>,
    /// Every "rustgt: iscsi://..." URL printed, in order (one per target).
    pub urls: Vec<String>,
    /// All stdout lines seen until ready: the listening, URL and iscsiadm lines.
    pub stdout: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    /// Default target, no config file.
    pub fn start() -> Self {
        Self::start_with(DaemonOptions::default())
    }

    /// With a generated config defining `targets` targets.
    pub fn start_with_config(toml: &str, targets: usize) -> Self {
        Self::start_with(DaemonOptions {
            config: Some(toml.to_owned()),
            targets: Some(targets),
            ..DaemonOptions::default()
        })
    }

    pub fn start_with(mut opts: DaemonOptions) -> Self {
        let scratch = match opts.scratch.take() {
            Some(dir) => dir,
            None => tempfile::tempdir().expect("scratch dir"),
        };
        let data_dir = scratch.path().join("data");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rustgt"));
        if !opts.keep_portals {
            cmd.arg("--listen").arg("127.0.0.1:0");
        }
        cmd.arg("--data-dir")
            .arg(&data_dir)
            .arg("--log")
            .arg("info");
        if let Some(toml) = &opts.config {
            let path = scratch.path().join("rustgt.toml");
            let body = toml.replace("{data_dir}", &data_dir.display().to_string());
            std::fs::write(&path, body).expect("write config");
            cmd.arg("--config").arg(&path);
        } else if !opts.fresh {
            let path = data_dir.join("rustgt.toml");
            if !path.exists() {
                std::fs::create_dir_all(&data_dir).expect("data dir");
                std::fs::write(&path, DEFAULT_CONFIG).expect("write default config");
            }
        }
        cmd.args(&opts.args);
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        // Plain log text in failure messages.
        cmd.env("NO_COLOR", "1");
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn rustgt");

        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(err) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if let Ok(mut s) = sink.lock() {
                        s.push_str(&line);
                        s.push('\n');
                    }
                }
            });
        }
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            thread::spawn(move || {
                // Keep draining after the test stopped listening so the
                // daemon never blocks on a full stdout pipe.
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }

        let mut daemon = Daemon {
            proc: Mutex::new(Some(Proc {
                child,
                exited: None,
            })),
            scratch,
            portal: SocketAddr::from(([127, 0, 0, 1], 0)),
            portals: Vec::new(),
            urls: Vec::new(),
            stdout: Vec::new(),
            stderr,
        };
        daemon.wait_ready(&rx, opts.targets.unwrap_or(1));
        daemon
    }

    fn wait_ready(&mut self, rx: &mpsc::Receiver<String>, targets: usize) {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut listening = None;
        let mut hints = 0;
        while listening.is_none() || self.urls.len() < targets || hints < targets {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix("rustgt: listening on ") {
                        let addr = addr
                            .trim()
                            .parse::<SocketAddr>()
                            .unwrap_or_else(|e| panic!("bad listening line {line:?}: {e}"));
                        listening.get_or_insert(addr);
                        self.portals.push(addr);
                    } else if let Some(url) = line.strip_prefix("rustgt: iscsi://") {
                        self.urls.push(format!("iscsi://{}", url.trim()));
                    } else if line.starts_with("rustgt: iscsiadm ") {
                        hints += 1;
                    }
                    self.stdout.push(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!(
                        "rustgt not ready within {START_TIMEOUT:?}; stdout so far: {:?}\nstderr:\n{}",
                        self.stdout,
                        self.stderr()
                    );
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.take_proc().and_then(|mut p| p.terminate());
                    panic!(
                        "rustgt exited before it was ready ({status:?}); stdout: {:?}\nstderr:\n{}",
                        self.stdout,
                        self.stderr()
                    );
                }
            }
        }
        if let Some(addr) = listening {
            self.portal = addr;
        }
    }

    /// What the daemon wrote on stderr so far (its log).
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The last `n` lines of the daemon's log, for failure messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        let all = self.stderr();
        let lines: Vec<&str> = all.lines().collect();
        lines
            .get(lines.len().saturating_sub(n)..)
            .unwrap_or_default()
            .join("\n")
    }

    /// The scratch data directory (`--data-dir`).
    pub fn data_dir(&self) -> PathBuf {
        self.scratch.path().join("data")
    }

    /// `iscsi://127.0.0.1:port`, the discovery URL.
    pub fn portal_url(&self) -> String {
        format!("iscsi://{}", self.portal)
    }

    /// URL of a LUN of a target.
    pub fn url(&self, iqn: &str, lun: u64) -> String {
        format!("iscsi://{}/{iqn}/{lun}", self.portal)
    }

    /// URL of a LUN with CHAP credentials (`user%secret@`).
    pub fn chap_url(&self, user: &str, secret: &str, iqn: &str, lun: u64) -> String {
        format!("iscsi://{user}%{secret}@{}/{iqn}/{lun}", self.portal)
    }

    /// The exit status if the daemon has exited (it should not have).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.proc
            .lock()
            .ok()
            .and_then(|mut p| p.as_mut().and_then(Proc::poll))
    }

    /// The daemon's process id while it runs (for /proc/PID reads), `None`
    /// once it has exited.
    pub fn pid(&self) -> Option<u32> {
        let mut guard = self.proc.lock().ok()?;
        let proc = guard.as_mut()?;
        match proc.poll() {
            Some(_) => None,
            None => Some(proc.child.id()),
        }
    }

    /// SIGKILL now and wait (bounded, 10 s) until the process is gone:
    /// a daemon dying without a chance to clean up.
    pub fn kill_now(&self, what: &str) {
        let mut guard = self.proc.lock().expect("daemon lock");
        let proc = guard.as_mut().expect("daemon still owned");
        if proc.poll().is_none() {
            signal(&proc.child, libc::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc.poll().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        assert!(proc.poll().is_some(), "{what} still runs after SIGKILL");
    }

    fn take_proc(&self) -> Option<Proc> {
        self.proc.lock().ok().and_then(|mut p| p.take())
    }

    /// SIGTERM and wait for exit (bounded); returns the exit status.
    pub fn stop(self) -> ExitStatus {
        let mut proc = self.take_proc().expect("daemon still owned");
        match proc.terminate() {
            Some(status) => status,
            None => panic!(
                "rustgt did not exit within {STOP_TIMEOUT:?} of SIGTERM\nstderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// Stops the daemon, asserts a clean exit and hands back the scratch
    /// directory so backing files can be inspected.
    pub fn stop_keep_files(mut self) -> tempfile::TempDir {
        let status = self.take_proc().and_then(|mut p| p.terminate());
        assert!(
            status.is_some_and(|s| s.success()),
            "rustgt should exit 0 on SIGTERM, got {status:?}\nstderr:\n{}",
            self.stderr()
        );
        let placeholder = tempfile::tempdir().expect("tempdir");
        std::mem::replace(&mut self.scratch, placeholder)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut proc) = self.take_proc() {
            proc.terminate();
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: kill(2) has no memory effects. The pid is our own child's and
    // callers only signal it before it has been reaped (Proc::poll caches
    // the exit status), so the pid cannot have been reused.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Result of one tool run.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics with the full output unless the tool exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(self.success(), "command failed: {self}");
        self
    }

    /// Panics with the full output if the tool exited 0.
    pub fn assert_failure(&self) -> &Self {
        assert!(!self.success(), "command should have failed: {self}");
        self
    }
}

impl std::fmt::Display for ToolOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` -> {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

/// A tool run cut short: timed out, or the daemon under test died.
#[derive(Debug)]
pub struct Interrupted {
    pub reason: String,
    /// What the tool printed before it was killed.
    pub partial: ToolOutput,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n{}", self.reason, self.partial)
    }
}

/// `rustgt bench load URL --json EXTRA...` (bounded: 60 s), asserted to
/// succeed; its JSON report.
pub fn bench_load_json(url: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["load", url];
    args.extend_from_slice(extra);
    bench_json(&args, Duration::from_secs(60))
}

/// `rustgt bench ARGS... --json` (bounded by `timeout`), asserted to
/// succeed; its JSON report.
pub fn bench_json(args: &[&str], timeout: Duration) -> serde_json::Value {
    let args: Vec<String> = std::iter::once("bench")
        .chain(args.iter().copied())
        .chain(std::iter::once("--json"))
        .map(str::to_owned)
        .collect();
    let out = run_tool(env!("CARGO_BIN_EXE_rustgt"), &args, timeout);
    assert!(
        out.success(),
        "{args:?} failed:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// Runs `program args...` with no stdin, bounded by `timeout`; panics if it
/// does not finish in time.
pub fn run_tool(program: &str, args: &[String], timeout: Duration) -> ToolOutput {
    run_tool_env(program, args, &[], timeout)
}

/// Like [`run_tool`] with extra environment variables.
pub fn run_tool_env(
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    timeout: Duration,
) -> ToolOutput {
    run_core(program, args, env, timeout, &|| None).unwrap_or_else(|i| panic!("{i}"))
}

/// Like [`run_tool`], but also stops (with an error instead of a panic) as
/// soon as `daemon` exits, so a crashed target does not leave an initiator
/// retrying until the timeout.
pub fn run_tool_watched(
    program: &str,
    args: &[String],
    timeout: Duration,
    daemon: &Daemon,
) -> Result<ToolOutput, Interrupted> {
    run_core(program, args, &[], timeout, &|| {
        daemon
            .exit_status()
            .map(|s| format!("rustgt exited ({s}) while {program} was running"))
    })
}

fn run_core(
    program: &str,
    args: &[String],
    env: &[(&str, &str)],
    timeout: Duration,
    abort: &dyn Fn() -> Option<String>,
) -> Result<ToolOutput, Interrupted> {
    let command = std::iter::once(program.to_owned())
        .chain(args.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "{program} is not installed: run tests/run, which installs libiscsi-bin, \
             qemu-utils and qemu-block-extra"
        ),
        Err(e) => panic!("cannot run {command}: {e}"),
    };
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut cut_short = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => panic!("waiting for {command}: {e}"),
        }
        if let Some(reason) = abort() {
            cut_short = Some(reason);
        } else if Instant::now() >= deadline {
            cut_short = Some(format!("`{command}` did not finish within {timeout:?}"));
        }
        if cut_short.is_some() {
            let _ = child.kill();
            match child.wait() {
                Ok(status) => break status,
                Err(e) => panic!("reaping {command}: {e}"),
            }
        }
        thread::sleep(Duration::from_millis(20));
    };
    let output = ToolOutput {
        command,
        status,
        stdout: join(out),
        stderr: join(err),
    };
    match cut_short {
        None => Ok(output),
        Some(reason) => Err(Interrupted {
            reason,
            partial: output,
        }),
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<thread::JoinHandle<String>> {
    pipe.map(|mut p| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    })
}

fn join(h: Option<thread::JoinHandle<String>>) -> String {
    h.and_then(|h| h.join().ok()).unwrap_or_default()
}

fn shell_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,%@[]+".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// `args!["a", x, ...]` -> `[String; N]`, for the `&[String]` of [`run_tool`].
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$(($a).to_string()),*] };
}

// ---------------------------------------------------------------------------
// qemu-io: a real libiscsi initiator moving real data
// ---------------------------------------------------------------------------

/// One pattern-filled region: `len` bytes of `pattern` at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub offset: u64,
    pub len: u64,
    pub pattern: u8,
}

impl Region {
    pub const fn new(offset: u64, len: u64, pattern: u8) -> Self {
        Self {
            offset,
            len,
            pattern,
        }
    }

    pub fn write_cmd(&self) -> String {
        format!(
            "write -P 0x{:02x} {} {}",
            self.pattern, self.offset, self.len
        )
    }

    pub fn read_cmd(&self) -> String {
        format!(
            "read -P 0x{:02x} {} {}",
            self.pattern, self.offset, self.len
        )
    }
}

/// How qemu-io opens the LUN.
#[derive(Debug, Clone)]
pub enum QemuTarget {
    /// A plain `iscsi://` URL (qemu's defaults: offers HeaderDigest None,CRC32C).
    Url(String),
    /// `--image-opts` key=value list (driver=iscsi,...).
    Opts(String),
}

impl QemuTarget {
    /// `--image-opts` for a LUN with the given qemu `header-digest` value
    /// (crc32c, none, crc32c-none, none-crc32c).
    pub fn with_header_digest(portal: SocketAddr, iqn: &str, lun: u64, digest: &str) -> Self {
        Self::Opts(format!(
            "driver=iscsi,transport=tcp,portal={portal},target={iqn},lun={lun},header-digest={digest}"
        ))
    }
}

/// Runs one qemu-io process with `cmds` (each `-c`), asserting every command
/// succeeded and every pattern verified.
pub fn qemu_io(target: &QemuTarget, cmds: &[String]) -> ToolOutput {
    let mut args = Vec::new();
    match target {
        QemuTarget::Url(_) => args.extend(["-f".to_owned(), "raw".to_owned()]),
        QemuTarget::Opts(_) => args.push("--image-opts".to_owned()),
    }
    for c in cmds {
        args.push("-c".to_owned());
        args.push(c.clone());
    }
    args.push(match target {
        QemuTarget::Url(u) | QemuTarget::Opts(u) => u.clone(),
    });
    let out = run_tool("qemu-io", &args, TOOL_TIMEOUT);
    out.assert_success();
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        !all.contains("Pattern verification failed"),
        "data mismatch: {out}"
    );
    assert!(!all.contains("failed:"), "an I/O command failed: {out}");
    // qemu-io reports each completed command as "wrote N/N" or "read N/N".
    let done = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("wrote ") || l.starts_with("read "))
        .count();
    assert_eq!(done, cmds.len(), "not every command completed: {out}");
    out
}

/// Writes every region then reads each back with pattern verification, in
/// one qemu-io session.
pub fn write_and_verify(target: &QemuTarget, regions: &[Region]) -> ToolOutput {
    let cmds: Vec<String> = regions
        .iter()
        .map(Region::write_cmd)
        .chain(regions.iter().map(Region::read_cmd))
        .collect();
    qemu_io(target, &cmds)
}

/// Reads each region back with pattern verification.
pub fn verify(target: &QemuTarget, regions: &[Region]) -> ToolOutput {
    let cmds: Vec<String> = regions.iter().map(Region::read_cmd).collect();
    qemu_io(target, &cmds)
}

/// Asserts the bytes of each region in a backing file hold its pattern.
pub fn assert_file_regions(path: &Path, regions: &[Region]) {
    use std::io::{Seek, SeekFrom};
    let mut file = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("open backing file {}: {e}", path.display()));
    for r in regions {
        let len = usize::try_from(r.len).expect("region fits in memory");
        let mut buf = vec![0u8; len];
        file.seek(SeekFrom::Start(r.offset)).expect("seek");
        file.read_exact(&mut buf).unwrap_or_else(|e| {
            panic!(
                "read {} bytes at {} of {}: {e}",
                r.len,
                r.offset,
                path.display()
            )
        });
        if let Some(pos) = buf.iter().position(|&b| b != r.pattern) {
            panic!(
                "{}: byte {} (offset {}) is 0x{:02x}, expected 0x{:02x} for {r:?}",
                path.display(),
                pos,
                r.offset + pos as u64,
                buf.get(pos).copied().unwrap_or_default(),
                r.pattern
            );
        }
    }
}

/// Resident memory of `pid` in KiB; fails the test when it cannot be read
/// (a figure of 0 would let every growth check pass).
pub fn rss_kib(pid: u32) -> u64 {
    rustgt_load::procstat::rss_kib(pid).expect("VmRSS of the daemon")
}
