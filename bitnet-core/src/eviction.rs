//! H2O's choice of what to evict ("Heavy-Hitter Oracle", Zhang et al. 2023): a bounded
//! cache keeps the first `sinks` positions (attention sinks), the `recent` most recent ones,
//! and, of the rest, the heavy hitters: the positions that received the most attention mass
//! so far (see `Engine::track_attention_mass`). When the cache is full, the lowest-mass
//! positions of the middle go, a batch at a time ([`heavy_hitter_batch`]), since every
//! eviction moves the later rows and rounds them to the cache's format once.
//!
//! The mass is the plain sum H2O uses, so a position that has been read by more query rows
//! (an older one) tends to have more: the recent positions are protected for that reason.

/// Positions held at most beyond sinks and recent ones for a heavy-hitter policy to work.
pub const MIN_HEAVY: usize = 4;

/// How many positions one eviction removes: a quarter of the heavy-hitter part of the
/// budget (at least one), or more when `short` positions must go at once.
pub fn heavy_hitter_batch(sinks: usize, recent: usize, budget: usize, short: usize) -> usize {
    (budget.saturating_sub(sinks + recent) / 4)
        .max(1)
        .max(short)
}

/// The positions to evict from a sequence of `len` positions whose received mass is
/// `mass` (missing entries count as zero): up to `count` of the positions between the
/// first `sinks` and the last `recent`, lowest mass first (the older on a tie), returned in
/// increasing order, as `Engine::evict` takes them. Empty when nothing is evictable.
pub fn heavy_hitter_victims(
    mass: &[f32],
    len: usize,
    sinks: usize,
    recent: usize,
    count: usize,
) -> Vec<usize> {
    let end = len.saturating_sub(recent);
    if end <= sinks || count == 0 {
        return Vec::new();
    }
    let m = |p: usize| mass.get(p).copied().unwrap_or(0.0);
    let mut cand: Vec<usize> = (sinks..end).collect();
    cand.sort_by(|&a, &b| m(a).total_cmp(&m(b)).then(a.cmp(&b)));
    cand.truncate(count);
    cand.sort_unstable();
    cand
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_the_lightest_of_the_middle_in_order() {
        let mass = [9.0, 9.0, 1.0, 5.0, 0.5, 7.0, 0.1, 0.2, 0.0];
        // Sinks 2, recent 3: candidates are 2..6 (masses 1, 5, 0.5, 7).
        assert_eq!(heavy_hitter_victims(&mass, 9, 2, 3, 2), vec![2, 4]);
        assert_eq!(heavy_hitter_victims(&mass, 9, 2, 3, 10), vec![2, 3, 4, 5]);
        assert!(heavy_hitter_victims(&mass, 5, 2, 3, 1).is_empty());
        // Ties and missing mass: the older first.
        assert_eq!(heavy_hitter_victims(&[], 8, 1, 1, 3), vec![1, 2, 3]);
    }

    #[test]
    fn a_batch_is_a_quarter_of_the_heavy_part() {
        assert_eq!(heavy_hitter_batch(4, 16, 36, 0), 4);
        assert_eq!(heavy_hitter_batch(4, 16, 36, 9), 9);
        assert_eq!(heavy_hitter_batch(4, 30, 36, 0), 1);
    }
}
