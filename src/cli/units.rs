//! Byte counts and durations as the command line and `-o` options give
//! them: `64M`, `16MiB`, `16777216` (bytes, 1024-based units); `0.5`
//! (seconds), `500ms`, `2s` (jiff's friendly format).

use std::time::Duration;

/// Parses a duration: a plain non-negative number of seconds (fractions
/// allowed: `0.5`), or a duration with units in jiff's friendly format
/// (`500ms`, `1.5s`, `2m`).
///
/// Errors: a message naming the text when it is neither, is negative, or
/// does not fit a [`Duration`].
pub(super) fn parse_seconds(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("{s:?} is not a non-negative number of seconds"));
        }
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"));
    }
    let d: jiff::SignedDuration = t
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (seconds such as 0.5, or 500ms, 2s)"))?;
    Duration::try_from(d).map_err(|_| format!("{s:?} is not a non-negative duration"))
}

/// Parses a byte count: plain digits, or a number followed by K, M, G, T
/// (or KiB, MiB, …; `B` optional), 1024-based, case-insensitive
/// (parse-size).
///
/// Errors: a message naming the text when it is no byte count or exceeds
/// `u64`.
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(s.trim())
        .map_err(|e| format!("{s:?} is not a byte count (e.g. 16777216, 64M or 16MiB): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts() {
        assert_eq!(parse_bytes("16777216"), Ok(16 << 20));
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("16m"), Ok(16 << 20));
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("2 G"), Ok(2 << 30));
        assert_eq!(parse_bytes("4KiB"), Ok(4 << 10));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("-5").is_err());
        assert!(parse_bytes("5 XiB").is_err());
        assert!(parse_bytes("99999999999999999999").is_err());
        assert!(parse_bytes("17179869184G").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
        assert_eq!(parse_seconds("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_seconds("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("-1s").is_err());
        assert!(parse_seconds("nan").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("1e400").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
