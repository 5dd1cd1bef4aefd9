//! Every task the daemon starts, in one [`TaskTracker`], so that a shutdown
//! waits for them to end instead of dropping them with the runtime.
//!
//! Start tasks with [`spawn`], [`spawn_blocking`] or [`spawn_until_stopped`]
//! here, never with `tokio::spawn` (the shape check refuses it outside this
//! file). Each task has a name, so a shutdown that gives up on a task says
//! which one.
//!
//! The tracker is process-wide, as the tokio runtime it spawns on is: a
//! process runs one daemon, and every layer (shells, MCP, tools, the model
//! clients, the store) starts tasks, most of them far from the runtime's
//! `Shared`. Only [`drain`], called once by `cli::run` as the daemon ends,
//! closes it; unit tests that never drain are unaffected, and test their
//! own [`Tasks`].
//!
//! Shutdown, in order (`cli::run`, `grpc::serve`): stop accepting, end
//! every client stream, tell each live conversation to stop (it records
//! its interrupted tools), stop the server, kill the background shells and
//! the MCP servers, then [`drain`]: the loops meant to live as long as the
//! daemon ([`spawn_until_stopped`]) are told to end, and the tracker is
//! waited for, with [`DRAIN_GRACE`] only as a last resort that names the
//! tasks still running.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Running tasks by name, and how many of each.
type Counts = BTreeMap<&'static str, usize>;

/// How long [`drain`] waits for the last tasks. Everything before it has
/// already stopped what they wait on, so they end in milliseconds; this is
/// only for a task that is stuck.
pub(crate) const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The daemon's tasks.
static DAEMON: LazyLock<Tasks> = LazyLock::new(Tasks::default);

/// Starts `task` as one of the daemon's tasks, called `name` in the log.
pub(crate) fn spawn<F>(name: &'static str, task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    DAEMON.spawn(name, task)
}

/// Runs `f` on the blocking pool as one of the daemon's tasks.
pub(crate) fn spawn_blocking<F, T>(name: &'static str, f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    DAEMON.spawn_blocking(name, f)
}

/// Starts `task`, meant to run as long as the daemon (a loop that forwards
/// or waits), and ends it when the daemon drains.
pub(crate) fn spawn_until_stopped<F>(name: &'static str, task: F) -> JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    DAEMON.spawn_until_stopped(name, task)
}

/// Ends the daemon's tasks: see [`Tasks::drain`].
pub(crate) async fn drain(grace: Duration) -> Vec<(&'static str, usize)> {
    DAEMON.drain(grace).await
}

/// A set of named, tracked tasks.
#[derive(Default)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
    /// How many tasks of each name are running.
    live: Arc<Mutex<Counts>>,
    /// Cancelled when the set drains: ends [`Tasks::spawn_until_stopped`]'s.
    stopping: CancellationToken,
}

impl Tasks {
    pub(crate) fn spawn<F>(&self, name: &'static str, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let live = self.count(name);
        self.tracker.spawn(async move {
            let _live = live;
            task.await
        })
    }

    pub(crate) fn spawn_blocking<F, T>(&self, name: &'static str, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let live = self.count(name);
        self.tracker.spawn_blocking(move || {
            let _live = live;
            f()
        })
    }

    pub(crate) fn spawn_until_stopped<F>(&self, name: &'static str, task: F) -> JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stopping = self.stopping.clone();
        self.spawn(name, async move {
            tokio::select! {
                () = task => {}
                () = stopping.cancelled() => {}
            }
        })
    }

    /// Tells the tasks meant to live as long as the daemon to end, and
    /// waits up to `grace` for every task to end. Returns those still
    /// running then, by name and count, and logs them: a task that does
    /// not end is a bug to fix, and the runtime drops it as the process
    /// exits.
    pub(crate) async fn drain(&self, grace: Duration) -> Vec<(&'static str, usize)> {
        self.stopping.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            tracing::info!("every task ended");
            return Vec::new();
        }
        let left: Vec<(&'static str, usize)> = lock(&self.live)
            .iter()
            .map(|(name, n)| (*name, *n))
            .collect();
        let named: Vec<String> = left
            .iter()
            .map(|(name, n)| format!("{name} ×{n}"))
            .collect();
        tracing::warn!(
            "{} task(s) did not end within {grace:?} of the shutdown: {}",
            self.tracker.len(),
            named.join(", ")
        );
        left
    }

    /// Counts a task called `name` until the returned guard is dropped.
    fn count(&self, name: &'static str) -> Live {
        *lock(&self.live).entry(name).or_default() += 1;
        Live {
            name,
            live: Arc::clone(&self.live),
        }
    }
}

/// One running task of a name; dropped with the task's future.
struct Live {
    name: &'static str,
    live: Arc<Mutex<Counts>>,
}

impl Drop for Live {
    fn drop(&mut self) {
        let mut live = lock(&self.live);
        if let Some(n) = live.get_mut(self.name) {
            *n -= 1;
            if *n == 0 {
                live.remove(self.name);
            }
        }
    }
}

/// The counts, even after a panic elsewhere (they stay correct: each
/// change is one statement).
fn lock(live: &Mutex<Counts>) -> std::sync::MutexGuard<'_, Counts> {
    live.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_every_task_and_ends_the_loops() {
        let tasks = Tasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiting = tasks.spawn("waiting", async move {
            let _ = rx.await;
        });
        tasks.spawn_until_stopped("forever", std::future::pending());
        let slow = tasks.spawn("slow", tokio::time::sleep(Duration::from_millis(500)));
        let blocking = tasks.spawn_blocking("blocking", || 7);
        assert_eq!(blocking.await.unwrap(), 7);
        drop(tx);
        let started = tokio::time::Instant::now();
        assert_eq!(tasks.drain(Duration::from_secs(60)).await, []);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "it waited for the slow task only"
        );
        assert!(waiting.is_finished() && slow.is_finished());
        assert!(lock(&tasks.live).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_does_not_end_is_named_when_the_grace_runs_out() {
        let tasks = Tasks::default();
        tasks.spawn("stuck", std::future::pending::<()>());
        tasks.spawn("stuck", std::future::pending::<()>());
        tasks.spawn("quick", async {});
        let started = tokio::time::Instant::now();
        let left = tasks.drain(Duration::from_secs(2)).await;
        assert_eq!(left, [("stuck", 2)]);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_task_is_no_longer_counted() {
        let tasks = Tasks::default();
        let handle = tasks.spawn("aborted", std::future::pending::<()>());
        handle.abort();
        let _ = handle.await;
        assert_eq!(tasks.drain(Duration::from_secs(1)).await, []);
    }
}
