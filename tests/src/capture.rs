//! Capturing `tracing` events for assertions about what lockcore reports.

/// Captures `tracing` events (level and rendered fields) for assertions about what lockcore
/// reports. Install it for the current thread with `tracing::subscriber::set_default` or
/// `with_default`; on a current_thread runtime that covers every task.
///
/// `tracing` caches per call site whether any subscriber is interested. With only
/// thread-scoped subscribers, a call site first hit on a thread without one can be cached as
/// "never" while another test's capture is being installed, and its events are then lost. So
/// the first capture also installs a global subscriber that records nothing but keeps every
/// call site's interest at "sometimes": each event then asks the current thread's subscriber.
#[derive(Debug, Clone)]
pub struct CapturedEvents {
    events: std::sync::Arc<std::sync::Mutex<Vec<(tracing::Level, String)>>>,
    /// Span names with their fields as created, and each later `record` of span fields.
    spans: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// `false` for the global "always ask" subscriber, which records nothing.
    recording: bool,
}

impl Default for CapturedEvents {
    fn default() -> Self {
        static GLOBAL: std::sync::Once = std::sync::Once::new();
        GLOBAL.call_once(|| {
            let always_ask = CapturedEvents {
                events: std::sync::Arc::default(),
                spans: std::sync::Arc::default(),
                recording: false,
            };
            // Fails only if a global subscriber is already set, which is just as good.
            let _ = tracing::subscriber::set_global_default(always_ask);
        });
        CapturedEvents {
            events: std::sync::Arc::default(),
            spans: std::sync::Arc::default(),
            recording: true,
        }
    }
}

impl CapturedEvents {
    /// Every event at `level` so far, rendered as `name=value` pairs.
    pub fn at(&self, level: tracing::Level) -> Vec<String> {
        self.events
            .lock()
            .unwrap_or_else(|e| panic!("captured events: {e}"))
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, text)| text.clone())
            .collect()
    }

    /// Every span created so far (`name: field=value ..`), and every later recording of span
    /// fields (`record: field=value ..`), at any level.
    pub fn spans(&self) -> Vec<String> {
        self.spans
            .lock()
            .unwrap_or_else(|e| panic!("captured spans: {e}"))
            .clone()
    }

    fn push_span(&self, text: String) {
        if self.recording {
            self.spans
                .lock()
                .unwrap_or_else(|e| panic!("captured spans: {e}"))
                .push(text);
        }
    }
}

struct Render(String);

impl tracing::field::Visit for Render {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.push_str(&format!("{}={} ", field.name(), value));
    }
}

impl tracing::Subscriber for CapturedEvents {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        self.recording
    }
    fn new_span(&self, attributes: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut text = Render(format!("{}: ", attributes.metadata().name()));
        attributes.record(&mut text);
        self.push_span(text.0);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut text = Render("record: ".to_owned());
        values.record(&mut text);
        self.push_span(text.0);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if !self.recording {
            return;
        }
        let mut text = Render(String::new());
        event.record(&mut text);
        self.events
            .lock()
            .unwrap_or_else(|e| panic!("captured events: {e}"))
            .push((*event.metadata().level(), text.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// How many panics this process has seen so far, on any thread (a task that tokio caught
/// included). The first call installs a hook that counts them and then runs the previous
/// hook (which prints the message as usual).
pub fn panic_count() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}
