//! AVX-512 grouped-query attention over an f16 KV cache: the `n_q` query heads that share one
//! KV head are scored (and their values summed) in one pass, so each K and V row is loaded
//! and converted once per group instead of once per head.
//!
//! The per-head kernels in `attn.rs` stay the reference shape; these sum in another order
//! and are held to the same dot budget. Group sizes 2, 4 and 8 have register-resident
//! kernels; for other sizes [`scores_group`] and [`wsum_group`] return `false` and the caller
//! runs the per-head kernels head by head.

// acc[j][h] pairs position j with head h; index loops say that more plainly than zips.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::float::mask16;

/// Scores of `G` heads (`q` is `[G][d]`) against positions `p0..p0 + P`; returns `[P][G]`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; positions `p0..p0 + P` (`d` elements at stride `kv_stride`) lie
/// inside `k`, and `q` holds `G * d` floats.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn scores_tile<const G: usize, const P: usize>(
    q: *const f32,
    d: usize,
    k: *const u16,
    kv_stride: usize,
    p0: usize,
) -> [[f32; G]; P] {
    let mut acc = [[_mm512_setzero_ps(); G]; P];
    let mut c = 0;
    while c < d {
        let m = mask16(d - c);
        // SAFETY: lanes c.. below d of each position and each head (caller's contract);
        // masked-out lanes are not read.
        unsafe {
            let kv: [__m512; P] = std::array::from_fn(|j| {
                let row = k.add((p0 + j) * kv_stride + c);
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row.cast()))
            });
            for h in 0..G {
                let qv = _mm512_maskz_loadu_ps(m, q.add(h * d + c));
                for j in 0..P {
                    acc[j][h] = _mm512_fmadd_ps(qv, kv[j], acc[j][h]);
                }
            }
        }
        c += 16;
    }
    acc.map(|a| a.map(|v| _mm512_reduce_add_ps(v)))
}

/// # Safety
/// As [`scores_tile`] for every position below `n_pos`; `out` holds `G * n_pos`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn scores_g<const G: usize>(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / G;
    let mut p = 0;
    while p < n_pos {
        // SAFETY: positions below n_pos lie inside k (checked by the safe API).
        unsafe {
            if p + 2 <= n_pos {
                let s = scores_tile::<G, 2>(q.as_ptr(), d, k.as_ptr(), kv_stride, p);
                for (j, sj) in s.iter().enumerate() {
                    for (h, &v) in sj.iter().enumerate() {
                        out[h * n_pos + p + j] = scale * v;
                    }
                }
                p += 2;
            } else {
                let s = scores_tile::<G, 1>(q.as_ptr(), d, k.as_ptr(), kv_stride, p);
                for (h, &v) in s[0].iter().enumerate() {
                    out[h * n_pos + p] = scale * v;
                }
                p += 1;
            }
        }
    }
}

/// `out[h] += Σ_p w[h][p] v_p` for `G` heads, 32 output lanes per pass.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; shapes as the safe API checks them (`w` is `[G][n_pos]`,
/// `out` is `[G][d]`, every position's `d` values inside `v`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn wsum_g<const G: usize>(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let mut c = 0;
    while c < d {
        let m = [mask16(d - c), mask16(d.saturating_sub(c + 16))];
        // Accumulate onto `out` (a cache walked block by block sums as one pass would).
        let acc_init: [[__m512; 2]; G] = std::array::from_fn(|h| {
            std::array::from_fn(|j| {
                let src = out.as_ptr().wrapping_add(h * d + c + 16 * j);
                // SAFETY: the mask covers only lanes below d of head h's output row.
                unsafe { _mm512_maskz_loadu_ps(m[j], src) }
            })
        });
        let mut acc = acc_init;
        for p in 0..n_pos {
            // SAFETY: the masked-in lanes lie below d of position p, inside v; the address of
            // an all-masked second half is formed with wrapping arithmetic.
            let vv: [__m512; 2] = std::array::from_fn(|j| unsafe {
                let row = v.as_ptr().wrapping_add(p * kv_stride + c + 16 * j);
                _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m[j], row.cast()))
            });
            for (h, a) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(w[h * n_pos + p]);
                a[0] = _mm512_fmadd_ps(wv, vv[0], a[0]);
                a[1] = _mm512_fmadd_ps(wv, vv[1], a[1]);
            }
        }
        for (h, a) in acc.iter().enumerate() {
            for j in 0..2 {
                let dst = out.as_mut_ptr().wrapping_add(h * d + c + 16 * j);
                // SAFETY: the mask covers only lanes below d of head h's output row.
                unsafe { _mm512_mask_storeu_ps(dst, m[j], a[j]) };
            }
        }
        c += 32;
    }
}

/// Grouped scores: `q` is `[n_q][d]`, `out` `[n_q][n_pos]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C; shapes as
/// `crate::shared::attn` checks them.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_group(
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes.
    unsafe {
        match n_q {
            2 => scores_g::<2>(q, k, kv_stride, n_pos, scale, out),
            4 => scores_g::<4>(q, k, kv_stride, n_pos, scale, out),
            8 => scores_g::<8>(q, k, kv_stride, n_pos, scale, out),
            _ => return false,
        }
    }
    true
}

/// Grouped weighted sums: `w` is `[n_q][n_pos]`, `out` `[n_q][d]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// As [`scores_group`].
pub(crate) unsafe fn wsum_group(
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes.
    unsafe {
        match n_q {
            2 => wsum_g::<2>(w, v, kv_stride, n_pos, out),
            4 => wsum_g::<4>(w, v, kv_stride, n_pos, out),
            8 => wsum_g::<8>(w, v, kv_stride, n_pos, out),
            _ => return false,
        }
    }
    true
}
