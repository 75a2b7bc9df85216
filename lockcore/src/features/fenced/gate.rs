//! [`FenceGate`]: in-process state that accepts writes only with a fencing token at least as
//! new as the newest one it has accepted.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::features::fenced::stale::StaleWrite;

/// In-process state that accepts writes only with a fencing token at least as new as the
/// newest one it has accepted: the value and its fence behind one mutex, so that the check and
/// the write are a single critical section.
///
/// Use it where the resource is this process's own state (a cache, a file, a service that
/// receives writes from lock holders). For a Redis key use [`FencedRedis`](crate::FencedRedis); for a SQL row, the
/// `UPDATE .. WHERE fence <= ?` pattern in [`FencedRedis`](crate::FencedRedis)'s docs.
///
/// The write closure runs under a `std::sync::Mutex`: keep it short and never block on async
/// work inside it. A closure that panics poisons nothing: the next call proceeds with the value
/// as the closure left it, and the fence already advanced.
///
/// ```
/// use lockcore::FenceGate;
///
/// let stock = FenceGate::new("stock:42", 10_u32);
/// stock.write(34, |qty| *qty -= 1)?; // holder with token 34
/// let stale = stock.write(33, |qty| *qty = 0).unwrap_err(); // a paused holder wakes up
/// assert_eq!((stale.presented, stale.latest), (33, 34));
/// assert_eq!(stock.read(|qty| *qty), 9);
/// # Ok::<(), lockcore::StaleWrite>(())
/// ```
#[derive(Debug)]
pub struct FenceGate<T> {
    resource: String,
    state: Mutex<Fenced<T>>,
}

#[derive(Debug)]
struct Fenced<T> {
    latest: u64,
    value: T,
}

impl<T> FenceGate<T> {
    /// A gate named `resource` (used in [`StaleWrite`]) around `value`, with no token accepted
    /// yet (fence 0).
    pub fn new(resource: impl Into<String>, value: T) -> Self {
        Self::with_latest(resource, value, 0)
    }

    /// A gate that has already accepted `latest`: for state restored from storage together
    /// with its fence. A gate that restarts at 0 over old data would accept stale writes.
    pub fn with_latest(resource: impl Into<String>, value: T, latest: u64) -> Self {
        FenceGate {
            resource: resource.into(),
            state: Mutex::new(Fenced { latest, value }),
        }
    }

    /// Runs `write` on the value if `fencing_token` is not older than the newest token accepted
    /// so far, and records the token; returns what `write` returned.
    ///
    /// # Errors
    /// [`StaleWrite`] when a newer token has been accepted; `write` is not called.
    pub fn write<R>(
        &self,
        fencing_token: u64,
        write: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StaleWrite> {
        let mut state = self.lock();
        if fencing_token == crate::protocol::fencing::NO_FENCING_TOKEN {
            return Err(StaleWrite::fencing_off(&self.resource, state.latest));
        }
        if fencing_token < state.latest {
            return Err(StaleWrite {
                resource: self.resource.clone(),
                presented: fencing_token,
                latest: state.latest,
            });
        }
        state.latest = fencing_token;
        Ok(write(&mut state.value))
    }

    /// Runs `read` on the current value.
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.lock().value)
    }

    /// The newest fencing token accepted so far (0 before the first write).
    pub fn latest(&self) -> u64 {
        self.lock().latest
    }

    /// The name given at construction.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The value and the newest accepted token, e.g. to persist them together.
    pub fn into_inner(self) -> (T, u64) {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (state.value, state.latest)
    }

    fn lock(&self) -> MutexGuard<'_, Fenced<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::features::fenced::stale::FenceError;

    #[test]
    fn accepts_newer_and_equal_rejects_older() {
        let gate = FenceGate::new("stock:1", Vec::new());
        assert_eq!(gate.latest(), 0);
        gate.write(5, |v| v.push(5)).unwrap();
        gate.write(5, |v| v.push(55)).unwrap(); // same lease writes again
        gate.write(9, |v| v.push(9)).unwrap();
        let err = gate.write(7, |v| v.push(7)).unwrap_err();
        assert_eq!(
            err,
            StaleWrite {
                resource: "stock:1".into(),
                presented: 7,
                latest: 9
            }
        );
        assert_eq!(gate.latest(), 9, "a rejected write does not move the fence");
        assert_eq!(gate.into_inner(), (vec![5, 55, 9], 9));
    }

    #[test]
    fn rejected_write_closure_never_runs() {
        let gate = FenceGate::with_latest("row", 0_u32, 10);
        let mut ran = false;
        assert!(gate.write(3, |_| ran = true).is_err());
        assert!(!ran);
        assert_eq!(gate.read(|v| *v), 0);
    }

    #[test]
    fn display_names_resource_and_both_tokens() {
        let msg = StaleWrite {
            resource: "stock:42".into(),
            presented: 33,
            latest: 34,
        }
        .to_string();
        assert!(msg.starts_with("stale write"), "{msg}");
        for part in ["stock:42", "33", "34"] {
            assert!(msg.contains(part), "{msg} lacks {part}");
        }
        let err = FenceError::from(StaleWrite {
            resource: "k".into(),
            presented: 1,
            latest: 2,
        });
        assert!(err.is_stale());
        assert!(err.to_string().starts_with("stale write"));
    }

    #[test]
    fn panicking_writer_does_not_wedge_the_gate() {
        let gate = Arc::new(FenceGate::new("g", 0_u32));
        let g = Arc::clone(&gate);
        let joined = std::thread::spawn(move || {
            g.write(1, |_| panic!("writer crashed")).ok();
        })
        .join();
        assert!(joined.is_err());
        assert_eq!(gate.latest(), 1);
        gate.write(2, |v| *v = 2).unwrap();
        assert_eq!(gate.read(|v| *v), 2);
    }

    /// Many threads race with shuffled tokens: every accepted write must carry a token at least
    /// as new as every write accepted before it, and the final fence is the maximum.
    #[test]
    fn concurrent_writers_never_land_an_older_token_after_a_newer_one() {
        let gate = Arc::new(FenceGate::new("log", Vec::<u64>::new()));
        let threads: Vec<_> = (0..8_u64)
            .map(|t| {
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || {
                    let mut rejected = 0;
                    for i in 0..500_u64 {
                        let token = (i * 8 + t) ^ 0b101; // not in order per thread pair
                        if gate.write(token, |log| log.push(token)).is_err() {
                            rejected += 1;
                        }
                    }
                    rejected
                })
            })
            .collect();
        let rejected: u32 = threads.into_iter().map(|h| h.join().unwrap()).sum();
        let (log, latest) = Arc::try_unwrap(gate).unwrap().into_inner();
        assert!(
            log.windows(2).all(|w| w[0] <= w[1]),
            "out of order: {log:?}"
        );
        assert_eq!(latest, *log.last().unwrap());
        assert_eq!(log.len() + rejected as usize, 8 * 500);
    }
}
