//! Choosing one option per group (a layer's K format, its V format) so the summed KL
//! divergence stays within a budget and the bytes are fewest: a multiple-choice knapsack,
//! solved exactly by dynamic programming over the budget cut into small units. Each
//! option's cost is rounded up to whole units, so a chosen set never exceeds the budget by
//! the sum of its estimates; whether the estimates add up (layers interact) is for the
//! caller to check by measuring the chosen plan.

use super::PlanError;

/// One option of a group: its KL divergence when it alone changes, and its bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub kld: f64,
    pub bytes: u64,
}

/// Units the budget is cut into: an option's cost is known to 1/UNITS of the budget.
const UNITS: usize = 4000;

/// For each group, the index of the option to take: fewest bytes in total with the summed
/// `kld` at most `budget`; among equal bytes, the smaller summed KL divergence. Every group
/// needs an option of KL divergence 0 (the unchanged setting) for a budget of 0 to be
/// met; a group without one takes its least divergent option. Negative estimates (noise
/// around 0) count as 0.
pub fn select_plan(groups: &[Vec<Choice>], budget: f64) -> Result<Vec<usize>, PlanError> {
    if !budget.is_finite() || budget < 0.0 {
        return Err(PlanError::Budget(budget));
    }
    let unit = if budget > 0.0 {
        budget / UNITS as f64
    } else {
        f64::MIN_POSITIVE
    };
    let cost = |c: &Choice| -> Option<usize> {
        let k = c.kld.max(0.0);
        if k == 0.0 {
            return Some(0);
        }
        let u = (k / unit).ceil();
        (u <= UNITS as f64).then_some(u as usize)
    };
    // best[c]: (bytes, kld) of the cheapest choice so far whose cost is exactly c units.
    const NONE: (u64, f64) = (u64::MAX, f64::INFINITY);
    let mut best = vec![NONE; UNITS + 1];
    best[0] = (0, 0.0);
    let mut picks: Vec<Vec<u16>> = Vec::with_capacity(groups.len());
    // Groups whose option was taken without counting its cost (nothing fitted).
    let mut over = vec![false; groups.len()];
    for (gi, g) in groups.iter().enumerate() {
        let fallback = g
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.kld.total_cmp(&b.1.kld))
            .map(|(i, _)| i);
        let mut next = vec![NONE; UNITS + 1];
        let mut pick = vec![u16::MAX; UNITS + 1];
        for (i, ch) in g.iter().enumerate() {
            let Some(w) = cost(ch) else { continue };
            for c in w..=UNITS {
                let (b, k) = best[c - w];
                if b == u64::MAX {
                    continue;
                }
                let cand = (b.saturating_add(ch.bytes), k + ch.kld.max(0.0));
                if cand.0 < next[c].0 || (cand.0 == next[c].0 && cand.1 < next[c].1) {
                    next[c] = cand;
                    pick[c] = i as u16;
                }
            }
        }
        if next.iter().all(|n| n.0 == u64::MAX) {
            // No option of this group fits what is left: take its least divergent one and
            // carry the others' choices (the budget is then exceeded, which the caller's
            // measurement shows).
            let Some(i) = fallback else {
                return Err(PlanError::Calibration("a group without options".into()));
            };
            over[gi] = true;
            for (c, slot) in best.iter().enumerate() {
                if slot.0 != u64::MAX {
                    next[c] = (
                        slot.0.saturating_add(g[i].bytes),
                        slot.1 + g[i].kld.max(0.0),
                    );
                    pick[c] = i as u16;
                }
            }
        }
        best = next;
        picks.push(pick);
    }
    let end = (0..=UNITS)
        .filter(|&c| best[c].0 != u64::MAX)
        .min_by(|&a, &b| {
            best[a]
                .0
                .cmp(&best[b].0)
                .then(best[a].1.total_cmp(&best[b].1))
        })
        .ok_or_else(|| PlanError::Calibration("no choice fits".into()))?;
    // Walk back: the option of the last group at `end`, then the cost that left.
    let mut out = vec![0; groups.len()];
    let mut c = end;
    for (gi, g) in groups.iter().enumerate().rev() {
        let i = picks[gi][c] as usize;
        out[gi] = i;
        if !over[gi] {
            c -= cost(&g[i]).expect("a counted option has a cost");
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(kld: f64, bytes: u64) -> Choice {
        Choice { kld, bytes }
    }

    /// Every combination, for checking the solver on small cases.
    fn brute(groups: &[Vec<Choice>], budget: f64) -> (u64, f64) {
        let mut best = (u64::MAX, f64::INFINITY);
        let mut idx = vec![0usize; groups.len()];
        loop {
            let k: f64 = idx.iter().zip(groups).map(|(&i, g)| g[i].kld).sum();
            let b: u64 = idx.iter().zip(groups).map(|(&i, g)| g[i].bytes).sum();
            if k <= budget && (b < best.0 || (b == best.0 && k < best.1)) {
                best = (b, k);
            }
            let mut g = 0;
            loop {
                if g == groups.len() {
                    return best;
                }
                idx[g] += 1;
                if idx[g] < groups[g].len() {
                    break;
                }
                idx[g] = 0;
                g += 1;
            }
        }
    }

    fn totals(groups: &[Vec<Choice>], picks: &[usize]) -> (u64, f64) {
        picks
            .iter()
            .zip(groups)
            .fold((0, 0.0), |(b, k), (&i, g)| (b + g[i].bytes, k + g[i].kld))
    }

    #[test]
    fn matches_brute_force_on_random_groups() {
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..200 {
            let n_groups = 1 + (next() % 5) as usize;
            let groups: Vec<Vec<Choice>> = (0..n_groups)
                .map(|_| {
                    let mut g = vec![ch(0.0, 256)];
                    for _ in 0..(1 + next() % 4) {
                        g.push(ch((next() % 1000) as f64 * 1e-5, 24 + next() % 200));
                    }
                    g
                })
                .collect();
            let budget = (next() % 3000) as f64 * 1e-5;
            let picks = select_plan(&groups, budget).unwrap();
            let (bytes, kld) = totals(&groups, &picks);
            assert!(kld <= budget + 1e-12, "case {case}: over budget");
            // Costs are rounded up to whole units, less than one a group: every set within
            // the budget less that many units is among the solver's candidates.
            let margin = n_groups as f64 / UNITS as f64;
            let (want, _) = brute(&groups, budget * (1.0 - margin));
            assert!(
                bytes <= want,
                "case {case}: {bytes} bytes, brute force {want}"
            );
        }
    }

    #[test]
    fn zero_budget_keeps_everything_exact_and_huge_takes_the_smallest() {
        let groups = vec![
            vec![ch(0.0, 256), ch(0.001, 136), ch(0.01, 72)],
            vec![ch(0.0, 256), ch(0.002, 136), ch(0.5, 24)],
        ];
        assert_eq!(select_plan(&groups, 0.0).unwrap(), vec![0, 0]);
        assert_eq!(select_plan(&groups, 10.0).unwrap(), vec![2, 2]);
        // 0.0125 fits one q4-like option and one q8-like (0.012): 72 + 136 beats 136 + 136.
        assert_eq!(select_plan(&groups, 0.0125).unwrap(), vec![2, 1]);
        // Costs are rounded up to 1/4000 of the budget, so a set exactly at the budget may
        // be passed over for a safer one.
        assert_eq!(select_plan(&groups, 0.012).unwrap(), vec![1, 1]);
    }

    #[test]
    fn bad_budgets_are_refused() {
        let groups = vec![vec![ch(0.0, 1)]];
        for b in [f64::NAN, -1.0, f64::INFINITY] {
            assert!(matches!(select_plan(&groups, b), Err(PlanError::Budget(_))));
        }
    }
}
