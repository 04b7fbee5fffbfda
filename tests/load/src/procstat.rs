//! A process's CPU time and context switches, from /proc.

use std::time::Duration;

/// What a process had used at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// utime + stime of the whole process.
    pub cpu: Duration,
    /// Voluntary and involuntary context switches, summed over its
    /// threads (those alive at the instant).
    pub switches: u64,
}

impl Usage {
    /// What was used between `self` and a later `end`.
    pub fn until(self, end: Usage) -> Usage {
        Usage {
            cpu: end.cpu.saturating_sub(self.cpu),
            switches: end.switches.saturating_sub(self.switches),
        }
    }
}

/// The usage of process `pid` now; `None` if it is gone or unreadable.
pub fn sample(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let cpu = cpu_of_stat(&stat, clock_ticks())?;
    let mut switches = 0u64;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    for task in tasks.flatten() {
        if let Ok(status) = std::fs::read_to_string(task.path().join("status")) {
            switches += switches_of_status(&status);
        }
    }
    Some(Usage { cpu, switches })
}

/// Clock ticks per second of /proc's times (USER_HZ): 100 on Linux.
fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// utime + stime (fields 14 and 15) of a /proc/PID/stat line. The command
/// name (field 2) is in parentheses and may hold spaces, so fields are
/// counted after its closing parenthesis.
fn cpu_of_stat(stat: &str, ticks: u64) -> Option<Duration> {
    let after = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = after.split_whitespace();
    // Fields 3.. follow the name: utime is the 12th of them, stime the 13th.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let t = utime + stime;
    Some(Duration::from_secs(t / ticks) + Duration::from_nanos((t % ticks) * 1_000_000_000 / ticks))
}

/// voluntary_ctxt_switches + nonvoluntary_ctxt_switches of a status file.
fn switches_of_status(status: &str) -> u64 {
    status
        .lines()
        .filter(|l| {
            l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt_switches")
        })
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_times_after_a_name_with_spaces() {
        let stat = "1234 (rustgt reactor) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(cpu_of_stat(stat, 100), Some(Duration::from_secs(3)));
    }

    #[test]
    fn sums_both_kinds_of_switches() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t5\n";
        assert_eq!(switches_of_status(status), 12);
    }

    #[test]
    fn samples_this_process() {
        let me = std::process::id();
        let a = sample(me).expect("own /proc");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = sample(me).expect("own /proc");
        assert!(b.cpu >= a.cpu);
        assert!(a.switches > 0 || b.switches > 0);
    }
}
