//! A lockcore client as the model runs it: one manager with its own wake-up channel and its own
//! clock, making acquire calls on one key one after another, as `backend/waiting.rs` does:
//!
//! - the first attempt (`seq` 1, mode 1) takes a free key or queues up; a queued waiter waits
//!   for a wake-up or its refresh timer, then takes the latest delivered grant when it answers
//!   its latest attempt (`grant.seq == seq`) and its claim window, counted from that attempt's
//!   start, has not passed by its own clock; otherwise it re-checks (`seq` + 1, mode 2);
//! - a won attempt's lease is valid until the attempt's start + `validity(ttl)` by the client's
//!   clock (`lease/state.rs`); a grant's until the attempt's start + `validity(claim)`, and it is
//!   provisional until a renewal (`lease/promotion.rs`, the watchdog, an extend: all
//!   `renew.lua`) sets the full TTL from that renewal's start;
//! - the guard's belief that it holds the key is exactly that deadline (`LockGuard`'s view);
//! - a call that goes without the lock (cancelled at an await point, a lost reply taken as a
//!   timeout, its wait budget spent) withdraws with `release_handoff.lua` in the background.

/// What a client sent to the server; its reply is routed back by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Request {
    /// `acquire_queued.lua` for call `round`, attempt `seq` (mode 1 for `seq` 1, else 2).
    Acquire {
        /// The acquire call (its token is `c<client>r<round>`).
        round: u8,
        /// The attempt's sequence number.
        seq: u8,
    },
    /// `renew.lua` of call `round`'s lease, sent at `start` by the client's clock.
    Renew {
        /// The acquire call.
        round: u8,
        /// When the renewal was sent (the new deadline counts from here).
        start: u64,
    },
    /// The guard's release (`release_handoff.lua`); `background`: a re-send after a lost
    /// reply, whose reply nobody awaits.
    Release {
        /// The acquire call.
        round: u8,
        /// Sent by a background retry.
        background: bool,
    },
    /// A call that goes without the lock takes its entry (and a lock just handed to it) back
    /// (`release_handoff.lua` with its value, in the background).
    Withdraw {
        /// The acquire call.
        round: u8,
    },
}

impl Request {
    /// The acquire call the request belongs to.
    pub fn round(&self) -> u8 {
        match *self {
            Request::Acquire { round, .. }
            | Request::Renew { round, .. }
            | Request::Release { round, .. }
            | Request::Withdraw { round } => round,
        }
    }
}

/// A delivered wake-up: `<token> <fencing token> <seq> <stored value>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The fencing token the release minted.
    pub fencing: u64,
    /// The attempt whose entry the release read.
    pub seq: u8,
    /// The value the release stored (`None`: a wake-up that only asks for a re-check).
    pub stored: Option<String>,
}

impl Grant {
    /// Parses a payload for `token`; `None` for another token or a malformed payload.
    pub fn parse(payload: &str, token: &str) -> Option<Grant> {
        let mut parts = payload.splitn(4, ' ');
        if parts.next()? != token {
            return None;
        }
        let fencing = parts.next()?.parse().ok()?;
        let seq = parts.next()?.parse().ok()?;
        Some(Grant {
            fencing,
            seq,
            stored: parts.next().map(str::to_owned),
        })
    }
}

/// Where a client's current call stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between calls (or before the first).
    Idle,
    /// Attempt `seq` sent at `start` (client clock); its reply is awaited.
    Attempting {
        /// The attempt's sequence number.
        seq: u8,
        /// When it was sent.
        start: u64,
    },
    /// Queued after attempt `seq` (sent at `start`), since `since`: waiting for a wake-up or the
    /// refresh timer.
    Waiting {
        /// The latest attempt.
        seq: u8,
        /// When it was sent.
        start: u64,
        /// When the wait began.
        since: u64,
    },
    /// The guard is held; it believes so while the client's clock is before `deadline`.
    Holding {
        /// The lease's deadline by the client's clock.
        deadline: u64,
        /// A hand-over's lease that runs on its claim window until a renewal.
        provisional: bool,
        /// A renewal in flight: when it was sent.
        renewing: Option<u64>,
        /// A renewal was sent (the model sends at most one per guard).
        renewed: bool,
        /// When the guard was handed out (the body's start).
        since: u64,
    },
    /// The guard's release was sent; its reply is awaited.
    Releasing,
    /// Every call made.
    Done,
    /// The process died: it sends nothing more (what it sent may still run).
    Crashed,
}

/// One client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// The current call's phase.
    pub phase: Phase,
    /// Acquire calls started (the current one's number).
    pub round: u8,
    /// Calls that got the lock.
    pub won: u8,
    /// How far the client's clock has fallen behind the real one (ms).
    pub lag: u64,
    /// Sent and not yet run by the server, in order (one connection: FIFO).
    pub outbox: Vec<Request>,
    /// Published on the client's channel, on their way.
    pub pushes: Vec<String>,
    /// The latest wake-up delivered to the current call (`Waiter`'s slot).
    pub slot: Option<Grant>,
}

impl Client {
    /// A client that has made no call yet.
    pub fn new() -> Self {
        Client {
            phase: Phase::Idle,
            round: 0,
            won: 0,
            lag: 0,
            outbox: Vec::new(),
            pushes: Vec::new(),
            slot: None,
        }
    }

    /// The client's clock at real time `now`.
    pub fn clock(&self, now: u64) -> u64 {
        now - self.lag
    }

    /// Whether the guard believes it holds the key at real time `now`.
    pub fn believes(&self, now: u64) -> bool {
        matches!(self.phase, Phase::Holding { deadline, .. } if self.clock(now) < deadline)
    }

    /// Whether the current call listens for wake-ups (registered from before its first
    /// attempt until it ends).
    pub fn listening(&self) -> bool {
        matches!(self.phase, Phase::Attempting { .. } | Phase::Waiting { .. })
    }

    /// Whether the client has gone for good.
    pub fn gone(&self) -> bool {
        matches!(self.phase, Phase::Done | Phase::Crashed)
    }
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

/// The token (and value) of client `id`'s call `round`.
pub fn token(id: usize, round: u8) -> String {
    format!("c{id}r{round}")
}

/// The wake-up channel of client `id`'s manager.
pub fn channel(id: usize) -> String {
    format!("w{id}")
}

/// `util/time.rs`' `validity`: `ttl - (ttl / 100 + 2)` ms for clock drift, at least 0.
pub fn validity(ttl: u64) -> u64 {
    ttl.saturating_sub(ttl / 100 + 2)
}
