//! Wall-clock time as integer nanoseconds since the Unix epoch, and the parsers
//! for the durations and instants users type on the command line and in URLs.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since 1970-01-01T00:00:00Z. Signed so differences are plain
/// subtraction; `i64` covers the years 1678..2262.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    pub const MAX: Timestamp = Timestamp(i64::MAX);
    /// The earliest time kansoku stores: 1970-01-01T00:00:00Z.
    pub const STORABLE_MIN: Timestamp = Timestamp(0);
    /// The first time past what kansoku stores: 2200-01-01T00:00:00Z. Past
    /// it lie ~62 years of headroom before `i64` ends, so bucket, tier and
    /// block arithmetic on stored times (a period's end, a step added to a
    /// start) cannot overflow.
    pub const STORABLE_END: Timestamp = Timestamp(7_258_118_400 * 1_000_000_000);

    /// Whether a sample at this time may be stored (see [`Timestamp::STORABLE_END`]).
    pub fn is_storable(self) -> bool {
        (Timestamp::STORABLE_MIN..Timestamp::STORABLE_END).contains(&self)
    }

    pub fn now() -> Timestamp {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Timestamp(since.as_nanos() as i64)
    }

    pub fn from_secs_f64(s: f64) -> Timestamp {
        Timestamp((s * 1e9) as i64)
    }

    pub fn as_nanos(self) -> i64 {
        self.0
    }

    pub fn saturating_sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(duration_nanos(d)))
    }
}

fn duration_nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 >= 0 {
            let t = UNIX_EPOCH + Duration::from_nanos(self.0 as u64);
            write!(f, "{}", humantime_rfc3339(t))
        } else {
            write!(f, "{}ns", self.0)
        }
    }
}

fn humantime_rfc3339(t: SystemTime) -> String {
    // RFC 3339 with nanoseconds, UTC; civil-from-days after Howard Hinnant.
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        d.subsec_nanos()
    )
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DurationError {
    #[error("invalid duration {input:?}: expected a number with a unit, like 100ms, 10s, 5m, 1h")]
    Duration { input: String },
    #[error("invalid time {input:?}: expected RFC 3339 (2026-11-22T10:00:00Z), Unix seconds, or a duration ago (-5m)")]
    Time { input: String },
    #[error("give either `since` or `from`, not both")]
    Conflict,
}

/// Parses `100ms`, `1.5s`, `5m`, `1h30m`, `2d`. Units: ns, us, µs, ms, s, m, h, d.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError::Duration { input: input.to_owned() };
    let s = input.trim();
    if s.is_empty() {
        return Err(err());
    }
    let mut total_ns: f64 = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "d" => 86_400e9,
            _ => return Err(err()),
        };
        rest = &rest[unit_len..];
        total_ns += value * scale;
    }
    if !total_ns.is_finite() || total_ns > u64::MAX as f64 {
        return Err(err());
    }
    Ok(Duration::from_nanos(total_ns.round() as u64))
}

/// Parses an instant: RFC 3339 (`2026-11-22T10:00:00Z`, fractional seconds and
/// offsets allowed), Unix seconds (`1795000000.5`), `now`, or a duration before
/// `now` (`-5m`, `5m ago`).
pub fn parse_time(input: &str, now: Timestamp) -> Result<Timestamp, DurationError> {
    let err = || DurationError::Time { input: input.to_owned() };
    let s = input.trim();
    if s == "now" {
        return Ok(now);
    }
    if let Some(ago) = s.strip_prefix('-').or_else(|| s.strip_suffix(" ago")) {
        let d = parse_duration(ago).map_err(|_| err())?;
        return Ok(now.saturating_sub(d));
    }
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs.abs() < 9.2e9 {
            return Ok(Timestamp::from_secs_f64(secs));
        }
        return Err(err());
    }
    parse_rfc3339(s).ok_or_else(err)
}

/// Range used when a query names none: the last five minutes.
pub const DEFAULT_SINCE: Duration = Duration::from_secs(300);

/// Resolves `--from/--to` or `--since` (as CLI flags or URL parameters) into
/// an inclusive range. `since` and `from` exclude each other; `to` defaults to
/// now and `from` to [`DEFAULT_SINCE`] before `to`.
pub fn resolve_range(
    from: Option<&str>,
    to: Option<&str>,
    since: Option<&str>,
    now: Timestamp,
) -> Result<(Timestamp, Timestamp), DurationError> {
    let to_t = to.map(|t| parse_time(t, now)).transpose()?.unwrap_or(now);
    let from_t = match (from, since) {
        (Some(_), Some(_)) => return Err(DurationError::Conflict),
        (Some(f), None) => parse_time(f, now)?,
        (None, Some(s)) => to_t.saturating_sub(parse_duration(s)?),
        (None, None) => to_t.saturating_sub(DEFAULT_SINCE),
    };
    Ok((from_t, to_t))
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01, UTC
/// (Howard Hinnant's civil-from-days).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

impl Timestamp {
    /// RFC 3339 in UTC with nanoseconds: `2026-11-24T12:00:00.000000001Z`.
    pub fn to_rfc3339(self) -> String {
        let (secs, ns) = (self.0.div_euclid(1_000_000_000), self.0.rem_euclid(1_000_000_000));
        let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
        let t = secs.rem_euclid(86_400);
        format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ns:09}Z", t / 3600, t / 60 % 60, t % 60)
    }
}

fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=days_in_month(year, month)).contains(&day)
        || hour > 23
        || min > 59
        || sec > 60
    {
        return None;
    }
    let mut i = 19;
    let mut nanos: i64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() {
            return None;
        }
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
        nanos = digits.parse().ok()?;
    }
    let offset_secs = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) && &tz[3..4] == ":" => {
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60)
        }
        _ => return None,
    };
    // days-from-civil after Howard Hinnant.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_secs;
    Some(Timestamp(secs.checked_mul(1_000_000_000)?.checked_add(nanos)?))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod rfc3339_out {
    use super::*;

    #[test]
    fn times_print_as_rfc3339_and_read_back() {
        for t in [0i64, 1_700_000_000_123_456_789, -1, 951_782_400_000_000_000] {
            let s = Timestamp(t).to_rfc3339();
            assert_eq!(parse_time(&s, Timestamp(0)).unwrap(), Timestamp(t), "{s}");
        }
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00.000000000Z");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_duration("100ms"), ms(100));
        assert_eq!(parse_duration("10ms"), ms(10));
        assert_eq!(parse_duration("1.5s"), ms(1500));
        assert_eq!(parse_duration("1h30m"), ms(5_400_000));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        for bad in ["", "10", "ms", "10 parsecs", "1..2s", "-1s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times() {
        let now = Timestamp(1_800_000_000_000_000_000);
        assert_eq!(parse_time("now", now), Ok(now));
        assert_eq!(parse_time("-5m", now), Ok(Timestamp(now.0 - 300_000_000_000)));
        assert_eq!(parse_time("5m ago", now), Ok(Timestamp(now.0 - 300_000_000_000)));
        assert_eq!(parse_time("1700000000.5", now), Ok(Timestamp(1_700_000_000_500_000_000)));
        assert_eq!(parse_time("2023-11-14T22:13:20Z", now), Ok(Timestamp(1_700_000_000_000_000_000)));
        assert_eq!(parse_time("2023-11-15T00:13:20.25+02:00", now), Ok(Timestamp(1_700_000_000_250_000_000)));
        assert!(parse_time("yesterday", now).is_err());
        assert!(parse_time("2023-13-01T00:00:00Z", now).is_err());
        // Days past the month's end are refused, not rolled into the next month.
        for bad in ["2026-02-31T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z", "1900-02-29T00:00:00Z"] {
            assert!(parse_time(bad, now).is_err(), "{bad}");
        }
        assert!(parse_time("2024-02-29T00:00:00Z", now).is_ok());
        assert!(parse_time("2000-02-29T00:00:00Z", now).is_ok());
    }

    #[test]
    fn storable_range() {
        assert_eq!(parse_time("2200-01-01T00:00:00Z", Timestamp(0)), Ok(Timestamp::STORABLE_END));
        assert!(Timestamp(0).is_storable());
        assert!(Timestamp(Timestamp::STORABLE_END.0 - 1).is_storable());
        assert!(!Timestamp::STORABLE_END.is_storable());
        assert!(!Timestamp(-1).is_storable());
        assert!(!Timestamp::MAX.is_storable());
    }

    #[test]
    fn ranges() {
        let now = Timestamp(10_000_000_000_000);
        assert_eq!(resolve_range(None, None, None, now), Ok((Timestamp(now.0 - 300_000_000_000), now)));
        assert_eq!(resolve_range(None, None, Some("1s"), now), Ok((Timestamp(now.0 - 1_000_000_000), now)));
        assert_eq!(
            resolve_range(Some("-2s"), Some("-1s"), None, now),
            Ok((Timestamp(now.0 - 2_000_000_000), Timestamp(now.0 - 1_000_000_000)))
        );
        assert_eq!(resolve_range(Some("-2s"), None, Some("1s"), now), Err(DurationError::Conflict));
    }

    #[test]
    fn display_round_trips_through_parse() {
        let t = Timestamp(1_700_000_000_123_456_789);
        assert_eq!(t.to_string(), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(parse_time(&t.to_string(), Timestamp(0)), Ok(t));
    }
}
