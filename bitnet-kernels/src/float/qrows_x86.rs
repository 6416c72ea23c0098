//! Block-quantized rows (Q8_0, Q6_K) times f32 vectors on x86: weight rows of heads and
//! embeddings kept in those formats, and the rows of an 8-bit KV cache. Each row is decoded
//! in registers and never written out.
//!
//! Lives beside the formats it decodes; `x86_64/{avx2,avx512}/float.rs` dispatch here from
//! their `matmul_f32` and `attn_*_q8_0`. Q4_0 (rare in heads) keeps the shared
//! dequantize-a-chunk path.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::float::formats::{Q6K_BLOCK_BYTES, Q8_0_BLOCK_BYTES, QK_K, QK8_0, RowFormat};

/// The f16 at `p` as f32, through F16C.
///
/// # Safety
/// Two bytes at `p` must be readable; the CPU must support F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the two bytes are readable.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// Dot of one Q8_0 row of `nb` blocks with `x` (32 nb floats), 512 bits wide.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` and `x` readable for `nb` blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_q8_0_avx512(w: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm512_setzero_ps();
    for b in 0..nb {
        // SAFETY: block b is below nb for w and x.
        unsafe {
            let p = w.add(b * Q8_0_BLOCK_BYTES);
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast())));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast())));
            let xp = x.add(QK8_0 * b);
            let t = _mm512_mul_ps(_mm512_loadu_ps(xp), lo);
            let t = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(16)), hi, t);
            acc = _mm512_fmadd_ps(t, _mm512_set1_ps(f16_at(p)), acc);
        }
    }
    _mm512_reduce_add_ps(acc)
}

/// Dot of one Q6_K row of `nb` super-blocks with `x`, 512 bits wide: per half-block the 6-bit
/// codes of the four 32-element quarters come from [`q6k_quarters`], are widened to f32 and
/// scaled per 16 elements by `d * scales[e / 16]`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` and `x` readable for `nb` super-blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_q6k_avx512(w: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc0 = _mm512_setzero_ps();
    let mut acc1 = _mm512_setzero_ps();
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                let xh = x.add(QK_K * b + 128 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(qg)));
                    let hi =
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(qg)));
                    let xg = xh.add(32 * g);
                    let s0 = d * f32::from(sc.add(2 * g).read() as i8);
                    let s1 = d * f32::from(sc.add(2 * g + 1).read() as i8);
                    let t0 = _mm512_mul_ps(_mm512_loadu_ps(xg), lo);
                    let t1 = _mm512_mul_ps(_mm512_loadu_ps(xg.add(16)), hi);
                    acc0 = _mm512_fmadd_ps(t0, _mm512_set1_ps(s0), acc0);
                    acc1 = _mm512_fmadd_ps(t1, _mm512_set1_ps(s1), acc1);
                }
            }
        }
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
}

/// The 6-bit codes (minus 32) of the four 32-element quarters of Q6_K half-block `n` of the
/// block at `blk`, rebuilt with byte logic: low nibbles from `ql`, 2-bit fields from `qh`.
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_quarters(blk: *const u8, n: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x30);
    // SAFETY: ql (64 bytes at 64 n) and qh (32 bytes at 128 + 32 n) lie inside the block.
    let (la, lb, qh) = unsafe {
        (
            _mm256_loadu_si256(blk.add(64 * n).cast()),
            _mm256_loadu_si256(blk.add(64 * n + 32).cast()),
            _mm256_loadu_si256(blk.add(128 + 32 * n).cast()),
        )
    };
    let q = [
        _mm256_or_si256(
            _mm256_and_si256(la, m4),
            _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(lb, m4),
            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(la), m4),
            _mm256_and_si256(qh, m2),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(lb), m4),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
        ),
    ];
    q.map(|v| _mm256_sub_epi8(v, _mm256_set1_epi8(32)))
}

/// Dot of one Q6_K row of `nb` super-blocks with `x`, 256 bits wide (as the AVX-512 one).
///
/// # Safety
/// AVX2, FMA, F16C; `w` and `x` readable for `nb` super-blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6k_avx2(w: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 2];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                let xh = x.add(QK_K * b + 128 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let halves = [
                        _mm256_castsi256_si128(qg),
                        _mm256_extracti128_si256::<1>(qg),
                    ];
                    for (h, &q16) in halves.iter().enumerate() {
                        // 16 elements share scale 2g + h.
                        let s = _mm256_set1_ps(d * f32::from(sc.add(2 * g + h).read() as i8));
                        let xs = xh.add(32 * g + 16 * h);
                        let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q16));
                        let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(q16)));
                        let t = _mm256_mul_ps(_mm256_loadu_ps(xs), lo);
                        let t = _mm256_fmadd_ps(_mm256_loadu_ps(xs.add(8)), hi, t);
                        acc[h] = _mm256_fmadd_ps(t, s, acc[h]);
                    }
                }
            }
        }
    }
    hsum256(_mm256_add_ps(acc[0], acc[1]))
}

/// Dot of one Q8_0 row of `nb` blocks with `x`, 256 bits wide.
///
/// # Safety
/// AVX2, FMA, F16C; `w` and `x` readable for `nb` blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0_avx2(w: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        // SAFETY: block b is below nb for w and x.
        unsafe {
            let p = w.add(b * Q8_0_BLOCK_BYTES);
            let xp = x.add(QK8_0 * b);
            let mut t = _mm256_setzero_ps();
            for j in 0..4 {
                let q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(2 + 8 * j).cast()));
                t = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8 * j)), _mm256_cvtepi32_ps(q), t);
            }
            acc = _mm256_fmadd_ps(t, _mm256_set1_ps(f16_at(p)), acc);
        }
    }
    hsum256(acc)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// Which decoder [`matmul`] runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Q8_0Avx512,
    Q6KAvx512,
    Q8_0Avx2,
    Q6KAvx2,
}

impl Kernel {
    fn format(self) -> RowFormat {
        match self {
            Kernel::Q8_0Avx512 | Kernel::Q8_0Avx2 => RowFormat::Q8_0,
            Kernel::Q6KAvx512 | Kernel::Q6KAvx2 => RowFormat::Q6K,
        }
    }
}

/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])` for rows decoded by `k`.
///
/// # Safety
/// The CPU must support the features of `k` (AVX-512 F/BW/VL/DQ for the Avx512 kernels,
/// AVX2/FMA/F16C for all). Shapes are checked here.
pub(crate) unsafe fn matmul(
    k: Kernel,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let fmt = k.format();
    let rb = fmt.row_bytes(row_len).expect("whole blocks");
    let nb = row_len / fmt.block_len();
    let nr = rows.len();
    assert!(
        crate::extent::holds(data.len(), rows.end, rb)
            && crate::extent::holds(x.len(), n_tok, row_len)
            && crate::extent::holds(out.len(), n_tok, nr)
    );
    for (i, r) in rows.enumerate() {
        for t in 0..n_tok {
            // SAFETY: row r < rows.end lies inside data and token t inside x (checked
            // above); the caller guarantees the CPU features of `k`.
            out[t * nr + i] = unsafe {
                let w = data.as_ptr().add(r * rb);
                let xt = x.as_ptr().add(t * row_len);
                match k {
                    Kernel::Q8_0Avx512 => dot_q8_0_avx512(w, xt, nb),
                    Kernel::Q6KAvx512 => dot_q6k_avx512(w, xt, nb),
                    Kernel::Q8_0Avx2 => dot_q8_0_avx2(w, xt, nb),
                    Kernel::Q6KAvx2 => dot_q6k_avx2(w, xt, nb),
                }
            };
        }
    }
}

/// The f16 scale of the Q8_0 block at `p` and its 32 quants as two f32 vectors.
///
/// # Safety
/// A whole Q8_0 block (34 bytes) at `p` must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn q8_block_f32_avx512(p: *const u8) -> (f32, __m512, __m512) {
    // SAFETY: the caller guarantees the 34 bytes of the block are readable.
    unsafe {
        let d = f16_at(p);
        let lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast()));
        let hi = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast()));
        (d, _mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi))
    }
}

/// `scalar::float::attn_scores_q8_0`, 512 bits wide.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn attn_scores_q8_0_avx512(
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
                let (d, lo, hi) = q8_block_f32_avx512(k.as_ptr().add(p * kv_stride + b * 34));
                let qp = q.as_ptr().add(32 * b);
                let t = _mm512_mul_ps(_mm512_loadu_ps(qp), lo);
                let t = _mm512_fmadd_ps(_mm512_loadu_ps(qp.add(16)), hi, t);
                acc = _mm512_fmadd_ps(t, _mm512_set1_ps(d), acc);
            }
        }
        *o = scale * _mm512_reduce_add_ps(acc);
    }
}

/// `scalar::float::attn_weighted_sum_q8_0`, 512 bits wide.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn attn_weighted_sum_q8_0_avx512(
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
                unsafe { q8_block_f32_avx512(v.as_ptr().add(p * kv_stride + b * 34)) };
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

/// The f16 scale of the Q8_0 block at `p` and its 32 quants as four f32 vectors.
///
/// # Safety
/// A whole Q8_0 block (34 bytes) at `p` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_block_f32_avx2(p: *const u8) -> (f32, [__m256; 4]) {
    // SAFETY: the caller guarantees the 34 bytes of the block are readable.
    unsafe {
        let d = f16_at(p);
        let v = [0, 1, 2, 3].map(|j| {
            let q = _mm_loadl_epi64(p.add(2 + 8 * j).cast());
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))
        });
        (d, v)
    }
}

/// `scalar::float::attn_scores_q8_0`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attn_scores_q8_0_avx2(
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
                let (d, v) = q8_block_f32_avx2(k.as_ptr().add(p * kv_stride + b * 34));
                let qp = q.as_ptr().add(32 * b);
                let mut t = _mm256_mul_ps(_mm256_loadu_ps(qp), v[0]);
                for (j, &vj) in v.iter().enumerate().skip(1) {
                    t = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(8 * j)), vj, t);
                }
                acc = _mm256_fmadd_ps(t, _mm256_set1_ps(d), acc);
            }
        }
        *o = scale * hsum256(acc);
    }
}

/// `scalar::float::attn_weighted_sum_q8_0`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attn_weighted_sum_q8_0_avx2(
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
            let (d, q) = unsafe { q8_block_f32_avx2(v.as_ptr().add(p * kv_stride + b * 34)) };
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
