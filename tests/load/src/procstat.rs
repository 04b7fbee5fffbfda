//! CPU time and context switches of a process, from `/proc`.

/// One reading of a process.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcSample {
    /// utime + stime of all its threads (`/proc/PID/stat`), seconds, at
    /// clock-tick resolution (10 ms at 100 Hz); it includes threads that
    /// have exited.
    pub cpu_s: f64,
    /// voluntary + nonvoluntary context switches summed over
    /// `/proc/PID/task/*/status`.
    pub ctxsw: u64,
    /// Each live thread's time on a CPU, nanoseconds: the first field of
    /// `/proc/PID/task/TID/schedstat` (the scheduler's own sum, exact).
    pub run_ns: Vec<(u32, u64)>,
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
        let mut run_ns = Vec::new();
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                ctxsw += status_ctxsw(&s);
            }
            let tid = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok());
            let ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| schedstat_ns(&s));
            if let (Some(tid), Some(ns)) = (tid, ns) {
                run_ns.push((tid, ns));
            }
        }
        Some(ProcSample {
            cpu_s: ticks as f64 / hz as f64,
            ctxsw,
            run_ns,
        })
    }

    /// CPU seconds the process used from `before` to `self`: exact (the
    /// threads' scheduler run time) when every thread of `before` is still
    /// there, otherwise (a thread exited, and took its run time with it)
    /// the clock-tick figure.
    pub fn cpu_since(&self, before: &ProcSample) -> f64 {
        let ticks = self.cpu_s - before.cpu_s;
        if before.run_ns.is_empty() && self.run_ns.is_empty() {
            return ticks;
        }
        let mut ns = 0u64;
        for &(tid, then) in &before.run_ns {
            match self.run_ns.iter().find(|&&(t, _)| t == tid) {
                Some(&(_, now)) => ns += now.saturating_sub(then),
                None => return ticks,
            }
        }
        // Threads started within the window: all their time is in it.
        for &(tid, now) in &self.run_ns {
            if !before.run_ns.iter().any(|&(t, _)| t == tid) {
                ns += now;
            }
        }
        ns as f64 / 1e9
    }
}

/// The run time in nanoseconds (first field) of a `schedstat` file.
pub fn schedstat_ns(schedstat: &str) -> Option<u64> {
    schedstat.split_whitespace().next()?.parse().ok()
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
    fn exact_cpu_time_unless_a_thread_went() {
        let sample = |ticks: f64, run_ns: &[(u32, u64)]| ProcSample {
            cpu_s: ticks,
            ctxsw: 0,
            run_ns: run_ns.to_vec(),
        };
        assert_eq!(
            schedstat_ns("1461338521 36213394 106988\n"),
            Some(1_461_338_521)
        );
        assert_eq!(schedstat_ns(""), None);
        let before = sample(1.0, &[(1, 1_000_000_000), (2, 500_000_000)]);
        // Both threads ran on, a third started: 0.25 + 0.125 + 0.0625 s.
        let after = sample(
            1.5,
            &[(1, 1_250_000_000), (2, 625_000_000), (3, 62_500_000)],
        );
        assert!((after.cpu_since(&before) - 0.4375).abs() < 1e-9);
        // Thread 2 exited: its time is only in the ticks.
        let gone = sample(1.5, &[(1, 1_250_000_000)]);
        assert!((gone.cpu_since(&before) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn reads_itself() {
        let me = ProcSample::read(std::process::id()).unwrap();
        assert!(me.ctxsw > 0);
        assert!(me.run_ns.iter().any(|&(_, ns)| ns > 0));
        assert!(me.cpu_s >= 0.0);
    }
}
