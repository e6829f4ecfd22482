//! Local clock times of the rendered transcript: event times (epoch
//! milliseconds) in the time zone of the process (`TZ` respected, else the
//! system's), through `jiff`.

use jiff::tz::TimeZone;
use jiff::Timestamp;

fn zone() -> &'static TimeZone {
    crate::store::zone::local_zone()
}

/// Names the time zone renderings are made in: its IANA name, else the
/// `TZ` value, else its offset now. A rendering cached under another name
/// is rebuilt.
pub fn zone_key() -> String {
    let tz = zone();
    if let Some(name) = tz.iana_name() {
        return name.to_string();
    }
    if let Some(v) = std::env::var_os("TZ").filter(|v| !v.is_empty()) {
        return format!("TZ={}", v.to_string_lossy());
    }
    format!("offset {}", tz.to_offset(Timestamp::now()))
}

fn at(ms: i64) -> Option<jiff::ZonedDateTime> {
    Timestamp::from_millisecond(ms)
        .ok()
        .map(|t| t.to_zoned_datetime(zone().clone()))
}

/// `2026-01-05 13:00:00 +01:00 (Europe/Paris)`; the raw number when out of
/// range.
pub fn date_time_zone(ms: i64) -> String {
    match at(ms) {
        Some(z) => {
            let base = z.strftime("%Y-%m-%d %H:%M:%S %:z").to_string();
            match zone().iana_name() {
                Some(name) => format!("{base} ({name})"),
                None => base,
            }
        }
        None => format!("{ms} ms since 1970"),
    }
}

/// `2026-01-05 13:00:00`; the raw number when out of range.
pub fn date_time(ms: i64) -> String {
    match at(ms) {
        Some(z) => z.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        None => format!("{ms} ms since 1970"),
    }
}

/// `13:00:00`; the raw number when out of range.
pub fn clock(ms: i64) -> String {
    match at(ms) {
        Some(z) => z.strftime("%H:%M:%S").to_string(),
        None => format!("{ms} ms since 1970"),
    }
}
