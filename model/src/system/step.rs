//! The system's steps: which actions a state allows, and what each does.

use super::{Action, COUNTER, ClientBug, Config, ENTRIES, LOCK, QUEUE, State, awaited};
use crate::client::{Client, Grant, Phase, Request, channel, token, validity};
use crate::scripts::Reply;
use crate::scripts::plain::renew;
use crate::scripts::queued::{QueueKeys, acquire_queued, release_handoff};
use crate::store::Data;

const KEYS: QueueKeys<'static> = QueueKeys {
    lock: LOCK,
    counter: COUNTER,
    queue: QUEUE,
    entries: ENTRIES,
};

/// The actions `state` allows under `config`.
pub(super) fn actions(config: &Config, state: &State, out: &mut Vec<Action>) {
    let fault = state.faults_left > 0;
    let allow = config.allow;
    let mut urgent = false;
    for (i, c) in state.clients.iter().enumerate() {
        let local = c.clock(state.now);
        if !c.outbox.is_empty() {
            out.push(Action::Serve(i));
            urgent = true;
            if fault && allow.lost_replies {
                out.push(Action::ServeLost(i));
            }
        }
        if !c.pushes.is_empty() {
            out.push(Action::DeliverPush(i));
            urgent = true;
            if fault && allow.missed_pushes {
                out.push(Action::LosePush(i));
            }
        }
        match c.phase {
            Phase::Idle => {
                out.push(Action::Start(i));
                urgent = true;
            }
            Phase::Waiting { since, .. } => {
                // Woken, or its timer: at least 1 ms after the wait began (lockcore's is at
                // least 125 ms), so that re-checks are bounded by time.
                let refresh = config.fair.map_or(1, |fair| fair.refresh);
                let due = c.slot.is_some() || local >= since + refresh;
                if due {
                    out.push(Action::EndWait(i));
                    urgent = true;
                }
            }
            Phase::Holding {
                deadline,
                renewing,
                renewed,
                since,
                ..
            } => {
                if config.fair.is_none_or(|fair| local >= since + fair.hold) {
                    out.push(Action::Release(i));
                    urgent = true;
                }
                if config.renew && !renewed && renewing.is_none() && local < deadline {
                    out.push(Action::Renew(i));
                }
            }
            _ => {}
        }
        if fault && allow.cancellations && c.listening() {
            out.push(Action::Cancel(i));
        }
        if fault && allow.crashes && (c.listening() || matches!(c.phase, Phase::Holding { .. })) {
            out.push(Action::Crash(i));
        }
        if c.lag < config.max_lag && c.lag < state.now && !c.gone() && c.phase != Phase::Idle {
            out.push(Action::Lag(i));
        }
    }
    if state.now < config.horizon && !(config.fair.is_some() && urgent) {
        out.push(Action::Tick);
    }
}

/// The state after `action`.
pub(super) fn next(config: &Config, state: &State, action: &Action) -> Option<State> {
    let mut s = state.clone();
    match *action {
        Action::Tick => {
            let held = s.store.exists(LOCK);
            s.now += 1;
            s.store.advance(s.now);
            if held && !s.store.exists(LOCK) {
                s.freed_by_expiry = true;
            }
        }
        Action::Lag(i) => s.clients[i].lag += 1,
        Action::Serve(i) => serve(config, &mut s, i, false),
        Action::ServeLost(i) => {
            s.faults_left -= 1;
            serve(config, &mut s, i, true);
        }
        Action::DeliverPush(i) => {
            let c = &mut s.clients[i];
            let payload = c.pushes.remove(0);
            if c.listening()
                && let Some(grant) = Grant::parse(&payload, &token(i, c.round))
            {
                c.slot = Some(grant);
            }
        }
        Action::LosePush(i) => {
            s.faults_left -= 1;
            s.clients[i].pushes.remove(0);
        }
        Action::Start(i) => {
            let c = &mut s.clients[i];
            c.round += 1;
            c.slot = None;
            c.outbox.push(Request::Acquire {
                round: c.round,
                seq: 1,
            });
            c.phase = Phase::Attempting {
                seq: 1,
                start: c.clock(s.now),
            };
        }
        Action::EndWait(i) => end_wait(config, &mut s, i),
        Action::Cancel(i) => {
            s.faults_left -= 1;
            withdraw(config, &mut s.clients[i]);
        }
        Action::Release(i) => {
            let c = &mut s.clients[i];
            c.outbox.push(Request::Release {
                round: c.round,
                background: false,
            });
            c.phase = Phase::Releasing;
        }
        Action::Renew(i) => {
            let c = &mut s.clients[i];
            let local = c.clock(s.now);
            if let Phase::Holding {
                renewing, renewed, ..
            } = &mut c.phase
            {
                *renewing = Some(local);
                *renewed = true;
            }
            c.outbox.push(Request::Renew {
                round: c.round,
                start: local,
            });
        }
        Action::Crash(i) => {
            s.faults_left -= 1;
            let c = &mut s.clients[i];
            c.phase = Phase::Crashed;
            c.pushes.clear();
            c.slot = None;
        }
    }
    Some(s)
}

/// The server runs client `i`'s oldest request, and its reply reaches the client at once
/// (`lost`: never; the client times out). A reply's delay only shortens what the client
/// believes (its deadline counts from the request's start), and a call cancelled while its
/// reply is on the way sends its withdrawal behind the request, as one cancelled before it ran.
fn serve(config: &Config, s: &mut State, i: usize, lost: bool) {
    let held_before = s.store.exists(LOCK);
    let waiter_live = live_waiter(s);
    let (request, reply, published) = run(config, s, i);
    s.clients[i].outbox.remove(0);
    let fast_path_win = matches!(&reply, Reply::Array(r) if r.len() == 2 && r[0] == Reply::Int(1));
    if matches!(request, Request::Acquire { seq: 1, .. })
        && !held_before
        && fast_path_win
        && waiter_live
        && !s.freed_by_expiry
    {
        s.queue_jumped = true;
    }
    if held_before && !s.store.exists(LOCK) {
        s.freed_by_expiry = false;
    }
    for (name, payload) in published {
        if let Some(j) = (0..s.clients.len()).find(|&j| channel(j) == name)
            && s.clients[j].phase != Phase::Crashed
        {
            s.clients[j].pushes.push(payload);
        }
    }
    if awaited(&s.clients[i]) == Some(request.clone()) {
        on_reply(config, s, i, &request, (!lost).then_some(&reply));
    }
}

/// Runs client `i`'s oldest request (its outbox must not be empty) on the state's store: the
/// request, its reply, what it published.
pub(crate) fn run(
    config: &Config,
    s: &mut State,
    i: usize,
) -> (Request, Reply, Vec<(String, String)>) {
    let request = s.clients[i].outbox[0].clone();
    let value = token(i, request.round());
    let (reply, published) = match request {
        Request::Acquire { seq, .. } => {
            let mode = if seq <= 1 { 1 } else { 2 };
            let ticket = format!(
                "{mode} {seq} {} {} {}",
                config.claim,
                config.lease,
                channel(i)
            );
            let ttl = config.ttl.to_string();
            acquire_queued(&mut s.store, KEYS, config.constants, &value, &ttl, &ticket)
        }
        Request::Renew { .. } => renew(&mut s.store, &[(LOCK, &value, config.ttl)]),
        Request::Release { .. } | Request::Withdraw { .. } => release_handoff(
            &mut s.store,
            KEYS,
            config.constants,
            config.script_bug,
            &value,
        ),
    };
    (request, reply, published)
}

/// Whether a queued value has a live entry (what a release would hand the key to).
fn live_waiter(s: &State) -> bool {
    let (Some(Data::List(queue)), Some(Data::Hash(entries))) = (
        s.store.get_stored(QUEUE).map(|q| &q.data),
        s.store.get_stored(ENTRIES).map(|e| &e.data),
    ) else {
        return false;
    };
    queue.iter().any(|value| {
        entries
            .get(value.as_str())
            .and_then(|entry| entry.split('|').next()?.parse::<u64>().ok())
            .is_some_and(|deadline| deadline > s.now)
    })
}

/// Client `i` receives the reply of the request it awaits (`None`: lost, a timeout).
fn on_reply(config: &Config, s: &mut State, i: usize, request: &Request, reply: Option<&Reply>) {
    let now = s.now;
    match request {
        Request::Acquire { .. } => {
            let Phase::Attempting { seq, start } = s.clients[i].phase else {
                return;
            };
            match reply {
                Some(Reply::Array(r)) if r.first() == Some(&Reply::Int(1)) => {
                    let fencing = match r.get(1) {
                        Some(Reply::Int(n)) => u64::try_from(*n).unwrap_or(0),
                        Some(Reply::Bulk(n)) => n.parse().unwrap_or(0),
                        _ => 0,
                    };
                    start_guard(s, i, fencing, start + validity(config.ttl), false);
                }
                Some(Reply::Array(r)) if r.first() == Some(&Reply::Int(0)) => {
                    let c = &mut s.clients[i];
                    c.phase = Phase::Waiting {
                        seq,
                        start,
                        since: c.clock(now),
                    };
                }
                _ => withdraw(config, &mut s.clients[i]),
            }
        }
        Request::Renew { start, .. } => {
            let c = &mut s.clients[i];
            match reply {
                Some(Reply::Array(r)) if r.first() == Some(&Reply::Int(1)) => {
                    if let Phase::Holding {
                        deadline,
                        provisional,
                        renewing,
                        ..
                    } = &mut c.phase
                    {
                        *deadline = start + validity(config.ttl);
                        *provisional = false;
                        *renewing = None;
                    }
                }
                Some(_) => {
                    // Lost: the guard's later release finds another holder (or nothing).
                    c.outbox.push(Request::Release {
                        round: c.round,
                        background: true,
                    });
                    end_call(config, c);
                }
                None => {
                    if let Phase::Holding { renewing, .. } = &mut c.phase {
                        *renewing = None;
                    }
                }
            }
        }
        Request::Release { .. } => {
            let c = &mut s.clients[i];
            if reply.is_none() {
                c.outbox.push(Request::Release {
                    round: c.round,
                    background: true,
                });
            }
            end_call(config, c);
        }
        Request::Withdraw { .. } => {}
    }
}

/// Client `i`'s wait ends: it starts on the latest grant when that answers its attempt, else
/// re-checks.
fn end_wait(config: &Config, s: &mut State, i: usize) {
    let c = &mut s.clients[i];
    let Phase::Waiting { seq, start, .. } = c.phase else {
        return;
    };
    let local = c.clock(s.now);
    let claim = config.ttl.min(config.claim);
    let me = token(i, c.round);
    let grant = c.slot.take().filter(|g| {
        g.stored
            .as_deref()
            .is_some_and(|v| crate::scripts::token_of(v) == me)
            && g.fencing != 0
    });
    let deadline = grant.as_ref().and_then(|g| match config.client_bug {
        ClientBug::None => {
            (g.seq == seq && local < start + validity(claim)).then(|| start + validity(claim))
        }
        ClientBug::StartsOnLatePush => {
            (local < start + validity(claim)).then(|| start + validity(claim))
        }
        ClientBug::ClaimFromGrant => (g.seq == seq).then(|| local + validity(claim)),
    });
    match (grant, deadline) {
        (Some(g), Some(deadline)) => start_guard(s, i, g.fencing, deadline, claim < config.ttl),
        _ => {
            let c = &mut s.clients[i];
            c.outbox.push(Request::Acquire {
                round: c.round,
                seq: seq + 1,
            });
            c.phase = Phase::Attempting {
                seq: seq + 1,
                start: local,
            };
        }
    }
}

/// Client `i`'s guard starts with `fencing`, believed until `deadline` (its clock).
fn start_guard(s: &mut State, i: usize, fencing: u64, deadline: u64, provisional: bool) {
    if fencing <= s.last_token {
        s.token_regressed = true;
    }
    s.last_token = s.last_token.max(fencing);
    let c = &mut s.clients[i];
    c.won += 1;
    c.slot = None;
    c.phase = Phase::Holding {
        deadline,
        provisional,
        renewing: None,
        renewed: false,
        since: c.clock(s.now),
    };
}

/// The call goes without the lock: its entry (and a lock just handed to it) is withdrawn in
/// the background.
fn withdraw(config: &Config, c: &mut Client) {
    c.outbox.push(Request::Withdraw { round: c.round });
    end_call(config, c);
}

/// The current call ends: the next one, or done.
fn end_call(config: &Config, c: &mut Client) {
    c.slot = None;
    c.phase = if c.round >= config.rounds {
        Phase::Done
    } else {
        Phase::Idle
    };
}
