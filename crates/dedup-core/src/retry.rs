//! The retry policy of memdedup's HTTP clients: full-jitter exponential backoff and the
//! server's `Retry-After`, as pure functions (the caller supplies the random number and
//! the clock, and does the waiting).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often and how patiently a client retries a failed request.
///
/// Attempt `n` (1-based) that failed with a retryable error is followed by a wait of
/// [`RetryPolicy::delay`], then attempt `n + 1`, up to [`RetryPolicy::max_attempts`]
/// attempts in all. The policy itself never sleeps and draws no random numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryPolicy {
    /// Retries after the first attempt of a request before giving up. Default 5.
    pub max_retries: u32,
    /// Backoff cap before the first retry; it doubles with every further retry. Default
    /// 500 ms.
    pub initial_backoff: Duration,
    /// Longest wait between two attempts, also the cap on a server's `Retry-After`.
    /// Default 20 s.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// Default [`RetryPolicy::max_retries`].
    pub const DEFAULT_MAX_RETRIES: u32 = 5;
    /// Default [`RetryPolicy::initial_backoff`].
    pub const DEFAULT_INITIAL_BACKOFF: Duration = Duration::from_millis(500);
    /// Default [`RetryPolicy::max_backoff`].
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(20);

    /// The most attempts a request gets: the first one plus [`RetryPolicy::max_retries`].
    pub fn max_attempts(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }

    /// Full-jitter exponential backoff after failed attempt number `attempt` (1-based):
    /// `unit_random` scaled into `[0, min(max_backoff, initial_backoff * 2^(attempt - 1))]`.
    ///
    /// `unit_random` is a uniform random number in `[0, 1]` (e.g. `rand::random::<f64>()`);
    /// values outside that range are clamped and NaN counts as 0, so the result never
    /// exceeds the cap.
    pub fn backoff(&self, attempt: u32, unit_random: f64) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        let cap = self.initial_backoff.saturating_mul(factor).min(self.max_backoff);
        let fraction = if unit_random.is_nan() { 0.0 } else { unit_random.clamp(0.0, 1.0) };
        cap.mul_f64(fraction)
    }

    /// The wait after failed attempt number `attempt` (1-based): the server's
    /// `retry_after`, capped at [`RetryPolicy::max_backoff`], when it sent one; else
    /// [`RetryPolicy::backoff`].
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, unit_random: f64) -> Duration {
        match retry_after {
            Some(requested) => requested.min(self.max_backoff),
            None => self.backoff(attempt, unit_random),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: RetryPolicy::DEFAULT_MAX_RETRIES,
            initial_backoff: RetryPolicy::DEFAULT_INITIAL_BACKOFF,
            max_backoff: RetryPolicy::DEFAULT_MAX_BACKOFF,
        }
    }
}

/// The wait a `Retry-After` header value asks for, seen at time `now`.
///
/// Two forms are understood (RFC 9110 §10.2.3): delay-seconds, where fractions such as
/// `"1.5"` are accepted as some servers send them, and an IMF-fixdate such as
/// `"Wed, 21 Oct 2015 07:28:00 GMT"`, which gives the time until then (zero for a date in
/// the past). Surrounding whitespace is ignored. Anything else (negative or non-finite
/// numbers, the obsolete RFC 850 and asctime date forms, garbage) gives `None`, and the
/// caller falls back to its own backoff.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        let seconds: f64 = value.parse().ok()?;
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = parse_imf_fixdate(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Parses `Sun, 06 Nov 1994 08:49:37 GMT` (the only date form HTTP senders may use).
fn parse_imf_fixdate(value: &str) -> Option<SystemTime> {
    const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let (weekday, rest) = value.split_once(", ")?;
    if !DAYS.contains(&weekday) {
        return None;
    }
    let mut parts = rest.split(' ');
    let (day, month, year, time, zone) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || zone != "GMT" || day.len() != 2 || year.len() != 4 {
        return None;
    }
    let day = digits(day)?;
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let year = digits(year)?;
    let mut clock = time.split(':');
    let (hour, minute, second) = (clock.next()?, clock.next()?, clock.next()?);
    if clock.next().is_some() || [hour, minute, second].iter().any(|p| p.len() != 2) {
        return None;
    }
    let (hour, minute, second) = (digits(hour)?, digits(minute)?, digits(second)?);
    // Second 60 is a leap second, which SystemTime cannot name; treat it as 59.
    if !(1..=days_in_month(year, month)).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second.min(59);
    // Dates before 1970 are negative: no `Retry-After` asks for them, so give up on them.
    let seconds = u64::try_from(seconds).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// The value of a string of ASCII digits.
fn digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Days in `month` (1-12) of `year` in the proleptic Gregorian calendar.
fn days_in_month(year: i64, month: usize) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: usize, day: i64) -> i64 {
    // `month` is 1..=12 here, so the cast is lossless.
    let month = month as i64;
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn policy(initial_ms: u64, max_ms: u64) -> RetryPolicy {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(initial_ms),
            max_backoff: Duration::from_millis(max_ms),
        }
    }

    #[test]
    fn defaults_match_the_documentation() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_retries, 5);
        assert_eq!(policy.initial_backoff, Duration::from_millis(500));
        assert_eq!(policy.max_backoff, Duration::from_secs(20));
        assert_eq!(policy.max_attempts(), 6);
        assert_eq!(RetryPolicy { max_retries: u32::MAX, ..policy }.max_attempts(), u32::MAX);
    }

    #[test]
    fn backoff_caps_double_per_attempt_up_to_max_backoff() {
        let policy = policy(100, 1_000);
        let caps: Vec<u128> = (1..=6).map(|attempt| policy.backoff(attempt, 1.0).as_millis()).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(policy.backoff(0, 1.0), Duration::from_millis(100), "attempt 0 is treated as 1");
        assert_eq!(policy.backoff(u32::MAX, 1.0), Duration::from_secs(1), "huge attempts saturate");
    }

    #[test]
    fn backoff_scales_by_the_random_fraction_and_clamps_it() {
        let policy = policy(100, 1_000);
        assert_eq!(policy.backoff(2, 0.0), Duration::ZERO);
        assert_eq!(policy.backoff(2, 0.5), Duration::from_millis(100));
        assert_eq!(policy.backoff(2, 7.0), Duration::from_millis(200));
        assert_eq!(policy.backoff(2, -1.0), Duration::ZERO);
        assert_eq!(policy.backoff(2, f64::NAN), Duration::ZERO);
    }

    #[test]
    fn delay_prefers_retry_after_capped_at_max_backoff() {
        let policy = policy(100, 1_000);
        assert_eq!(policy.delay(1, Some(Duration::from_millis(300)), 1.0), Duration::from_millis(300));
        assert_eq!(policy.delay(1, Some(Duration::from_secs(120)), 1.0), Duration::from_secs(1));
        assert_eq!(policy.delay(1, Some(Duration::ZERO), 1.0), Duration::ZERO);
        assert_eq!(policy.delay(3, None, 1.0), Duration::from_millis(400));
    }

    #[test]
    fn retry_after_delay_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1.5", now), Some(Duration::from_millis(1_500)));
        for bad in ["", "-1", "soon", "inf", "NaN", "1e999", "+5", "1 2"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn retry_after_http_date() {
        // 2015-10-21T07:28:00Z is 1445412480 s after the epoch.
        let date = UNIX_EPOCH + Duration::from_secs(1_445_412_480);
        let value = "Wed, 21 Oct 2015 07:28:00 GMT";
        assert_eq!(parse_retry_after(value, date - Duration::from_secs(90)), Some(Duration::from_secs(90)));
        assert_eq!(parse_retry_after(value, date), Some(Duration::ZERO));
        assert_eq!(parse_retry_after(value, date + Duration::from_secs(5)), Some(Duration::ZERO), "past dates");
        let epoch = parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", UNIX_EPOCH);
        assert_eq!(epoch, Some(Duration::from_secs(10)));
        let leap_day = parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", UNIX_EPOCH);
        assert_eq!(leap_day, Some(Duration::from_secs(1_709_164_800)));
        for bad in [
            "Wed, 21 Oct 2015 07:28:00 UTC",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Wed, 21 Oct 2015 07:28 GMT",
            "Wed, 32 Oct 2015 07:28:00 GMT",
            "Thu, 29 Feb 2023 00:00:00 GMT",
            "Wed, 21 Foo 2015 07:28:00 GMT",
            "Wed, 21 Oct 2015 24:00:00 GMT",
            "Xyz, 21 Oct 2015 07:28:00 GMT",
            "Wed, 1 Oct 2015 07:28:00 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, UNIX_EPOCH), None, "{bad:?}");
        }
    }

    #[test]
    fn days_from_civil_matches_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }

    proptest! {
        #[test]
        fn backoff_never_exceeds_its_cap(
            initial_ms in 0u64..10_000,
            max_ms in 0u64..100_000,
            attempt in 0u32..100,
            unit in proptest::num::f64::ANY,
        ) {
            let policy = policy(initial_ms, max_ms);
            let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
            let cap = policy.initial_backoff.saturating_mul(factor).min(policy.max_backoff);
            prop_assert!(policy.backoff(attempt, unit) <= cap);
            prop_assert!(policy.delay(attempt, None, unit) <= policy.max_backoff);
        }

        #[test]
        fn whole_seconds_round_trip(seconds in 0u64..10_000_000) {
            prop_assert_eq!(
                parse_retry_after(&seconds.to_string(), SystemTime::now()),
                Some(Duration::from_secs(seconds))
            );
        }
    }
}
