//! AVX-512 product of Q6_K weight rows (a file's Q6_K output head) and Q8_K activations:
//! `avx2/q6k_q8k.rs` at 512 bits. Quarters `g` and `g + 1` of a half-block are 64 consecutive
//! elements, so two of the shared 256-bit code registers (and their scale multipliers) make
//! one 512-bit register, once per block, against one 64-byte load of each token's
//! activations; `vpmaddubsw` and `vpdpwssd` (scale, then add) per 64 codes. Same walk, same
//! exact block dots, same float steps: the scalar reference's bits.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q8k::Q8KActs;
use crate::layout::rows::Q6K_BLOCK_BYTES;
use crate::x86_64::f16c::f16_at;
use crate::x86_64::hsum::{add_lane_sums, hsum_epi32};
use crate::x86_64::q6k::{Q8kPtrs, q6k_codes, q6k_q8k_walk, q6k_scale_pairs, store_sums};

/// Two 256-bit halves as one 512-bit register, `lo` first.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Writes to `out[(t0 + t) * nr + i]`, for tokens `t0..t0 + T`, the row at `row` dotted with
/// the token's activations, summed block by block as the reference does.
///
/// # Safety
/// The AVX-512 set's features; the row's `x.nb` blocks readable; the tokens below the
/// activations' capacity; `out` writable at those places.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
            // Register k: elements 64 k..64 k + 64 (half k / 2, quarters 2 (k % 2) and next).
            let wq: [__m512i; 4] =
                std::array::from_fn(|k| join(q[k / 2][2 * (k % 2)], q[k / 2][2 * (k % 2) + 1]));
            let ws: [__m512i; 4] =
                std::array::from_fn(|k| join(s[k / 2][2 * (k % 2)], s[k / 2][2 * (k % 2) + 1]));
            let dw = f16_at(blk.add(208));
            let mut acc = [_mm256_setzero_si256(); T];
            for (t, acc) in acc.iter_mut().enumerate() {
                let a = x.codes(t0 + t, b);
                let mut v = [_mm512_setzero_si512(); 2];
                for k in 0..4 {
                    let av = _mm512_loadu_si512(a.add(64 * k).cast());
                    let p = _mm512_maddubs_epi16(wq[k], av);
                    v[k & 1] = _mm512_dpwssd_epi32(v[k & 1], p, ws[k]);
                }
                let v = _mm512_add_epi32(v[0], v[1]);
                let v =
                    _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v));
                let bs = _mm256_loadu_si256(x.sums(t0 + t, b).cast());
                let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc, bs));
                *acc = _mm256_sub_epi32(v, corr);
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
/// The CPU must support the AVX-512 set's features; the shapes were checked
/// (`crate::layout::q8k::check_matmul_q6k`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
