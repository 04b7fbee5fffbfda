//! Log output: tracing's formatted lines on stderr.
//!
//! Under systemd, when stderr is the journal's stream (`JOURNAL_STREAM`
//! names its device and inode, as sd-daemon(3) says to check), each line
//! starts with its syslog priority in the `<N>` form journald understands
//! (so `journalctl -p warning` finds warnings), and carries no timestamp
//! or colour, which the journal adds or does not want.

use std::io::Write;

use tracing::{Level, Metadata};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `filter` as `--log` / `RUSTGT_LOG`
/// (default "info").
pub fn init(filter: Option<&str>) {
    let (targets, env) = filter_of(filter.unwrap_or("info"));
    let registry = tracing_subscriber::registry().with(targets).with(env);
    if stderr_is_journal() {
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(Journal)
            .with_ansi(false)
            .without_time();
        registry.with(fmt).init();
        return;
    }
    // Colour only for a person at a terminal: not in a file or a pipe, and
    // never when NO_COLOR is set to anything (no-color.org).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    registry.with(fmt).init();
}

/// The filter of `directives`: plain `target=level` lists (the usual
/// case) as a static [`Targets`] filter, which costs nothing when a span
/// is entered or left (every connection task is polled inside its span);
/// directives that filter on spans or fields (`[`, `{`) as an
/// [`EnvFilter`], which keeps per-span state. Invalid directives fall back
/// to "info".
fn filter_of(directives: &str) -> (Option<Targets>, Option<EnvFilter>) {
    let spans = directives.contains(['[', '{']);
    if !spans {
        if let Ok(t) = directives.parse::<Targets>() {
            return (Some(t), None);
        }
    }
    match EnvFilter::try_new(directives) {
        Ok(f) => (None, Some(f)),
        Err(_) => (Some(Targets::new().with_default(Level::INFO)), None),
    }
}

/// Whether `JOURNAL_STREAM` ("DEVICE:INODE") names this process's stderr.
fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(fd)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The sd-daemon(3) prefix of a level: `<3>` error, `<4>` warning,
/// `<6>` info, `<7>` debug and trace.
fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "<3>",
        Level::WARN => "<4>",
        Level::INFO => "<6>",
        _ => "<7>",
    }
}

/// Makes a [`Prefixed`] writer per event, for the event's level.
#[derive(Debug, Clone, Copy)]
struct Journal;

impl<'a> MakeWriter<'a> for Journal {
    type Writer = Prefixed<std::io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Prefixed::new(priority(&Level::INFO), std::io::stderr())
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        Prefixed::new(priority(meta.level()), std::io::stderr())
    }
}

/// Collects one event's text and writes it, each line prefixed, in one
/// write when dropped (so lines of concurrent events do not mix).
#[derive(Debug)]
struct Prefixed<W: Write> {
    prefix: &'static str,
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> Prefixed<W> {
    fn new(prefix: &'static str, out: W) -> Self {
        Prefixed {
            prefix,
            buf: Vec::new(),
            out,
        }
    }

    /// The collected text with the prefix before every line.
    fn prefixed(&self) -> Vec<u8> {
        let mut text = Vec::with_capacity(self.buf.len() + 8);
        for line in self.buf.split_inclusive(|&b| b == b'\n') {
            text.extend_from_slice(self.prefix.as_bytes());
            text.extend_from_slice(line);
        }
        text
    }
}

impl<W: Write> Write for Prefixed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for Prefixed<W> {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let text = self.prefixed();
            let _ = self.out.write_all(&text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_directives_get_the_static_filter_and_span_directives_the_dynamic_one() {
        use tracing::level_filters::LevelFilter;
        let (t, e) = filter_of("info");
        assert!(e.is_none());
        let t = t.expect("static filter");
        assert!(t.would_enable("rustgt_port", &Level::INFO));
        assert!(!t.would_enable("rustgt_port", &Level::DEBUG));
        let (t, e) = filter_of("warn,rustgt_port=trace");
        assert!(e.is_none());
        let t = t.expect("static filter");
        assert!(t.would_enable("rustgt_port::turn", &Level::TRACE));
        assert!(!t.would_enable("rustgt_iscsi", &Level::INFO));
        assert!(t.would_enable("rustgt_iscsi", &Level::WARN));
        let (t, e) = filter_of("info,[conn{initiator=iqn.x}]=debug");
        assert!(t.is_none());
        assert!(e.is_some());
        // Not a directive at all: info, as before.
        let (t, e) = filter_of("=[");
        assert!(e.is_none());
        let t = t.expect("fallback");
        assert_eq!(t.default_level(), Some(LevelFilter::INFO));
    }

    #[test]
    fn every_line_of_an_event_gets_its_priority() {
        let mut out = Vec::new();
        {
            let mut w = Prefixed::new(priority(&Level::WARN), &mut out);
            w.write_all(b"first line\nsecond").expect("write");
            w.write_all(b" part\n").expect("write");
        }
        assert_eq!(out, b"<4>first line\n<4>second part\n");
        assert_eq!(priority(&Level::ERROR), "<3>");
        assert_eq!(priority(&Level::INFO), "<6>");
        assert_eq!(priority(&Level::TRACE), "<7>");
    }
}
