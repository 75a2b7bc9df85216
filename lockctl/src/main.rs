//! `lockctl`: list, inspect, force-release and watch lockcore locks.
//!
//! ```text
//! lockctl --url redis://127.0.0.1:6380/ list 'lock:order:*' --json
//! lockctl --url redis://127.0.0.1:6380/ inspect lock:order:lock:product:42
//! lockctl --url redis://127.0.0.1:6380/ release lock:order:lock:product:42 --force
//! lockctl --cluster redis://10.0.0.1:7000/ redis://10.0.0.2:7000/ watch --interval 500
//! LOCKCTL_URL=redis://ops:secret@127.0.0.1:6380/ lockctl list
//! ```
//!
//! Without `--url`, `--cluster` or `--sentinel`, the server is read from `LOCKCTL_URL`, else
//! `REDIS_URL`. Human output shows times as local RFC 3339 with an age; `--json` keeps ms.
//!
//! Every failure prints one line on stderr (`lockctl: ...`) and exits with status 1
//! (2 for a command line clap rejects).

mod cli;
mod conn;
mod error;
mod escape;
mod idem;
mod listing;
mod record;
mod render;
mod time;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::cli::{Cli, Command};
use crate::conn::Target;
use crate::error::CtlError;
use crate::listing::Listing;
use crate::record::Found;

fn main() -> ExitCode {
    let cli = Cli::parse_with_env();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&format!("cannot start the async runtime: {err}")),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => fail(&err.to_string()),
    }
}

/// Prints `message` as one line, escaped: it may quote a key or a server's reply.
fn fail(message: &str) -> ExitCode {
    eprintln!("lockctl: {}", escape::text(message));
    ExitCode::FAILURE
}

async fn run(cli: Cli) -> Result<(), CtlError> {
    let default_pattern = format!("{}*", cli.prefix);
    // Check what needs no server first.
    if let Command::Release { key, force, .. } = &cli.command
        && !force
    {
        return Err(CtlError::NotForced { key: key.clone() });
    }
    let mut target = Target::connect(&cli.connect).await?;
    let prefix = cli.prefix.as_str();
    match cli.command {
        Command::List { pattern, json } => {
            let pattern = pattern.unwrap_or(default_pattern);
            let listing = listing::list(&mut target, prefix, &pattern).await?;
            if json {
                println!("{}", render::json(&listing));
            } else {
                print!("{}", render::table(&listing));
            }
        }
        Command::Inspect { key, json } => {
            let (listing, detail) = if let Some(idem_key) = idem::idempotency_key(prefix, &key) {
                let record = idem::inspect_idempotency(&mut target, prefix, idem_key, &key).await?;
                let detail = render::idempotency_detail(&record);
                (Listing::of_record(record), detail)
            } else {
                let found = record::inspect(&mut target, prefix, &key).await?;
                let detail = match &found {
                    Found::Lock(lock) => render::detail(lock),
                    Found::NotALock(other) => render::other_detail(other),
                };
                (Listing::of(found), detail)
            };
            if json {
                println!("{}", render::json(&listing));
            } else {
                print!("{detail}");
            }
        }
        Command::Release { key, token, .. } => {
            release(&mut target, prefix, &key, token.as_deref()).await?;
        }
        Command::Watch {
            pattern,
            interval,
            iterations,
        } => {
            let pattern = pattern.unwrap_or(default_pattern);
            watch(&mut target, prefix, &pattern, interval, iterations).await?;
        }
    }
    Ok(())
}

/// Reads the lock, then deletes it only if it still holds exactly that value.
async fn release(
    target: &mut Target,
    prefix: &str,
    key: &str,
    expected_token: Option<&str>,
) -> Result<(), CtlError> {
    record::check_is_lock(target, prefix, key).await?;
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(&mut *target).await?;
    let value = value.ok_or_else(|| CtlError::NoSuchKey {
        key: key.to_owned(),
    })?;
    let holder = record::Holder::parse(&value);
    if lockcore::keyspace::is_shares_marker(&holder.token) {
        return release_share(target, prefix, key, expected_token).await;
    }
    if let Some(expected) = expected_token
        && holder.token_bytes != expected.as_bytes()
    {
        return Err(CtlError::OtherHolder {
            key: key.to_owned(),
            held: holder.token,
            expected: expected.to_owned(),
        });
    }
    let outcome = lockcore::admin::force_release(&mut *target, prefix, key, &value).await?;
    if outcome != lockcore::admin::ForceRelease::Released {
        return Err(CtlError::Changed {
            key: key.to_owned(),
        });
    }
    let now = time::now_ms();
    // The audit line: who released what, from whom, and when.
    println!(
        "released {}: token {} held by host={} pid={} label={} acquired {}; released by {} (pid {}) at {}",
        escape::text(key),
        escape::bytes(&holder.token_bytes),
        escape::text(holder.host.as_deref().unwrap_or("-")),
        holder.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
        escape::text(holder.label.as_deref().unwrap_or("-")),
        time::when_or_dash(holder.acquired_at, now),
        escape::text(&operator()),
        std::process::id(),
        time::local_rfc3339(now, &jiff::tz::TimeZone::system()),
    );
    Ok(())
}

/// Releases the one share of `key` (a semaphore's permit, a reader's share) that `token` holds.
async fn release_share(
    target: &mut Target,
    prefix: &str,
    key: &str,
    token: Option<&str>,
) -> Result<(), CtlError> {
    let token = token.ok_or_else(|| CtlError::SharesNeedToken {
        key: key.to_owned(),
    })?;
    let outcome = lockcore::admin::force_release_share(&mut *target, prefix, key, token).await?;
    if outcome != lockcore::admin::ForceRelease::Released {
        return Err(CtlError::NoSuchShare {
            key: key.to_owned(),
            token: token.to_owned(),
        });
    }
    let now = time::now_ms();
    println!(
        "released one share of {}: token {}; released by {} (pid {}) at {}",
        escape::text(key),
        escape::text(token),
        escape::text(&operator()),
        std::process::id(),
        time::local_rfc3339(now, &jiff::tz::TimeZone::system()),
    );
    Ok(())
}

/// `<user>@<host>`: the OS account this process runs as (its passwd entry, not `$USER`, which
/// a container, cron or `su` may leave unset or stale) and this machine's host name.
fn operator() -> String {
    let user = whoami::username()
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknown-user".to_owned());
    format!("{user}@{}", gethostname::gethostname().to_string_lossy())
}

/// Redraws the table every `interval_ms` until interrupted or `iterations` are done.
async fn watch(
    target: &mut Target,
    prefix: &str,
    pattern: &str,
    interval_ms: u64,
    iterations: Option<u64>,
) -> Result<(), CtlError> {
    let tty = std::io::stdout().is_terminal();
    let mut done = 0u64;
    let mut ticker = tokio::time::interval(Duration::from_millis(interval_ms.max(1)));
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let listing = listing::list(target, prefix, pattern).await?;
        let mut out = std::io::stdout().lock();
        let header = format!(
            "lockctl watch {}  every {interval_ms} ms  (refresh {})\n",
            escape::text(pattern),
            done + 1
        );
        // In place on a terminal (cursor home, clear screen); one table after another otherwise.
        let clear = if tty { "\x1b[H\x1b[2J" } else { "" };
        let _ = write!(out, "{clear}{header}{}", render::table(&listing));
        let _ = out.flush();
        done += 1;
        if iterations.is_some_and(|n| done >= n) {
            return Ok(());
        }
    }
}
