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

/// Dots of one Q8_0 row of `nb` blocks with `T` token rows of `x` (`xs` floats apart), 512
/// bits wide. Each block is decoded once for the whole tile; each token's sum is formed in
/// the same order whatever `T` is, so a token's result does not depend on its batch.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` readable for `nb` blocks, `x + t * xs` for `nb`
/// blocks of floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dots_q8_0_avx512<const T: usize>(
    w: *const u8,
    x: *const f32,
    xs: usize,
    nb: usize,
) -> [f32; T] {
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: block b is below nb for w and for every token row of x.
        unsafe {
            let p = w.add(b * Q8_0_BLOCK_BYTES);
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(2).cast())));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(18).cast())));
            let d = _mm512_set1_ps(f16_at(p));
            for (t, a) in acc.iter_mut().enumerate() {
                let xp = x.add(t * xs + QK8_0 * b);
                let s = _mm512_mul_ps(_mm512_loadu_ps(xp), lo);
                let s = _mm512_fmadd_ps(_mm512_loadu_ps(xp.add(16)), hi, s);
                *a = _mm512_fmadd_ps(s, d, *a);
            }
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
}

/// Dots of one Q6_K row of `nb` super-blocks with `T` token rows of `x` (`xs` floats apart),
/// 512 bits wide: per half-block the 6-bit codes of the four 32-element quarters come from
/// [`q6k_quarters`], are widened to f32 once for the tile and scaled per 16 elements by
/// `d * scales[e / 16]`; each token's sums are formed in the same order whatever `T` is.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ, AVX2, FMA, F16C; `w` readable for `nb` super-blocks, `x + t * xs` for
/// `nb` super-blocks of floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dots_q6k_avx512<const T: usize>(
    w: *const u8,
    x: *const f32,
    xs: usize,
    nb: usize,
) -> [f32; T] {
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and for every token row of x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(qg)));
                    let hi =
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256::<1>(qg)));
                    let s0 = _mm512_set1_ps(d * f32::from(sc.add(2 * g).read() as i8));
                    let s1 = _mm512_set1_ps(d * f32::from(sc.add(2 * g + 1).read() as i8));
                    let off = QK_K * b + 128 * n + 32 * g;
                    for (t, a) in acc.iter_mut().enumerate() {
                        let xg = x.add(t * xs + off);
                        let t0 = _mm512_mul_ps(_mm512_loadu_ps(xg), lo);
                        let t1 = _mm512_mul_ps(_mm512_loadu_ps(xg.add(16)), hi);
                        a[0] = _mm512_fmadd_ps(t0, s0, a[0]);
                        a[1] = _mm512_fmadd_ps(t1, s1, a[1]);
                    }
                }
            }
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1])))
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

/// Dots of one Q6_K row of `nb` super-blocks with `T` token rows of `x` (`xs` floats apart),
/// 256 bits wide (as the AVX-512 one).
///
/// # Safety
/// AVX2, FMA, F16C; `w` readable for `nb` super-blocks, `x + t * xs` for `nb` super-blocks of
/// floats for every `t < T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_q6k_avx2<const T: usize>(
    w: *const u8,
    x: *const f32,
    xs: usize,
    nb: usize,
) -> [f32; T] {
    let mut acc = [[_mm256_setzero_ps(); 2]; T];
    for b in 0..nb {
        // SAFETY: super-block b is below nb for w and for every token row of x.
        unsafe {
            let blk = w.add(b * Q6K_BLOCK_BYTES);
            let d = f16_at(blk.add(208));
            for n in 0..2 {
                let q = q6k_quarters(blk, n);
                let sc = blk.add(192 + 8 * n);
                for (g, &qg) in q.iter().enumerate() {
                    let halves = [
                        _mm256_castsi256_si128(qg),
                        _mm256_extracti128_si256::<1>(qg),
                    ];
                    for (h, &q16) in halves.iter().enumerate() {
                        // 16 elements share scale 2g + h.
                        let s = _mm256_set1_ps(d * f32::from(sc.add(2 * g + h).read() as i8));
                        let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q16));
                        let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128::<8>(q16)));
                        let off = QK_K * b + 128 * n + 32 * g + 16 * h;
                        for (t, a) in acc.iter_mut().enumerate() {
                            let xp = x.add(t * xs + off);
                            let v = _mm256_mul_ps(_mm256_loadu_ps(xp), lo);
                            let v = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), hi, v);
                            a[h] = _mm256_fmadd_ps(v, s, a[h]);
                        }
                    }
                }
            }
        }
    }
    acc.map(|a| hsum256(_mm256_add_ps(a[0], a[1])))
}

/// Dots of one Q8_0 row of `nb` blocks with `T` token rows of `x` (`xs` floats apart), 256
/// bits wide (as the AVX-512 one).
///
/// # Safety
/// AVX2, FMA, F16C; `w` readable for `nb` blocks, `x + t * xs` for `nb` blocks of floats for
/// every `t < T`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dots_q8_0_avx2<const T: usize>(
    w: *const u8,
    x: *const f32,
    xs: usize,
    nb: usize,
) -> [f32; T] {
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..nb {
        // SAFETY: block b is below nb for w and for every token row of x.
        unsafe {
            let (d, q) = q8_block_f32_avx2(w.add(b * Q8_0_BLOCK_BYTES));
            let d = _mm256_set1_ps(d);
            for (t, a) in acc.iter_mut().enumerate() {
                let xp = x.add(t * xs + QK8_0 * b);
                let mut s = _mm256_setzero_ps();
                for (j, &qj) in q.iter().enumerate() {
                    s = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8 * j)), qj, s);
                }
                *a = _mm256_fmadd_ps(s, d, *a);
            }
        }
    }
    acc.map(|a| hsum256(a))
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

    /// Token rows one decoded weight row is used for at a time: as many as keep the tile's
    /// accumulators in registers (Q6_K keeps two a token; AVX2 has 16 vector registers), at
    /// most [`MAX_TILE`].
    fn tile_tokens(self) -> usize {
        match self {
            Kernel::Q6KAvx2 => 4,
            Kernel::Q8_0Avx512 | Kernel::Q6KAvx512 | Kernel::Q8_0Avx2 => 8,
        }
    }

    /// The dots of one row with `T` token rows, by this kernel.
    ///
    /// # Safety
    /// As the kernel's own function: its CPU features, `w` and the `T` rows of `x` readable
    /// for `nb` blocks.
    #[inline]
    unsafe fn dots<const T: usize>(
        self,
        w: *const u8,
        x: *const f32,
        xs: usize,
        nb: usize,
    ) -> [f32; T] {
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                Kernel::Q8_0Avx512 => dots_q8_0_avx512::<T>(w, x, xs, nb),
                Kernel::Q6KAvx512 => dots_q6k_avx512::<T>(w, x, xs, nb),
                Kernel::Q8_0Avx2 => dots_q8_0_avx2::<T>(w, x, xs, nb),
                Kernel::Q6KAvx2 => dots_q6k_avx2::<T>(w, x, xs, nb),
            }
        }
    }
}

/// The widest token tile of [`matmul`] (its dispatch has an arm for each width up to this).
const MAX_TILE: usize = 8;

/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])` for rows decoded by `k`. Each
/// row is decoded once for a tile of up to [`Kernel::tile_tokens`] tokens (batched decode
/// reads and decodes the head once per step, not once per sequence); a token's result is the
/// same bits in any tile.
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
    let tile = k.tile_tokens();
    debug_assert!((1..=MAX_TILE).contains(&tile));
    for (i, r) in rows.enumerate() {
        let mut t0 = 0;
        while t0 < n_tok {
            let tt = tile.min(n_tok - t0);
            let mut d = [0.0f32; MAX_TILE];
            // SAFETY: row r < rows.end lies inside data and tokens t0..t0 + tt inside x
            // (checked above); the caller guarantees the CPU features of `k`.
            unsafe {
                let w = data.as_ptr().add(r * rb);
                let xt = x.as_ptr().add(t0 * row_len);
                match tt {
                    8 => d = k.dots::<8>(w, xt, row_len, nb),
                    7 => d[..7].copy_from_slice(&k.dots::<7>(w, xt, row_len, nb)),
                    6 => d[..6].copy_from_slice(&k.dots::<6>(w, xt, row_len, nb)),
                    5 => d[..5].copy_from_slice(&k.dots::<5>(w, xt, row_len, nb)),
                    4 => d[..4].copy_from_slice(&k.dots::<4>(w, xt, row_len, nb)),
                    3 => d[..3].copy_from_slice(&k.dots::<3>(w, xt, row_len, nb)),
                    2 => d[..2].copy_from_slice(&k.dots::<2>(w, xt, row_len, nb)),
                    1 => d[..1].copy_from_slice(&k.dots::<1>(w, xt, row_len, nb)),
                    _ => unreachable!("token tiles are 1 to {MAX_TILE} wide"),
                }
            }
            for (t, &v) in d.iter().enumerate().take(tt) {
                out[(t0 + t) * nr + i] = v;
            }
            t0 += tt;
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
