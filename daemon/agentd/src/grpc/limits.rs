//! What keeps the listeners serving under load or attack: the file
//! descriptor limit raised at start and a share of it kept for the Unix
//! socket, accept loops that back off (never spin) when descriptors run
//! out, TLS handshakes counted per address, connections with no call in
//! progress closed after a while, and failures logged per address per
//! minute instead of once each.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The first pause after an accept failed for want of resources.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between accept attempts.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);
/// How often the failures counted per address are reported.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Raises the soft limit of open files to the hard limit; returns the
/// soft limit now in force (None when it cannot be read).
pub(crate) fn raise_nofile() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => {
                tracing::info!("raised the open-file limit from {soft} to {hard}");
                return Some(hard);
            }
            Err(e) => tracing::warn!("cannot raise the open-file limit from {soft}: {e}"),
        }
    }
    Some(soft)
}

/// The remote connections allowed at once: what is configured, but never
/// more than half of `nofile` (the rest is the Unix socket's, the store's,
/// the tools' and the shells').
pub(crate) fn connection_cap(configured: usize, nofile: Option<u64>) -> usize {
    let half = nofile
        .map(|n| usize::try_from(n / 2).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    configured.min(half).max(1)
}

/// Whether an accept error is one connection's (gone before it was
/// accepted): the next may be fine. Any other (descriptors or memory run
/// out, anything unexpected) leaves the listener readable, so trying again
/// at once would spin.
fn one_connections(e: &std::io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::ECONNABORTED | Errno::ECONNRESET | Errno::EPROTO | Errno::EINTR)
    )
}

/// Pauses of an accept loop after failures: growing from 10 ms to 1 s
/// while accepting fails for want of resources, reset by the next
/// connection accepted. The first failure of a run is logged, the run's
/// length once it ends.
#[derive(Debug)]
pub(crate) struct Backoff {
    what: &'static str,
    pause: Duration,
    failures: u64,
}

impl Backoff {
    /// For the accept loop of `what` ("the Unix socket", "TCP").
    pub(crate) fn new(what: &'static str) -> Backoff {
        Backoff {
            what,
            pause: Duration::ZERO,
            failures: 0,
        }
    }

    /// The pause after `e`, grown; zero for an error of one connection (it
    /// is gone, the next may be fine).
    pub(crate) fn failed(&mut self, e: &std::io::Error) -> Duration {
        self.failures += 1;
        if self.failures == 1 {
            tracing::warn!(
                "cannot accept a connection on {}: {e}; retrying with growing pauses",
                self.what
            );
        }
        if one_connections(e) {
            return Duration::ZERO;
        }
        self.pause = (self.pause * 2).clamp(FIRST_PAUSE, LONGEST_PAUSE);
        self.pause
    }

    /// A connection was accepted.
    pub(crate) fn accepted(&mut self) {
        if self.failures > 1 {
            tracing::warn!(
                "accepting on {} again after {} failed attempts",
                self.what,
                self.failures
            );
        }
        self.failures = 0;
        self.pause = Duration::ZERO;
    }
}

/// Events counted per address and reported at most once a minute each:
/// the first of a kind from an address is logged at once, the rest as one
/// line per address per minute with their count.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    counts: Mutex<HashMap<(IpAddr, &'static str), Counted>>,
    /// Events from addresses beyond [`TALLIED_ADDRESSES`] this minute (a
    /// peer with many addresses), per kind: counted together.
    others: Mutex<HashMap<&'static str, Counted>>,
}

/// Addresses whose events are logged and counted one by one each minute.
const TALLIED_ADDRESSES: usize = 256;

#[derive(Debug)]
struct Counted {
    since_report: u64,
    last: String,
}

impl Tally {
    /// Counts one `what` ("failed TLS handshakes") from `ip`, `detail`
    /// being this one's reason; logs it when it is the first.
    pub(crate) fn count(&self, ip: IpAddr, what: &'static str, detail: &str) {
        let Ok(mut counts) = self.counts.lock() else {
            return;
        };
        let full = counts.len() >= TALLIED_ADDRESSES;
        match counts.get_mut(&(ip, what)) {
            Some(c) => {
                c.since_report += 1;
                c.last.clear();
                c.last.push_str(detail);
            }
            None if full => {
                drop(counts);
                if let Ok(mut others) = self.others.lock() {
                    let c = others.entry(what).or_insert(Counted {
                        since_report: 0,
                        last: String::new(),
                    });
                    c.since_report += 1;
                    c.last.clear();
                    c.last.push_str(detail);
                }
            }
            None => {
                tracing::info!(
                    "{what} from {ip}: {detail} (more from this address are counted and reported once a minute)"
                );
                counts.insert(
                    (ip, what),
                    Counted {
                        since_report: 0,
                        last: String::new(),
                    },
                );
            }
        }
    }

    /// Logs one line per address and kind counted since the last report,
    /// and forgets the quiet ones (their next is logged at once again).
    pub(crate) fn report(&self) {
        let Ok(mut counts) = self.counts.lock() else {
            return;
        };
        counts.retain(|(ip, what), c| {
            if c.since_report == 0 {
                return false;
            }
            tracing::info!(
                "{} more {what} from {ip} in the last minute (the last: {})",
                c.since_report,
                c.last
            );
            c.since_report = 0;
            true
        });
        drop(counts);
        if let Ok(mut others) = self.others.lock() {
            for (what, c) in others.drain() {
                tracing::info!(
                    "{} more {what} from other addresses in the last minute (over {TALLIED_ADDRESSES} addresses; the last: {})",
                    c.since_report,
                    c.last
                );
            }
        }
    }
}

/// TLS handshakes in progress per address.
#[derive(Debug, Default)]
pub(crate) struct Handshakes {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One handshake of an address in progress; counted down when dropped.
#[derive(Debug)]
pub(crate) struct Handshaking {
    of: Arc<Handshakes>,
    ip: IpAddr,
}

impl Handshakes {
    /// Starts a handshake of `ip`, unless it has `max` in progress.
    pub(crate) fn start(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<Handshaking> {
        let mut counts = self.counts.lock().ok()?;
        let n = counts.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Handshaking {
            of: self.clone(),
            ip,
        })
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        if let Ok(mut counts) = self.of.counts.lock()
            && let Some(n) = counts.get_mut(&self.ip)
        {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// The calls in progress on one remote connection, and since when it has
/// had none: what its idle timeout is measured from.
#[derive(Debug)]
pub(crate) struct Activity {
    open: AtomicUsize,
    idle_since: Mutex<Instant>,
    /// The connection's reader, woken when its last call ends (to start
    /// the idle timer).
    reader: Mutex<Option<Waker>>,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
            reader: Mutex::new(None),
        })
    }

    /// A call starts; it is in progress until the guard is dropped (with
    /// the response's body, or with the call if it never answered).
    pub(crate) fn call(self: &Arc<Self>) -> CallGuard {
        self.open.fetch_add(1, Ordering::SeqCst);
        CallGuard(self.clone())
    }

    /// Since when the connection has had no call, if it has none now.
    fn idle_since(&self) -> Option<Instant> {
        if self.open.load(Ordering::SeqCst) > 0 {
            return None;
        }
        self.idle_since.lock().ok().map(|t| *t)
    }
}

/// See [`Activity::call`].
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Ok(mut since) = self.0.idle_since.lock() {
            *since = Instant::now();
        }
        if self.0.open.fetch_sub(1, Ordering::SeqCst) == 1
            && let Ok(mut reader) = self.0.reader.lock()
            && let Some(waker) = reader.take()
        {
            waker.wake();
        }
    }
}

/// The idle timeout of one connection, checked by its reader: a
/// connection whose reads wait while it has had no call for `timeout`
/// reads as ended, and the server closes it.
#[derive(Debug)]
pub(crate) struct IdleTimer {
    activity: Arc<Activity>,
    timeout: Duration,
    timer: Pin<Box<Sleep>>,
}

impl IdleTimer {
    pub(crate) fn new(activity: Arc<Activity>, timeout: Duration) -> IdleTimer {
        IdleTimer {
            activity,
            timeout,
            timer: Box::pin(tokio::time::sleep(timeout)),
        }
    }

    pub(crate) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Called when a read found nothing: whether the connection has been
    /// idle too long (and otherwise arranges to be asked again in time).
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if let Ok(mut reader) = self.activity.reader.lock() {
            *reader = Some(cx.waker().clone());
        }
        let Some(since) = self.activity.idle_since() else {
            return false;
        };
        let deadline = since + self.timeout;
        if Instant::now() >= deadline {
            return true;
        }
        if self.timer.deadline() != deadline {
            self.timer.as_mut().reset(deadline);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_half_the_descriptors_to_the_rest() {
        assert_eq!(connection_cap(256, Some(1_048_576)), 256);
        assert_eq!(connection_cap(256, Some(256)), 128);
        assert_eq!(connection_cap(256, None), 256);
        assert_eq!(connection_cap(256, Some(0)), 1);
    }

    #[test]
    fn pauses_grow_while_descriptors_are_out_and_reset_after() {
        let mut b = Backoff::new("test");
        let emfile = std::io::Error::from_raw_os_error(nix::errno::Errno::EMFILE as i32);
        let pauses: Vec<Duration> = (0..10).map(|_| b.failed(&emfile)).collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert!(pauses.windows(2).all(|w| w[1] >= w[0]), "{pauses:?}");
        assert_eq!(pauses[9], LONGEST_PAUSE);
        b.accepted();
        assert_eq!(b.failed(&emfile), FIRST_PAUSE);
        let reset = std::io::Error::from_raw_os_error(nix::errno::Errno::ECONNABORTED as i32);
        assert_eq!(b.failed(&reset), Duration::ZERO);
    }

    #[test]
    fn a_peer_with_many_addresses_is_counted_together_past_a_bound() {
        let tally = Tally::default();
        for i in 0..1000u32 {
            let ip = IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8]);
            tally.count(ip, "failed TLS handshakes", "x");
        }
        assert_eq!(tally.counts.lock().unwrap().len(), TALLIED_ADDRESSES);
        let others = tally.others.lock().unwrap()["failed TLS handshakes"].since_report;
        assert_eq!(others, 1000 - TALLIED_ADDRESSES as u64);
        tally.report();
        assert!(tally.others.lock().unwrap().is_empty());
        // The quiet addresses are forgotten at the report.
        assert!(tally.counts.lock().unwrap().is_empty());
    }

    #[test]
    fn handshakes_are_counted_per_address() {
        let h = Arc::new(Handshakes::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let first = h.start(a, 2).unwrap();
        let _second = h.start(a, 2).unwrap();
        assert!(h.start(a, 2).is_none());
        assert!(h.start(b, 2).is_some());
        drop(first);
        assert!(h.start(a, 2).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_while_no_call_is_in_progress() {
        let activity = Activity::new();
        let mut idle = IdleTimer::new(activity.clone(), Duration::from_secs(5));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(!idle.expired(&mut cx));
        let call = activity.call();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!idle.expired(&mut cx), "a call is in progress");
        drop(call);
        assert!(!idle.expired(&mut cx), "idle from the call's end");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(idle.expired(&mut cx));
    }
}
