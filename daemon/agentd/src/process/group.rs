//! Process groups: how the daemon names a group it started (the leader's
//! pid and start time), tells whether it is still ours, and stops it.

use std::future::Future;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::{KILL_WAIT, POLL};

/// A process group the daemon started: its id (the leader's pid) and the
/// leader's start time, which together name it for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    pgid: Pid,
    leader_ticks: Option<u64>,
}

impl Group {
    /// The group `pgid` whose leader started at `leader_ticks` (field 22 of
    /// its `/proc/<pid>/stat`), as recorded when it was spawned.
    pub(crate) fn new(pgid: Pid, leader_ticks: Option<u64>) -> Self {
        Group { pgid, leader_ticks }
    }

    /// The group led by `pid`, with the start time the leader has now. Only
    /// right for a leader that is known to be ours at this moment (spawned
    /// and not yet reaped).
    pub(super) fn led_by(pid: Pid) -> Self {
        Group::new(pid, start_ticks(pid))
    }

    /// The group led by `pid`, started between `before` and `after` (the
    /// [`boot_ticks`] around the spawn). When both are the same tick, that
    /// tick is the leader's start time, and `/proc` is not read: right
    /// after a spawn the read cost the worker 40–60 µs while the new
    /// process was still in its `exec`, on the same CPU (issue 20).
    pub(super) fn spawned(pid: Pid, before: Option<u64>, after: Option<u64>) -> Self {
        match (before, after) {
            (Some(before), Some(after)) if before == after => Group::new(pid, Some(before)),
            _ => Group::led_by(pid),
        }
    }

    pub(crate) fn pgid(&self) -> Pid {
        self.pgid
    }

    pub(crate) fn leader_ticks(&self) -> Option<u64> {
        self.leader_ticks
    }

    /// Whether the number still names this group: no live process other
    /// than our leader holds the pid. A live process with the pid and
    /// another start time means the number was reused and the group (if
    /// any) is someone else's. pids 0 and 1 and our own are never ours:
    /// signalling them would hit the daemon's group or init.
    pub(crate) fn is_ours(&self) -> bool {
        self.may_be_ours()
            && !proc_stat(self.pgid.as_raw())
                .is_some_and(|s| s.is_alive() && Some(s.start_ticks) != self.leader_ticks)
    }

    /// Not a number that is never ours (0, 1, the daemon's own).
    fn may_be_ours(&self) -> bool {
        let pid = self.pgid.as_raw();
        pid > 1 && pid != nix::unistd::getpid().as_raw()
    }

    /// Whether the group is still ours ([`Group::is_ours`]) and has a live
    /// member.
    pub(crate) fn is_alive(&self) -> bool {
        // The signal-0 probe before `/proc`: for a command that ended with
        // its whole group (nearly every one) it answers alone.
        self.may_be_ours() && group_alive(self.pgid) && self.is_ours()
    }

    /// Sends `signal` to every process of the group, unless the group is no
    /// longer ours; whether it was sent.
    pub(crate) fn signal(&self, signal: Signal) -> bool {
        self.is_ours() && killpg(self.pgid, signal).is_ok()
    }

    /// Stops the group: SIGTERM to all of it, SIGKILL after `grace` to
    /// whatever is left, then up to [`KILL_WAIT`] for SIGKILL to take
    /// effect. Does nothing to a group that is gone or no longer ours, and
    /// checks again before every signal.
    pub(crate) async fn terminate(&self, grace: Duration) {
        self.terminate_with(grace, tokio::time::sleep).await;
    }

    /// [`Group::terminate`] for start-up, outside any task: blocks the
    /// thread while it waits.
    pub(crate) fn terminate_blocking(&self, grace: Duration) {
        // The waits block instead of yielding, so the future is ready on
        // its first poll and no runtime is needed to drive it.
        futures::executor::block_on(self.terminate_with(grace, |d| {
            std::thread::sleep(d);
            std::future::ready(())
        }));
    }

    /// The one termination sequence; `sleep` decides whether waiting yields
    /// to the runtime or blocks the thread.
    async fn terminate_with<F: Future<Output = ()>>(
        &self,
        grace: Duration,
        mut sleep: impl FnMut(Duration) -> F,
    ) {
        if !self.is_alive() {
            return;
        }
        self.signal(Signal::SIGTERM);
        // A stopped process acts on SIGTERM only once it runs again.
        self.signal(Signal::SIGCONT);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_alive() {
                return;
            }
            sleep(POLL).await;
        }
        if self.is_alive() {
            self.signal(Signal::SIGKILL);
        }
        let deadline = Instant::now() + KILL_WAIT;
        while self.is_alive() && Instant::now() < deadline {
            sleep(POLL).await;
        }
    }
}

/// Whether `pid` is, right now, the process that started at `ticks`: alive,
/// leading its own group, with that start time. This is what proves a
/// process recorded before a daemon crash is still ours.
pub(crate) fn leads_group_since(pid: Pid, ticks: u64) -> bool {
    let group = Group::new(pid, Some(ticks));
    group.is_ours()
        && proc_stat(pid.as_raw())
            .is_some_and(|s| s.is_alive() && s.pgrp == pid.as_raw() && s.start_ticks == ticks)
}

/// The start time (clock ticks since boot) of process `pid`, which with the
/// pid identifies it for good.
pub(super) fn start_ticks(pid: Pid) -> Option<u64> {
    proc_stat(pid.as_raw()).map(|s| s.start_ticks)
}

/// The time since boot in the unit and on the clock of a start time in
/// `/proc/<pid>/stat`: clock ticks (`sysconf(_SC_CLK_TCK)`, rounded down)
/// of `CLOCK_BOOTTIME`, which is what the kernel stamps a new process with
/// (see proc(5), field 22). None when either cannot be read.
pub(super) fn boot_ticks() -> Option<u64> {
    static NANOS_PER_TICK: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let per_tick = (*NANOS_PER_TICK.get_or_init(|| {
        let per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
        let per_second = u64::try_from(per_second).ok().filter(|t| *t > 0)?;
        // The kernel divides exactly when the tick divides a second.
        (1_000_000_000 % per_second == 0).then(|| 1_000_000_000 / per_second)
    }))?;
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let nanos = u64::try_from(now.tv_sec())
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(now.tv_nsec()).ok()?)?;
    Some(nanos / per_tick)
}

/// Whether any live process is in the group `pgid`, whoever's it is.
/// Zombies do not count: they are dead and only wait for a parent to reap
/// them (and in a container the init process may never do so), but
/// signal 0 still reaches them.
pub(crate) fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None).is_err() {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return false;
        };
        proc_stat(pid).is_some_and(|s| s.pgrp == pgid.as_raw() && s.is_alive())
    })
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// One letter: R, S, D, Z (zombie), X (dead), ...
    pub(crate) state: char,
    /// Process group id.
    pub(crate) pgrp: i32,
    /// Start time in clock ticks after boot (field 22): with the pid, it
    /// identifies a process, because pids are reused but not at the same
    /// instant.
    pub(crate) start_ticks: u64,
}

impl ProcStat {
    /// Running or able to run: neither a zombie nor dead.
    pub(crate) fn is_alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Reads `/proc/<pid>/stat`; None if the process does not exist.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

pub(super) fn parse_stat(stat: &str) -> Option<ProcStat> {
    // The fields after the command name, which is in parentheses and may
    // itself contain spaces and parentheses: state (field 3), ppid, pgrp,
    // ..., starttime (field 22).
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}
