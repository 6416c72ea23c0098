//! Paired comparison of interleaved repetitions (`bench --interleave`).
//!
//! On a host whose speed drifts (a shared VM, a laptop that heats up), two configurations
//! measured one after the other can differ by more than the change between them. Taken in
//! turn, round by round, both see the same host in each round, so the ratio of their two
//! samples of a round cancels the drift; the median ratio and a sign test over the rounds
//! say whether one is faster beyond the noise.

use serde::{Deserialize, Serialize};

/// One row's repetitions against the first configuration's, round by round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// The configuration compared against (`t2 K f16 V f16`).
    pub against: String,
    /// Median over the rounds of (this row's t/s / the other's t/s in the same round).
    pub median_ratio: f64,
    pub min_ratio: f64,
    pub max_ratio: f64,
    /// Rounds in which this configuration was the faster, out of `rounds`.
    pub faster: usize,
    pub rounds: usize,
    /// Two-sided sign test: the chance of a split at least this uneven if neither
    /// configuration were faster (rounds with equal figures left out).
    pub sign_test_p: f64,
}

/// Compares `samples` with `base` (tokens/s of the same rounds, in the same order); `None`
/// when there is nothing to pair (no rounds, or lengths that do not match).
pub fn paired(samples: &[f64], base: &[f64], against: &str) -> Option<Paired> {
    if samples.is_empty() || samples.len() != base.len() {
        return None;
    }
    let mut ratios: Vec<f64> = samples.iter().zip(base).map(|(s, b)| s / b).collect();
    if ratios.iter().any(|r| !r.is_finite()) {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let median = if n % 2 == 1 {
        ratios[n / 2]
    } else {
        (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0
    };
    let faster = ratios.iter().filter(|&&r| r > 1.0).count();
    let slower = ratios.iter().filter(|&&r| r < 1.0).count();
    Some(Paired {
        against: against.to_owned(),
        median_ratio: median,
        min_ratio: ratios[0],
        max_ratio: ratios[n - 1],
        faster,
        rounds: n,
        sign_test_p: sign_test_p(faster, faster + slower),
    })
}

/// Two-sided exact sign test: P(a Binomial(n, 1/2) count is at least as far from n/2 as `k`).
pub fn sign_test_p(k: usize, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    let tail = k.min(n - k);
    // Sum the binomial probabilities of 0..=tail in log space: 0.5^n underflows past n = 1074.
    let ln_half_n = n as f64 * std::f64::consts::LN_2;
    let mut ln_choose = 0.0f64; // ln C(n, 0)
    let mut sum = 0.0f64;
    for i in 0..=tail {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        sum += (ln_choose - ln_half_n).exp();
    }
    (2.0 * sum).min(1.0)
}

impl Paired {
    /// `x0.930 (0.850-1.020) vs t2 K f16 V f16, faster in 3/20 rounds, sign test p=0.003`.
    pub fn describe(&self) -> String {
        format!(
            "x{:.3} ({:.3}-{:.3}) vs {}, faster in {}/{} rounds, sign test p={}",
            self.median_ratio,
            self.min_ratio,
            self.max_ratio,
            self.against,
            self.faster,
            self.rounds,
            format_p(self.sign_test_p)
        )
    }
}

fn format_p(p: f64) -> String {
    if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_test_matches_the_binomial_by_hand() {
        // 0 of 10: 2 * (1/1024).
        assert!((sign_test_p(0, 10) - 2.0 / 1024.0).abs() < 1e-12);
        assert!((sign_test_p(10, 10) - 2.0 / 1024.0).abs() < 1e-12);
        // 2 of 10: 2 * (1 + 10 + 45) / 1024.
        assert!((sign_test_p(2, 10) - 112.0 / 1024.0).abs() < 1e-12);
        assert_eq!(sign_test_p(5, 10), 1.0);
        assert_eq!(sign_test_p(0, 0), 1.0);
        assert_eq!(sign_test_p(0, 1), 1.0);
        // Far past where 0.5^n underflows, a lopsided split is still a tiny, finite p.
        let p = sign_test_p(0, 2000);
        assert!(p == 0.0 || p < 1e-300);
        let p = sign_test_p(900, 2000);
        assert!(p > 0.0 && p < 1e-5, "{p}");
    }

    #[test]
    fn ratios_are_taken_round_by_round() {
        // The host halves its speed in the second round: both configurations see it, and
        // the ratio of each round stays 1.1.
        let base = [100.0, 50.0, 100.0, 50.0];
        let faster = [110.0, 55.0, 110.0, 55.0];
        let p = paired(&faster, &base, "t2 K f16 V f16").unwrap();
        assert!((p.median_ratio - 1.1).abs() < 1e-12);
        assert!((p.min_ratio - 1.1).abs() < 1e-12 && (p.max_ratio - 1.1).abs() < 1e-12);
        assert_eq!((p.faster, p.rounds), (4, 4));
        assert!((p.sign_test_p - 2.0 / 16.0).abs() < 1e-12);
        assert!(
            p.describe()
                .starts_with("x1.100 (1.100-1.100) vs t2 K f16 V f16")
        );
        assert!(
            p.describe()
                .contains("faster in 4/4 rounds, sign test p=0.125")
        );
    }

    #[test]
    fn median_of_an_even_count_and_mixed_rounds() {
        let p = paired(&[9.0, 12.0, 10.0, 11.0], &[10.0; 4], "x").unwrap();
        assert!((p.median_ratio - 1.05).abs() < 1e-12);
        assert!((p.min_ratio - 0.9).abs() < 1e-12 && (p.max_ratio - 1.2).abs() < 1e-12);
        // One round ties: it counts for neither side of the sign test.
        assert_eq!(p.faster, 2);
        assert!((p.sign_test_p - sign_test_p(2, 3)).abs() < 1e-12);
    }

    #[test]
    fn nothing_to_pair() {
        assert!(paired(&[], &[], "x").is_none());
        assert!(paired(&[1.0, 2.0], &[1.0], "x").is_none());
        assert!(paired(&[1.0], &[0.0], "x").is_none());
    }
}
