//! B1: uncontended acquire+release on distinct keys (see `benches/README.md`).

use std::sync::Arc;

use crate::lockers::{self, Impl, Kind, with_locker};
use crate::scenarios::{
    BUDGET, Config, Cycles, Row, cells_of, client_cpu, cycles, faster, pings, server_cpu,
    start_server,
};

pub(crate) const B1_TASKS: [usize; 3] = [1, 8, 64];

/// One B1 cell: how many tasks, and whether the server runs on the client's CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct B1Setup {
    pub(crate) tasks: usize,
    /// The server pinned to the client's CPU (only in pinned runs): the shortest round trip
    /// loopback offers, where a fixed per-call cost weighs the most.
    pub(crate) same_cpu: bool,
}

impl B1Setup {
    pub(crate) const fn tasks(tasks: usize) -> B1Setup {
        B1Setup {
            tasks,
            same_cpu: false,
        }
    }
}

pub(crate) struct B1 {
    pub(crate) setups: Vec<B1Setup>,
    /// Per setup with one task: `PING` round trips on the floor's connection, interleaved with
    /// the rounds.
    pub(crate) rtt: Vec<Option<Cycles>>,
    /// Per implementation, one `Cycles` per setup.
    pub(crate) rows: Vec<Row<Vec<Cycles>>>,
}

impl B1 {
    pub(crate) fn cell(&self, kind: Kind, setup: B1Setup) -> Option<&Cycles> {
        let i = self.setups.iter().position(|&s| s == setup)?;
        cells_of(&self.rows, kind)?.get(i).filter(|c| c.ops > 0)
    }

    /// The floor (`fenced`: the fenced floor) at `setup`: the faster of its two settings.
    pub(crate) fn floor(&self, fenced: bool, setup: B1Setup) -> Option<(Kind, &Cycles)> {
        let both = Kind::floors(fenced).into_iter();
        faster(both.filter_map(|k| Some((k, self.cell(k, setup)?))))
    }
}

pub(crate) async fn b1(cfg: &Config, kinds: &[Kind]) -> Result<B1, String> {
    let server = start_server(cfg);
    let urls = [server.url()];
    let mut imps = Vec::new();
    for &kind in kinds {
        imps.push((kind, lockers::connect(kind, &urls, BUDGET).await));
    }
    let floor_conn = imps.iter().find_map(|(_, imp)| match imp {
        Ok(Impl::Floor(f)) => f.connection(),
        _ => None,
    });
    let floor_conn = floor_conn.ok_or("B1: the floor did not connect")?;
    let mut control = lockers::nodelay_connection(&urls[0]).await?;
    let per_round = cfg.latency_cell / cfg.rounds;
    let mut setups: Vec<B1Setup> = B1_TASKS
        .iter()
        .map(|&tasks| B1Setup {
            tasks,
            same_cpu: false,
        })
        .collect();
    if cfg.pin.is_some() {
        setups.push(B1Setup {
            tasks: 1,
            same_cpu: true,
        });
    }
    let mut rtt: Vec<Option<Cycles>> = setups
        .iter()
        .map(|s| (s.tasks == 1).then(Cycles::new))
        .collect();
    let mut acc: Vec<Vec<Cycles>> = imps
        .iter()
        .map(|_| setups.iter().map(|_| Cycles::new()).collect())
        .collect();
    for (si, setup) in setups.iter().enumerate() {
        if let (true, Some(pin), Some(pid)) = (setup.same_cpu, cfg.pin, server.pid()) {
            crate::pin::pin_pid(pid, pin.client_cpu);
        }
        for round in 0..cfg.rounds {
            if let Some(rtt) = &mut rtt[si] {
                rtt.merge(pings(floor_conn.clone(), per_round, false).await);
            }
            for (i, (_, imp)) in imps.iter().enumerate() {
                let Ok(imp) = imp else { continue };
                let prefix = format!("b1:{i}:{si}:{round}:");
                let tasks = setup.tasks;
                let cpu_before = server_cpu(&mut control).await;
                let client_before = client_cpu();
                let mut c =
                    with_locker!(imp, l => cycles(Arc::clone(l), tasks, per_round, &prefix).await);
                let client_after = client_cpu();
                let cpu_after = server_cpu(&mut control).await;
                if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
                    c.server_cpu = b.saturating_sub(a);
                }
                if let (Some(a), Some(b)) = (client_before, client_after) {
                    c.client_cpu = b.saturating_sub(a);
                }
                acc[i][si].merge(c);
            }
        }
        if let (true, Some(pin), Some(pid)) = (setup.same_cpu, cfg.pin, server.pid()) {
            crate::pin::pin_pid(pid, pin.server_cpu);
        }
    }
    let rows = imps
        .into_iter()
        .zip(acc)
        .map(|((kind, imp), cells)| Row {
            kind,
            cells: imp.map(|_| cells),
        })
        .collect();
    drop(server);
    Ok(B1 { setups, rtt, rows })
}
