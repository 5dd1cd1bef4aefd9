//! Failed authentications counted per address, and the lockout of an
//! address that keeps failing.

use super::{FAILURE_WINDOW, MAX_FAILURES};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;
use tonic::Status;

/// Failed attempts of one address.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    since: Instant,
}

/// Counts failed authentications per address (the IP, not the port).
#[derive(Debug, Default)]
pub(crate) struct RateLimit {
    failures: Mutex<HashMap<IpAddr, Failures>>,
}

impl RateLimit {
    /// Refuses an address that failed [`MAX_FAILURES`] times within the
    /// window, saying when it may try again.
    pub(crate) fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Status> {
        let Ok(mut failures) = self.failures.lock() else {
            return Err(Status::internal("the rate limiter's lock is poisoned"));
        };
        if let Some(f) = failures.get(&ip) {
            let age = now.saturating_duration_since(f.since);
            if age >= FAILURE_WINDOW {
                failures.remove(&ip);
            } else if f.count >= MAX_FAILURES {
                let wait = (FAILURE_WINDOW - age).as_secs().max(1);
                return Err(Status::resource_exhausted(format!(
                    "too many failed authentication attempts from {ip} ({} within {} s); try again in {wait} s",
                    f.count,
                    FAILURE_WINDOW.as_secs()
                )));
            }
        }
        Ok(())
    }

    /// Counts a failed attempt of `ip`.
    pub(crate) fn failed(&self, ip: IpAddr, now: Instant) {
        if let Ok(mut failures) = self.failures.lock() {
            let f = failures.entry(ip).or_insert(Failures {
                count: 0,
                since: now,
            });
            if now.saturating_duration_since(f.since) >= FAILURE_WINDOW {
                *f = Failures {
                    count: 0,
                    since: now,
                };
            }
            f.count += 1;
            // Forget addresses whose window has passed, so the map stays
            // as small as the set of recent offenders.
            if failures.len() > 1024 {
                failures.retain(|_, f| now.saturating_duration_since(f.since) < FAILURE_WINDOW);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_address_that_keeps_failing_is_refused_until_its_window_passes() {
        let limit = RateLimit::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..MAX_FAILURES {
            assert!(limit.check(ip, t0).is_ok());
            limit.failed(ip, t0);
        }
        let refused = limit.check(ip, t0 + Duration::from_secs(1)).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("try again in 59 s"),
            "{}",
            refused.message()
        );
        assert!(
            limit.check(other, t0).is_ok(),
            "other addresses are not affected"
        );
        assert!(limit.check(ip, t0 + FAILURE_WINDOW).is_ok());
    }
}
