//! The waiting acquire: attempts until the lock is won or the wait budget is spent, waiting
//! between them as the backend's [`Plan`] says (in the fair queue, woken and handed the lock by
//! a release; or with backoff and full jitter), never past the holder's remaining TTL.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::backoff::Backoff;
use crate::backend::handoff::{self, Waiter};
use crate::backend::vote::Vote;
use crate::backend::{AttemptRequest, Backend, Plan};
use crate::error::LockError;
use crate::options::LockOptions;
use crate::protocol::messages::{Grant, QueueTicket};
use crate::protocol::value::LockValue;
use crate::util::defer::OnDrop;
use crate::util::escape::Escaped;
use crate::util::time::validity;

/// A won lock, as the backend hands it to the manager.
#[derive(Debug)]
pub(crate) struct Won {
    /// The value Redis holds at the key.
    pub(crate) value: LockValue,
    pub(crate) fencing_token: u64,
    /// When the successful attempt started: the lease's validity counts from here.
    pub(crate) attempt_start: Instant,
    /// A hand-over's claim window (at most the ttl), when the lease runs on it until its first
    /// renewal; `None` for a lease of the full ttl.
    pub(crate) claim: Option<Duration>,
}

/// What an acquire call reports while it runs (its span and metrics).
pub(crate) trait Progress {
    /// One more attempt is being sent.
    fn attempt(&self);
    /// The call waits in the fair queue.
    fn queued(&self);
    /// An attempt found the key held; the holder's remaining TTL when Redis reported one.
    fn held(&self, key: &str, holder_ttl: Option<Duration>);
    /// A release's grant handed the lock to this call.
    fn handed_over(&self);
}

/// One acquire call: the key, its fencing counter, the options and how to mint a value.
pub(crate) struct Request<'a, M> {
    pub(crate) key: &'a str,
    pub(crate) counter_key: &'a str,
    pub(crate) opts: &'a LockOptions,
    pub(crate) mint: M,
}

/// A call's place in the fair queue.
struct Queued<'a> {
    waiter: Waiter,
    handoff: &'a std::sync::Arc<handoff::Handoff>,
    starts_on_grant: bool,
}

impl Backend {
    /// Acquires `request.key`, waiting until `opts`' wait budget is spent.
    ///
    /// # Errors
    /// - [`LockError::Contended`] when the key stayed held for the whole wait budget;
    /// - [`LockError::Closed`] once the manager is closed (also while waiting: a close wakes
    ///   the call, which withdraws from the queue);
    /// - any error of [`attempt`](Backend::attempt) at once, except a refusal Redis Cluster
    ///   answers before it runs a script (`TRYAGAIN` during a slot migration), which is waited
    ///   out like a held key.
    pub(crate) async fn acquire<M: Fn() -> LockValue>(
        &self,
        request: &Request<'_, M>,
        progress: &impl Progress,
    ) -> Result<Won, LockError> {
        let Request {
            key,
            counter_key,
            opts,
            ref mint,
        } = *request;
        let started = Instant::now();
        let give_up_at = started + opts.wait_budget();
        let plan = self.plan(opts);
        let call_value = match plan {
            Plan::Queue { .. }
            | Plan::Backoff {
                value_per_call: true,
            } => Some(mint()),
            Plan::Backoff { .. } => None,
        };
        // Register for wake-ups before the first attempt: the attempt that finds the key held
        // queues this waiter, so no release can slip between that check and the wait.
        let queued = match (&plan, &call_value) {
            (
                Plan::Queue {
                    handoff,
                    starts_on_grant,
                },
                Some(value),
            ) => Some(Queued {
                waiter: handoff.register(value.token()),
                handoff,
                starts_on_grant: *starts_on_grant,
            }),
            _ => None,
        };
        // Unless it acquired, a waiter that goes takes its queue entry (and a lock just handed
        // to it) back, in the background.
        let withdraw = match (&queued, &call_value) {
            (Some(_), Some(value)) => Some(OnDrop::new(|| {
                self.spawn_release(key.to_owned(), value.clone(), opts.ttl());
            })),
            _ => None,
        };
        if queued.is_some() {
            progress.queued();
        }
        let mut backoff = Backoff::new(opts);
        let fenced = counter_key != key;
        for seq in 1.. {
            let value = call_value.clone().unwrap_or_else(mint);
            // The windows this attempt asks for follow the manager's round trip to Redis; a
            // grant that answers it lives the claim window sent here.
            let (claim, lease) = queued
                .as_ref()
                .map_or((Duration::ZERO, Duration::ZERO), |q| q.handoff.windows());
            let queue = queued.as_ref().map(|q| QueueTicket {
                channel: q.handoff.channel(),
                seq,
                claim,
                lease,
            });
            self.ensure_open()?;
            let attempt_start = Instant::now();
            progress.attempt();
            let attempt = self
                .attempt(
                    &AttemptRequest {
                        key,
                        counter_key,
                        value: &value,
                        ttl: opts.ttl(),
                        queue,
                        give_up_at: Some(give_up_at),
                        stamp: opts.hold_at_least_value().is_some(),
                    },
                    attempt_start,
                )
                .await;
            if let Some(q) = &queued {
                q.handoff.record_round_trip(attempt_start.elapsed());
            }
            let holder_ttl = match attempt {
                Ok(Vote::Won {
                    fencing_token,
                    stored,
                }) => {
                    if let Some(withdraw) = withdraw {
                        withdraw.disarm();
                    }
                    return Ok(Won {
                        value: stored.map_or(value, LockValue::stored),
                        fencing_token,
                        attempt_start,
                        claim: None,
                    });
                }
                Ok(Vote::Lost { holder_ttl }) => holder_ttl,
                // The script never ran (its keys are split by a slot migration, or the cluster
                // is reconfiguring): wait it out within the budget, as for a held key.
                Err(err) if !opts.wait_budget().is_zero() && err.script_never_ran() => {
                    tracing::debug!(key = %Escaped(key), error = %err, "lock script refused during a cluster change; retrying within the wait budget");
                    None
                }
                Err(err) => return Err(err),
            };
            progress.held(key, holder_ttl);
            let waited = started.elapsed();
            let remaining = opts.wait_budget().saturating_sub(waited);
            if remaining.is_zero() {
                // A queued waiter's entry is withdrawn as `withdraw` drops, in the background:
                // the error returns within the budget. A release in the meantime may still hand
                // the key to this waiter; the withdrawal then gives it back at once.
                return Err(LockError::Contended {
                    key: key.to_owned(),
                    waited,
                });
            }
            let mut delay = match &queued {
                Some(_) => handoff::refresh_delay().min(opts.retry_cap_value()),
                None => backoff.next_delay(),
            }
            .min(remaining);
            if let Some(ttl) = holder_ttl {
                // Wake no later than the holder's lease ends (+1 ms for the expiry).
                delay = delay.min(ttl + Duration::from_millis(1));
            }
            // A close wakes the call at once: the next round finds the manager closed.
            let Some(q) = &queued else {
                tokio::select! {
                    () = self.closing() => {}
                    () = tokio::time::sleep(delay) => {}
                }
                continue;
            };
            tokio::select! {
                () = q.waiter.woken() => {}
                () = self.closing() => {}
                () = tokio::time::sleep(delay) => {}
            }
            q.waiter.keep_listening();
            // A hand-over's grant answers this attempt only when it echoes its sequence number
            // (see `handoff`): an older one may have lapsed.
            let granted = q
                .waiter
                .take_grant()
                .filter(|grant| grant.seq == seq)
                .and_then(|grant| {
                    let value = call_value.as_ref()?;
                    let ttl = opts.ttl();
                    q.granted(grant, value, attempt_start, ttl.min(claim), fenced)
                });
            if let Some(won) = granted {
                progress.handed_over();
                if let Some(withdraw) = withdraw {
                    withdraw.disarm();
                }
                return Ok(won);
            }
        }
        unreachable!("a u64 sequence of attempts does not run out")
    }
}

impl Queued<'_> {
    /// The lock a hand-over's `grant` gave `value`, answering the queued attempt that started
    /// at `start` with the claim window `claim` (at most the ttl): the release set the key to
    /// the grant's stored value (with `acquired_at` stamped) with a TTL of `claim` after that
    /// attempt ran, so the lease is valid until `start` + `claim` − drift allowance; its first
    /// renewal sets the full ttl. `None` when that deadline has passed already (the wake-up
    /// came late) or the grant is unusable (a wake-up that only asks for a re-check, a fencing
    /// token of 0 from a counter lockcore did not mint, a value that is not this waiter's, or a
    /// manager that must confirm with `WAIT`): the waiter then re-checks.
    fn granted(
        &self,
        grant: Grant,
        value: &LockValue,
        start: Instant,
        claim: Duration,
        fenced: bool,
    ) -> Option<Won> {
        let stored = LockValue::stored(grant.stored?);
        if !self.starts_on_grant
            || (fenced && grant.fencing_token == 0)
            || stored.token() != value.token()
            || Instant::now() >= start + validity(claim)
        {
            return None;
        }
        Some(Won {
            value: stored,
            fencing_token: grant.fencing_token,
            attempt_start: start,
            claim: Some(claim),
        })
    }
}
