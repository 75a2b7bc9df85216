//! A counterexample as a readable trace: one line per step, with the real time, what happened
//! (a script call with its reply, a push, a fault), the lock key after it and who believes
//! they hold it.

use std::fmt::Write;

use stateright::{Checker, Model};

use crate::client::{Phase, Request};
use crate::scripts::Reply;
use crate::system::{Action, Config, LOCK, LockSystem, QUEUE, State};

/// The trace of the path from the initial state to `states`' last, with the actions taken.
pub fn render(config: &Config, steps: &[(State, Option<Action>)]) -> String {
    let mut out = String::new();
    for pair in steps.windows(2) {
        let ((before, Some(action)), (after, _)) = (&pair[0], &pair[1]) else {
            continue;
        };
        let _ = writeln!(
            out,
            "t={:<3} {:<58} | {}",
            after.now,
            describe(config, before, after, action),
            summary(after)
        );
    }
    out
}

/// The trace of checker's discovery `name`, if it found one.
pub fn discovery<C: Checker<LockSystem>>(checker: &C, name: &'static str) -> Option<String> {
    let path = checker.discovery(name)?;
    Some(render(&checker.model().config, &path.into_vec()))
}

fn describe(config: &Config, before: &State, after: &State, action: &Action) -> String {
    match *action {
        Action::Tick => "time passes".to_owned(),
        Action::Lag(i) => format!("c{i}'s clock falls 1 ms behind"),
        Action::Serve(i) | Action::ServeLost(i) => {
            let mut scratch = before.clone();
            let (request, reply, published) = crate::system::run_request(config, &mut scratch, i);
            let pushed: Vec<String> = published
                .iter()
                .map(|(channel, payload)| format!("; publish {channel} '{payload}'"))
                .collect();
            let lost = if matches!(action, Action::ServeLost(_)) {
                " (reply LOST)"
            } else {
                ""
            };
            format!(
                "server runs c{i} {} -> {}{lost}{}; c{i} {}",
                request_name(&request),
                reply_text(&reply),
                pushed.concat(),
                phase(&after.clients[i].phase)
            )
        }
        Action::DeliverPush(i) => format!("c{i} receives a push, slot {:?}", after.clients[i].slot),
        Action::LosePush(i) => format!("c{i}'s push is LOST"),
        Action::Start(i) => format!("c{i} starts acquire call {}", after.clients[i].round),
        Action::EndWait(i) => format!("c{i}'s wait ends, now {}", phase(&after.clients[i].phase)),
        Action::Cancel(i) => format!("c{i}'s call is CANCELLED (withdraws)"),
        Action::Release(i) => format!("c{i} releases"),
        Action::Renew(i) => format!("c{i} sends a renewal"),
        Action::Crash(i) => format!("c{i} CRASHES"),
    }
}

fn request_name(request: &Request) -> String {
    match request {
        Request::Acquire { seq: 1, .. } => "acquire_queued(mode 1, seq 1)".to_owned(),
        Request::Acquire { seq, .. } => format!("acquire_queued(mode 2, seq {seq})"),
        Request::Renew { .. } => "renew".to_owned(),
        Request::Release {
            background: false, ..
        } => "release_handoff".to_owned(),
        Request::Release { .. } => "release_handoff (re-sent)".to_owned(),
        Request::Withdraw { .. } => "release_handoff (withdraw)".to_owned(),
    }
}

fn reply_text(reply: &Reply) -> String {
    match reply {
        Reply::Int(n) => n.to_string(),
        Reply::Bulk(s) => format!("'{s}'"),
        Reply::Nil => "nil".to_owned(),
        Reply::Error(e) => format!("ERR {e}"),
        Reply::Array(items) => {
            let items: Vec<String> = items.iter().map(reply_text).collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

fn phase(phase: &Phase) -> String {
    match phase {
        Phase::Idle => "idle".to_owned(),
        Phase::Attempting { seq, .. } => format!("attempting (seq {seq})"),
        Phase::Waiting { seq, start, .. } => format!("queued (seq {seq}, sent at {start})"),
        Phase::Holding {
            deadline,
            provisional,
            ..
        } => format!(
            "HOLDING until {deadline}{}",
            if *provisional { " (claim window)" } else { "" }
        ),
        Phase::Releasing => "releasing".to_owned(),
        Phase::Done => "done".to_owned(),
        Phase::Crashed => "crashed".to_owned(),
    }
}

fn summary(s: &State) -> String {
    let lock = match s.store.get(LOCK) {
        Ok(Some(value)) => format!("k={value} (pttl {})", s.store.pttl(LOCK)),
        Ok(None) => "k free".to_owned(),
        Err(_) => "k of another type".to_owned(),
    };
    let queue = match s.store.get_stored(QUEUE).map(|q| &q.data) {
        Some(crate::store::Data::List(values)) => format!(" q=[{}]", values.join(",")),
        _ => String::new(),
    };
    let believers: Vec<String> = s
        .clients
        .iter()
        .enumerate()
        .filter(|(_, c)| c.believes(s.now))
        .map(|(i, _)| format!("c{i}"))
        .collect();
    format!("{lock}{queue} believers=[{}]", believers.join(","))
}

/// Runs the BFS check of `model` on `threads` threads and returns the checker, done.
pub fn check(model: LockSystem, threads: usize) -> impl Checker<LockSystem> {
    model.checker().threads(threads).spawn_bfs().join()
}
