//! The checked system: one server (the [`scripts`](crate::scripts) over a [`Store`] with a
//! server clock), [`Client`]s with their own clocks, the network between them (requests in
//! order per connection, replies that may be lost, pushes that may be missed), and the
//! properties (see [`LockSystem::properties`](stateright::Model::properties)).

use stateright::{Model, Property};

use crate::client::{Client, Phase, Request};
use crate::scripts::{Constants, ScriptBug};
use crate::store::Store;

mod step;

/// The lock key, its fencing counter, its waiter queue and entries, as the model names them.
pub const LOCK: &str = "k";
/// The fencing counter.
pub const COUNTER: &str = "f";
/// The waiter queue.
pub const QUEUE: &str = "q";
/// The waiter entries.
pub const ENTRIES: &str = "e";

/// A deliberately wrong client, for the negative controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClientBug {
    /// The client as lockcore ships it.
    #[default]
    None,
    /// A waiter that starts on any delivered grant, not only one that answers its latest
    /// attempt (no `grant.seq == seq` filter): a late push starts it.
    StartsOnLatePush,
    /// A waiter that counts the claim window from the grant's arrival instead of its attempt's
    /// start.
    ClaimFromGrant,
}

/// What is checked: the clients, the bounds, the protocol's windows, the faults allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// How many clients (one manager each).
    pub clients: usize,
    /// Acquire calls per client.
    pub rounds: u8,
    /// The real time (ms) the exploration stops at.
    pub horizon: u64,
    /// The lock's TTL (ms).
    pub ttl: u64,
    /// The claim window a ticket asks for (ms).
    pub claim: u64,
    /// The entry lease a ticket asks for (ms).
    pub lease: u64,
    /// How far a client's clock may fall behind the real one, in all (ms).
    pub max_lag: u64,
    /// How many faults may happen in all: a lost reply, a missed push, a cancellation, a crash.
    pub faults: u8,
    /// Which faults are allowed.
    pub allow: Faults,
    /// Fair scheduling: time passes only when no request, reply, push or due timer waits, and
    /// every client releases after `hold` ms; checks that every call is granted by `live_by`.
    pub fair: Option<Fairness>,
    /// Whether a holder may renew (the watchdog, the promotion, an extend).
    pub renew: bool,
    /// The scripts' constants.
    pub constants: Constants,
    /// A bug in a script (negative controls).
    pub script_bug: ScriptBug,
    /// A bug in the client (negative controls).
    pub client_bug: ClientBug,
}

/// The faults a [`Config`] allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Faults {
    /// A reply lost on its way (the client's response timeout).
    pub lost_replies: bool,
    /// A wake-up that never arrives.
    pub missed_pushes: bool,
    /// A call dropped at an await point (or its wait budget spent).
    pub cancellations: bool,
    /// A client that dies (at any point, its sent requests still run).
    pub crashes: bool,
}

impl Faults {
    /// Every fault.
    pub const ALL: Faults = Faults {
        lost_replies: true,
        missed_pushes: true,
        cancellations: true,
        crashes: true,
    };
}

/// The schedule of a liveness check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fairness {
    /// How long a body holds the lock (ms).
    pub hold: u64,
    /// A queued waiter's refresh interval (ms): it re-checks this long after its wait began.
    pub refresh: u64,
    /// By this real time every call must have been granted and every client be done.
    pub live_by: u64,
}

/// The system's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The real time (ms); the server's clock is this one.
    pub now: u64,
    /// The server's keyspace.
    pub store: Store,
    /// The clients.
    pub clients: Vec<Client>,
    /// Faults still allowed.
    pub faults_left: u8,
    /// The highest fencing token a guard started with (ghost).
    pub last_token: u64,
    /// A guard started with a token not above `last_token` (ghost).
    pub token_regressed: bool,
    /// The lock key was last freed by its expiry, not by a script (ghost).
    pub freed_by_expiry: bool,
    /// A first attempt's fast path took a key that a script had freed while a live waiter was
    /// queued (ghost).
    pub queue_jumped: bool,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// One ms passes.
    Tick,
    /// Client `i`'s clock misses one ms.
    Lag(usize),
    /// The server runs client `i`'s oldest request; the reply reaches the client.
    Serve(usize),
    /// The server runs client `i`'s oldest request; the reply is lost (the client times out).
    ServeLost(usize),
    /// Client `i` receives its oldest push.
    DeliverPush(usize),
    /// Client `i`'s oldest push is lost.
    LosePush(usize),
    /// Client `i` starts an acquire call.
    Start(usize),
    /// Client `i`'s wait ends (woken, or its timer): it takes a grant or re-checks.
    EndWait(usize),
    /// Client `i`'s call is dropped (at an await point) or its budget is spent.
    Cancel(usize),
    /// Client `i`'s guard is released.
    Release(usize),
    /// Client `i`'s lease is renewed.
    Renew(usize),
    /// Client `i` dies.
    Crash(usize),
}

/// The model: a [`Config`].
#[derive(Debug, Clone)]
pub struct LockSystem {
    /// What is checked.
    pub config: Config,
}

impl Model for LockSystem {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            store: Store::new(0),
            clients: vec![Client::new(); self.config.clients],
            faults_left: self.config.faults,
            last_token: 0,
            token_regressed: false,
            freed_by_expiry: true,
            queue_jumped: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        step::actions(&self.config, state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        step::next(&self.config, state, &action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, s: &State| {
                s.clients.iter().filter(|c| c.believes(s.now)).count() <= 1
            }),
            Property::always("fencing tokens increase", |_, s: &State| !s.token_regressed),
            Property::always("every lock and queue key expires", |_, s: &State| {
                s.store
                    .keys()
                    .all(|(key, stored)| key == COUNTER || stored.expires_at.is_some())
            }),
            Property::always("the queue is never jumped", |_, s: &State| !s.queue_jumped),
            Property::always(
                "every call is granted in time",
                |m: &LockSystem, s: &State| {
                    let Some(fair) = m.config.fair else {
                        return true;
                    };
                    s.now < fair.live_by
                        || s.clients
                            .iter()
                            .all(|c| c.phase == Phase::Done && c.won == m.config.rounds)
                },
            ),
            Property::always(
                "no key is held once every client is gone",
                |m: &LockSystem, s: &State| {
                    // Then the lock key is gone within one lease: it never outlives its clients.
                    let quiet = s.clients.iter().all(|c| c.gone() && c.outbox.is_empty());
                    let most = i64::try_from(m.config.ttl.max(m.config.claim)).unwrap_or(i64::MAX);
                    let pttl = s.store.pttl(LOCK);
                    !quiet || pttl == -2 || (0..=most).contains(&pttl)
                },
            ),
            Property::sometimes("a grant is handed over", |_, s: &State| {
                s.clients.iter().any(|c| {
                    matches!(
                        c.phase,
                        Phase::Holding {
                            provisional: true,
                            ..
                        }
                    ) && c.believes(s.now)
                })
            }),
        ]
    }
}

/// The request a client's phase awaits a reply for, if any (for routing replies).
pub(crate) fn awaited(client: &Client) -> Option<Request> {
    match client.phase {
        Phase::Attempting { seq, .. } => Some(Request::Acquire {
            round: client.round,
            seq,
        }),
        Phase::Holding {
            renewing: Some(start),
            ..
        } => Some(Request::Renew {
            round: client.round,
            start,
        }),
        Phase::Releasing => Some(Request::Release {
            round: client.round,
            background: false,
        }),
        _ => None,
    }
}

impl Config {
    /// The scripts' constants at the model's scale: the queue keys live at least 12 ms.
    pub const MODEL_CONSTANTS: Constants = Constants {
        hand_over_steps: 64,
        max_ttl_ms: 86_400_000,
        queue_ttl_floor_ms: 12,
    };

    /// The default safety check: `clients` clients, one call each, every fault (two in all),
    /// clocks that fall up to 1 ms behind, renewals, an 8 ms horizon. The windows keep
    /// lockcore's proportions at a ms scale: TTL 8 (validity 6), claim window 5, entry lease 6.
    pub fn safety(clients: usize) -> Config {
        Config {
            clients,
            rounds: 1,
            horizon: 8,
            ttl: 8,
            claim: 5,
            lease: 6,
            max_lag: 1,
            faults: 2,
            allow: Faults::ALL,
            fair: None,
            renew: true,
            constants: Self::MODEL_CONSTANTS,
            script_bug: ScriptBug::None,
            client_bug: ClientBug::None,
        }
    }

    /// The liveness check: fair scheduling (time passes only when nothing else can happen),
    /// no faults but `missed` missed pushes, bodies that hold 1 ms; every call must be granted
    /// and every client done by `live_by`.
    pub fn liveness(clients: usize, rounds: u8, missed: u8) -> Config {
        let live_by = 4 * u64::from(rounds) * clients as u64 + 4;
        Config {
            clients,
            rounds,
            horizon: live_by + 2,
            faults: missed,
            allow: Faults {
                lost_replies: false,
                missed_pushes: true,
                cancellations: false,
                crashes: false,
            },
            fair: Some(Fairness {
                hold: 1,
                refresh: 3,
                live_by,
            }),
            renew: false,
            max_lag: 0,
            ..Config::safety(clients)
        }
    }

    /// This configuration with `bug` in the scripts.
    pub fn with_script_bug(self, bug: ScriptBug) -> Config {
        Config {
            script_bug: bug,
            ..self
        }
    }

    /// This configuration with `bug` in the client.
    pub fn with_client_bug(self, bug: ClientBug) -> Config {
        Config {
            client_bug: bug,
            ..self
        }
    }
}

/// Runs client `i`'s oldest request on `state`'s store (its outbox must not be empty): the
/// request, the reply and what it published (for traces).
pub fn run_request(
    config: &Config,
    state: &mut State,
    i: usize,
) -> (Request, crate::scripts::Reply, Vec<(String, String)>) {
    step::run(config, state, i)
}

impl Config {
    /// The negative controls' configuration: 2 clients with 2 calls each (so that a client
    /// comes back as a newcomer), no faults but delays, no renewals, short windows (TTL 5,
    /// claim window 4, entry lease 5) and a 6 ms horizon.
    pub fn control() -> Config {
        Config {
            rounds: 2,
            horizon: 6,
            ttl: 5,
            claim: 4,
            lease: 5,
            max_lag: 0,
            faults: 0,
            renew: false,
            ..Config::safety(2)
        }
    }
}
