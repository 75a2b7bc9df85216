//! Time rules shared by every layer: whole milliseconds for Redis, a lease's validity, and
//! how a duration is shown in a message.

use std::fmt;
use std::time::Duration;

use crate::error::LockError;

/// Whole milliseconds in `d`, saturating at `u64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether `d` is a whole number of milliseconds, as every duration sent to Redis (`PX`,
/// `PEXPIRE`, a script's ms argument) must be: a remainder would be cut off silently.
pub(crate) fn is_whole_ms(d: Duration) -> bool {
    d.subsec_nanos().is_multiple_of(1_000_000)
}

/// [`LockError::InvalidOptions`] when `value` of option `name` is not a whole number of
/// milliseconds: Redis takes whole milliseconds, and a remainder is refused rather than cut off
/// or rounded silently.
pub(crate) fn check_whole_ms(name: &str, value: Duration) -> Result<(), LockError> {
    if is_whole_ms(value) {
        return Ok(());
    }
    let below = Duration::from_millis(duration_ms(value));
    Err(LockError::InvalidOptions {
        reason: format!(
            "{name} is {value:?}; expected whole milliseconds (Redis takes milliseconds): {} or {}",
            Shown(below),
            Shown(below + Duration::from_millis(1))
        ),
    })
}

/// A duration as every message shows it: whole microseconds below 1 ms (`250µs`), whole
/// milliseconds below 1 s (`102ms`), else seconds to the millisecond (`1.5s`, `30s`); each
/// rounded to the nearest unit. Never the nanoseconds of `{:?}` (`101.619588ms`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown(pub(crate) Duration);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        let round = |unit: u128| (nanos + unit / 2) / unit;
        if nanos < 999_500 {
            return write!(f, "{}µs", round(1_000));
        }
        let ms = round(1_000_000);
        if ms < 1_000 {
            return write!(f, "{ms}ms");
        }
        let (secs, frac) = (ms / 1_000, ms % 1_000);
        if frac == 0 {
            return write!(f, "{secs}s");
        }
        let frac = format!("{frac:03}");
        write!(f, "{secs}.{}s", frac.trim_end_matches('0'))
    }
}

/// Validity as in the Redlock spec: `ttl - (ttl * 0.01 + 2 ms)` for clock drift, saturating
/// at zero.
pub(crate) fn validity(ttl: Duration) -> Duration {
    let drift = ttl / 100 + Duration::from_millis(2);
    ttl.saturating_sub(drift)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn any_duration() -> impl Strategy<Value = Duration> {
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(secs, nanos)| Duration::new(secs, nanos))
    }

    #[test]
    fn durations_are_shown_rounded() {
        let shown = |d: Duration| Shown(d).to_string();
        assert_eq!(shown(Duration::from_nanos(101_619_588)), "102ms");
        assert_eq!(shown(Duration::from_nanos(250_400)), "250µs");
        assert_eq!(shown(Duration::ZERO), "0µs");
        assert_eq!(shown(Duration::from_nanos(999_600)), "1ms");
        assert_eq!(shown(Duration::from_micros(1_500)), "2ms");
        assert_eq!(shown(Duration::from_millis(1_500)), "1.5s");
        assert_eq!(shown(Duration::from_millis(999_999)), "999.999s");
        assert_eq!(shown(Duration::from_secs(30)), "30s");
        assert_eq!(shown(Duration::from_nanos(29_999_999_999)), "30s");
        assert_eq!(
            shown(Duration::MAX),
            format!("{}s", u128::from(Duration::MAX.as_secs()) + 1)
        );
    }

    #[test]
    fn whole_milliseconds() {
        assert!(is_whole_ms(Duration::from_millis(1)));
        assert!(is_whole_ms(Duration::from_secs(30)));
        assert!(!is_whole_ms(Duration::from_micros(1_500)));
        assert!(!is_whole_ms(Duration::from_nanos(30_000_000_001)));
    }

    #[test]
    fn a_remainder_is_refused_naming_the_whole_values_around_it() {
        for (value, shown, around) in [
            (Duration::from_micros(1_500), "1.5ms", "1ms or 2ms"),
            (
                Duration::from_nanos(30_000_000_001),
                "30.000000001s",
                "30s or 30.001s",
            ),
        ] {
            let Err(LockError::InvalidOptions { reason }) = check_whole_ms("ttl", value) else {
                panic!("{value:?} should be refused");
            };
            assert!(
                reason.starts_with("ttl is ") && reason.contains(shown),
                "{reason}"
            );
            assert!(reason.contains(around), "{reason}");
        }
        assert!(check_whole_ms("ttl", Duration::from_millis(2)).is_ok());
    }

    #[test]
    fn validity_saturates_and_never_exceeds_ttl() {
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
        assert_eq!(validity(Duration::ZERO), Duration::ZERO);
        assert_eq!(
            validity(Duration::from_secs(10)),
            Duration::from_millis(9_898)
        );
        assert!(validity(Duration::MAX) < Duration::MAX);
    }

    proptest! {
        #[test]
        fn validity_never_exceeds_ttl_and_keeps_the_drift_allowance(ttl in any_duration()) {
            let v = validity(ttl);
            prop_assert!(v <= ttl);
            let allowance = ttl / 100 + Duration::from_millis(2);
            prop_assert_eq!(v, ttl.saturating_sub(allowance));
        }

        #[test]
        fn duration_ms_saturates(d in any_duration()) {
            let ms = duration_ms(d);
            prop_assert!(u128::from(ms) <= d.as_millis());
            prop_assert!(ms == u64::MAX || u128::from(ms) == d.as_millis());
        }
    }
}
