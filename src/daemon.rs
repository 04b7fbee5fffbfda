//! Runtime wiring: config -> backstores -> SCSI targets -> the port (one
//! for both transports) and its TCP and iSER portals, the admin socket and
//! metrics endpoint, and signal handling. No protocol logic lives here.
//!
//! The running state belongs to one control task ([`run`]'s loop): it owns
//! the [`Runtime`] and applies, one at a time, admin requests (from the
//! socket and the metrics endpoint), SIGHUP (re-apply the config file) and
//! finally SIGTERM/SIGINT. The config -> lower layers conversions are in
//! [`crate::wiring`].

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::Config;
use crate::control::portals::IserPortalError;
use crate::control::runtime::{AdminError, ConfigSource, Runtime};
use crate::control::server::{log_change, AdminSocket, Envelope, SocketError};

/// Why the daemon could not start or serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    #[error("creating data directory {}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Another daemon holds the data directory's lock.
    #[error("data directory {}: {why}", path.display())]
    DataDirInUse { path: PathBuf, why: String },
    /// Building the configured targets, LUNs and portals failed.
    #[error("{0}")]
    Start(AdminError),
    #[error(transparent)]
    Iser(#[from] IserPortalError),
    #[error(transparent)]
    AdminSocket(#[from] SocketError),
    #[error("metrics_listen {addr}")]
    Metrics {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// Signal handlers, the banner on stdout.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

type Result<T, E = DaemonError> = std::result::Result<T, E>;

/// How long initiators get to log out after the Async logout request.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Requests waiting for the control task before senders wait too.
const CONTROL_QUEUE: usize = 64;

/// The lock file in the data directory that one daemon at a time holds.
const DATA_DIR_LOCK: &str = "rustgt.lock";

/// Takes the data directory's lock (an OFD lock on its `rustgt.lock`,
/// released when the process ends).
fn lock_data_dir(dir: &std::path::Path) -> Result<rustgt_backstore::image_lock::ImageLock> {
    let path = dir.join(DATA_DIR_LOCK);
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| DaemonError::DataDir {
            path: path.clone(),
            source,
        })?;
    rustgt_backstore::image_lock::lock_image(&path, "this daemon", true).map_err(|e| {
        let why = match e {
            rustgt_backstore::image_lock::LockError::Elsewhere { .. } => format!(
                "in use by another rustgt daemon (it holds the lock on {})",
                path.display()
            ),
            other => other.to_string(),
        };
        DaemonError::DataDirInUse {
            path: dir.to_owned(),
            why,
        }
    })
}

/// Build everything from `cfg`, serve until SIGINT/SIGTERM, shut down cleanly.
pub async fn run(cfg: Config, source: ConfigSource) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};

    std::fs::create_dir_all(&cfg.data_dir).map_err(|source| DaemonError::DataDir {
        path: cfg.data_dir.clone(),
        source,
    })?;
    // One daemon per data directory and admin socket, checked before any
    // image is opened or portal bound; the lock is held until exit.
    let _data_dir_lock = lock_data_dir(&cfg.data_dir)?;
    crate::control::server::ensure_unused(&cfg.admin_socket_path())?;
    // Installed first, so a SIGHUP during start-up is not fatal.
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;

    let socket_path = cfg.admin_socket_path();
    let socket_group = cfg.admin_socket_group.clone();
    let metrics_addr = cfg.metrics_listen;
    let (fenced_tx, mut fenced) = mpsc::unbounded_channel::<(String, u64)>();
    let mut rt = Runtime::start(cfg, source, fenced_tx)
        .await
        .map_err(DaemonError::Start)?;
    rt.start_iser()?;

    let (control, mut inbox) = mpsc::channel::<Envelope>(CONTROL_QUEUE);
    let admin = AdminSocket::bind(&socket_path, socket_group.as_ref())?;
    tracing::info!(
        path = %socket_path.display(),
        group = socket_group.as_ref().map(|g| g.name.as_str()),
        "admin socket ready"
    );
    let admin_task = tokio::spawn(admin.serve(control.clone()));
    let mut metrics_bound = None;
    let metrics_task = match metrics_addr {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| DaemonError::Metrics { addr, source })?;
            let real = l.local_addr()?;
            tracing::info!(addr = %real, "metrics on http://{real}/metrics");
            metrics_bound = Some(real);
            Some(tokio::spawn(crate::control::metrics::serve(
                l,
                control.clone(),
            )))
        }
        None => None,
    };
    drop(control);
    rt.set_endpoints(Some(socket_path.clone()), metrics_bound);
    print_banner(&rt, rt.iser_portals())?;
    // Type=notify: systemd counts the service started once every portal
    // is bound and the admin socket answers.
    notify(&[sd_notify::NotifyState::Ready]);

    loop {
        tokio::select! {
            Some(env) = inbox.recv() => {
                // Changes are logged here, in the order they are applied.
                let audit = match &env.caller {
                    Some(c) if env.request.is_change() => Some((c.clone(), env.request.describe())),
                    _ => None,
                };
                let reply = rt.handle(env.request).await;
                if let Some((caller, what)) = audit {
                    log_change(&caller, &what, &reply);
                }
                let _ = env.reply.send(reply);
            }
            Some((iqn, lun)) = fenced.recv() => rt.reopen_fenced(&iqn, lun).await,
            _ = hup.recv() => {
                reloading();
                match rt.reload(false).await {
                    Ok(r) => tracing::info!(changes = r.changes.len(), restart_needed = ?r.restart_needed, "SIGHUP: configuration re-applied"),
                    Err(e) => tracing::error!(error = %e, "SIGHUP: configuration not applied"),
                }
                notify(&[sd_notify::NotifyState::Ready]);
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    notify(&[sd_notify::NotifyState::Stopping]);
    admin_task.abort();
    if let Some(t) = metrics_task {
        t.abort();
    }
    // The socket file goes with the aborted task's AdminSocket.
    let _ = admin_task.await;
    tracing::info!("shutting down: asking initiators to log out");
    rt.stop_listeners();
    // Every session of both transports, then the SCSI targets.
    rt.port().shutdown(SHUTDOWN_GRACE).await;
    tracing::info!("shutdown complete");
    Ok(())
}

/// Tells the service manager (`NOTIFY_SOCKET`, set by systemd for
/// Type=notify; nothing without it) the daemon's state.
fn notify(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(state) {
        tracing::warn!(error = %e, "NOTIFY_SOCKET: state not sent");
    }
}

/// RELOADING=1 with the monotonic time of the reload, as sd_notify(3)
/// asks (Type=notify-reload refuses a reload without it).
fn reloading() {
    use sd_notify::NotifyState;
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
}

/// The start-up lines on stdout: portals, then a URL and an iscsiadm hint
/// per target.
fn print_banner(rt: &Runtime, iser: &[SocketAddr]) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    for addr in rt.portals() {
        writeln!(stdout, "rustgt: listening on {addr}")?;
    }
    for addr in iser {
        writeln!(stdout, "rustgt: iSER listening on {addr}")?;
    }
    for t in &rt.config().targets {
        if let Some(p) = t.portals.first() {
            let lun = t.luns.first().map(|l| l.id).unwrap_or(0);
            writeln!(stdout, "rustgt: iscsi://{p}/{}/{lun}", t.iqn)?;
            writeln!(
                stdout,
                "rustgt: iscsiadm -m discovery -t st -p {p} && iscsiadm -m node -T {} -p {p} --login",
                t.iqn
            )?;
        }
    }
    stdout.flush()?;
    Ok(())
}
