//! The small statistics the tests and benchmarks print and assert on.

use std::time::Duration;

/// A duration in milliseconds, for printing.
pub fn ms_f64(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p`-quantile (0..=1) of `samples`, nearest rank. Panics on no samples.
pub fn quantile(samples: &[Duration], p: f64) -> Duration {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Jain's fairness index of per-contender counts: (Σx)² / (n·Σx²); 1 is perfectly even,
/// 1/n is one contender taking everything. `None` for no counts or all zero.
pub fn jain(counts: &[u64]) -> Option<f64> {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let sum_sq: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
    (n > 0.0 && sum_sq > 0.0).then(|| sum * sum / (n * sum_sq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_bounds() {
        assert_eq!(jain(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain(&[4, 0, 0, 0]), Some(0.25));
        assert_eq!(jain(&[0, 0]), None);
    }

    #[test]
    fn quantile_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&samples, 0.0), Duration::from_millis(1));
        assert_eq!(quantile(&samples, 1.0), Duration::from_millis(100));
        assert_eq!(quantile(&samples, 0.5), Duration::from_millis(51));
    }
}
