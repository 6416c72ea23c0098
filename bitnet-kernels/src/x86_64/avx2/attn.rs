//! AVX2 attention over one KV head of an f16, f32 or Q8_0 cache: the same names and
//! contracts as `scalar/attn.rs`, 256 bits wide. Scores take the shared position walk
//! (`crate::x86_64::rows::attn_scores`, four positions a pass) with this set's dots; the
//! weighted sums keep 32 output lanes in registers while the positions stream past. Grouped
//! f16 attention is `attn_group.rs`, the low-bit KV formats `kv*.rs`.

use std::arch::x86_64::*;

use super::float::{Dots, hsum, load_w, pad_tail};
use super::qrows::q8_block_f32;
use crate::layout::rows::Q8_0_BLOCK_BYTES;
use crate::x86_64::rows::{self, esize};

/// `out += Σ_p w[p] v_p` over a cache of kind `K`: 32 output lanes at a time in registers
/// while the positions stream past; the last `d % 8` lanes go through padded rows.
///
/// # Safety
/// AVX2/FMA/F16C; `v_ptr` holds `(n_pos - 1) * kv_stride + out.len()` elements of kind `K`,
/// `w` holds `n_pos`.
#[allow(clippy::needless_range_loop)] // acc[j] pairs with the j-th 8 lanes of each row
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attn_weighted_sum<const K: u8>(
    w: &[f32],
    v_ptr: *const u8,
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let (d, es) = (out.len(), esize(K));
    assert!(w.len() >= n_pos);
    let full = d - d % 8;
    let mut c = 0;
    while c < full {
        let nv = ((full - c) / 8).min(4);
        // Accumulate onto `out`: a cache walked block by block sums as one pass would.
        let mut acc = [_mm256_setzero_ps(); 4];
        for (j, a) in acc.iter_mut().enumerate().take(nv) {
            // SAFETY: c + 8 j + 8 <= full <= d, inside out.
            *a = unsafe { _mm256_loadu_ps(out.as_ptr().add(c + 8 * j)) };
        }
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            let wv = _mm256_set1_ps(wp);
            // SAFETY: elements c..c + 8 nv <= d of position p lie inside the cache.
            let row = unsafe { v_ptr.add((p * kv_stride + c) * es) };
            for j in 0..nv {
                // SAFETY: as above.
                let v = unsafe { load_w::<K>(row, 8 * j) };
                acc[j] = _mm256_fmadd_ps(wv, v, acc[j]);
            }
        }
        for j in 0..nv {
            // SAFETY: c + 8 j + 8 <= full <= d, inside out.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * j), acc[j]) };
        }
        c += 8 * nv;
    }
    if full < d {
        let mut o = [0.0f32; 8];
        o[..d - full].copy_from_slice(&out[full..]);
        // SAFETY: o holds 8 floats.
        let mut acc = unsafe { _mm256_loadu_ps(o.as_ptr()) };
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            // SAFETY: the d - full < 8 tail elements of position p lie inside the cache.
            let v = unsafe {
                let buf = pad_tail::<K>(v_ptr.add((p * kv_stride + full) * es), d - full);
                load_w::<K>(buf.as_ptr(), 0)
            };
            acc = _mm256_fmadd_ps(_mm256_set1_ps(wp), v, acc);
        }
        // SAFETY: o holds 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc) };
        out[full..].copy_from_slice(&o[..d - full]);
    }
}

rows::plain_attn_kernels!("avx2,fma,f16c", "AVX2, FMA and F16C");

/// `attn_scores_q8_0` of `scalar/attn.rs`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            // SAFETY: block b of position p < n_pos lies inside k (checked above); q holds
            // 32 nb floats.
            unsafe {
                let (d, v) = q8_block_f32(k.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES));
                let qp = q.as_ptr().add(32 * b);
                let mut t = _mm256_mul_ps(_mm256_loadu_ps(qp), v[0]);
                for (j, &vj) in v.iter().enumerate().skip(1) {
                    t = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(8 * j)), vj, t);
                }
                acc = _mm256_fmadd_ps(t, _mm256_set1_ps(d), acc);
            }
        }
        *o = scale * hsum(acc);
    }
}

/// `attn_weighted_sum_q8_0` of `scalar/attn.rs`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
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
        let mut acc =
            [0, 1, 2, 3].map(|j| unsafe { _mm256_loadu_ps(out.as_ptr().add(32 * b + 8 * j)) });
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            // SAFETY: block b of position p < n_pos lies inside v (checked above).
            let (d, q) =
                unsafe { q8_block_f32(v.as_ptr().add(p * kv_stride + b * Q8_0_BLOCK_BYTES)) };
            let c = _mm256_set1_ps(wp * d);
            for (a, &qj) in acc.iter_mut().zip(&q) {
                *a = _mm256_fmadd_ps(c, qj, *a);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: out holds 32 nb floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(32 * b + 8 * j), *a) };
        }
    }
}
