//! Allocator caches: only the threads that do the daemon's work keep one,
//! and they give it back once the daemon has gone quiet.
//!
//! jemalloc (the daemon's allocator, `main.rs`) keeps a cache of freed
//! blocks per thread, trimmed only as that thread allocates. A thread that
//! goes idle after a busy stretch (a hundred `agent run`s, say) keeps its
//! cache for good, and the pages under it stay resident: ~5 MiB over the
//! daemon's 16 threads, most of them sled's (BENCHMARKS.md, "2026-11-24,
//! later"). So no thread has a cache by default (`tcache:false`, compiled
//! in by `.cargo/config.toml`) except the tokio runtime's threads, where
//! every tool round allocates: they turn theirs on as they start
//! ([`enable_thread_cache`]). Its blocking-pool threads give theirs back
//! when they end, after 10 s without work. When something large ends (a
//! conversation unloads), the workers are asked to hand their caches back
//! ([`release_when_idle`]), and each does so the next time it parks.
//! jemalloc's background thread then returns the emptied pages within its
//! decay time.
//!
//! A thread checks one atomic counter when it goes idle; it flushes only
//! when the counter moved, so a busy daemon pays nothing per tool round.

// The one place the daemon calls C: jemalloc's control interface has no
// safe binding for `thread.tcache.flush` and `thread.tcache.enabled`.
#![expect(unsafe_code)]

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped each time threads are asked to give their caches back.
static ASKED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last request this thread honoured.
    static HONOURED: Cell<u64> = const { Cell::new(0) };
}

/// Asks every runtime worker to give its cache of freed memory back the
/// next time it parks.
pub(crate) fn release_when_idle() {
    ASKED.fetch_add(1, Ordering::Relaxed);
}

/// Called by a thread about to wait for work: gives its cache back if that
/// was asked since it last did.
pub(crate) fn on_idle() {
    let asked = ASKED.load(Ordering::Relaxed);
    let due = HONOURED.with(|honoured| {
        let due = honoured.get() != asked;
        honoured.set(asked);
        due
    });
    if due {
        flush_thread_cache();
    }
}

/// Gives the calling thread a cache of its own (the runtime's threads, as
/// they start; see the module's documentation).
pub(crate) fn enable_thread_cache() {
    let name = c"thread.tcache.enabled";
    let mut enabled = true;
    // SAFETY: `thread.tcache.enabled` is a `bool` control: the new value is
    // read from a valid, aligned `bool` of exactly the length passed; no old
    // value is asked for (null pointers). The name is NUL-terminated.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut enabled).cast(),
            std::mem::size_of::<bool>(),
        )
    };
    if status != 0 {
        tracing::debug!("thread.tcache.enabled: error {status}");
    }
}

/// Returns the calling thread's cached blocks to jemalloc's arenas (a no-op
/// where jemalloc is not the allocator in use, as in unit tests: its own,
/// unused caches are empty).
fn flush_thread_cache() {
    let name = c"thread.tcache.flush";
    // SAFETY: `thread.tcache.flush` reads and writes nothing: jemalloc's
    // manual documents it as a `void` control, called with null old and new
    // pointers and a zero length, which is what this passes. The name is a
    // valid NUL-terminated string that outlives the call.
    let status = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if status != 0 {
        // EFAULT when the thread's cache is disabled: nothing to give back.
        tracing::trace!("thread.tcache.flush: error {status}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_flushes_once_per_request_and_not_otherwise() {
        // Fresh thread: its own HONOURED starts at 0.
        std::thread::spawn(|| {
            let start = ASKED.load(Ordering::Relaxed);
            HONOURED.with(|h| h.set(start));
            on_idle();
            assert_eq!(
                HONOURED.with(Cell::get),
                start,
                "nothing asked, nothing done"
            );
            release_when_idle();
            on_idle();
            assert!(HONOURED.with(Cell::get) > start, "the request was honoured");
        })
        .join()
        .unwrap();
    }
}
