//! `INFO commandstats`: calls per command, and script calls (every lockcore acquire attempt,
//! release and renewal is one `EVALSHA` or `EVAL`).

use redis::aio::MultiplexedConnection;

use crate::{cmd, query};

/// Sum of `calls` per command from `INFO commandstats`, without `info` itself, and the calls
/// per command.
pub fn parse_commandstats(info: &str) -> (u64, std::collections::BTreeMap<String, u64>) {
    let mut per_command = std::collections::BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let calls = fields
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        per_command.insert(name.to_owned(), calls);
    }
    (per_command.values().sum(), per_command)
}

/// `calls=` of `cmdstat_<name>` in `INFO commandstats` text (0 when absent).
pub fn calls_of(stats: &str, name: &str) -> u64 {
    parse_commandstats(stats).1.get(name).copied().unwrap_or(0)
}

/// `usec_per_call=` of `cmdstat_<name>` in `INFO commandstats` text: Redis' own time per call
/// in µs (0 when absent).
pub fn usec_per_call_of(stats: &str, name: &str) -> f64 {
    let lead = format!("cmdstat_{name}:");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&lead))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// `INFO commandstats` on a raw connection.
pub async fn commandstats(con: &mut MultiplexedConnection) -> String {
    query(con, &cmd(&["INFO", "commandstats"])).await
}

/// Script calls (`EVALSHA` + `EVAL`) so far: every lockcore acquire attempt, release and renewal
/// is one.
pub async fn script_calls(con: &mut MultiplexedConnection) -> u64 {
    let stats = commandstats(con).await;
    calls_of(&stats, "evalsha") + calls_of(&stats, "eval")
}

/// `CONFIG RESETSTAT`: the command counters start again from zero.
pub async fn reset_stats(con: &mut MultiplexedConnection) {
    let _: () = query(con, &cmd(&["CONFIG", "RESETSTAT"])).await;
}
