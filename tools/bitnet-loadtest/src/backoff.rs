//! How long a client waits before its next request after a failed one: what the server's
//! `Retry-After` says after a 429 or 503, else an exponential wait with jitter of its own.
//! Without it a client that keeps failing fast (a busy server, a refused connection) would
//! send thousands of requests a second and measure nothing but its own loop.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// After a 429/503 without `Retry-After`: 0.5 s, doubling each time, up to 8 s.
const BUSY_FIRST: Duration = Duration::from_millis(500);
const BUSY_CAP: Duration = Duration::from_secs(8);
/// After any other error (a 500, a refused connection, a timeout): shorter, since the
/// error is the figure being measured, but still not a tight loop.
const ERROR_FIRST: Duration = Duration::from_millis(100);
const ERROR_CAP: Duration = Duration::from_secs(2);
/// `Retry-After: 0` (or a date already past) repeated would be a tight loop.
pub const RETRY_AFTER_FLOOR: Duration = Duration::from_millis(100);
/// Longer than any run; the run's end cuts the wait anyway.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(86_400);

/// One client's run of failures since its last success.
#[derive(Debug)]
pub struct Backoff {
    failures: u32,
    rng: u64,
}

impl Backoff {
    /// `salt` keeps clients started together from waking together.
    pub fn new(salt: u64) -> Backoff {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Backoff {
            failures: 0,
            // xorshift must not start at 0.
            rng: (nanos ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1,
        }
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// The wait after a 429/503: the server's `Retry-After` if it gave one.
    pub fn busy(&mut self, retry_after: Option<Duration>) -> Duration {
        match retry_after {
            Some(d) => {
                self.failures = self.failures.saturating_add(1);
                d.max(RETRY_AFTER_FLOOR)
            }
            None => self.next(BUSY_FIRST, BUSY_CAP),
        }
    }

    /// The wait after any other failure.
    pub fn error(&mut self) -> Duration {
        self.next(ERROR_FIRST, ERROR_CAP)
    }

    /// `first * 2^failures` up to `cap`, of which up to half is taken off at random.
    fn next(&mut self, first: Duration, cap: Duration) -> Duration {
        let full = first.saturating_mul(1 << self.failures.min(16)).min(cap);
        self.failures = self.failures.saturating_add(1);
        full.mul_f64(1.0 - 0.5 * self.unit())
    }

    /// A number in [0, 1) (xorshift64*: jitter only, no need for more).
    fn unit(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `Retry-After` in either form: delay seconds (`120`) or an HTTP date
/// (`Sun, 06 Nov 1994 08:49:37 GMT`, the IMF-fixdate form; the obsolete forms are taken
/// as absent). `None` when it cannot be read.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(RETRY_AFTER_CAP));
    }
    let at = UNIX_EPOCH + Duration::from_secs(http_date_secs(value)?);
    // A date already past means now.
    Some(
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(RETRY_AFTER_CAP),
    )
}

/// Seconds since the Unix epoch of an IMF-fixdate (RFC 9110 section 5.6.7).
fn http_date_secs(s: &str) -> Option<u64> {
    let mut parts = s.split_ascii_whitespace();
    let (_weekday, day, month, year, time, zone) = (
        parts.next()?.strip_suffix(',')?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if zone != "GMT" || parts.next().is_some() || day.len() != 2 || year.len() != 4 {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let day: u64 = day.parse().ok()?;
    let year: u64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, sec) = (hms.next()??, hms.next()??, hms.next()??);
    if hms.next().is_some()
        || !(1..=31).contains(&day)
        || year < 1970
        || h > 23
        || m > 59
        || sec > 60
    {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + sec)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (years from 1970),
/// counting years from March so the leap day falls at the end of one.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_and_as_a_date() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(parse_retry_after(" 3 ", now), Some(Duration::from_secs(3)));
        // 784111777 is 1994-11-06 08:49:37 UTC (RFC 9110's example).
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Tue, 29 Feb 2028 12:00:00 GMT", UNIX_EPOCH),
            Some(RETRY_AFTER_CAP)
        );
        assert_eq!(
            http_date_secs("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(1_835_438_400)
        );
        for bad in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn waits_double_with_jitter_up_to_a_cap_and_reset() {
        let mut b = Backoff::new(7);
        let mut last_full = Duration::ZERO;
        for i in 0..10 {
            let full = ERROR_FIRST.saturating_mul(1 << i).min(ERROR_CAP);
            let w = b.error();
            assert!(
                w > full / 2 - Duration::from_millis(1) && w <= full,
                "{i}: {w:?}"
            );
            assert!(full >= last_full);
            last_full = full;
        }
        b.reset();
        assert!(b.busy(None) <= BUSY_FIRST);
        assert_eq!(b.busy(Some(Duration::ZERO)), RETRY_AFTER_FLOOR);
        assert_eq!(b.busy(Some(Duration::from_secs(3))), Duration::from_secs(3));
        for _ in 0..20 {
            assert!(b.busy(None) <= BUSY_CAP);
        }
    }
}
