//! CPU time and context switches of a process, from `/proc`.

/// One reading of a process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcSample {
    /// utime + stime of all its threads (`/proc/PID/stat`), seconds.
    pub cpu_s: f64,
    /// voluntary + nonvoluntary context switches summed over
    /// `/proc/PID/task/*/status`.
    pub ctxsw: u64,
}

impl ProcSample {
    /// Reads `pid`; `None` when it is gone or unreadable.
    pub fn read(pid: u32) -> Option<ProcSample> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ticks = stat_ticks(&stat)?;
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&h| h > 0)
            .unwrap_or(100);
        let mut ctxsw = 0;
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                ctxsw += status_ctxsw(&s);
            }
        }
        Some(ProcSample {
            cpu_s: ticks as f64 / hz as f64,
            ctxsw,
        })
    }
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the
/// command name in parentheses may hold spaces.
pub fn stat_ticks(stat: &str) -> Option<u64> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let mut f = after.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// voluntary_ctxt_switches + nonvoluntary_ctxt_switches of a status file.
pub fn status_ctxsw(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches")
                .then(|| v.trim().parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

/// `VmRSS` of `pid` in KiB (`/proc/PID/status`); `None` when it is gone
/// or unreadable.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_spaces_in_the_name() {
        let s = "42 (tokio rt) S 1 42 42 0 -1 4194560 100 0 0 0 37 5 0 0 20 0 3 0";
        assert_eq!(stat_ticks(s), Some(42));
        assert_eq!(stat_ticks("42 (x"), None);
    }

    #[test]
    fn sums_context_switches() {
        let s = "Name:\tx\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_ctxsw(s), 13);
    }

    #[test]
    fn reads_itself() {
        let me = ProcSample::read(std::process::id()).unwrap();
        assert!(me.ctxsw > 0);
        assert!(me.cpu_s >= 0.0);
    }
}
