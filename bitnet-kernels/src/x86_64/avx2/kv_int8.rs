//! AVX2 scoring of integer-coded keys (Q8_0, Q8R, Q4_0) against an int8 query
//! (`crate::layout::kv::ATTN_INT8_PLACEHOLDER`; the specification is `scalar/kv_int8.rs`).
//! Each key block is loaded once for the GQA group as 32 bytes (Q8_0 and Q8R signed codes,
//! Q4_0 unsigned nibbles), and each (head, row) block dot is `vpmaddubsw` + `vpmaddwd` over
//! all 32 values, exact in i32 lanes (Q8_0 and
//! Q8R through the sign trick: `|k|` times `q` carrying `k`'s sign keeps the unsigned operand
//! of `vpmaddubsw` in range; Q4_0's 8 comes off through the query's block sums). Four such
//! dots are gathered into one vector before the conversion and the scaling by the key's and
//! the query's block scales ([`scores_tile`]). Decoding the keys to floats instead (`kv.rs`)
//! takes four FMAs for those 32 values per head, plus the conversions: the attention at depth
//! is bound by that arithmetic, not by the bytes.

use std::arch::x86_64::*;

use super::kv::{PREFETCH_ROWS, Q8R, Q40, Q80, f16_splat, prefetch_row, row_bytes};
use crate::layout::kv::{KvQuant, Q8R_SCALE_BYTES, QK_KV};
use crate::layout::rows::{Q4_0_BLOCK_BYTES, Q8_0_BLOCK_BYTES};

/// Block `b` of the row at `row`: its scale in every lane and its 32 integer values in
/// order: for Q8_0 and Q8R the signed codes the reference's `block_ints` gives, for Q4_0 the
/// unsigned nibbles (`block_ints`' values + 8; the tile takes the 8 off through the
/// query's block sums, which spares the sign trick).
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
                (
                    f16_splat(blk),
                    _mm256_and_si256(both, _mm256_set1_epi8(0x0f)),
                )
            }
        }
    }
}

/// Blocks of a head dim the per-block query vectors are kept on the stack for (d <= 1024).
const STACK_BLOCKS: usize = 32;

/// The layout of a tile's sums: unit `u = j * G + h` is head `h` against the tile's row `j`,
/// and four units share a vector (a quad), unit `4k + l` in lanes `l` and `l + 4` of quad `k`:
/// lane `l` sums the block's first 16 values, lane `l + 4` its last 16. The heads of a quad
/// repeat with the quad's parity for `G = 8` and are the same in every quad otherwise:
/// `quad_head::<G>(k % patterns::<G>(), l)`.
#[inline(always)]
const fn quad_head<const G: usize>(pattern: usize, l: usize) -> usize {
    4 * pattern + (l % 4) % G
}

#[inline(always)]
const fn patterns<const G: usize>() -> usize {
    if G > 4 { G / 4 } else { 1 }
}

/// The query's per-block constants of every quad pattern, laid out `[b][pattern]`: the
/// query scales of the lanes' heads, and for Q4_0 `8 * Σ codes` over each lane's half block
/// (what the unsigned nibbles add to the exact dot).
///
/// # Safety
/// AVX2; `codes` holds `G * 32 nb` codes and `scales` `G * nb` scales; `dq` and `corr` hold
/// `nb * patterns::<G>()` vectors.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn query_blocks<const F: u8, const G: usize>(
    codes: &[i8],
    scales: &[f32],
    nb: usize,
    dq: &mut [__m256],
    corr: &mut [__m256i],
) {
    for b in 0..nb {
        for c in 0..patterns::<G>() {
            let lanes: [f32; 8] = std::array::from_fn(|l| scales[quad_head::<G>(c, l) * nb + b]);
            let sums: [i32; 8] = std::array::from_fn(|l| {
                if F != Q40 {
                    return 0;
                }
                let h = quad_head::<G>(c, l);
                let half = &codes[(h * nb + b) * QK_KV + 16 * (l / 4)..][..16];
                8 * half.iter().map(|&q| i32::from(q)).sum::<i32>()
            });
            // SAFETY: `lanes` and `sums` hold 8 values each.
            unsafe {
                dq[b * patterns::<G>() + c] = _mm256_loadu_ps(lanes.as_ptr());
                corr[b * patterns::<G>() + c] = _mm256_loadu_si256(sums.as_ptr().cast());
            }
        }
    }
}

/// The scores of `G` int8 query heads against the `P` rows `rows` (`G * P` a multiple of 4,
/// at most 16), before the attention scale, as `G * P / 4` quads of 4 sums (unit `4k + l`
/// in lane `l` of quad `k`). Each key block is decoded once for the group; a unit's block dot
/// is `vpmaddubsw` + `vpmaddwd` (for Q8_0 and Q8R with the sign trick: `|k|` times `q`
/// carrying `k`'s sign keeps the unsigned operand in range; Q4_0's nibbles are unsigned
/// already); two rounds of `vphaddd` gather a quad's four dots, by half block, into one
/// vector, so the conversion, the block scale and the FMA are paid once per quad, not once
/// per unit. Every half-block sum is exact, and each unit's lanes add in block order, so a
/// unit's score does not depend on `G`, `P` or its place in the tile.
///
/// # Safety
/// AVX2/FMA/F16C; the rows hold `nb` blocks; `codes` holds `G * 32 nb` codes; `dq` and
/// `corr` are [`query_blocks`]' for these codes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_tile<const F: u8, const G: usize, const P: usize>(
    codes: *const i8,
    dq: &[__m256],
    corr: &[__m256i],
    nb: usize,
    rows: [*const u8; P],
) -> [__m128; 4] {
    debug_assert!((G * P).is_multiple_of(4) && G * P <= 16);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); 4];
    for b in 0..nb {
        // SAFETY: the P rows hold nb blocks (the caller's contract).
        let keys: [(__m256, __m256i); P] =
            std::array::from_fn(|j| unsafe { block::<F>(rows[j], b) });
        let abs: [__m256i; P] = std::array::from_fn(|j| {
            if F == Q40 {
                keys[j].1
            } else {
                _mm256_abs_epi8(keys[j].1)
            }
        });
        for (k, acc) in acc.iter_mut().enumerate().take(G * P / 4) {
            let dots: [__m256i; 4] = std::array::from_fn(|l| {
                let (j, h) = ((4 * k + l) / G, (4 * k + l) % G);
                // SAFETY: head h's block b lies inside codes (the caller's contract).
                let q = unsafe { _mm256_loadu_si256(codes.add((h * nb + b) * QK_KV).cast()) };
                // |k| <= 128 (15 for Q4_0) and |q| <= 127: a pair of products fits i16.
                let pairs = if F == Q40 {
                    _mm256_maddubs_epi16(abs[j], q)
                } else {
                    _mm256_maddubs_epi16(abs[j], _mm256_sign_epi8(q, keys[j].1))
                };
                _mm256_madd_epi16(pairs, ones)
            });
            let pattern = k % patterns::<G>();
            let mut sums = _mm256_hadd_epi32(
                _mm256_hadd_epi32(dots[0], dots[1]),
                _mm256_hadd_epi32(dots[2], dots[3]),
            );
            if F == Q40 {
                sums = _mm256_sub_epi32(sums, corr[b * patterns::<G>() + pattern]);
            }
            // The key scale of each lane's row.
            let dk = match G {
                1 => {
                    let (s0, s1, s2, s3) = (
                        keys[4 * k].0,
                        keys[4 * k + 1].0,
                        keys[4 * k + 2].0,
                        keys[4 * k + 3].0,
                    );
                    let s01 = _mm256_blend_ps::<0b0010_0010>(s0, s1);
                    let s012 = _mm256_blend_ps::<0b0100_0100>(s01, s2);
                    _mm256_blend_ps::<0b1000_1000>(s012, s3)
                }
                2 => _mm256_blend_ps::<0b1100_1100>(keys[2 * k].0, keys[2 * k + 1].0),
                _ => keys[4 * k / G].0,
            };
            let s = _mm256_mul_ps(dk, dq[b * patterns::<G>() + pattern]);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s, *acc);
        }
    }
    acc.map(|a| _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a)))
}

/// Scores of `G` int8 query heads (`codes` `[G][d]`, `scales` `[G][d / 32]`) against `n_pos`
/// rows; `out` is `[G][n_pos]`. Rows are taken `P` at a time; the last tile repeats its last
/// row for the rows past `n_pos`, and their scores are dropped.
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
    let n_vec = nb * patterns::<G>();
    let (mut dq_stack, mut corr_stack) = (
        [_mm256_setzero_ps(); STACK_BLOCKS * 2],
        [_mm256_setzero_si256(); STACK_BLOCKS * 2],
    );
    // Head dims past 1,024 (none in use) take the heap.
    let (mut dq_heap, mut corr_heap) = (Vec::new(), Vec::new());
    let (dq, corr): (&mut [__m256], &mut [__m256i]) = if n_vec <= dq_stack.len() {
        (&mut dq_stack[..n_vec], &mut corr_stack[..n_vec])
    } else {
        dq_heap.resize(n_vec, _mm256_setzero_ps());
        corr_heap.resize(n_vec, _mm256_setzero_si256());
        (&mut dq_heap, &mut corr_heap)
    };
    // SAFETY: shapes as the safe API checks them; dq and corr hold n_vec vectors.
    unsafe { query_blocks::<F, G>(codes, scales, nb, dq, corr) };
    let mut lanes = [0.0f32; 16];
    let mut p = 0;
    while p < n_pos {
        for j in 0..P {
            if p + j + PREFETCH_ROWS < n_pos {
                // SAFETY: that row lies inside k (checked by the safe API).
                unsafe { prefetch_row(k.as_ptr().add((p + j + PREFETCH_ROWS) * kv_stride), rb) };
            }
        }
        let n = P.min(n_pos - p);
        // SAFETY: rows p..p + n lie inside k (checked by the safe API); the rest repeat
        // row p + n - 1.
        let rows =
            std::array::from_fn(|j| unsafe { k.as_ptr().add((p + j.min(n - 1)) * kv_stride) });
        // SAFETY: the rows hold nb blocks; codes, dq and corr have the checked shapes.
        let quads = unsafe { scores_tile::<F, G, P>(codes.as_ptr(), dq, corr, nb, rows) };
        for (k, quad) in quads.iter().enumerate() {
            // SAFETY: `lanes` holds 16 floats.
            unsafe { _mm_storeu_ps(lanes.as_mut_ptr().add(4 * k), *quad) };
        }
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
        4 => scores_g::<F, 4, 4>,
        8 => scores_g::<F, 8, 2>,
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

/// `attn_scores_int8_query` of `scalar/kv_int8.rs`, 256 bits wide.
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
