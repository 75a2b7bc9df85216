//! The timeline picture: time runs left to right; each fault is a coloured band over the full
//! height (its colour by kind, listed in [`FAULT_COLOURS`]); below, one lane per lock key, and
//! in it every lease as a bar from its acquire reply to its release or deadline (green when a
//! write under it was accepted, grey when not). Leases of one key are spread over a few rows,
//! so that overlaps show as stacked bars. Bitmap only: no font, no system library.

use std::path::Path;

use plotters::prelude::*;

use super::BoxError;
use super::checker::Lease;
use super::faults::{FaultKind, FaultRecord};
use super::workload::KEYS;

/// The band colour of each fault kind, in [`FaultKind::ALL`] order.
pub const FAULT_COLOURS: [(FaultKind, RGBColor); 11] = [
    (FaultKind::HolderPause, RGBColor(230, 25, 75)),
    (FaultKind::ServerPauseShort, RGBColor(245, 130, 48)),
    (FaultKind::ServerPauseLong, RGBColor(255, 225, 25)),
    (FaultKind::ClientPauseWrite, RGBColor(60, 180, 75)),
    (FaultKind::ClientKill, RGBColor(70, 240, 240)),
    (FaultKind::ReplyLoss, RGBColor(0, 130, 200)),
    (FaultKind::Latency, RGBColor(145, 30, 180)),
    (FaultKind::ScriptFlush, RGBColor(240, 50, 230)),
    (FaultKind::Restart, RGBColor(128, 0, 0)),
    (FaultKind::Partition, RGBColor(0, 0, 128)),
    (FaultKind::KillWorker, RGBColor(128, 128, 0)),
];

const WIDTH: u32 = 1600;
const LANE: i32 = 60;
const ROWS: i32 = 4;
const TOP: i32 = 20;

/// "holder-pause #e6194b, ...": which band colour is which fault, for the report.
pub fn legend() -> String {
    FAULT_COLOURS
        .iter()
        .map(|(kind, RGBColor(r, g, b))| format!("{} #{r:02x}{g:02x}{b:02x}", kind.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn colour(kind: FaultKind) -> RGBColor {
    FAULT_COLOURS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(BLACK, |(_, c)| *c)
}

/// Draws the timeline of `start_ns..end_ns` to `path` (PNG).
///
/// # Errors
/// When drawing or writing the file fails.
pub fn draw(
    path: &Path,
    leases: &[Lease],
    faults: &[FaultRecord],
    start_ns: u64,
    end_ns: u64,
) -> Result<(), BoxError> {
    let lanes = i32::try_from(KEYS.len()).unwrap_or(5);
    let height = u32::try_from(TOP * 2 + lanes * LANE).unwrap_or(400);
    let root = BitMapBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let span = end_ns.saturating_sub(start_ns).max(1) as f64;
    let x = |t: u64| -> i32 {
        let f = t.saturating_sub(start_ns) as f64 / span;
        (f.clamp(0.0, 1.0) * f64::from(WIDTH - 1)) as i32
    };
    for fault in faults {
        let (x0, x1) = (
            x(fault.start_ns),
            x(fault.heal_ns).max(x(fault.start_ns) + 3),
        );
        let band = Rectangle::new(
            [(x0, 0), (x1, i32::try_from(height).unwrap_or(400))],
            colour(fault.kind).mix(0.35).filled(),
        );
        root.draw(&band).map_err(|e| e.to_string())?;
    }
    for (lane, key) in KEYS.iter().enumerate() {
        let lane = i32::try_from(lane).unwrap_or(0);
        let top = TOP + lane * LANE;
        let line = Rectangle::new(
            [(0, top + LANE - 2), (WIDTH as i32, top + LANE - 1)],
            BLACK.mix(0.3).filled(),
        );
        root.draw(&line).map_err(|e| e.to_string())?;
        let mut row = 0;
        for lease in leases.iter().filter(|l| l.key == *key) {
            let y = top + row * (LANE / ROWS);
            row = (row + 1) % ROWS;
            let style = if lease.accepted {
                RGBColor(0, 150, 0).filled()
            } else {
                RGBColor(150, 150, 150).filled()
            };
            let (x0, x1) = (
                x(lease.start_ns),
                x(lease.end_ns).max(x(lease.start_ns) + 1),
            );
            let bar = Rectangle::new([(x0, y + 2), (x1, y + LANE / ROWS - 2)], style);
            root.draw(&bar).map_err(|e| e.to_string())?;
        }
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
