//! Who is asking and when: client request ids, this client's name as the
//! others see it, and the wall clock in milliseconds.

/// A fresh client request id: the daemon answers a retry carrying it with
/// the first attempt's outcome instead of doing it twice.
///
/// A ULID of the time and 80 bits from std's per-process random hash keys
/// (seeded by the OS when the process starts), the pid and a counter. Not
/// `Ulid::new()`: its generator probes the CPU's features on first use,
/// a dozen `cpuid` instructions, each a trap to the hypervisor on a VM
/// (6 µs apiece measured on the 2-vCPU test machine), in every `agent`
/// process. The id only has to be unique, not secret.
pub fn request_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let keys = std::hash::RandomState::new();
    let word = |part: u64| {
        let mut hasher = keys.build_hasher();
        hasher.write_u64(part);
        hasher.write_u32(std::process::id());
        hasher.write_u64(count);
        hasher.finish()
    };
    let random = (u128::from(word(0)) << 64 | u128::from(word(1))) & ((1u128 << 80) - 1);
    let ms = u64::try_from(now_ms()).unwrap_or(0);
    ulid::Ulid::from_parts(ms, random).to_string()
}

/// This client's name as the other clients see it: the one given with
/// `--name`, else `user@host:pid`. Worked out once per process: every call
/// and every session of a command carries it, and finding the user can
/// mean reading the password database.
pub fn client_name() -> String {
    if let Some(name) = crate::remote::chosen_name() {
        return name;
    }
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(default_client_name).clone()
}

/// The user named by the environment, as a login sets it.
fn env_user() -> Option<String> {
    user_from_env(|key| std::env::var(key).ok())
}

/// `USER`, else `LOGNAME`, as `var` reads them; empty ones do not count.
pub(super) fn user_from_env(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["USER", "LOGNAME"]
        .into_iter()
        .find_map(|key| var(key).filter(|u| !u.is_empty()))
}

/// `user@host:pid`, the user as the environment names it. Without `USER`
/// and `LOGNAME` (cron, services, containers) it is `agent@host:pid`: the
/// user database is not asked. On the local socket every client is the
/// daemon's own user (its directory is private), so the lookup (nsswitch,
/// the password file, nscd, or a directory service over the network)
/// would tell the others nothing, and it cost every command 0.1 ms or
/// more before its first call (issue 20).
fn default_client_name() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty());
    name_from(env_user(), host, std::process::id())
}

/// A client's name from its user, host and pid, each as far as known.
pub(super) fn name_from(user: Option<String>, host: Option<String>, pid: u32) -> String {
    match (user, host) {
        (Some(user), Some(host)) => format!("{user}@{host}:{pid}"),
        (Some(user), None) => format!("{user}:{pid}"),
        (None, Some(host)) => format!("agent@{host}:{pid}"),
        (None, None) => format!("agent-{pid}"),
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
