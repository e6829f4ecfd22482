//! The local time zone of the process, as `TZ` names it (else the
//! system's), for the views' dates and the renderings' clock times.
//!
//! `jiff` reads `TZ` as a tzdb name, a TZif file or a POSIX string with
//! its rules. A POSIX string with a DST name but no rule (`CET-1CEST`,
//! `EST5EDT`), which POSIX leaves to the implementation, is read as glibc
//! reads it (`date(1)`, `ls -l`): with the default rule of its
//! `posixrules`, the US one (`M3.2.0,M11.1.0`). A `TZ` that cannot be read
//! at all gives UTC, with one warning in the log.

use std::sync::OnceLock;

use jiff::tz::TimeZone;

/// Milliseconds in 400 Gregorian years (146,097 days): the calendar
/// repeats with this period, which extends jiff's range (years
/// -9999..=9999) to every `i64` of milliseconds.
const CYCLE_MS: i64 = 146_097 * 86_400_000;

/// A time's calendar date and clock time in a zone; `year` is not bound
/// to four digits (JavaScript's dates reach ±275,760).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i8,
    pub day: i8,
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    pub millisecond: i16,
}

/// `ms` (milliseconds since the Unix epoch) in `zone`. A time outside
/// jiff's range is shifted by whole 400-year cycles into the first cycle
/// after the epoch, read there (with that date's offset in `zone`), and
/// its year moved back by the cycles.
pub fn civil(ms: i64, zone: &TimeZone) -> Civil {
    let (ts, cycles) = match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => (ts, 0),
        Err(_) => (
            jiff::Timestamp::from_millisecond(ms.rem_euclid(CYCLE_MS))
                .expect("the first 400 years after 1970 are within jiff's range"),
            ms.div_euclid(CYCLE_MS),
        ),
    };
    let z = zone.to_datetime(ts);
    Civil {
        year: i64::from(z.year()) + cycles * 400,
        month: z.month(),
        day: z.day(),
        hour: z.hour(),
        minute: z.minute(),
        second: z.second(),
        millisecond: z.millisecond(),
    }
}

/// glibc's rule for a POSIX `TZ` with a DST name but no rule.
const GLIBC_DEFAULT_RULE: &str = "M3.2.0,M11.1.0";

/// The process's time zone (read once).
pub fn local_zone() -> &'static TimeZone {
    static ZONE: OnceLock<TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| match TimeZone::try_system() {
        Ok(zone) => zone,
        Err(e) => match std::env::var("TZ") {
            Ok(v) => without_rule(&v).unwrap_or_else(|| {
                log::warn!(
                    "TZ={v:?} is not a time zone sessionfs can read ({e}); times are shown in UTC"
                );
                TimeZone::UTC
            }),
            Err(_) => TimeZone::UTC,
        },
    })
}

/// A POSIX `TZ` with a DST name but no rule, read with glibc's default
/// rule; `None` for anything else.
fn without_rule(tz: &str) -> Option<TimeZone> {
    if tz.contains(',') {
        return None;
    }
    TimeZone::posix(&format!("{tz},{GLIBC_DEFAULT_RULE}")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;

    fn offset_at(tz: &TimeZone, rfc3339: &str) -> i32 {
        let t: Timestamp = rfc3339.parse().unwrap();
        tz.to_offset(t).seconds()
    }

    #[test]
    fn a_posix_tz_without_a_rule_is_read_as_glibc_reads_it() {
        let cet = without_rule("CET-1CEST").unwrap();
        assert_eq!(offset_at(&cet, "1970-01-01T00:00:00Z"), 3600);
        // glibc's default rule: DST from the second Sunday of March.
        assert_eq!(offset_at(&cet, "2026-03-20T12:00:00Z"), 7200);
        assert_eq!(offset_at(&cet, "2026-11-20T12:00:00Z"), 3600);
        let est = without_rule("EST5EDT").unwrap();
        assert_eq!(offset_at(&est, "2026-01-05T12:00:00Z"), -5 * 3600);
        // Strings with a rule are jiff's to read; names are no POSIX
        // strings.
        assert!(without_rule("CET-1CEST,M3.5.0,M10.5.0/3").is_none());
        assert!(without_rule("garbage zone").is_none());
    }

    /// The same as date(1), which reads TZ through glibc.
    #[test]
    fn a_posix_tz_agrees_with_date() {
        for tz in ["CET-1CEST", "EST5EDT", "CET-1"] {
            for t in [
                "2026-01-05T12:00:00Z",
                "2026-03-20T12:00:00Z",
                "2026-07-01T12:00:00Z",
            ] {
                let out = std::process::Command::new("date")
                    .env("TZ", tz)
                    .args(["-d", t, "+%z"])
                    .output()
                    .unwrap();
                let z = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let zone = without_rule(tz)
                    .or_else(|| TimeZone::posix(tz).ok())
                    .unwrap();
                let secs = offset_at(&zone, t);
                let ours = format!(
                    "{}{:02}{:02}",
                    if secs < 0 { '-' } else { '+' },
                    secs.abs() / 3600,
                    secs.abs() % 3600 / 60
                );
                assert_eq!(ours, z, "TZ={tz} at {t}");
            }
        }
    }
}
