//! `--plot FILE.png`: the lock-wait distribution of both phases, one histogram each.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use crate::report::PhaseSummary;

/// Histogram bins per phase.
const BINS: u32 = 40;

/// Draws the wait (call to body start) of every processed order, per phase, into a PNG.
pub(crate) fn draw(path: &Path, phases: &[PhaseSummary]) -> Result<(), Box<dyn Error>> {
    // The one font, embedded: no system fontconfig. Registering twice is harmless.
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        epaint_default_fonts::UBUNTU_LIGHT,
    )
    .map_err(|_| "the embedded plot font is invalid")?;
    let root =
        BitMapBackend::new(path, (1000, 360 * phases.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_ms = phases
        .iter()
        .flat_map(|p| p.waits_us.iter())
        .max()
        .map_or(1.0, |us| (*us as f64 / 1000.0).max(1.0));
    let bin_ms = max_ms / f64::from(BINS);
    for (area, phase) in root
        .split_evenly((phases.len().max(1), 1))
        .iter()
        .zip(phases)
    {
        let mut counts = vec![0u32; BINS as usize];
        for us in &phase.waits_us {
            let bin = ((*us as f64 / 1000.0) / bin_ms) as usize;
            counts[bin.min(BINS as usize - 1)] += 1;
        }
        let top = counts.iter().copied().max().unwrap_or(0).max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{}: lock wait of {} orders (ms)",
                    phase.phase,
                    phase.waits_us.len()
                ),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..max_ms, 0u32..top + top / 10 + 1)?;
        chart
            .configure_mesh()
            .x_desc("wait (ms)")
            .y_desc("orders")
            .label_style(("sans-serif", 14))
            .draw()?;
        chart.draw_series(counts.iter().enumerate().map(|(i, n)| {
            let x0 = i as f64 * bin_ms;
            Rectangle::new([(x0, 0), (x0 + bin_ms, *n)], BLUE.mix(0.6).filled())
        }))?;
    }
    root.present()?;
    Ok(())
}
