//! The `#[distributed_lock]` attribute of [lockcore](https://docs.rs/lockcore).
//!
//! Depend on `lockcore`, which re-exports the attribute (feature `macros`, on by default); this
//! crate is its implementation and is versioned in lockstep with it.

mod args;
mod diagnostics;
mod expand;
mod idempotent;
mod item;
mod render;
mod template;

#[cfg(test)]
mod snapshot_shapes;
#[cfg(test)]
mod snapshot_tests;

/// Runs an `async fn` while holding a Redis lock whose key is rendered from its arguments.
///
/// ```no_run
/// use lockcore::distributed_lock;
/// # #[derive(Debug, thiserror::Error)]
/// # enum AppError {
/// #     #[error(transparent)]
/// #     Lock(#[from] lockcore::LockError),
/// # }
/// # struct OrderId(u64);
/// # struct Stock(u64);
/// # async fn load_stock(_: u64) -> Result<Stock, AppError> { Ok(Stock(1)) }
/// # async fn place_order(_: Stock, user_id: u64) -> Result<OrderId, AppError> { Ok(OrderId(user_id)) }
///
/// #[distributed_lock(key = "order:lock:product:<product_id>", ttl_ms = 10_000)]
/// async fn create_order(product_id: u64, user_id: u64) -> Result<OrderId, AppError> {
///     // at most one caller per product, across every instance of the service
///     let stock = load_stock(product_id).await?;
///     place_order(stock, user_id).await
/// }
/// # fn main() { let _ = create_order(1, 2); }
/// ```
///
/// Each call renders the key, acquires the lock, runs the body, releases the lock and returns
/// the body's value. The body never runs without the lock.
///
/// # Arguments
///
/// `name = value` pairs, comma-separated, in any order, each at most once.
///
/// | argument | value | default |
/// |---|---|---|
/// | `key` | string literal: the key template, see below (required) | none |
/// | `ttl_ms` | positive integer literal: the lease, in milliseconds | the manager's default (30 000 ms) |
/// | `wait_ms` | integer literal: the total time to wait for a contended lock, in milliseconds; `0` means one attempt | the manager's default (5 000 ms) |
/// | `manager` | expression evaluated in the function's scope, giving a `LockManager`, `&LockManager` or `Arc<LockManager>`, e.g. `self.locks` | `lockcore::default_manager()` |
/// | `crate` | string literal: the path to lockcore, for a renamed dependency, e.g. `crate = "::my_locks"` | `"::lockcore"` |
/// | `watchdog` | `true` or `false`: renew the lease while the body runs | the manager's explicit `LockOptions::watchdog(..)` in its default options, else `true` |
/// | `on_lost` | `"abort"` or `"continue"`: what happens to the body when the lock is lost | `"abort"` |
/// | `guard` | identifier: binds `&LockGuard` under that name inside the body (`&MultiGuard` with `keys`) | none |
/// | `keys` | array of key templates, e.g. `keys = ["acct:<from>", "acct:<to>"]`: all locked together; exclusive with `key` | none |
/// | `on_contended` | `"error"`: return the `Contended` error; `"skip"`: return `Ok(())` (for `Result<(), E>`) or `Ok(None)` (for `Result<Option<T>, E>`) without running the body | `"error"` |
/// | `fallback` | path to a fn (async or not) taking the same arguments (`self` first in a method) and returning the same type, called instead of the body when the lock is contended; exclusive with `on_contended` | none |
/// | `reentrant` | `true` or `false`: what a nested call on a key this task already holds through the attribute does (see below) | `true` |
/// | `permits` | integer literal ≥ 1: the call takes one permit of a semaphore of that many permits on the key (`LockManager::semaphore`; `permits = 1` is the plain lock); exclusive with `keys` and `mode` | none |
/// | `mode` | `"read"`: the call takes a reader's share of the key's read-write lock (`RwLock::read`); `"write"`: the write lock, which is the plain lock; exclusive with `keys` and `permits` | `"write"` |
/// | `hold_at_least_ms` | integer literal ≥ 1 and ≤ `ttl_ms` (a compile error otherwise), ms: the release keeps the key until this long after the acquire, by Redis' clock (ShedLock's lockAtLeastFor; `LockOptions::hold_at_least`). With `wait_ms = 0, on_contended = "skip"` a job lock | none |
///
/// The Redis key is the manager's key prefix (default `"lock:"`) followed by the rendered
/// template, byte for byte.
///
/// # Key templates
///
/// - `<name>` inserts the parameter `name` with its `Display` impl; `<name.field.field>` inserts
///   a field (tuple indices work too: `<pair.0>`).
/// - `<self.field>` works in methods, with any receiver form.
/// - `<<` is a literal `<`.
/// - All other text is literal, `>` and braces included, so a Redis Cluster hash tag such as
///   `"{user:<user_id>}:cart"` keeps its braces.
///
/// The first name of each placeholder must be a parameter bound by a plain identifier pattern
/// (`x: T` or `mut x: T`), or `self`. Everything is checked at compile time: an empty template,
/// an unclosed `<`, an empty `<>`, a malformed placeholder and an unknown name (the error lists
/// the available parameters) are compile errors on the key.
///
/// # Several keys
///
/// With `keys = [..]` every template is rendered, and the keys are locked with
/// `LockManager::acquire_many`: sorted and deduplicated (so two calls locking the same
/// accounts in opposite directions never deadlock), all or nothing (a key that cannot be taken
/// releases those already taken), within one wait budget, and released together. Each key has
/// its own fencing token: `guard = held` binds `&MultiGuard` (`held.fencing_token("acct:1")`,
/// `held.guards()`).
///
/// ```no_run
/// # use lockcore::distributed_lock;
/// # async fn move_money(_: u64, _: u64, _: i64) -> Result<(), lockcore::LockError> { Ok(()) }
/// #[distributed_lock(keys = ["acct:<from>", "acct:<to>"], ttl_ms = 5_000)]
/// async fn transfer(from: u64, to: u64, amount: i64) -> Result<(), lockcore::LockError> {
///     move_money(from, to, amount).await
/// }
/// # fn main() {}
/// ```
///
/// # Contention
///
/// Once `wait_ms` is spent, `on_contended = "skip"` returns `Ok(())` / `Ok(None)` without
/// running the body (a job that one instance runs is skipped by the others), and
/// `fallback = path` returns what `path(..)` returns, called with the same arguments; both are
/// logged at `DEBUG` through `tracing`, with the key. Other errors (Redis down, `Lost`) are
/// returned as errors either way.
///
/// A skipped `Result<(), E>` call returns the same `Ok(())` as one whose body ran: its caller
/// cannot tell them apart. When the caller needs to know, return `Result<Option<T>, E>` (a
/// body that ran returns `Ok(Some(..))`, a skipped call `Ok(None)`).
///
/// # Reentrancy
///
/// A locked call made inside a locked body of the same task, on keys that body's call already
/// holds (same manager), never waits for its own lock:
///
/// - `reentrant = true` (the default): it runs at once, without a second acquire, under the
///   enclosing call's lock (`guard` binds the enclosing guard); only the outermost call
///   releases. Its own `ttl_ms`, `wait_ms` and `watchdog` are not used.
/// - `reentrant = false`: it fails at once with `LockError::AlreadyHeld { key }`.
/// - A nested call whose keys are held only in part (or across several enclosing calls) fails
///   at once with `AlreadyHeld` too: acquiring the rest while holding some could deadlock.
/// - A nested call re-enters only a hold that covers its kind: an exclusive hold (plain, job,
///   `mode = "write"`, `keys`) covers every kind, a read share a read, a permit a permit of the
///   same count. Otherwise (a write or plain lock inside a share, another permit count, a read
///   inside permits, permits inside a read) it fails at once with `LockError::InvalidOptions`
///   naming both kinds; its body does not run. The guide's attribute chapter has the table.
///
/// The hold set is a tokio task-local that follows the body's future: a task started with
/// `tokio::spawn` inside the body does not inherit it, and its locked calls wait like any
/// other contender's.
///
/// # With `#[async_trait]` and `#[tracing::instrument]`
///
/// In an `#[async_trait]` impl (or trait, for default methods) write `#[distributed_lock]` on
/// the method, with `#[async_trait]` on the block as usual. async-trait turns the method into a
/// `fn` returning `Pin<Box<dyn Future<Output = R> + Send + '_>>` whose body is
/// `Box::pin(async move { .. })`; the attribute recognises that shape and locks inside the boxed
/// future, so the future stays `Send`. Written on the impl block itself it is a compile error
/// that says to move it to the method.
///
/// Attributes expand from the top and each wraps what the ones above it produced, so the lower
/// one is the outer layer: `#[tracing::instrument]` *below* `#[distributed_lock]` makes a span
/// that covers the acquire, the body and the release (a skipped or fallback call is inside it);
/// *above*, the span covers the body only. Both orders work, also on async-trait methods.
///
/// # Requirements on the function
///
/// - It is an `async fn` with a body; a plain `fn` is a compile error at `fn`.
/// - Its return type is `Result<T, E>` with `E: From<lockcore::LockError>`; lock errors are
///   returned through that conversion. Another return type is a compile error naming it.
///
/// Everything else is kept exactly as written: attributes and docs, visibility, generics and
/// where-clause, lifetimes, `impl Trait` arguments and the receiver (`&self`, `&mut self`,
/// `self`, `self: Arc<Self>`). Inherent methods, associated functions and `async fn` in trait
/// impls all work, and the returned future is `Send` whenever the body's future is.
///
/// With `#[tokio::test]`, put `#[distributed_lock]` above it:
///
/// ```no_run
/// # use lockcore::distributed_lock;
/// #[distributed_lock(key = "test:one-at-a-time")]
/// #[tokio::test]
/// async fn one_at_a_time() -> Result<(), lockcore::LockError> {
///     Ok(())
/// }
/// # fn main() {}
/// ```
///
/// # Behaviour
///
/// - **Contention**: the acquire waits, as `LockManager::acquire` does (queued for a fair
///   hand-off on a single node, exponential backoff with full jitter under Redlock), until
///   `wait_ms` is spent, then returns `Err(LockError::Contended { .. })` converted into `E`; the
///   body does not run.
/// - **`return` and `?`**: the body runs as an inner `async move` block, so its early returns
///   land before the release. The caller gets the body's value only after the release.
/// - **Release failure**: it never replaces the body's result; it is reported through `tracing`.
/// - **Lost lock**: with `watchdog = true` the lease is renewed while the body runs. If the lock
///   is lost anyway, `on_lost = "abort"` drops the body at its next `.await` and returns
///   `Err(LockError::Lost { .. })` converted into `E`; `on_lost = "continue"` lets it finish.
///   With `watchdog = false` the body always runs to completion, and a lease that ran out is
///   reported through `tracing` at release.
/// - **Panic**: the body's panic is caught, the lock is released, then the panic resumes.
/// - **Cancellation** (the future is dropped): the `LockGuard`'s `Drop` releases the key without
///   blocking, by a release spawned on the current tokio runtime.
/// - **Drop order**: parameters the body uses are dropped when the body ends, before the
///   release; parameters it never uses are dropped after the release.
///
/// # Equivalent code
///
/// The example above behaves like this hand-written function. The generated code calls
/// `lockcore::__private::lock`, which also takes the manager's defaults for what the attribute
/// does not set, turns the watchdog on, and checks the task's hold set (reentrancy); its
/// `run` adds the lost-lock handling and catches a panic so that the lock is released first.
///
/// ```no_run
/// # #[derive(Debug, thiserror::Error)]
/// # enum AppError {
/// #     #[error(transparent)]
/// #     Lock(#[from] lockcore::LockError),
/// # }
/// # struct OrderId(u64);
/// # struct Stock(u64);
/// # async fn load_stock(_: u64) -> Result<Stock, AppError> { Ok(Stock(1)) }
/// # async fn place_order(_: Stock, user_id: u64) -> Result<OrderId, AppError> { Ok(OrderId(user_id)) }
/// async fn create_order(product_id: u64, user_id: u64) -> Result<OrderId, AppError> {
///     let keys = [format!("order:lock:product:{}", product_id)];
///     let manager = lockcore::default_manager()?;
///     let opts = lockcore::LockOptions::new(std::time::Duration::from_millis(10_000))
///         // `wait_ms` not given: the manager's default wait
///         .wait(manager.default_options().wait_budget())
///         // `watchdog` not given: the manager's explicit choice, else on
///         .watchdog(true);
///     // `on_contended = "error"`: `Contended` and every other lock error are returned
///     let locks = manager.acquire_many(&keys, &opts).await?;
///     let result = async move {
///         let stock = load_stock(product_id).await?;
///         place_order(stock, user_id).await
///     }
///     .await;
///     if let Err(error) = locks.release().await {
///         tracing::warn!(%error, "releasing the lock failed");
///     }
///     result
/// }
/// # fn main() { let _ = create_order(1, 2); }
/// ```
///
/// With `on_contended = "skip"` the acquire's `Err(LockError::Contended { .. })` becomes
/// `return Ok(())` (or `Ok(None)`), and with `fallback = busy` it becomes
/// `return busy(product_id, user_id).await` (no `.await` for a plain `fn`).
#[proc_macro_attribute]
pub fn distributed_lock(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    expand::distributed_lock(args.into(), item.into()).into()
}

/// Runs an `async fn` once per idempotency key: a retried request returns the first call's
/// stored result instead of running the body again. Needs lockcore's cargo feature
/// `idempotency`.
///
/// ```no_run
/// # #[derive(Debug, thiserror::Error)]
/// # enum AppError {
/// #     #[error(transparent)]
/// #     Lock(#[from] lockcore::LockError),
/// # }
/// # async fn insert_order(_: &str, _: u64) -> Result<u64, AppError> { Ok(1) }
/// #[lockcore::idempotent(key = "order:req:<request_id>", ttl_ms = 86_400_000)]
/// async fn place_order(request_id: String, product_id: u64) -> Result<u64, AppError> {
///     insert_order(&request_id, product_id).await
/// }
/// # fn main() {}
/// ```
///
/// The function returns `Result<T, E>` with `T: Serialize + DeserializeOwned` and
/// `E: From<lockcore::LockError>`. The first call with a rendered key runs the body under a lock
/// on that key and stores its `Ok` value for `ttl_ms`; later calls return the stored value and
/// do not run the body; calls that arrive while the first still runs wait for it (up to
/// `wait_ms`) and return its value; an `Err` is not stored. See `LockManager::idempotent` for the
/// record format, the error variants and the edge cases.
///
/// | argument | value | default |
/// |---|---|---|
/// | `key` | key template, as for `#[distributed_lock]`, checked at compile time | required |
/// | `ttl_ms` | how long the result is kept, in milliseconds | required |
/// | `wait_ms` | how long a duplicate waits for a running first call, in milliseconds | the manager's default wait |
/// | `manager` | as for `#[distributed_lock]` | the default manager |
/// | `crate` | as for `#[distributed_lock]` | `"::lockcore"` |
/// | `fingerprint` | expression whose `ToString` identifies the request; a later call with another fingerprint fails with `LockError::IdempotencyMismatch` | none |
///
/// With `#[distributed_lock]` on the same fn, write `#[distributed_lock]` above
/// `#[idempotent]`: the lower attribute is the outer layer, so the idempotency check comes
/// first and the resource lock is taken only by a call that runs the body.
#[proc_macro_attribute]
pub fn idempotent(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    idempotent::idempotent(args.into(), item.into()).into()
}
