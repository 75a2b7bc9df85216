//! [`RoundTrip`]: a manager's estimate of its round trip to Redis, which sizes a queued waiter's
//! claim window and entry lease (see `handoff::windows`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The largest recent round trip, decaying by an eighth at each new sample, and never above
/// the response timeout (a call that takes longer fails). Lock-free; read and written by every
/// attempt.
#[derive(Debug)]
pub(crate) struct RoundTrip {
    micros: AtomicU64,
    cap: Duration,
}

impl RoundTrip {
    /// No sample yet (an estimate of zero), capped at `cap`.
    pub(crate) fn new(cap: Duration) -> Self {
        RoundTrip {
            micros: AtomicU64::new(0),
            cap,
        }
    }

    /// A call to Redis took `sample`, from sending it to its reply.
    pub(crate) fn record(&self, sample: Duration) {
        let sample = micros(sample.min(self.cap));
        // `fetch_update` retries only while other samples land; the closure always returns
        // `Some`, so the result carries no error worth handling.
        let _ = self
            .micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(sample.max(old - old / 8))
            });
    }

    /// The current estimate.
    pub(crate) fn estimate(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::Relaxed))
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_largest_recent_sample_and_decays() {
        let rtt = RoundTrip::new(Duration::from_secs(1));
        assert_eq!(rtt.estimate(), Duration::ZERO);
        rtt.record(Duration::from_millis(600));
        assert_eq!(rtt.estimate(), Duration::from_millis(600));
        rtt.record(Duration::from_millis(1));
        assert_eq!(rtt.estimate(), Duration::from_micros(525_000));
        for _ in 0..100 {
            rtt.record(Duration::from_millis(1));
        }
        assert_eq!(rtt.estimate(), Duration::from_millis(1));
        rtt.record(Duration::from_secs(30));
        assert_eq!(rtt.estimate(), Duration::from_secs(1), "capped");
    }
}
