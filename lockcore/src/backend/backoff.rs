//! [`Backoff`]: the retry schedule of an acquire that waits without the hand-off queue
//! (Redlock, or `LockOptions::handoff(false)`).

use std::time::Duration;

use crate::options::LockOptions;

/// Exponential backoff with full jitter ("Exponential Backoff And Jitter", AWS Architecture
/// Blog, 2015): sleep `n` is uniform in `1 ms ..= min(cap, base * 2^n)`.
///
/// The 1 ms floor keeps the number of attempts bounded by the wait budget.
#[derive(Debug)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
}

impl Backoff {
    /// The next sleep, before clamping to the wait budget or the holder's TTL.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .base
            .checked_mul(1u32.checked_shl(self.attempt).unwrap_or(u32::MAX))
            .map_or(self.cap, |d| d.min(self.cap));
        self.attempt = self.attempt.saturating_add(1);
        let ceiling_us = u64::try_from(ceiling.as_micros())
            .unwrap_or(u64::MAX)
            .max(1_000);
        Duration::from_micros(fastrand::u64(1_000..=ceiling_us))
    }
}

impl Backoff {
    /// The schedule of `opts`' retry policy, from its first step.
    pub(crate) fn new(opts: &LockOptions) -> Self {
        Backoff {
            base: opts.retry_base_value(),
            cap: opts.retry_cap_value(),
            attempt: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn backoff_has_jitter_and_respects_the_cap() {
        let opts = LockOptions::default()
            .retry_base(Duration::from_millis(10))
            .retry_cap(Duration::from_millis(80));
        let mut b = Backoff::new(&opts);
        let delays: Vec<Duration> = (0..200).map(|_| b.next_delay()).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(80)));
        assert!(delays.iter().all(|d| *d >= Duration::from_millis(1)));
        // jitter: the capped tail is not a constant
        let tail: std::collections::HashSet<_> = delays[10..].iter().collect();
        assert!(
            tail.len() > 50,
            "expected random delays, got {} distinct",
            tail.len()
        );
    }

    #[test]
    fn backoff_survives_huge_attempt_counts() {
        let mut b = Backoff::new(&LockOptions::default());
        for _ in 0..100 {
            assert!(b.next_delay() <= Duration::from_secs(1));
        }
    }

    proptest! {
        /// Every delay is at least 1 ms (the attempts stay bounded by the wait budget) and at
        /// most `min(cap, base * 2^n)`, for any valid base and cap and any number of attempts.
        #[test]
        fn backoff_delays_stay_within_the_exponential_ceiling(
            base_ms in 1..5_000u64,
            extra_ms in 0..5_000u64,
            attempts in 1..80usize,
        ) {
            let base = Duration::from_millis(base_ms);
            let cap = Duration::from_millis(base_ms + extra_ms);
            let o = LockOptions::default().retry_base(base).retry_cap(cap);
            prop_assert!(o.validate().is_ok());
            let mut backoff = Backoff::new(&o);
            for n in 0..attempts {
                let ceiling = base
                    .checked_mul(1u32.checked_shl(u32::try_from(n).unwrap_or(u32::MAX)).unwrap_or(u32::MAX))
                    .map_or(cap, |d| d.min(cap))
                    .max(Duration::from_millis(1));
                let delay = backoff.next_delay();
                prop_assert!(delay >= Duration::from_millis(1), "{:?}", delay);
                prop_assert!(delay <= ceiling, "attempt {}: {:?} > {:?}", n, delay, ceiling);
            }
        }

    }
}
