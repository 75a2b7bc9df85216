//! Human tables and JSON output. Every text from Redis in a table goes through
//! [`escape`](crate::escape); JSON keeps it exact.

use std::fmt::Write as _;

use serde::Serialize;

use crate::escape;
use crate::idem::IdemRecord;
use crate::listing::Listing;
use crate::record::{Holder, LockRecord, OtherKey};
use crate::time::{now_ms, when_or_dash};

/// How much of a stored record the `inspect` table shows.
const RECORD_PREVIEW_CHARS: usize = 200;

/// One entry of the JSON array: a lock (`"kind": "lock"`), a key that is not a lock
/// (`"kind": "not_a_lock"`) or an idempotency record (`"kind": "idempotency"`).
#[derive(Serialize)]
#[serde(untagged)]
enum Entry<'a> {
    Lock(&'a LockRecord),
    NotALock(&'a OtherKey),
    Idempotency(&'a IdemRecord),
}

/// One JSON array of objects, on one line: the locks, the keys that are not locks, then the
/// idempotency records. Times stay raw (ms since the Unix epoch, durations in ms).
pub(crate) fn json(listing: &Listing) -> String {
    let entries: Vec<Entry<'_>> = listing
        .locks
        .iter()
        .map(Entry::Lock)
        .chain(listing.others.iter().map(Entry::NotALock))
        .chain(listing.idem.iter().map(Entry::Idempotency))
        .collect();
    // Serializing plain structs of strings and numbers cannot fail; fall back to `[]` anyway.
    serde_json::to_string(&entries).unwrap_or_else(|_| "[]".to_owned())
}

/// The `list` / `watch` tables: the locks, then the keys that are not locks and the
/// idempotency records (each when there are any).
pub(crate) fn table(listing: &Listing) -> String {
    let now = now_ms();
    let mut out = lock_table(&listing.locks, now);
    if !listing.others.is_empty() {
        out.push('\n');
        out.push_str(&other_table(&listing.others));
    }
    if !listing.idem.is_empty() {
        out.push('\n');
        out.push_str(&idempotency_table(&listing.idem, now));
    }
    out
}

fn other_table(others: &[OtherKey]) -> String {
    let mut rows = vec![
        ["NOT A LOCK", "TYPE", "PTTL_MS"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for o in others {
        rows.push(vec![
            escape::bytes(&o.key_bytes).into_owned(),
            shown(&o.redis_type),
            o.pttl_ms.to_string(),
        ]);
    }
    let mut out = columns(&rows);
    let _ = writeln!(
        out,
        "{} key(s) under the pattern that are not locks (another Redis type than a string)",
        others.len()
    );
    out
}

/// The `inspect` view of a key that is not a lock.
pub(crate) fn other_detail(o: &OtherKey) -> String {
    let rows: Vec<Vec<String>> = vec![
        vec!["key".into(), escape::bytes(&o.key_bytes).into_owned()],
        vec!["kind".into(), o.kind.to_owned()],
        vec!["type".into(), shown(&o.redis_type)],
        vec!["pttl_ms".into(), o.pttl_ms.to_string()],
        vec![
            "note".into(),
            format!(
                "a Redis {}, not a string: no lockcore lock (`release` refuses it)",
                shown(&o.redis_type)
            ),
        ],
    ];
    columns(&rows)
}

fn idempotency_table(idem: &[IdemRecord], now: u64) -> String {
    let mut rows = vec![
        [
            "IDEMPOTENCY KEY",
            "STATE",
            "SINCE",
            "SIZE",
            "PTTL_MS",
            "HOLDER",
            "PID",
            "WAITERS",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for r in idem {
        let holder = r.holder.as_ref();
        rows.push(vec![
            shown(&r.key),
            r.state.to_owned(),
            when_or_dash(since(r), now),
            r.size_bytes
                .map_or_else(|| "-".to_owned(), |n| format!("{n}B")),
            r.pttl_ms.to_string(),
            or_dash(holder.and_then(|h| h.host.as_deref())),
            holder
                .and_then(|h| h.pid)
                .map_or_else(|| "-".to_owned(), |p| p.to_string()),
            r.waiters.len().to_string(),
        ]);
    }
    let mut out = columns(&rows);
    let _ = writeln!(out, "{} idempotency record(s)", idem.len());
    out
}

/// The `inspect` view of an idempotency record, with the stored JSON cut to a preview.
pub(crate) fn idempotency_detail(r: &IdemRecord) -> String {
    let now = now_ms();
    let holder = r.holder.as_ref();
    let number = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let mut rows: Vec<Vec<String>> = vec![
        vec!["key".into(), shown(&r.key)],
        vec!["kind".into(), r.kind.to_owned()],
        vec!["idempotency_key".into(), shown(&r.idempotency_key)],
        vec!["lock_key".into(), shown(&r.lock_key)],
        vec!["state".into(), r.state.to_owned()],
        vec!["pttl_ms".into(), r.pttl_ms.to_string()],
        vec!["since".into(), when_or_dash(since(r), now)],
        vec![
            "size".into(),
            r.size_bytes
                .map_or_else(|| "-".to_owned(), |n| format!("{n} bytes")),
        ],
        vec!["written_at".into(), when_or_dash(r.written_at, now)],
        vec!["fingerprint".into(), or_dash(r.fingerprint.as_deref())],
        vec![
            "host".into(),
            or_dash(holder.and_then(|h| h.host.as_deref())),
        ],
        vec!["pid".into(), number(holder.and_then(|h| h.pid))],
        vec![
            "label".into(),
            or_dash(holder.and_then(|h| h.label.as_deref())),
        ],
        vec!["waiters".into(), r.waiters.len().to_string()],
    ];
    for (i, w) in r.waiters.iter().enumerate() {
        rows.push(vec![format!("  #{}", i + 1), waiter(w)]);
    }
    let stored = r
        .record
        .as_ref()
        .map_or_else(|| "-".to_owned(), |v| shown(&preview(&v.to_string())));
    rows.push(vec!["record".into(), stored]);
    columns(&rows)
}

/// When a record was written (`done`) or its first call took the lock (`running`).
fn since(r: &IdemRecord) -> Option<u64> {
    r.written_at
        .or_else(|| r.holder.as_ref().and_then(|h| h.acquired_at))
}

/// `text` cut to [`RECORD_PREVIEW_CHARS`] characters, saying how much was left out.
fn preview(text: &str) -> String {
    match text.char_indices().nth(RECORD_PREVIEW_CHARS) {
        None => text.to_owned(),
        Some((cut, _)) => format!(
            "{}... ({} more bytes; --json shows all)",
            &text[..cut],
            text.len() - cut
        ),
    }
}

fn lock_table(records: &[LockRecord], now: u64) -> String {
    let mut rows = vec![
        [
            "KEY", "PTTL_MS", "HOLDER", "PID", "LABEL", "ACQUIRED", "TEMPLATE", "WAITERS",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for r in records {
        let h = &r.holder;
        rows.push(vec![
            escape::bytes(&r.key_bytes).into_owned(),
            r.pttl_ms.to_string(),
            or_dash(h.host.as_deref()),
            h.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
            or_dash(h.label.as_deref()),
            when_or_dash(h.acquired_at, now),
            or_dash(h.key_template.as_deref()),
            r.waiters.len().to_string(),
        ]);
    }
    let mut out = columns(&rows);
    let _ = writeln!(out, "{} lock(s)", records.len());
    out
}

/// The `inspect` view: one field a line, then the waiters in queue order.
pub(crate) fn detail(r: &LockRecord) -> String {
    let h = &r.holder;
    let mut rows: Vec<Vec<String>> = vec![
        vec!["key".into(), escape::bytes(&r.key_bytes).into_owned()],
        vec!["pttl_ms".into(), r.pttl_ms.to_string()],
        vec!["token".into(), escape::bytes(&h.token_bytes).into_owned()],
        vec!["host".into(), or_dash(h.host.as_deref())],
        vec![
            "pid".into(),
            h.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
        ],
        vec!["label".into(), or_dash(h.label.as_deref())],
        vec!["acquired_at".into(), when_or_dash(h.acquired_at, now_ms())],
        vec!["key_template".into(), or_dash(h.key_template.as_deref())],
        vec!["fencing_token".into(), "- (not stored in Redis)".into()],
        vec!["waiters".into(), r.waiters.len().to_string()],
    ];
    for (i, w) in r.waiters.iter().enumerate() {
        rows.push(vec![format!("  #{}", i + 1), waiter(w)]);
    }
    if let Some(shares) = &r.shares {
        let what = match shares.permits {
            Some(permits) => format!("semaphore: {} of {permits} permits used", shares.used),
            None => format!("read: {} reader(s)", shares.used),
        };
        rows.push(vec!["shares".into(), what]);
        for share in &shares.holders {
            rows.push(vec![
                "  share".into(),
                format!(
                    "{} remaining_ms={}",
                    shown(&share.token),
                    share.remaining_ms
                ),
            ]);
        }
    }
    columns(&rows)
}

fn waiter(w: &Holder) -> String {
    format!(
        "{} host={} pid={} label={}",
        escape::bytes(&w.token_bytes),
        or_dash(w.host.as_deref()),
        w.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
        or_dash(w.label.as_deref()),
    )
}

/// Text from Redis, escaped.
fn shown(s: &str) -> String {
    escape::text(s).into_owned()
}

/// Text from Redis, escaped, or `-`.
fn or_dash(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_owned(), shown)
}

/// Left-aligned columns, two spaces apart.
fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let rows = vec![
            vec!["a".to_owned(), "bb".to_owned()],
            vec!["ccc".to_owned(), "d".to_owned()],
        ];
        assert_eq!(columns(&rows), "a    bb\nccc  d\n");
    }

    #[test]
    fn long_records_are_cut_on_a_char_boundary() {
        assert_eq!(preview("{\"v\":1}"), "{\"v\":1}");
        let long = "é".repeat(RECORD_PREVIEW_CHARS + 10);
        let cut = preview(&long);
        assert!(cut.starts_with(&"é".repeat(RECORD_PREVIEW_CHARS)), "{cut}");
        assert!(cut.ends_with("(20 more bytes; --json shows all)"), "{cut}");
    }
}
