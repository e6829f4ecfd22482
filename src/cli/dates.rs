//! Times as the CLI prints them: ISO 8601 in UTC, as JavaScript's
//! `Date.prototype.toISOString` writes them (the calendar of
//! [`crate::store::zone::civil`]).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (negative before it, saturating).
pub(super) fn system_time_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Formats milliseconds since the Unix epoch as ISO 8601 in UTC, the way
/// JavaScript's `Date.prototype.toISOString` does
/// (`2026-01-05T09:00:00.000Z`; years outside 0–9999 as `±YYYYYY`).
pub fn format_utc_ms(ms: i64) -> String {
    let dt = crate::store::zone::civil(ms, &jiff::tz::TimeZone::UTC);
    let year = dt.year;
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", year.unsigned_abs())
    } else {
        format!("+{year:06}")
    };
    format!(
        "{year}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        dt.month, dt.day, dt.hour, dt.minute, dt.second, dt.millisecond
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_match_javascript() {
        for (ms, iso) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_767_603_600_000, "2026-01-05T09:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
            (8_640_000_000_000_000, "+275760-09-13T00:00:00.000Z"),
            (-62_198_755_200_000, "-000001-01-01T00:00:00.000Z"),
            (-62_167_219_200_000, "0000-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(format_utc_ms(ms), iso, "{ms}");
        }
        // No panic at the extremes.
        let _ = format_utc_ms(i64::MAX);
        let _ = format_utc_ms(i64::MIN);
    }
}
