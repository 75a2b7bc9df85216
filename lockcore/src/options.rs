//! [`LockOptions`]: lease length, wait budget and the retry policy.

use std::time::Duration;

use crate::error::LockError;
use crate::util::time::{Shown, check_whole_ms};

/// How long a lease lasts, how long `acquire` may wait for it, and how it retries.
///
/// Build with [`LockOptions::new`] (or start from [`LockOptions::default`]) and the consuming
/// setters. Values are checked when they are used, before any network call: an out-of-range
/// value makes the call return [`LockError::InvalidOptions`].
///
/// | option | default | range |
/// |---|---|---|
/// | [`ttl`](Self::ttl) | 30 s | 1 ms ..= [`MAX_TTL`](Self::MAX_TTL), whole milliseconds (a remainder such as 1.5 ms is refused, not rounded) |
/// | [`wait`](Self::wait) | 5 s | 0 ..= [`MAX_WAIT`](Self::MAX_WAIT); zero means one attempt |
/// | [`retry_base`](Self::retry_base) | 50 ms | 1 ms ..= `retry_cap` |
/// | [`retry_cap`](Self::retry_cap) | 1 s | `retry_base` ..= `MAX_WAIT` |
/// | [`watchdog`](Self::watchdog) | off | renew the lease every ttl/3 while the guard lives |
/// | [`max_hold`](Self::max_hold) | none | 1 ns ..= [`MAX_HOLD`](Self::MAX_HOLD); stop renewing after this long, the guard is then lost |
/// | [`handoff`](Self::handoff) | on | queue fairly and be woken by the release (single node) instead of polling |
/// | [`hold_at_least`](Self::hold_at_least) | none | 1 ms ..= `ttl`, whole milliseconds; a release keeps the key until this long after the acquire, by the server's clock |
///
/// ```
/// use std::time::Duration;
/// use lockcore::LockOptions;
///
/// let opts = LockOptions::new(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .retry_base(Duration::from_millis(20))
///     .retry_cap(Duration::from_millis(500));
/// assert_eq!(opts.ttl(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    ttl: Duration,
    wait: Duration,
    retry_base: Duration,
    retry_cap: Duration,
    watchdog: bool,
    /// `watchdog(..)` was called: `#[distributed_lock]` then keeps this choice instead of its
    /// own default (on).
    watchdog_chosen: bool,
    max_hold: Option<Duration>,
    handoff: bool,
    /// A release keeps the key until this long after the acquire (ShedLock's lockAtLeastFor).
    hold_at_least: Option<Duration>,
    /// The `#[distributed_lock]` key template, for holder metadata and metric labels.
    key_template: Option<&'static str>,
}

impl Default for LockOptions {
    /// ttl 30 s, wait 5 s, retry base 50 ms, retry cap 1 s, watchdog off.
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(30),
            wait: Duration::from_secs(5),
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_secs(1),
            watchdog: false,
            watchdog_chosen: false,
            max_hold: None,
            handoff: true,
            hold_at_least: None,
            key_template: None,
        }
    }
}

impl LockOptions {
    /// The largest accepted TTL: 7 days.
    pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
    /// The largest accepted [`max_hold`](Self::max_hold): 30 days.
    pub const MAX_HOLD: Duration = Duration::from_secs(30 * 24 * 3600);
    /// The largest accepted wait budget (and retry cap): 1 hour.
    pub const MAX_WAIT: Duration = Duration::from_secs(3600);

    /// Options with this lease TTL and the other values of [`LockOptions::default`].
    ///
    /// The TTL is sent to Redis as `PX` milliseconds; sub-millisecond parts are rounded down.
    pub fn new(ttl: Duration) -> Self {
        LockOptions {
            ttl,
            ..LockOptions::default()
        }
    }

    /// Sets the total wait budget of [`LockManager::acquire`](crate::manager::LockManager::acquire),
    /// measured from the call. `Duration::ZERO` means exactly one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the first backoff step. Retry `n` (from 0) sleeps a uniformly random time in
    /// `1 ms ..= min(retry_cap, retry_base * 2^n)` ("full jitter", with a 1 ms floor so that a
    /// retry never spins), never past the wait budget
    /// and never past the holder's remaining TTL as reported by the failed attempt.
    pub fn retry_base(mut self, base: Duration) -> Self {
        self.retry_base = base;
        self
    }

    /// Sets the largest single backoff sleep.
    pub fn retry_cap(mut self, cap: Duration) -> Self {
        self.retry_cap = cap;
        self
    }

    /// Turns the watchdog on or off: while on, the guard's lease is renewed in the background
    /// until it is released or dropped. Off by default for the explicit API, on for
    /// `#[distributed_lock]`.
    ///
    /// Calling it is an explicit choice: in a manager's
    /// [`default_options`](crate::builder::LockManagerBuilder::default_options) it is what
    /// `#[distributed_lock]` uses when the attribute has no `watchdog = ..` argument. The
    /// attribute's rule is: its own `watchdog` argument, else the manager's explicit choice,
    /// else on.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self.watchdog_chosen = true;
        self
    }

    /// The watchdog setting if [`watchdog`](Self::watchdog) was called, `None` if it was left
    /// at its default.
    pub(crate) fn watchdog_choice(&self) -> Option<bool> {
        self.watchdog_chosen.then_some(self.watchdog)
    }

    /// Replaces the lease TTL (the attribute's `ttl_ms`).
    pub(crate) fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Waits in a fair queue and gets the lock handed over on release, woken by a pub/sub push
    /// (on, the default), or polls with plain jittered backoff (off). Single node only: Redlock
    /// always polls. See "Contention: queue and hand-off" in the guide (`docs/src/handoff.md`).
    pub fn handoff(mut self, on: bool) -> Self {
        self.handoff = on;
        self
    }

    /// The largest single backoff sleep (also the longest a queued waiter sleeps between
    /// re-checks, together with the 250 ms refresh interval).
    pub fn retry_cap_value(&self) -> Duration {
        self.retry_cap
    }

    /// Whether waiting uses the hand-off queue.
    pub fn handoff_enabled(&self) -> bool {
        self.handoff
    }

    /// Caps the total time the watchdog keeps renewing, counted from the acquire: after
    /// `max_hold` it stops, and the guard is reported lost. Default: no cap.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Keeps the key for at least `at_least` after the acquire (ShedLock's `lockAtLeastFor`):
    /// a release, explicit or on drop, then leaves the key holding this lease's token until
    /// `at_least` after the acquire instead of deleting it, so that an instance whose schedule
    /// fires late (clock skew, a slow start) finds the job's lock still held and skips it. With
    /// [`wait(Duration::ZERO)`](Self::wait) and `try_acquire` (or the attribute's
    /// `on_contended = "skip"`) this is a job lock.
    ///
    /// Measured by Redis, not by any client's wall clock: the acquire stamps the server's time
    /// into the lock value's `acquired_at` (a hand-over stamps the time of the grant), and the
    /// release script computes `remaining = at_least − (server now − acquired_at)` and
    /// `PEXPIRE`s the key with it, in one script. The TTL stays the upper bound (ShedLock's
    /// `lockAtMostFor`): the release never lengthens the key's current TTL. Under Redlock each
    /// node measures with its own clock. Waiters queued behind a kept key get it once it
    /// expires, at their next re-check (at most 250 ms later): the minimum wins over the
    /// hand-off.
    ///
    /// Whole milliseconds. A release whose lease was already lost keeps nothing (the key is not
    /// its own). An acquire whose attempt failed is cleaned up by a plain delete.
    ///
    /// # Errors
    /// The call returns [`LockError::InvalidOptions`] when `at_least` is below 1 ms or exceeds
    /// the ttl.
    ///
    /// ```no_run
    /// # async fn demo(locks: lockcore::LockManager) -> Result<(), lockcore::LockError> {
    /// use std::time::Duration;
    /// let job = lockcore::LockOptions::new(Duration::from_secs(60))
    ///     .wait(Duration::ZERO)
    ///     .hold_at_least(Duration::from_secs(10));
    /// if let Some(guard) = locks.try_acquire("job:nightly-report", &job).await? {
    ///     // ... run the job (here: once per 10 s across the fleet at most) ...
    ///     guard.release().await?; // the key stays until 10 s after the acquire
    /// }
    /// # Ok(()) }
    /// ```
    pub fn hold_at_least(mut self, at_least: Duration) -> Self {
        self.hold_at_least = Some(at_least);
        self
    }

    /// The minimum a release keeps the key for, if any (see
    /// [`hold_at_least`](Self::hold_at_least)).
    pub fn hold_at_least_value(&self) -> Option<Duration> {
        self.hold_at_least
    }

    /// `Err(LockError::InvalidOptions)` naming `key` when a minimum hold is asked of a share
    /// of it (`what`: "a semaphore", "a read lock"): a permit or a reader's share keeps none.
    pub(crate) fn refuse_hold_for_share(&self, key: &str, what: &str) -> Result<(), LockError> {
        match self.hold_at_least {
            Some(at_least) => Err(LockError::InvalidOptions {
                reason: format!(
                    "`{}`: hold_at_least ({}) is for a plain (job) lock; {what}'s share keeps no minimum",
                    crate::util::escape::Escaped(key),
                    Shown(at_least)
                ),
            }),
            None => Ok(()),
        }
    }

    /// The watchdog's renewal cap, if any.
    pub fn max_hold_value(&self) -> Option<Duration> {
        self.max_hold
    }

    /// The lease TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The wait budget.
    pub fn wait_budget(&self) -> Duration {
        self.wait
    }

    /// Whether the watchdog renews the lease.
    pub fn watchdog_enabled(&self) -> bool {
        self.watchdog
    }

    /// Checks every value against the ranges in the type's docs.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] naming the option, its value and the accepted range.
    pub fn validate(&self) -> Result<(), LockError> {
        let invalid = |reason: String| Err(LockError::InvalidOptions { reason });
        if self.ttl < Duration::from_millis(1) {
            return invalid(format!(
                "ttl is {}; expected at least 1ms (Redis `PX` takes whole milliseconds)",
                Shown(self.ttl)
            ));
        }
        if self.ttl > Self::MAX_TTL {
            return invalid(format!(
                "ttl is {}; expected at most {}",
                Shown(self.ttl),
                Shown(Self::MAX_TTL)
            ));
        }
        check_whole_ms("ttl", self.ttl)?;
        if self.wait > Self::MAX_WAIT {
            return invalid(format!(
                "wait is {}; expected at most {}",
                Shown(self.wait),
                Shown(Self::MAX_WAIT)
            ));
        }
        if let Some(max_hold) = self.max_hold
            && (max_hold.is_zero() || max_hold > Self::MAX_HOLD)
        {
            return invalid(format!(
                "max_hold is {}; expected more than zero and at most {}",
                Shown(max_hold),
                Shown(Self::MAX_HOLD)
            ));
        }
        if let Some(at_least) = self.hold_at_least {
            if at_least < Duration::from_millis(1) || at_least > self.ttl {
                return invalid(format!(
                    "hold_at_least is {}; expected at least 1ms and at most the ttl ({}): the ttl stays the upper bound",
                    Shown(at_least),
                    Shown(self.ttl)
                ));
            }
            check_whole_ms("hold_at_least", at_least)?;
        }
        if self.retry_base < Duration::from_millis(1) {
            return invalid(format!(
                "retry_base is {}; expected at least 1ms",
                Shown(self.retry_base)
            ));
        }
        if self.retry_cap < self.retry_base || self.retry_cap > Self::MAX_WAIT {
            return invalid(format!(
                "retry_cap is {}; expected between retry_base ({}) and {}",
                Shown(self.retry_cap),
                Shown(self.retry_base),
                Shown(Self::MAX_WAIT)
            ));
        }
        Ok(())
    }

    /// The backoff schedule for one `acquire` call.
    /// Records the key template this lock's key was rendered from (set by the attribute's
    /// expansion through `__private`).
    pub(crate) fn with_key_template(mut self, template: &'static str) -> Self {
        self.key_template = Some(template);
        self
    }

    /// The key template, when the lock comes from `#[distributed_lock]`.
    pub(crate) fn key_template_value(&self) -> Option<&'static str> {
        self.key_template
    }

    /// The first backoff step.
    pub(crate) fn retry_base_value(&self) -> Duration {
        self.retry_base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_values_match_the_design() {
        let o = LockOptions::default();
        assert_eq!(o.ttl(), Duration::from_secs(30));
        assert_eq!(o.wait_budget(), Duration::from_secs(5));
        assert_eq!(o.retry_base, Duration::from_millis(50));
        assert_eq!(o.retry_cap, Duration::from_secs(1));
        assert!(!o.watchdog_enabled());
        assert!(o.handoff_enabled());
    }

    #[test]
    fn watchdog_choice_is_tracked() {
        assert_eq!(LockOptions::default().watchdog_choice(), None);
        assert_eq!(
            LockOptions::default().watchdog(false).watchdog_choice(),
            Some(false)
        );
        assert_eq!(
            LockOptions::default().watchdog(true).watchdog_choice(),
            Some(true)
        );
    }

    #[test]
    fn zero_ttl_is_invalid_and_names_the_option() {
        let err = LockOptions::new(Duration::ZERO).validate().unwrap_err();
        assert!(matches!(&err, LockError::InvalidOptions { reason } if reason.contains("ttl")));
    }

    #[test]
    fn out_of_range_values_are_invalid() {
        let bad = [
            LockOptions::new(LockOptions::MAX_TTL + Duration::from_millis(1)),
            LockOptions::default().wait(LockOptions::MAX_WAIT + Duration::from_secs(1)),
            LockOptions::default().retry_base(Duration::ZERO),
            LockOptions::default()
                .retry_base(Duration::from_millis(100))
                .retry_cap(Duration::from_millis(10)),
            LockOptions::default().max_hold(Duration::ZERO),
            LockOptions::default().max_hold(Duration::MAX),
            LockOptions::new(Duration::from_secs(1)).hold_at_least(Duration::from_millis(1001)),
            LockOptions::default().hold_at_least(Duration::ZERO),
        ];
        for o in bad {
            assert!(o.validate().is_err(), "{o:?} should be rejected");
        }
        assert!(
            LockOptions::new(Duration::from_millis(1))
                .validate()
                .is_ok()
        );
        assert!(
            LockOptions::new(Duration::from_secs(1))
                .hold_at_least(Duration::from_secs(1))
                .validate()
                .is_ok()
        );
    }

    /// Redis takes whole milliseconds: a remainder of ttl or hold_at_least is refused, naming
    /// the option (1.5 ms would have been a 1 ms lease).
    #[test]
    fn sub_millisecond_remainders_are_refused() {
        let hold =
            LockOptions::new(Duration::from_secs(1)).hold_at_least(Duration::from_micros(2_500));
        for (name, o) in [
            ("ttl", LockOptions::new(Duration::from_micros(1_500))),
            ("hold_at_least", hold),
        ] {
            let Err(LockError::InvalidOptions { reason }) = o.validate() else {
                panic!("{o:?} should be refused");
            };
            assert!(
                reason.starts_with(name) && reason.contains("whole milliseconds"),
                "{reason}"
            );
        }
    }

    /// Messages show durations rounded, never to the nanosecond.
    #[test]
    fn messages_show_durations_rounded() {
        let o = LockOptions::new(LockOptions::MAX_TTL + Duration::from_millis(1));
        let Err(LockError::InvalidOptions { reason }) = o.validate() else {
            panic!("out of range");
        };
        assert_eq!(reason, "ttl is 604800.001s; expected at most 604800s");
    }
}

/// Options, fuzzed (proptest, with shrinking).
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::util::time::is_whole_ms;

    /// Durations around the edges of every range: zero, sub-millisecond, in range, above.
    fn duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            (0..1_000_000u64).prop_map(Duration::from_nanos),
            (1..10_000u64).prop_map(Duration::from_millis),
            (1_000_001..10_000_000u64).prop_map(Duration::from_nanos),
            (0..=2 * LockOptions::MAX_TTL.as_secs()).prop_map(Duration::from_secs),
            Just(Duration::MAX),
        ]
    }

    fn options() -> impl Strategy<Value = LockOptions> {
        (
            duration(),
            duration(),
            duration(),
            duration(),
            proptest::option::of(duration()),
        )
            .prop_map(|(ttl, wait, base, cap, max_hold)| {
                let o = LockOptions::new(ttl)
                    .wait(wait)
                    .retry_base(base)
                    .retry_cap(cap);
                match max_hold {
                    Some(h) => o.max_hold(h),
                    None => o,
                }
            })
    }

    proptest! {
        #[test]
        fn validation_accepts_exactly_the_documented_ranges(o in options()) {
            let in_range = o.ttl >= Duration::from_millis(1)
                && o.ttl <= LockOptions::MAX_TTL
                && is_whole_ms(o.ttl)
                && o.wait <= LockOptions::MAX_WAIT
                && o.max_hold.is_none_or(|h| !h.is_zero() && h <= LockOptions::MAX_HOLD)
                && o.retry_base >= Duration::from_millis(1)
                && o.retry_cap >= o.retry_base
                && o.retry_cap <= LockOptions::MAX_WAIT;
            match o.validate() {
                Ok(()) => prop_assert!(in_range, "{:?} accepted", o),
                Err(LockError::InvalidOptions { reason }) => {
                    prop_assert!(!in_range, "{:?} rejected: {}", o, reason);
                    prop_assert!(reason.contains("expected"), "{}", reason);
                    let named = ["ttl", "wait", "max_hold", "retry_base", "retry_cap"]
                        .iter()
                        .any(|name| reason.starts_with(name));
                    prop_assert!(named, "{}", reason);
                }
                Err(other) => prop_assert!(false, "unexpected {:?}", other),
            }
        }

    }
}
