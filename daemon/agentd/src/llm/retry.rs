//! Reading the retry hints a provider puts in response headers.
//!
//! The provider layer never retries by itself (one call, one attempt); it
//! only reports what the server said so that the state machine can decide.
//! The hints are `retry-after` (delta-seconds or an HTTP-date),
//! `retry-after-ms` (OpenAI's millisecond variant, preferred when present),
//! `x-should-retry` (an explicit yes/no that overrides the status code) and
//! the request id that support needs to find a failed call.

use http::HeaderMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the server asked us to wait, if it said so. `now` is the clock
/// reading an HTTP-date is measured against; a date in the past means "now".
pub(super) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) =
        header_str(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(d);
    }
    let value = header_str(headers, "retry-after")?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    // Not allowed by RFC 9110, but seen in the wild: fractional seconds.
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The `x-should-retry` override: `Some(true)`/`Some(false)` when the server
/// said so, `None` when it did not (or said something else).
pub(super) fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match header_str(headers, "x-should-retry")?.trim() {
        v if v.eq_ignore_ascii_case("true") => Some(true),
        v if v.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

/// The request id: Anthropic's `request-id`, or the `x-request-id` that
/// OpenAI and most compatible servers send.
pub(super) fn request_id(headers: &HeaderMap) -> Option<String> {
    ["request-id", "x-request-id"]
        .iter()
        .find_map(|name| header_str(headers, name))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only
/// HTTP-date form servers may send today. The two obsolete forms are not
/// accepted; a `retry-after` in them is ignored like any unreadable hint.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let mut parts = s.split_ascii_whitespace();
    let weekday = parts.next()?;
    let day: u32 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let year: i64 = parts.next()?.parse().ok()?;
    let time = parts.next()?;
    let zone = parts.next()?;
    if parts.next().is_some() || zone != "GMT" || !weekday.ends_with(',') {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = u32::try_from(MONTHS.iter().position(|m| *m == month)?).ok()? + 1;
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some() || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let secs = days
        .checked_mul(86_400)?
        .checked_add(h * 3600 + m * 60 + sec)?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date. Counting from March
/// puts the leap day at the end of the year, so the day-of-year is a linear
/// formula in the month; a 400-year era has exactly 146 097 days.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn civil_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1994, 11, 6), 9_075);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
    }

    #[test]
    fn retry_after_forms() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        type Pairs = &'static [(&'static str, &'static str)];
        let cases: &[(Pairs, Option<Duration>)] = &[
            (&[], None),
            (&[("retry-after", "30")], Some(Duration::from_secs(30))),
            (&[("retry-after", " 0 ")], Some(Duration::ZERO)),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")],
                Some(Duration::from_secs(30)),
            ),
            (
                &[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")],
                Some(Duration::ZERO),
            ),
            (&[("retry-after", "Sunday, 06-Nov-94 08:49:37 GMT")], None),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "-5")], None),
            (
                &[("retry-after", "30"), ("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            (
                &[("retry-after", "30"), ("retry-after-ms", "nonsense")],
                Some(Duration::from_secs(30)),
            ),
        ];
        for (pairs, want) in cases {
            assert_eq!(retry_after(&headers(pairs), now), *want, "{pairs:?}");
        }
    }

    #[test]
    fn should_retry_and_request_id() {
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "true")])),
            Some(true)
        );
        assert_eq!(
            should_retry(&headers(&[("x-should-retry", "False")])),
            Some(false)
        );
        assert_eq!(should_retry(&headers(&[("x-should-retry", "maybe")])), None);
        assert_eq!(should_retry(&headers(&[])), None);
        assert_eq!(
            request_id(&headers(&[("request-id", "req_1"), ("x-request-id", "x")])).as_deref(),
            Some("req_1")
        );
        assert_eq!(
            request_id(&headers(&[("x-request-id", "abc")])).as_deref(),
            Some("abc")
        );
        assert_eq!(request_id(&headers(&[])), None);
    }
}
