//! Times for people: wall-clock instants (ms since the Unix epoch, as lock values and records
//! store them) as local RFC 3339 with an age, `2026-12-01T19:02:11Z, 2.3 s ago`, and durations
//! as `850 ms`, `2.3 s`, `4 min 05 s`. `--json` keeps the raw milliseconds.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// This machine's wall clock, in ms since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `at_ms` in the local time zone (`TZ`, else `/etc/localtime`), then how long before `now_ms`
/// it was: `2026-12-01T20:02:11+01:00, 2.3 s ago`; a time ahead of this machine's clock (a
/// holder whose clock is ahead) reads `.., in 1.2 s`.
pub(crate) fn when(at_ms: u64, now_ms: u64) -> String {
    let at = local_rfc3339(at_ms, &TimeZone::system());
    match now_ms.checked_sub(at_ms) {
        Some(age) => format!("{at}, {} ago", duration(age)),
        None => format!("{at}, in {}", duration(at_ms - now_ms)),
    }
}

/// [`when`] for an optional time; `-` when there is none.
pub(crate) fn when_or_dash(at_ms: Option<u64>, now_ms: u64) -> String {
    at_ms.map_or_else(|| "-".to_owned(), |at| when(at, now_ms))
}

/// `ms` since the Unix epoch as RFC 3339 in `tz`, to the second: `Z` for UTC, else the offset
/// (`+05:30`). A time no calendar can show (past the year 9999) is shown as `<ms> (unix ms)`.
pub(crate) fn local_rfc3339(ms: u64, tz: &TimeZone) -> String {
    let zoned = i64::try_from(ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map(|ts| ts.to_zoned(tz.clone()));
    let Some(zoned) = zoned else {
        return format!("{ms} (unix ms)");
    };
    let format = if zoned.offset().seconds() == 0 {
        "%Y-%m-%dT%H:%M:%SZ"
    } else {
        "%Y-%m-%dT%H:%M:%S%:z"
    };
    jiff::fmt::strtime::format(format, &zoned).unwrap_or_else(|_| format!("{ms} (unix ms)"))
}

/// `850 ms`, `12.3 s`, `4 min 05 s`, `3 h 07 min`, `2 d 04 h`.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        // Tenths, truncated: 59 999 ms is `59.9 s`, never `60.0 s`.
        1_000..60_000 => format!("{}.{} s", ms / 1000, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{} min {:02} s", ms / 60_000, (ms / 1000) % 60),
        3_600_000..86_400_000 => format!("{} h {:02} min", ms / 3_600_000, (ms / 60_000) % 60),
        _ => format!("{} d {:02} h", ms / 86_400_000, (ms / 3_600_000) % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2025-12-01T09:00:00.250Z.
    const AT: u64 = 1_764_579_600_250;

    #[test]
    fn utc_reads_z_and_other_zones_their_offset() {
        assert_eq!(local_rfc3339(AT, &TimeZone::UTC), "2025-12-01T09:00:00Z");
        let east = TimeZone::fixed(jiff::tz::offset(5));
        assert_eq!(local_rfc3339(AT, &east), "2025-12-01T14:00:00+05:00");
        let west = TimeZone::fixed(jiff::tz::offset(-8));
        assert_eq!(local_rfc3339(AT, &west), "2025-12-01T01:00:00-08:00");
        assert_eq!(
            local_rfc3339(u64::MAX, &TimeZone::UTC),
            format!("{} (unix ms)", u64::MAX)
        );
    }

    #[test]
    fn ages_and_future_times() {
        let utc = |at, now| {
            let text = when(at, now);
            // The zone is the machine's: compare what follows the time.
            text.split_once(", ")
                .map(|(_, age)| age.to_owned())
                .unwrap_or(text)
        };
        assert_eq!(utc(AT, AT + 2_345), "2.3 s ago");
        assert_eq!(utc(AT, AT), "0 ms ago");
        assert_eq!(utc(AT + 1_200, AT), "in 1.2 s");
        assert_eq!(when_or_dash(None, AT), "-");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_345), "12.3 s");
        assert_eq!(duration(59_999), "59.9 s");
        assert_eq!(duration(245_000), "4 min 05 s");
        assert_eq!(duration(11_220_000), "3 h 07 min");
        assert_eq!(duration(187_200_000), "2 d 04 h");
        assert!(duration(u64::MAX).ends_with(" h"));
    }
}
