//! B4: Redlock at N = 1, 3, 5 (see `benches/README.md`).

use std::sync::Arc;

use lockcore_tests::RedisServer;

use crate::lockers::{self, Impl, Kind, with_locker};
use crate::scenarios::{BUDGET, Config, Cycles, Row, cells_of, cycles, faster, start_server};

pub(crate) const B4_NODES: [usize; 3] = [1, 3, 5];

/// B4's floor at `B4_NODES[ni]`: the faster of its two settings.
pub(crate) fn b4_floor(b4: &[Row<Vec<Cycles>>], ni: usize) -> Option<(Kind, &Cycles)> {
    let both = Kind::floors(false).into_iter();
    faster(both.filter_map(|k| Some((k, cells_of(b4, k)?.get(ni)?))))
}

pub(crate) async fn b4(cfg: &Config, kinds: &[Kind]) -> Vec<Row<Vec<Cycles>>> {
    let servers: Vec<RedisServer> = (0..5).map(|_| start_server(cfg)).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let mut imps = Vec::new();
    for &kind in kinds {
        let mut per_n = Vec::new();
        for &n in &B4_NODES {
            per_n.push(lockers::connect(kind, &urls[..n], BUDGET).await);
        }
        let per_n: Result<Vec<Impl>, String> = per_n.into_iter().collect();
        imps.push((kind, per_n));
    }
    let per_round = cfg.latency_cell / cfg.rounds;
    let mut acc: Vec<Vec<Cycles>> = imps
        .iter()
        .map(|_| B4_NODES.iter().map(|_| Cycles::new()).collect())
        .collect();
    for round in 0..cfg.rounds {
        for (ni, n) in B4_NODES.iter().enumerate() {
            for (i, (_, per_n)) in imps.iter().enumerate() {
                let Ok(per_n) = per_n else { continue };
                let prefix = format!("b4:{i}:{n}:{round}:");
                let c = with_locker!(&per_n[ni], l => cycles(Arc::clone(l), 1, per_round, &prefix).await);
                acc[i][ni].merge(c);
            }
        }
    }
    drop(servers);
    imps.into_iter()
        .zip(acc)
        .map(|((kind, per_n), cells)| Row {
            kind,
            cells: per_n.map(|_| cells),
        })
        .collect()
}
