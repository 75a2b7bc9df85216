//! A process that campaigns for a leadership, for the election tests (`tests/election.rs`):
//! they SIGKILL, SIGSTOP and SIGCONT it.
//!
//! `campaigner URL KEY TTL_MS LABEL` builds a manager labelled `LABEL` on `URL`, campaigns for
//! `KEY` with a TTL of `TTL_MS` and no wait limit, and reports on stdout, one line each:
//! `elected <term> <pid>` once it leads, then `lost <term> leader=<is_leader>` when the
//! leadership ends; then it exits. A line `resign` on stdin resigns (`resigned <term>`).

use std::io::Write as _;
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use tokio::io::AsyncBufReadExt as _;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, key, ttl_ms, label] = args.as_slice() else {
        panic!("usage: campaigner URL KEY TTL_MS LABEL");
    };
    let ttl: u64 = ttl_ms
        .parse()
        .unwrap_or_else(|_| panic!("TTL_MS must be a number, not {ttl_ms:?}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("tokio runtime: {err}"));
    runtime.block_on(async {
        let locks = LockManager::builder()
            .url(url)
            .process_label(label)
            .build()
            .await
            .unwrap_or_else(|err| panic!("manager: {err}"));
        let opts = LockOptions::new(Duration::from_millis(ttl)).wait(Duration::MAX);
        let leadership = locks
            .campaign(key, &opts)
            .await
            .unwrap_or_else(|err| panic!("campaign: {err}"));
        let term = leadership.term();
        say(&format!("elected {term} {}", std::process::id()));
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        tokio::select! {
            () = leadership.lost() => {
                say(&format!("lost {term} leader={}", leadership.is_leader()));
            }
            line = stdin.next_line() => {
                if matches!(line, Ok(Some(ref l)) if l == "resign") {
                    leadership
                        .resign()
                        .await
                        .unwrap_or_else(|err| panic!("resign: {err}"));
                    say(&format!("resigned {term}"));
                }
            }
        }
    });
}
