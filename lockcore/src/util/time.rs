//! Time rules shared by every layer: whole milliseconds for Redis, and a lease's validity.

use std::time::Duration;

/// Whole milliseconds in `d`, saturating at `u64::MAX`.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
