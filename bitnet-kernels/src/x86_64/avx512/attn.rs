//! AVX-512 attention over one KV head of an f16, f32 or Q8_0 cache: the same names and
//! contracts as `scalar/attn.rs`, 512 bits wide with masked tails. Scores take the shared
//! position walk (`crate::x86_64::rows::attn_scores`, four positions a pass) with this set's
//! dots; the weighted sums keep 64 output lanes in registers while the positions stream
//! past. Grouped f16 attention is `attn_group.rs`.

use std::arch::x86_64::*;

use super::float::{Dots, load_w, mask16};
use super::qrows::q8_block_f32;
use crate::layout::rows::Q8_0_BLOCK_BYTES;
use crate::x86_64::rows::{self, esize};

/// `out += Σ_p w[p] v_p` over a cache of kind `K`: 64 output lanes at a time stay in
/// registers while every position streams past.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C; `v_ptr` holds
/// `(n_pos - 1) * kv_stride + out.len()` elements of kind `K`, `w` holds `n_pos`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn attn_weighted_sum<const K: u8>(
    w: &[f32],
    v_ptr: *const u8,
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let (d, es) = (out.len(), esize(K));
    assert!(w.len() >= n_pos);
    let mut c = 0;
    while c < d {
        let masks = [0, 1, 2, 3].map(|j| mask16(d.saturating_sub(c + 16 * j)));
        // Accumulate onto `out`: a cache walked block by block sums as one pass would.
        let mut acc = [0, 1, 2, 3].map(|j| {
            let src = out.as_ptr().wrapping_add(c + 16 * j);
            // SAFETY: the mask covers only elements below d (none if this vector is past d).
            unsafe { _mm512_maskz_loadu_ps(masks[j], src) }
        });
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            let wv = _mm512_set1_ps(wp);
            let row = p * kv_stride + c;
            for j in 0..4 {
                // SAFETY: masked-in lanes are elements c + 16j.. below d of position p,
                // inside the cache (caller's contract).
                let v = unsafe { load_w::<K>(v_ptr.wrapping_add(row * es), 16 * j, masks[j]) };
                acc[j] = _mm512_fmadd_ps(wv, v, acc[j]);
            }
        }
        for j in 0..4 {
            let dst = out.as_mut_ptr().wrapping_add(c + 16 * j);
            // SAFETY: the mask covers only elements below d (none if this vector is past d).
            unsafe { _mm512_mask_storeu_ps(dst, masks[j], acc[j]) };
        }
        c += 64;
    }
}

rows::plain_attn_kernels!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    "AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C"
);

/// `attn_scores_q8_0` of `scalar/attn.rs`, 512 bits wide.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub unsafe fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = q.len() / 32;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(out.len() >= n_pos && crate::extent::holds_strided(k.len(), n_pos, kv_stride, rb));
    for (p, o) in out.iter_mut().enumerate().take(n_pos) {
        let mut acc = _mm512_setzero_ps();
        for b in 0..nb {
            // SAFETY: block b of position p < n_pos lies inside k (checked above); q holds
            // 32 nb floats.
            unsafe {
                let (d, lo, hi) =
                    q8_block_f32(k.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES));
                let qp = q.as_ptr().add(32 * b);
                let t = _mm512_mul_ps(_mm512_loadu_ps(qp), lo);
                let t = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(16)), hi, t);
                acc = _mm512_fmadd_ps(t, _mm512_set1_ps(d), acc);
            }
        }
        *o = scale * _mm512_reduce_add_ps(acc);
    }
}

/// `attn_weighted_sum_q8_0` of `scalar/attn.rs`, 512 bits wide.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub unsafe fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let nb = out.len() / 32;
    let rb = nb * Q8_0_BLOCK_BYTES;
    assert!(w.len() >= n_pos && crate::extent::holds_strided(v.len(), n_pos, kv_stride, rb));
    for b in 0..nb {
        // Accumulate onto `out` (a cache walked block by block sums as one pass would).
        // SAFETY: out holds 32 nb floats.
        let (mut a0, mut a1) = unsafe {
            (
                _mm512_loadu_ps(out.as_ptr().add(32 * b)),
                _mm512_loadu_ps(out.as_ptr().add(32 * b + 16)),
            )
        };
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            // SAFETY: block b of position p < n_pos lies inside v (checked above).
            let (d, lo, hi) =
                unsafe { q8_block_f32(v.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES)) };
            let c = _mm512_set1_ps(wp * d);
            a0 = _mm512_fmadd_ps(c, lo, a0);
            a1 = _mm512_fmadd_ps(c, hi, a1);
        }
        // SAFETY: out holds 32 nb floats.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr().add(32 * b), a0);
            _mm512_storeu_ps(out.as_mut_ptr().add(32 * b + 16), a1);
        }
    }
}
