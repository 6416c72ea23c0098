//! AVX2 attention kernels of the low-bit KV formats (`crate::float::kv`). A format is a const
//! parameter of one kernel shape: each 16-value half of a block is decoded in registers into
//! the same exact values the scalar reference uses, then scored against (or summed into) the
//! `G` query heads of a GQA group, so each row is decoded once per group. Group sizes 1, 2,
//! 4 and 8 have kernels; others run one head at a time.
//!
//! AVX-512 machines run these too (no 512-bit versions yet: this machine cannot test them).

// acc[h][j] pairs head h with lane group j; index loops say that more plainly than zips.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::float::formats::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
use crate::float::kv::{B1_BLOCK_BYTES, FP8_BLOCK_BYTES, KvQuant, Q8R_SCALE_BYTES, QK_KV};

const Q8R: u8 = 0;
const FP8: u8 = 1;
const Q40: u8 = 2;
const B1: u8 = 3;
const Q80: u8 = 4;

/// The f16 at `p` as f32.
///
/// # Safety
/// Two bytes at `p` readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the two bytes are readable.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// The row scale of the row at `row` (Q8R's f32, else 1).
///
/// # Safety
/// The row must be readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn row_scale<const F: u8>(row: *const u8) -> f32 {
    if F == Q8R {
        // SAFETY: a Q8R row starts with its 4-byte scale.
        unsafe { row.cast::<f32>().read_unaligned() }
    } else {
        1.0
    }
}

/// Half `half` (values `16 half..16 half + 16`) of block `b` of the row at `row`: the block
/// scale and the values as two vectors of 8 (exactly the scalar reference's values).
///
/// # Safety
/// Block `b` of the row must be readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_block<const F: u8>(row: *const u8, b: usize, half: usize) -> (f32, [__m256; 2]) {
    // SAFETY: every load below stays inside block b (the caller's contract).
    unsafe {
        match F {
            Q80 => {
                let blk = row.add(Q8_0_BLOCK_BYTES * b);
                let p = blk.add(2 + 16 * half);
                let v = [0, 8].map(|o| {
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(o).cast())))
                });
                (f16_at(blk), v)
            }
            Q8R => {
                let p = row.add(Q8R_SCALE_BYTES + QK_KV * b + 16 * half);
                let v = [0, 8].map(|o| {
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(o).cast())))
                });
                (1.0, v)
            }
            FP8 => {
                let blk = row.add(FP8_BLOCK_BYTES * b);
                let p = blk.add(2 + 16 * half);
                let pow = _mm256_set1_ps(f32::from_bits((127 + 120) << 23));
                let v = [0, 8].map(|o| {
                    let c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(o).cast()));
                    let sign =
                        _mm256_slli_epi32::<24>(_mm256_and_si256(c, _mm256_set1_epi32(0x80)));
                    let rest =
                        _mm256_slli_epi32::<20>(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)));
                    _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(sign, rest)), pow)
                });
                (f16_at(blk), v)
            }
            Q40 => {
                let blk = row.add(Q4_0_BLOCK_BYTES * b);
                let x = _mm_loadu_si128(blk.add(2).cast());
                let x = if half == 0 { x } else { _mm_srli_epi16::<4>(x) };
                let n = _mm_sub_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));
                let v = [
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(n)),
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(n))),
                ];
                (f16_at(blk), v)
            }
            _ => {
                let blk = row.add(B1_BLOCK_BYTES * b);
                let bits = blk.add(2).cast::<u32>().read_unaligned();
                let lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
                let v = [0, 1].map(|j| {
                    let byte = (bits >> (8 * (2 * half + j))) & 0xff;
                    let m = _mm256_and_si256(_mm256_set1_epi32(byte as i32), lanes);
                    let set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(m, lanes));
                    _mm256_blendv_ps(_mm256_set1_ps(-1.0), _mm256_set1_ps(1.0), set)
                });
                (f16_at(blk), v)
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Scores of `G` heads (`q` is `[G][d]`) against `n_pos` rows; `out` is `[G][n_pos]`.
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_g<const F: u8, const G: usize>(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / G;
    let nb = d / QK_KV;
    for p in 0..n_pos {
        // SAFETY: row p < n_pos lies inside k and q holds G d floats (checked by the safe API).
        unsafe {
            let row = k.as_ptr().add(p * kv_stride);
            let mut acc = [_mm256_setzero_ps(); G];
            for b in 0..nb {
                for half in 0..2 {
                    let (s, v) = half_block::<F>(row, b, half);
                    let sv = _mm256_set1_ps(s);
                    for h in 0..G {
                        let qp = q.as_ptr().add(h * d + QK_KV * b + 16 * half);
                        let t = _mm256_mul_ps(_mm256_loadu_ps(qp), v[0]);
                        let t = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(8)), v[1], t);
                        acc[h] = _mm256_fmadd_ps(t, sv, acc[h]);
                    }
                }
            }
            let r = row_scale::<F>(row);
            for h in 0..G {
                out[h * n_pos + p] = scale * (r * hsum(acc[h]));
            }
        }
    }
}

/// `out[h] += Σ_p w[h][p] v_p` for `G` heads, 16 output lanes per pass.
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wsum_g<const F: u8, const G: usize>(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let nb = d / QK_KV;
    for b in 0..nb {
        for half in 0..2 {
            let lane0 = QK_KV * b + 16 * half;
            // Accumulate onto `out` (a cache walked block by block sums as one pass would).
            // SAFETY: lanes lane0..lane0 + 16 lie below d of every head's output row.
            let mut acc: [[__m256; 2]; G] = std::array::from_fn(|h| unsafe {
                let o = out.as_ptr().add(h * d + lane0);
                [_mm256_loadu_ps(o), _mm256_loadu_ps(o.add(8))]
            });
            for p in 0..n_pos {
                // SAFETY: row p < n_pos lies inside v (checked by the safe API).
                let (row, (s, x)) = unsafe {
                    let row = v.as_ptr().add(p * kv_stride);
                    (row, half_block::<F>(row, b, half))
                };
                // SAFETY: as above.
                let r = unsafe { row_scale::<F>(row) };
                for h in 0..G {
                    let c = _mm256_set1_ps((w[h * n_pos + p] * r) * s);
                    acc[h][0] = _mm256_fmadd_ps(c, x[0], acc[h][0]);
                    acc[h][1] = _mm256_fmadd_ps(c, x[1], acc[h][1]);
                }
            }
            for h in 0..G {
                // SAFETY: as for the loads.
                unsafe {
                    let o = out.as_mut_ptr().add(h * d + lane0);
                    _mm256_storeu_ps(o, acc[h][0]);
                    _mm256_storeu_ps(o.add(8), acc[h][1]);
                }
            }
        }
    }
}

type ScoresKernel = unsafe fn(&[f32], &[u8], usize, usize, f32, &mut [f32]);
type WsumKernel = unsafe fn(&[f32], &[u8], usize, usize, &mut [f32]);

/// The kernels of format `F` for a group of `g` heads, if there are any.
fn kernels<const F: u8>(g: usize) -> Option<(ScoresKernel, WsumKernel)> {
    Some(match g {
        1 => (scores_g::<F, 1>, wsum_g::<F, 1>),
        2 => (scores_g::<F, 2>, wsum_g::<F, 2>),
        4 => (scores_g::<F, 4>, wsum_g::<F, 4>),
        8 => (scores_g::<F, 8>, wsum_g::<F, 8>),
        _ => return None,
    })
}

fn kernels_of(fmt: KvQuant, g: usize) -> Option<(ScoresKernel, WsumKernel)> {
    match fmt {
        KvQuant::Q8_0 => kernels::<Q80>(g),
        KvQuant::Q8R => kernels::<Q8R>(g),
        KvQuant::Fp8 => kernels::<FP8>(g),
        KvQuant::Q4_0 => kernels::<Q40>(g),
        KvQuant::B1 => kernels::<B1>(g),
    }
}

/// `crate::scalar::kv::attn_scores`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; shapes checked by the safe API.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores(
    fmt: KvQuant,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    if let Some((f, _)) = kernels_of(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(q, k, kv_stride, n_pos, scale, out) };
        return;
    }
    let (f, _) = kernels_of(fmt, 1).expect("a one-head kernel for every format");
    let d = q.len() / n_q;
    for h in 0..n_q {
        let (qh, oh) = (&q[h * d..][..d], &mut out[h * n_pos..][..n_pos]);
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(qh, k, kv_stride, n_pos, scale, oh) };
    }
}

/// `crate::scalar::kv::attn_weighted_sum`, 256 bits wide.
///
/// # Safety
/// As [`attn_scores`].
pub(crate) unsafe fn attn_weighted_sum(
    fmt: KvQuant,
    w: &[f32],
    n_q: usize,
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    if let Some((_, f)) = kernels_of(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(w, v, kv_stride, n_pos, out) };
        return;
    }
    let (_, f) = kernels_of(fmt, 1).expect("a one-head kernel for every format");
    let d = out.len() / n_q;
    for h in 0..n_q {
        let (wh, oh) = (&w[h * n_pos..][..n_pos], &mut out[h * d..][..d]);
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(wh, v, kv_stride, n_pos, oh) };
    }
}
