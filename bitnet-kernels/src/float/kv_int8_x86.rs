//! AVX2 scoring of integer-coded keys (Q8_0, Q8R, Q4_0) against an int8 query
//! (`crate::float::kv::attn_scores_kv_int8_query`). Each key block is loaded once for the GQA
//! group as 32 signed bytes (Q4_0's nibbles unpacked and centred), and each head's block dot
//! is `vpmaddubsw` + `vpmaddwd` over all 32 values (the sign trick: `|k|` times `q` carrying
//! `k`'s sign, which keeps the unsigned operand of `vpmaddubsw` in range), exact in i32
//! lanes, then scaled by the key's and the query's block scales into a float accumulator.
//! Decoding the keys to floats instead (`kv_x86`) takes four FMAs for those 32 values per
//! head, plus the conversions: the attention at depth was bound by that arithmetic, not by
//! the bytes.

use std::arch::x86_64::*;

use crate::float::attn_group_x86::reduce8_avx2;
use crate::float::formats::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};
use crate::float::kv::{KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::float::kv_x86::{PREFETCH_ROWS, Q8R, Q40, Q80, f16_splat, prefetch_row, row_bytes};

/// Block `b` of the row at `row`: its scale in every lane and its 32 integer values in
/// order, the ones `crate::scalar::kv::block_ints` gives.
///
/// # Safety
/// Block `b` of the row (and for Q8R the row's scale) must be readable; AVX2/FMA/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block<const F: u8>(row: *const u8, b: usize) -> (__m256, __m256i) {
    // SAFETY: every load stays inside block b or reads the row's leading scale (the
    // caller's contract).
    unsafe {
        match F {
            Q80 => {
                let blk = row.add(Q8_0_BLOCK_BYTES * b);
                (f16_splat(blk), _mm256_loadu_si256(blk.add(2).cast()))
            }
            Q8R => {
                let s = _mm256_set1_ps(row.cast::<f32>().read_unaligned());
                let codes = row.add(Q8R_SCALE_BYTES + QK_KV * b);
                (s, _mm256_loadu_si256(codes.cast()))
            }
            _ => {
                // Byte j holds value j in its low nibble and value j + 16 in its high one.
                let blk = row.add(Q4_0_BLOCK_BYTES * b);
                let x = _mm_loadu_si128(blk.add(2).cast());
                let both = _mm256_set_m128i(_mm_srli_epi16::<4>(x), x);
                let n = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
                (f16_splat(blk), _mm256_sub_epi8(n, _mm256_set1_epi8(8)))
            }
        }
    }
}

/// The scores of `G` int8 query heads against the `P` rows at `row0`, `kv_stride` apart
/// (`G * P <= 8`): lane `j * G + h` is head `h` against row `j` before the attention scale,
/// lanes past `G * P` are 0. The `G * P` accumulators are independent chains, and one
/// reduction serves all of them (a horizontal sum per head and row cost as much as a block).
///
/// # Safety
/// AVX2/FMA/F16C; the `P` rows lie inside the cache; `codes` holds `G * 32 nb` codes and
/// `scales` `G * nb` scales.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_tile<const F: u8, const G: usize, const P: usize>(
    codes: *const i8,
    scales: *const f32,
    nb: usize,
    row0: *const u8,
    kv_stride: usize,
) -> __m256 {
    debug_assert!(G * P <= 8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 8];
    for b in 0..nb {
        // SAFETY: the P rows lie inside the cache (the caller's contract).
        let rows: [(__m256, __m256i); P] =
            std::array::from_fn(|j| unsafe { block::<F>(row0.add(j * kv_stride), b) });
        let abs: [__m256i; P] = std::array::from_fn(|j| _mm256_abs_epi8(rows[j].1));
        for h in 0..G {
            // SAFETY: head h's block b lies inside codes and scales (the caller's contract).
            let (qv, qs) = unsafe {
                let c = codes.add((h * nb + b) * QK_KV);
                (
                    _mm256_loadu_si256(c.cast()),
                    _mm256_set1_ps(*scales.add(h * nb + b)),
                )
            };
            for j in 0..P {
                // |k| <= 128 and |q| <= 127: a pair of products fits vpmaddubsw's i16.
                let pairs = _mm256_maddubs_epi16(abs[j], _mm256_sign_epi8(qv, rows[j].1));
                let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                let s = _mm256_mul_ps(rows[j].0, qs);
                acc[j * G + h] = _mm256_fmadd_ps(dot, s, acc[j * G + h]);
            }
        }
    }
    reduce8_avx2(acc)
}

/// Scores of `G` int8 query heads (`codes` `[G][d]`, `scales` `[G][d / 32]`) against `n_pos`
/// rows; `out` is `[G][n_pos]`. Rows are taken `P` at a time (`8 / G` for a group, 4 for one
/// head).
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them; `G` is 1, 2, 4 or 8.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_g<const F: u8, const G: usize, const P: usize>(
    codes: &[i8],
    scales: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = codes.len() / G;
    let nb = d / QK_KV;
    let rb = row_bytes::<F>(d);
    let (cp, sp) = (codes.as_ptr(), scales.as_ptr());
    let mut lanes = [0.0f32; 8];
    let mut p = 0;
    while p < n_pos {
        for j in 0..P {
            if p + j + PREFETCH_ROWS < n_pos {
                // SAFETY: that row lies inside k (checked by the safe API).
                unsafe { prefetch_row(k.as_ptr().add((p + j + PREFETCH_ROWS) * kv_stride), rb) };
            }
        }
        // SAFETY: the rows from p on lie inside k (checked by the safe API), P of them when
        // p + P <= n_pos; codes and scales have the checked shapes.
        let (sums, n) = unsafe {
            let row = k.as_ptr().add(p * kv_stride);
            if p + P <= n_pos {
                (scores_tile::<F, G, P>(cp, sp, nb, row, kv_stride), P)
            } else {
                (scores_tile::<F, G, 1>(cp, sp, nb, row, kv_stride), 1)
            }
        };
        // SAFETY: `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
        for j in 0..n {
            for h in 0..G {
                out[h * n_pos + p + j] = scale * lanes[j * G + h];
            }
        }
        p += n;
    }
}

type ScoresKernel = unsafe fn(&[i8], &[f32], &[u8], usize, usize, f32, &mut [f32]);

fn kernels<const F: u8>(g: usize) -> Option<ScoresKernel> {
    Some(match g {
        1 => scores_g::<F, 1, 4>,
        2 => scores_g::<F, 2, 4>,
        4 => scores_g::<F, 4, 2>,
        8 => scores_g::<F, 8, 1>,
        _ => return None,
    })
}

fn kernel_of(fmt: KvQuant, g: usize) -> Option<ScoresKernel> {
    match fmt {
        KvQuant::Q8_0 => kernels::<Q80>(g),
        KvQuant::Q8R => kernels::<Q8R>(g),
        KvQuant::Q4_0 => kernels::<Q40>(g),
        KvQuant::Fp8 | KvQuant::B1 => None,
    }
}

/// `crate::scalar::kv::attn_scores_int8_query`, 256 bits wide.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `fmt` has integer codes; shapes checked by the
/// safe API.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn attn_scores_int8_query(
    fmt: KvQuant,
    codes: &[i8],
    scales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    if let Some(f) = kernel_of(fmt, n_q) {
        // SAFETY: the caller guarantees the CPU features and the shapes.
        unsafe { f(codes, scales, k, kv_stride, n_pos, scale, out) };
        return;
    }
    let f = kernel_of(fmt, 1).expect("a one-head kernel for every integer format");
    let d = codes.len() / n_q;
    let nb = d / QK_KV;
    for h in 0..n_q {
        let (ch, sh) = (&codes[h * d..][..d], &scales[h * nb..][..nb]);
        let oh = &mut out[h * n_pos..][..n_pos];
        // SAFETY: one head of the checked group has the checked shape.
        unsafe { f(ch, sh, k, kv_stride, n_pos, scale, oh) };
    }
}
