//! The runtime's clock, injected so that tests run on tokio's paused time.
//!
//! The core never reads the clock: the runtime reads it here and passes the
//! reading in (`ConvContext::now_ms`, message timestamps, event times).
//! Durations (tool run times, timers) use `tokio::time::Instant`, which
//! paused time also controls.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where wall-clock readings come from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Clock {
    System,
    /// A clock that starts at `origin_ms` and advances with tokio's time:
    /// under `tokio::time::pause` it moves only when the test advances it.
    #[cfg(test)]
    Virtual {
        /// The reading at `start`.
        origin_ms: i64,
        /// When the clock was made.
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// A virtual clock reading `origin_ms` now.
    #[cfg(test)]
    pub(crate) fn virtual_at(origin_ms: i64) -> Clock {
        Clock::Virtual {
            origin_ms,
            start: tokio::time::Instant::now(),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        match self {
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            #[cfg(test)]
            Clock::Virtual { origin_ms, start } => {
                let elapsed = i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX);
                origin_ms.saturating_add(elapsed)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_virtual_clock_moves_only_with_tokio_time() {
        let clock = Clock::virtual_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        tokio::time::advance(std::time::Duration::from_millis(250)).await;
        assert_eq!(clock.now_ms(), 1_250);
    }

    #[test]
    fn the_system_clock_is_after_2020() {
        assert!(Clock::System.now_ms() > 1_577_836_800_000);
    }
}
