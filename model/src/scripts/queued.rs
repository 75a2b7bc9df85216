//! The fair queue with direct grant: `acquire_queued.lua` (its modes 0, 1 and 2),
//! `release_handoff.lua`, and their helpers `hand_over.lua` (`serve`), `enqueue.lua`,
//! `entries.lua` and `queue.lua`, re-stated line by line for plain locks. The keys are always
//! `[lock, counter, queue, entries]`: the share set `KEYS[5]` (semaphores, read-write locks),
//! `acquire_queued.lua`'s `ARGV[4]` (a job lock's `acquired_at` stamped at the acquire) and
//! `release_handoff.lua`'s minimum hold `ARGV[2]` (`hold.lua`) are not modelled. A share
//! waiter met at the head of the queue is woken to take its turn itself, as the plain scripts
//! do.

use super::{
    Abort, Constants, Outcome, Reply, ScriptBug, decimal, mint, not_a_lock, number, owns, token_of,
};
use crate::store::{Store, WrongType};

/// The four keys of a queue script.
#[derive(Debug, Clone, Copy)]
pub struct QueueKeys<'a> {
    /// `KEYS[1]`, the lock key.
    pub lock: &'a str,
    /// `KEYS[2]`, the caller's fencing counter (the lock key itself: no fencing).
    pub counter: &'a str,
    /// `KEYS[3]`, the waiter queue (a list of waiters' values).
    pub queue: &'a str,
    /// `KEYS[4]`, the waiter entries (a hash by token).
    pub entries: &'a str,
}

/// One script call: the store, the keys, the constants, the messages published so far.
struct Run<'s, 'k> {
    store: &'s mut Store,
    keys: QueueKeys<'k>,
    constants: Constants,
    published: Vec<(String, String)>,
}

impl Run<'_, '_> {
    /// `queue(command, ..)`: a `WRONGTYPE` on a queue key deletes both queue keys and reads as
    /// nothing (`None` / no effect).
    fn queue<T>(
        &mut self,
        op: impl FnOnce(&mut Store) -> Result<Option<T>, WrongType>,
    ) -> Option<T> {
        match op(self.store) {
            Ok(value) => value,
            Err(WrongType) => {
                self.store.del(self.keys.queue);
                self.store.del(self.keys.entries);
                None
            }
        }
    }

    fn lpop(&mut self) -> Option<String> {
        let queue = self.keys.queue;
        self.queue(|s| s.lpop(queue))
    }

    fn hget(&mut self, field: &str) -> Option<String> {
        let entries = self.keys.entries;
        self.queue(|s| s.hget(entries, field))
    }

    fn hdel(&mut self, field: &str) {
        let entries = self.keys.entries;
        self.queue(|s| s.hdel(entries, field).map(|()| None::<()>));
    }

    /// `serve(now, self)` of `hand_over.lua`, for the plain scripts (no share set `KEYS[5]`):
    /// the free lock key to the first live waiter at the head of the queue. Returns what it
    /// did and whether a live waiter is still waiting at the head (`blocked`).
    fn serve(&mut self, now: u64, me: Option<&str>) -> Result<(Served, bool), Abort> {
        if super::value_of(self.store, self.keys.lock).is_some() {
            return Ok((Served::Nothing, true));
        }
        let queue = self.keys.queue;
        for _ in 0..self.constants.hand_over_steps {
            let Some(head) = self.queue(|s| s.lindex0(queue)) else {
                return Ok((Served::Nothing, false));
            };
            let token = token_of(&head).to_owned();
            let entry = self.hget(&token);
            let live = entry.as_deref().and_then(entry_fields).and_then(|fields| {
                let px = number(fields.claim).min(number(fields.ttl));
                (px >= 1 && px <= self.constants.max_ttl_ms && number(fields.deadline) > now)
                    .then_some((px, fields))
            });
            let Some((px, fields)) = live else {
                self.lpop();
                if entry.is_some() {
                    self.hdel(&token);
                }
                continue;
            };
            if Some(token.as_str()) == me {
                return Ok((Served::Caller, false));
            }
            let len = usize::try_from(number(fields.len)).unwrap_or(usize::MAX);
            let (counter, channel) = split_at(fields.rest, len);
            let (counter, channel) = (counter.to_owned(), channel.to_owned());
            let seq = fields.seq.to_owned();
            if (counter != self.keys.lock && counter != self.keys.counter) || is_share(&head) {
                self.published.push((channel, format!("{token} 0 0")));
                return Ok((Served::Recheck, true));
            }
            self.lpop();
            self.hdel(&token);
            let fencing = decimal(&mint(self.store, self.keys.lock, &counter)?);
            let stored = stamp(&head, now);
            self.store.set(self.keys.lock, &stored, Some(px));
            let payload = format!("{token} {fencing} {seq} {stored}");
            self.published.push((channel, payload));
            return Ok((Served::Granted, false));
        }
        Ok((Served::Nothing, true))
    }
}

/// What `serve` did (for a plain script: it never serves shares).
#[derive(PartialEq, Eq)]
enum Served {
    /// Nobody was served (`false`).
    Nothing,
    /// The caller is the first live waiter (`'self'`).
    Caller,
    /// The first live waiter has another counter, or waits for a share: woken to take its
    /// turn itself (`'recheck'`).
    Recheck,
    /// The key was granted to another queued waiter (its value).
    Granted,
}

/// `share_of(value)` of `shares.lua` is not nil: the value is a share waiter's (a
/// semaphore's `"permits":<n>` or a reader's `"mode":"read"}`), which a plain script does not
/// serve (it has no share set).
fn is_share(value: &str) -> bool {
    let permits = value.match_indices("\"permits\":").any(|(at, _)| {
        let before = at.checked_sub(1).and_then(|b| value.as_bytes().get(b));
        let rest = &value.as_bytes()[at + "\"permits\":".len()..];
        let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        matches!(before, Some(b'{' | b','))
            && digits > 0
            && matches!(rest.get(digits), Some(b',' | b'}'))
    });
    permits || value.contains("\"mode\":\"read\"}")
}

/// The fields of an entry `<deadline>|<ttl>|<seq>|<claim>|<len>|<rest>`.
struct Entry<'a> {
    deadline: &'a str,
    ttl: &'a str,
    seq: &'a str,
    claim: &'a str,
    len: &'a str,
    rest: &'a str,
}

/// `entry_fields(entry)`: `^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(.*)$`.
fn entry_fields(entry: &str) -> Option<Entry<'_>> {
    let mut parts = entry.splitn(6, '|');
    let mut digits = || parts.next().filter(|p| is_digits(p));
    let (deadline, ttl, seq, claim, len) = (digits()?, digits()?, digits()?, digits()?, digits()?);
    let rest = parts.next()?;
    Some(Entry {
        deadline,
        ttl,
        seq,
        claim,
        len,
        rest,
    })
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `string.sub(rest, 1, len), string.sub(rest, len + 1)`, by bytes.
fn split_at(rest: &str, len: usize) -> (&str, &str) {
    let len = len.min(rest.len());
    match (rest.get(..len), rest.get(len..)) {
        (Some(a), Some(b)) => (a, b),
        _ => (rest, ""),
    }
}

/// `stamp(value, now)`: the first `,"acquired_at":<digits>` gets `now`.
pub fn stamp(value: &str, now: u64) -> String {
    const FIELD: &str = ",\"acquired_at\":";
    for (at, _) in value.match_indices(FIELD) {
        let digits_from = at + FIELD.len();
        let digits = value[digits_from..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits > 0 {
            let end = digits_from + digits;
            return format!("{}{now}{}", &value[..digits_from], &value[end..]);
        }
    }
    value.to_owned()
}

/// A parsed ticket `<mode> <seq> <claim_ms> <lease_ms> <channel>`.
struct Ticket<'a> {
    mode: &'a str,
    seq: &'a str,
    claim: &'a str,
    lease: &'a str,
    channel: &'a str,
}

/// `^(%d) (%d+) (%d+) (%d+) (.*)$`.
fn ticket(text: &str) -> Option<Ticket<'_>> {
    let mut parts = text.splitn(5, ' ');
    let mode = parts.next().filter(|m| m.len() == 1 && is_digits(m))?;
    let mut digits = || parts.next().filter(|p| is_digits(p));
    let (seq, claim, lease) = (digits()?, digits()?, digits()?);
    let channel = parts.next()?;
    Some(Ticket {
        mode,
        seq,
        claim,
        lease,
        channel,
    })
}

/// `acquire_queued.lua`: `ARGV = [value, ttl_ms, ticket]`.
pub fn acquire_queued(
    store: &mut Store,
    keys: QueueKeys<'_>,
    constants: Constants,
    value: &str,
    ttl: &str,
    ticket_text: &str,
) -> Outcome {
    let mut run = Run {
        store,
        keys,
        constants,
        published: Vec::new(),
    };
    let reply = acquire_queued_in(&mut run, value, ttl, ticket_text).unwrap_or_else(Reply::Error);
    (reply, run.published)
}

fn acquire_queued_in(
    run: &mut Run<'_, '_>,
    value: &str,
    ttl_text: &str,
    ticket_text: &str,
) -> Result<Reply, Abort> {
    let keys = run.keys;
    let ttl = ttl_text.parse::<u64>().ok().filter(|&t| t > 0);
    let mut old = None;
    let first = ticket_text.as_bytes().first();
    let fast = first == Some(&b'1') || (first == Some(&b'0') && !run.store.exists(keys.queue));
    if fast {
        match run.store.get(keys.lock) {
            Ok(None) => {
                let ttl = ttl.ok_or_else(invalid_expire)?;
                run.store.set(keys.lock, value, Some(ttl));
                return Ok(Reply::Array(vec![
                    Reply::Int(1),
                    mint(run.store, keys.lock, keys.counter)?,
                ]));
            }
            Ok(Some(held)) => old = Some(Ok(Some(held))),
            Err(WrongType) => old = Some(Err(WrongType)),
        }
    }
    let Some(t) = ticket(ticket_text) else {
        return Ok(Reply::Error(
            "ERR malformed lockcore acquire ticket".to_owned(),
        ));
    };
    let token = token_of(value);
    let holder = match old {
        Some(old) => old,
        None => run.store.get(keys.lock),
    };
    let Ok(mut holder) = holder else {
        return Ok(not_a_lock(run.store, keys.lock));
    };
    if owns(holder.as_deref(), token) {
        run.store
            .pexpire(keys.lock, ttl.ok_or_else(invalid_expire)?);
        let minted = mint(run.store, keys.lock, keys.counter)?;
        return Ok(Reply::Array(vec![
            Reply::Int(1),
            minted,
            Reply::Bulk(holder.unwrap_or_default()),
        ]));
    }
    let now = run.store.now;
    if holder.is_none() {
        if t.mode == "0" {
            let queue = keys.queue;
            let mut head = run.queue(|s| s.lindex0(queue));
            for _ in 0..run.constants.hand_over_steps {
                let Some(first) = head.clone() else { break };
                let entry = run.hget(token_of(&first));
                let deadline = entry
                    .as_deref()
                    .and_then(|e| e.split('|').next())
                    .filter(|d| is_digits(d));
                if deadline.is_some_and(|d| number(d) > now) {
                    return Ok(Reply::ints(&[0, 0]));
                }
                run.lpop();
                if entry.is_some() {
                    run.hdel(token_of(&first));
                }
                head = run.queue(|s| s.lindex0(queue));
            }
            if head.is_some() {
                return Ok(Reply::ints(&[0, 0]));
            }
            run.store
                .set(keys.lock, value, Some(ttl.ok_or_else(invalid_expire)?));
            return Ok(Reply::Array(vec![
                Reply::Int(1),
                mint(run.store, keys.lock, keys.counter)?,
            ]));
        }
        let (served, blocked) = run.serve(now, Some(token))?;
        if served == Served::Caller || (served == Served::Nothing && !blocked) {
            if served == Served::Caller {
                run.lpop();
            }
            run.hdel(token);
            let stored = stamp(value, now);
            run.store
                .set(keys.lock, &stored, Some(ttl.ok_or_else(invalid_expire)?));
            let minted = mint(run.store, keys.lock, keys.counter)?;
            return Ok(Reply::Array(vec![
                Reply::Int(1),
                minted,
                Reply::Bulk(stored),
            ]));
        }
        holder = run.store.get(keys.lock).map_err(super::abort)?;
    }
    if t.mode == "0" {
        return Ok(Reply::ints(&[0, run.store.pttl(keys.lock)]));
    }
    let entry = format!(
        "{}|{ttl_text}|{}|{}|{}|{}{}",
        now.saturating_add(number(t.lease)),
        t.seq,
        t.claim,
        keys.counter.len(),
        keys.counter,
        t.channel
    );
    let mut lapsed = true;
    if t.mode == "2" {
        let before = run.hget(token);
        let deadline = before
            .as_deref()
            .and_then(|e| e.split('|').next())
            .filter(|d| is_digits(d));
        lapsed = deadline.is_none_or(|d| number(d) <= now);
    }
    let (queue, entries) = (keys.queue, keys.entries);
    if run
        .queue(|s| s.hset(entries, token, &entry).map(|()| Some(())))
        .is_none()
    {
        run.queue(|s| s.hset(entries, token, &entry).map(|()| Some(())));
    }
    if lapsed {
        if t.mode == "2" {
            run.queue(|s| s.lrem_all(queue, value).map(|()| None::<()>));
        }
        run.queue(|s| s.rpush(queue, value).map(|()| None::<()>));
    }
    let keep = run.constants.queue_ttl_floor_ms.max(4 * number(t.lease));
    run.store.pexpire(queue, keep);
    run.store.pexpire(entries, keep);
    if holder.is_none() {
        return Ok(Reply::ints(&[0, 0]));
    }
    Ok(Reply::ints(&[0, run.store.pttl(keys.lock)]))
}

fn invalid_expire() -> Abort {
    "ERR invalid expire time in 'set' command".to_owned()
}

/// `release_handoff.lua`: `ARGV = [value]`; 1 when the key held it (deleted or handed over),
/// 0 when missing, -1 when it holds another value or type (the value withdraws from the queue).
pub fn release_handoff(
    store: &mut Store,
    keys: QueueKeys<'_>,
    constants: Constants,
    bug: ScriptBug,
    value: &str,
) -> Outcome {
    let mut run = Run {
        store,
        keys,
        constants,
        published: Vec::new(),
    };
    let reply = release_in(&mut run, bug, value).unwrap_or_else(Reply::Error);
    (reply, run.published)
}

fn release_in(run: &mut Run<'_, '_>, bug: ScriptBug, value: &str) -> Result<Reply, Abort> {
    let keys = run.keys;
    let holder = run.store.get(keys.lock);
    let token = token_of(value);
    let held = match &holder {
        Ok(held) => owns(held.as_deref(), token),
        Err(WrongType) => false,
    };
    let released =
        held || (bug == ScriptBug::ReleaseWithoutOwnerCheck && matches!(holder, Ok(Some(_))));
    if released && bug == ScriptBug::ReleaseDeletes {
        return Ok(Reply::Int(i64::from(run.store.del(keys.lock))));
    }
    if released {
        if let Ok(None) = run.store.lindex0(keys.queue) {
            return Ok(Reply::Int(i64::from(run.store.del(keys.lock))));
        }
        run.store.del(keys.lock);
        let now = run.store.now;
        run.serve(now, None)?;
        return Ok(Reply::Int(1));
    }
    run.hdel(token);
    let queue = keys.queue;
    run.queue(|s| s.lrem_all(queue, value).map(|()| None::<()>));
    Ok(Reply::Int(match holder {
        Ok(None) => 0,
        _ => -1,
    }))
}
