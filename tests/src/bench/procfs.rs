//! What `/proc` says about a process (CPU time, memory) and the machine.

use std::sync::OnceLock;
use std::time::Duration;

/// CPU time of a process: its own (all threads, live and dead) and that of
/// its reaped children.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTimes {
    /// utime + stime.
    pub own: Duration,
    /// cutime + cstime.
    pub children: Duration,
}

impl CpuTimes {
    /// `self - earlier`.
    pub fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            own: self.own.saturating_sub(earlier.own),
            children: self.children.saturating_sub(earlier.children),
        }
    }
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when that fails).
pub fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .filter(|t| *t > 0)
            .unwrap_or(100)
    })
}

/// CPU time of `pid`'s live threads, to the nanosecond: the sum of their
/// `/proc/<pid>/task/<tid>/schedstat` run times. Threads that ended are not
/// counted; for a short interval over a daemon whose threads live on, the
/// difference of two readings is its CPU time at a precision
/// [`cpu_times`]' clock ticks (10 ms) cannot give.
pub fn threads_cpu(pid: u32) -> Option<Duration> {
    let mut total = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended since the listing is simply not counted.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(Duration::from_nanos(total))
}

/// CPU time (user + system) of this process's reaped children, from
/// `getrusage`, which is precise where `/proc`'s `cutime` counts ticks.
pub fn children_cpu() -> Option<Duration> {
    let usage =
        nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).ok()?;
    Some(timeval(usage.user_time()) + timeval(usage.system_time()))
}

/// CPU time (user + system) of this process so far, from `getrusage`.
pub fn own_cpu() -> Option<Duration> {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).ok()?;
    Some(timeval(usage.user_time()) + timeval(usage.system_time()))
}

fn timeval(t: nix::sys::time::TimeVal) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec()).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec()).unwrap_or(0))
}

/// CPU times of `pid` from `/proc/<pid>/stat` (tick resolution).
pub fn cpu_times(pid: u32) -> Option<CpuTimes> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Then: state(3) ... utime(14) stime(15) cutime(16) cstime(17).
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let tick = |t: u64| Duration::from_nanos(t * 1_000_000_000 / clock_ticks());
    Some(CpuTimes {
        own: tick(field(14)? + field(15)?),
        children: tick(field(16)? + field(17)?),
    })
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes.
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// Resident memory of `pid` now, in MiB (NaN when unknown).
pub fn rss_mib(pid: u32) -> f64 {
    status_bytes(pid, "VmRSS").map_or(f64::NAN, mib)
}

/// Peak resident memory of `pid` so far, in MiB (NaN when unknown).
pub fn hwm_mib(pid: u32) -> f64 {
    status_bytes(pid, "VmHWM").map_or(f64::NAN, mib)
}

/// Bytes to MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `nproc`, memory and CPU model, one line.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name")?.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(f64::NAN, |kb| kb as f64 / (1024.0 * 1024.0));
    format!("{cpus} CPUs ({model}), {mem:.1} GiB RAM")
}

/// Samples the peak RSS of a short-lived process until it exits: the last
/// `VmHWM` read before `/proc/<pid>` went away (or became a zombie, whose
/// status no longer has memory lines). Runs on a blocking thread.
pub fn watch_peak_rss(pid: u32) -> std::thread::JoinHandle<Option<u64>> {
    std::thread::spawn(move || {
        let mut peak = None;
        while let Some(v) = status_bytes(pid, "VmHWM") {
            peak = Some(v);
            std::thread::sleep(Duration::from_micros(500));
        }
        peak
    })
}

/// Counts a process's flush system calls with `perf stat`: `fsync` and
/// `fdatasync` (durable) and `sync_file_range` (writes the data back but
/// flushes neither metadata nor the disk's cache). `None` when perf cannot
/// be started.
pub struct SyncCounter {
    child: std::process::Child,
}

/// What a [`SyncCounter`] counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncCounts {
    /// fsync + fdatasync.
    pub fsync: u64,
    /// sync_file_range.
    pub sync_file_range: u64,
}

const SYNC_EVENTS: &str =
    "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_sync_file_range";

impl SyncCounter {
    /// Starts counting the calls of `pid` (all its threads).
    pub fn start(pid: u32) -> Option<SyncCounter> {
        let child = std::process::Command::new("perf")
            .args(["stat", "-x,", "-e", SYNC_EVENTS, "-p", &pid.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        // perf needs a moment to attach before the calls to count happen.
        std::thread::sleep(Duration::from_millis(300));
        Some(SyncCounter { child })
    }

    /// Stops counting and returns the counts.
    pub fn stop(mut self) -> Option<SyncCounts> {
        use std::io::Read as _;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).ok()?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).ok()?;
        let mut err = String::new();
        self.child.stderr.take()?.read_to_string(&mut err).ok()?;
        self.child.wait().ok()?;
        let mut counts = SyncCounts::default();
        let mut seen = false;
        for line in err.lines() {
            let fields: Vec<&str> = line.split(',').collect();
            let (Some(count), Some(event)) = (fields.first(), fields.get(2)) else {
                continue;
            };
            // "<not counted>" means the process made no such call.
            let n = count.trim().parse::<u64>().unwrap_or(0);
            match *event {
                "syscalls:sys_enter_fsync" | "syscalls:sys_enter_fdatasync" => counts.fsync += n,
                "syscalls:sys_enter_sync_file_range" => counts.sync_file_range += n,
                _ => continue,
            }
            seen = true;
        }
        seen.then_some(counts)
    }
}

/// Resets the peak resident memory (`VmHWM`) of `pid` to its current RSS
/// (`/proc/<pid>/clear_refs`, Linux ≥ 4.0), so a later [`hwm_mib`] is the
/// peak since now. Returns whether it worked.
pub fn reset_hwm(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}
