//! Reference Q4_0 weighted sum with integer weights (`crate::layout::kv` has the Q4_0
//! layout, and the tile, weight bound and rounding step every kernel set shares): each
//! tile's weights rounded to integers, the nibbles multiplied as integers. The specification
//! of the SIMD `kv_q4_wsum` kernels, bit for bit.

use super::kv_int8::block_ints;
use crate::layout::kv::{KvQuant, Q4_0_WSUM_TILE, QK_KV, q4_0_wsum_step};

/// Q4_0 values weighted with integer weights: per head `h`, block `b` and tile `t` of
/// [`Q4_0_WSUM_TILE`] positions, the products `c_p = w[h][p] * s_p,b` are rounded (ties to
/// even) to integers `k_p = round(c_p * (127 / m))`, `m = max_p |c_p|`, and
/// `out[h][32 b + j] += (m / 127) * Σ_p k_p (n_p,j - 8)` (one fused multiply-add; the sum is
/// exact). Against the float weighted sum this rounds each weight by at most `m / 254`: the
/// budget `tests/kv_formats.rs` names. What it buys: the nibbles are multiplied as bytes,
/// two positions per `vpmaddubsw`, instead of each being turned into a float. A tile whose
/// `m` is 0 (or under 4e-37) adds nothing; one with a weight that is not finite adds NaN.
pub fn attn_weighted_sum_q4_0(
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / n_q;
    let rb = KvQuant::Q4_0.row_bytes(d).expect("checked by the safe API");
    for t0 in (0..n_pos).step_by(Q4_0_WSUM_TILE) {
        let n = Q4_0_WSUM_TILE.min(n_pos - t0);
        let row = |p: usize| &v[(t0 + p) * kv_stride..][..rb];
        for h in 0..n_q {
            for (b, ob) in out[h * d..][..d].chunks_exact_mut(QK_KV).enumerate() {
                // Each position's block scale and integers `n - 8`.
                let blocks: Vec<(f32, [i8; QK_KV])> = (0..n)
                    .map(|p| block_ints(KvQuant::Q4_0, row(p), b))
                    .collect();
                let c: Vec<f32> = (0..n)
                    .map(|p| w[h * n_pos + t0 + p] * blocks[p].0)
                    .collect();
                let Some((step, k)) = q4_0_wsum_weights(&c) else {
                    continue;
                };
                for (j, o) in ob.iter_mut().enumerate() {
                    let sum: i32 = (0..n).map(|p| k[p] * i32::from(blocks[p].1[j])).sum();
                    *o = super::fma::mul_add(step, sum as f32, *o);
                }
            }
        }
    }
}

/// The integer weights of one tile of [`attn_weighted_sum_q4_0`] and the step they count
/// in; `None` when the tile adds nothing. A weight that is not finite gives a NaN step (it
/// must not vanish from the sum).
pub fn q4_0_wsum_weights(c: &[f32]) -> Option<(f32, Vec<i32>)> {
    if c.iter().any(|x| !x.is_finite()) {
        return Some((f32::NAN, vec![0; c.len()]));
    }
    let (step, inv) = q4_0_wsum_step(c.iter().fold(0.0f32, |m, x| m.max(x.abs())))?;
    let k = c
        .iter()
        .map(|&x| (x * inv).round_ties_even() as i32)
        .collect();
    Some((step, k))
}
