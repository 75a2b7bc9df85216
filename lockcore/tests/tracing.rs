//! The spans and events an operator sees, on a real server: contention at debug once per
//! call (never a warning per retry), loss at warn, and the acquire span's fields.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Debug, Clone)]
struct Seen {
    /// `event` or the span's name (recorded when the span closes).
    what: String,
    level: Level,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl Capture {
    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.lock().unwrap().push(Seen {
            what: "event".to_owned(),
            level: *event.metadata().level(),
            fields: fields.0,
        });
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            self.0.lock().unwrap().push(Seen {
                what: span.name().to_owned(),
                level: *span.metadata().level(),
                fields,
            });
        }
    }
}

fn events<'a>(seen: &'a [Seen], message: &str) -> Vec<&'a Seen> {
    seen.iter()
        .filter(|s| {
            s.what == "event" && s.fields.get("message").is_some_and(|m| m.contains(message))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_is_one_debug_line_and_loss_a_warning() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(capture.clone()))
        .expect("the only subscriber of this test binary");
    let server = RedisServer::start();
    let locks = LockManager::connect(&server.url()).await.expect("manager");
    let mut raw = server.connection().await;
    let ttl = Duration::from_secs(10);

    let held = locks
        .acquire("busy", &LockOptions::new(ttl))
        .await
        .expect("acquire");
    capture.take();
    let polling = LockOptions::new(ttl)
        .wait(Duration::from_millis(150))
        .handoff(false)
        .retry_base(Duration::from_millis(1))
        .retry_cap(Duration::from_millis(5));
    assert!(
        locks
            .acquire("busy", &polling)
            .await
            .is_err_and(|e| e.is_contended())
    );
    let seen = capture.take();
    let acquire = seen
        .iter()
        .find(|s| s.what == "lock.acquire")
        .expect("the acquire span closed");
    assert_eq!(acquire.level, Level::DEBUG);
    assert_eq!(acquire.fields["key"], "lock:busy");
    assert_eq!(acquire.fields["key_template"], "-");
    assert_eq!(acquire.fields["outcome"], "contended");
    let attempts: u32 = acquire.fields["attempts"].parse().expect("attempts");
    assert!(attempts > 5, "retried {attempts} times");
    assert!(
        acquire.fields["waited_ms"]
            .parse::<u64>()
            .expect("waited_ms")
            >= 150
    );
    let contended = events(&seen, "lock contended; waiting");
    assert_eq!(
        contended.len(),
        1,
        "one line per call, not per retry: {seen:#?}"
    );
    assert_eq!(contended[0].level, Level::DEBUG);
    assert_eq!(events(&seen, "wait budget spent").len(), 1, "{seen:#?}");
    assert!(seen.iter().all(|s| s.level != Level::WARN), "{seen:#?}");

    held.release().await.expect("release");
    let seen = capture.take();
    let release = seen
        .iter()
        .find(|s| s.what == "lock.release")
        .expect("the release span closed");
    assert_eq!(release.fields["key"], "lock:busy");

    // The watchdog finds the key gone: one warning naming the key and the reason.
    let watched = LockOptions::new(Duration::from_millis(300)).watchdog(true);
    let guard = locks.acquire("watched", &watched).await.expect("acquire");
    let acquired = capture
        .take()
        .into_iter()
        .find(|s| s.what == "lock.acquire")
        .expect("acquire span");
    assert_eq!(acquired.fields["outcome"], "acquired");
    assert_eq!(
        acquired.fields["fencing_token"],
        guard.fencing_token().to_string()
    );
    // Another party deletes the key: the watchdog's next renewal finds it gone.
    let _: i64 = redis::AsyncCommands::del(&mut raw, guard.key())
        .await
        .expect("DEL");
    guard.lost().await;
    let seen = capture.take();
    let warnings: Vec<&Seen> = seen.iter().filter(|s| s.level == Level::WARN).collect();
    assert_eq!(warnings.len(), 1, "{seen:#?}");
    assert_eq!(warnings[0].fields["key"], "lock:watched");
    assert_eq!(warnings[0].fields["reason"], "taken");
}
