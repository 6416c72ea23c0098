//! AVX2 product of Q6_K weight rows (a file's Q6_K output head) and Q8_K activations, for
//! decode and batched decode, in the shared walk of `x86_64/q6k.rs`: one row at a time (one
//! sequential stream a thread), each block's codes rebuilt once for up to eight tokens.
//!
//! Per 32 codes (unsigned, 0..63) `vpmaddubsw` against the signed activations (a pair sum is at
//! most 2 * 63 * 128, inside i16) and `vpmaddwd` by the two sub-block scales; then
//! `32 * Σ sc_j bsum_j` taken off with one more `vpmaddwd` of the scales and the activation
//! sums: each token's exact block dot. The float steps are the scalar reference's,
//! `sum += (d_w * d_a) * isum` rounded separately (no FMA), so the result is its bits.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q8k::Q8KActs;
use crate::layout::rows::Q6K_BLOCK_BYTES;
use crate::x86_64::f16c::f16_at;
use crate::x86_64::hsum::{add_lane_sums, hsum_epi32};
use crate::x86_64::q6k::{Q8kPtrs, q6k_codes, q6k_q8k_walk, q6k_scale_pairs, store_sums};

/// Writes to `out[(t0 + t) * nr + i]`, for tokens `t0..t0 + T`, the row at `row` dotted with
/// the token's activations, summed block by block as the reference does.
///
/// # Safety
/// AVX2, FMA, F16C; the row's `x.nb` blocks readable; the tokens below the activations'
/// capacity; `out` writable at those places.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_tokens<const T: usize>(
    row: *const u8,
    x: Q8kPtrs,
    t0: usize,
    out: *mut f32,
    nr: usize,
    i: usize,
) {
    let mut sums = [0.0f32; T];
    for b in 0..x.nb {
        // SAFETY: block b of the row and block b of tokens t0..t0 + T are readable (the
        // caller's guarantees).
        unsafe {
            let blk = row.add(b * Q6K_BLOCK_BYTES);
            let q = [q6k_codes(blk, 0), q6k_codes(blk, 1)];
            let (sc, s) = q6k_scale_pairs(blk);
            let dw = f16_at(blk.add(208));
            let mut acc = [_mm256_setzero_si256(); T];
            for (t, acc) in acc.iter_mut().enumerate() {
                let a = x.codes(t0 + t, b);
                // Two chains of adds, not one of eight.
                let mut v = [_mm256_setzero_si256(); 2];
                for n in 0..2 {
                    for g in 0..4 {
                        let av = _mm256_loadu_si256(a.add(128 * n + 32 * g).cast());
                        let p = _mm256_maddubs_epi16(q[n][g], av);
                        v[g & 1] = _mm256_add_epi32(v[g & 1], _mm256_madd_epi16(p, s[n][g]));
                    }
                }
                let bs = _mm256_loadu_si256(x.sums(t0 + t, b).cast());
                let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bs));
                *acc = _mm256_sub_epi32(_mm256_add_epi32(v[0], v[1]), corr);
            }
            let mut isum = [0i32; T];
            if T == 1 {
                isum[0] = hsum_epi32(acc[0]);
            } else {
                add_lane_sums(&acc, isum.as_mut_ptr(), 1);
            }
            for (t, (sum, &dot)) in sums.iter_mut().zip(&isum).enumerate() {
                *sum += (dw * x.scale(t0 + t, b)) * dot as f32;
            }
        }
    }
    // SAFETY: the caller's guarantee.
    unsafe { store_sums(&sums, out, t0, nr, i) };
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; the shapes were checked
/// (`crate::layout::q8k::check_matmul_q6k`).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q6k_q8k(
    w: &[u8],
    row_len: usize,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    q6k_q8k_walk!(row_tokens, w, row_len, x, n_tok, rows, out);
}
