//! Absmean ternarization exactly as bitnet.cpp's embedding converter computes it in numpy
//! (`utils/convert-bitnet-embedding-to-gguf.py`, `quantize_to_i2_s`), bit for bit:
//!
//! ```text
//! w        = the tensor as float32, flattened
//! abs_mean = max(np.mean(np.abs(w)), 1e-5)        # a float32 mean
//! q        = np.round(w * (1.0 / abs_mean)).clip(-1, 1)
//! scale    = np.float32(abs_mean)
//! ```
//!
//! Three details decide a weight that sits near a rounding boundary, and the scale's last
//! bit, so each is reproduced rather than approximated:
//! - numpy sums a contiguous float32 array in float32, pairwise (`pairwise_sum` in numpy's
//!   `loops_utils.h.src`): below 8 values one after another; up to 128 in eight interleaved
//!   accumulators, combined as `((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`, then the remainder;
//!   above 128 the two halves (the first a multiple of 8 long) separately. A sum in f64
//!   (what the language-model route and the runtime's load-time rule use) can differ from
//!   it in the mean's last bit.
//! - the mean is that f32 sum divided by the count, rounded to f32 (done here in f64 and
//!   rounded once, which is the same result for any count below 2^24, i.e. any projection
//!   of these models);
//! - the weights are multiplied by the f32 reciprocal of the mean, not divided by it.

/// The smallest scale, as the reference clamps it.
const MIN_SCALE: f64 = 1e-5;
/// Below this many values numpy adds one value after another.
const UNROLL: usize = 8;
/// Up to this many values numpy sums in eight accumulators; above it, it halves.
const PAIRWISE_BLOCK: usize = 128;

/// `sum(|x|)` in float32, in numpy's pairwise order.
pub(crate) fn pairwise_abs_sum(x: &[f32]) -> f32 {
    let n = x.len();
    if n < UNROLL {
        return x.iter().fold(0.0f32, |acc, v| acc + v.abs());
    }
    if n <= PAIRWISE_BLOCK {
        let mut r = [0f32; UNROLL];
        for (r, v) in r.iter_mut().zip(x) {
            *r = v.abs();
        }
        let whole = n - n % UNROLL;
        for chunk in x[UNROLL..whole].chunks_exact(UNROLL) {
            for (r, v) in r.iter_mut().zip(chunk) {
                *r += v.abs();
            }
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for v in &x[whole..] {
            res += v.abs();
        }
        return res;
    }
    let half = n / 2;
    let half = half - half % UNROLL;
    pairwise_abs_sum(&x[..half]) + pairwise_abs_sum(&x[half..])
}

/// The trits and the scale of `w` (a whole tensor, row-major), by the reference's rule.
pub(crate) fn ternarize(w: &[f32]) -> (Vec<i8>, f32) {
    let n = w.len().max(1);
    let mean = (f64::from(pairwise_abs_sum(w)) / n as f64) as f32;
    trits_for_mean(w, mean)
}

/// The trits and scale of `w` whose float32 mean of `|w|` is `mean`.
fn trits_for_mean(w: &[f32], mean: f32) -> (Vec<i8>, f32) {
    // `max(abs_mean, 1e-5)` keeps the float32 mean, or takes the Python float 1e-5, whose
    // reciprocal is then computed in double: 100000 exactly.
    let (scale, inv) = if f64::from(mean) < MIN_SCALE {
        (MIN_SCALE as f32, (1.0 / MIN_SCALE) as f32)
    } else {
        (mean, 1.0 / mean)
    };
    let trits = w
        .iter()
        .map(|&v| (v * inv).round_ties_even().clamp(-1.0, 1.0) as i8)
        .collect();
    (trits, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values spread over a few magnitudes (a test input both here and in the
    /// numpy session that produced the expected bits below).
    fn values(n: usize) -> Vec<f32> {
        (0..n as u32)
            .map(|i| {
                let h = i.wrapping_mul(2_654_435_761) >> 8;
                let v = (h % 100_003) as f32 * 1.3e-5 - 0.6;
                if i % 7 == 0 { v * 0.01 } else { v }
            })
            .collect()
    }

    /// `np.sum(np.abs(values(n)))` with numpy 2.4 (float32, pairwise); for 100, 65536 and
    /// 300001 a sum in f64 rounded to f32 differs.
    const NUMPY_SUMS: [(usize, u32); 9] = [
        (5, 0x3f84_697b),
        (8, 0x3ff6_fb1b),
        (100, 0x41e1_b79d),
        (128, 0x420f_0aa6),
        (129, 0x4210_849a),
        (1000, 0x438c_77c0),
        (4099, 0x448f_bf18),
        (65536, 0x468f_94bc),
        (300_001, 0x47a4_50ca),
    ];

    /// The reference's `quantize_to_i2_s` on `values(n)` in numpy 2.4: the scale's bits and
    /// the sum of the trits; for 65536 and 300032 an f64 mean gives another scale.
    const NUMPY_TERNARY: [(usize, u32, i64); 5] = [
        (128, 0x3e8f_0aa6, 6),
        (1000, 0x3e8f_d6c9, 66),
        (4096, 0x3e8f_9f46, 270),
        (65536, 0x3e8f_94bc, 4247),
        (300_032, 0x3e8f_948f, 19463),
    ];

    #[test]
    fn the_sum_is_numpys() {
        for (n, want) in NUMPY_SUMS {
            let got = pairwise_abs_sum(&values(n));
            assert_eq!(got.to_bits(), want, "n = {n}: {got}");
        }
    }

    #[test]
    fn the_mean_scale_and_trits_are_numpys() {
        for (n, want_scale, want_trit_sum) in NUMPY_TERNARY {
            let w = values(n);
            let (t, s) = ternarize(&w);
            assert_eq!(s.to_bits(), want_scale, "n = {n}: scale {s}");
            let sum: i64 = t.iter().map(|&x| i64::from(x)).sum();
            assert_eq!(sum, want_trit_sum, "n = {n}");
        }
    }

    /// numpy multiplies by the f32 reciprocal: with mean 0.8588302 the weight 0.42941514
    /// gives exactly 0.5 (a tie, 0), where dividing gives 0.50000006 (1).
    #[test]
    fn weights_are_multiplied_by_the_reciprocal() {
        let mean = f32::from_bits(0x3f5b_dc4c);
        let w = f32::from_bits(0x3edb_dc4d);
        assert_eq!((w / mean).round_ties_even(), 1.0);
        assert_eq!(trits_for_mean(&[w, -w], mean).0, [0, 0]);
    }

    #[test]
    fn the_floor_and_ties() {
        let (t, s) = ternarize(&[0.0; 128]);
        assert_eq!((t, s), (vec![0; 128], 1e-5));
        // mean 1: 0.5 and -0.5 are ties, rounded to even (0); 1.5 rounds to 2, clamped.
        let w = [0.5, -0.5, 1.5, 1.5, 0.5, 1.5, 0.5, 1.5];
        let (t, s) = ternarize(&w);
        assert_eq!(s, 1.0);
        assert_eq!(t, [0, 0, 1, 1, 0, 1, 0, 1]);
    }
}
