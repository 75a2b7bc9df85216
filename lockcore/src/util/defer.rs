//! [`OnDrop`]: run a closure when a value is dropped, unless it was disarmed first.

/// Runs its closure on drop unless [`disarm`](Self::disarm)ed: the one drop-guard pattern of
/// this crate (cleanup of an acquire dropped in flight, a waiter's withdrawal, the trace of a
/// release no runtime ran, a background task's "stopped" mark).
pub(crate) struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub(crate) fn new(on_drop: F) -> Self {
        OnDrop(Some(on_drop))
    }

    /// Drops the closure unrun.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(on_drop) = self.0.take() {
            on_drop();
        }
    }
}

impl<F: FnOnce()> std::fmt::Debug for OnDrop<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OnDrop").field(&self.0.is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_on_drop_and_not_once_disarmed() {
        let ran = std::cell::Cell::new(0);
        drop(OnDrop::new(|| ran.set(ran.get() + 1)));
        OnDrop::new(|| ran.set(ran.get() + 10)).disarm();
        assert_eq!(ran.get(), 1);
    }
}
