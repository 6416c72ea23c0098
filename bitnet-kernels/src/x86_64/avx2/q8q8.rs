//! AVX2 Q8_0 x Q8_0 products: the `--head q8` output head, for one token (decode) or a few
//! (batched decode, where every sequence needs its logits).
//!
//! The integer core is `maddubs(|w|, sign(x, w))` then `madd` against ones: |w| is unsigned
//! (even for a weight quant of -128), x never is -128, so the pair sums stay inside i16. One
//! token streams four weight rows against its activations (the weights are the bound). For a
//! batch, the same weight block serves several tokens: it is loaded, and its |w| and scale
//! taken, once per tile of tokens, which leaves `sign`, `maddubs`, `madd`, the conversion and
//! the scaled accumulation as the per-token work (the batch is compute bound, not stream
//! bound, from about 4 tokens on).
//!
//! Both kernels gather four dots (four rows of one token, or one row of four tokens) into
//! one vector with two rounds of `vphaddd` ([`quad`]): lane `l` holds dot `l`'s sum over
//! the block's first 16 values, lane `l + 4` over its last 16. The conversion, the block
//! scale and the FMA are then paid once per four dots instead of once per dot, and every
//! dot sums the same exact half-block integers in block order whichever kernel and which
//! lane computes it, so a token's logits do not depend on its batch.

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::ops::Range;

use crate::float::formats::{Q8_0_BLOCK_BYTES, QK8_0};

/// Weight rows per pass of the one-token kernel.
const ROWS: usize = 4;
/// Activation rows per pass of the batched kernel (its accumulators stay in registers).
const TOKENS: usize = 8;
/// How far ahead of the block in use the batched kernel prefetches the weight row stream.
const PREFETCH_BYTES: usize = 6144;

thread_local! {
    /// The activation scales of a batched call as f32 (grown once per thread, then reused).
    static SCALES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The f16 scale of the Q8_0 block at `p`.
///
/// # Safety
/// Two bytes at `p` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_scale(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees the scale field is readable.
    let h = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(h))))
}

/// The f16 scales of four consecutive Q8_0 blocks at `p` as an xmm of f32.
///
/// # Safety
/// The four blocks' scale fields must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_scales4(p: *const u8) -> __m128 {
    let mut bits = 0u64;
    for j in 0..4 {
        // SAFETY: the caller guarantees the four scale fields are readable.
        let h = unsafe { p.add(j * Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned() };
        bits |= u64::from(h) << (16 * j);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64))
}

/// The i32 lanes of the dot of the quants of one weight block (`wq`, with `aw = |wq|`) and
/// one activation block (`xq`): lane `i` sums the products of bytes `4i..4i + 4`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn block_dot(aw: __m256i, wq: __m256i, xq: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, wq));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

/// Four [`block_dot`]s gathered into one vector: lane `l` is dot `l`'s sum over the block's
/// first 16 values, lane `l + 4` over its last 16 (exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn quad(d: [__m256i; 4]) -> __m256 {
    let s = _mm256_hadd_epi32(_mm256_hadd_epi32(d[0], d[1]), _mm256_hadd_epi32(d[2], d[3]));
    _mm256_cvtepi32_ps(s)
}

/// The four dots of a quad accumulator: its two half-block sums added.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn quad_sums(acc: __m256) -> [f32; 4] {
    let v = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let mut out = [0.0f32; 4];
    // SAFETY: `out` holds 4 floats.
    unsafe { _mm_storeu_ps(out.as_mut_ptr(), v) };
    out
}

/// Q8_0 x Q8_0 dots of four weight rows with one activation row of `nb` blocks, scaled per
/// block in f32 (a row may repeat: the tail of a row range).
///
/// # Safety
/// Each `w[r]` and `x` must point at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_rows(w: [*const u8; ROWS], x: *const u8, nb: usize) -> [f32; ROWS] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    let row_bytes = nb * BB;
    let mut acc = _mm256_setzero_ps();
    let mut b = 0;
    // Four blocks per pass: the four rows' scales of those blocks are converted together
    // and transposed to one vector of the rows' scales per block.
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let dx = q8_scales4(xp);
            let [mut d0, mut d1, mut d2, mut d3] = w.map(|wr| q8_scales4(wr.add(b * BB)));
            _MM_TRANSPOSE4_PS(&mut d0, &mut d1, &mut d2, &mut d3);
            let dw = [d0, d1, d2, d3];
            for r in 0..ROWS {
                // Rows are short (2.7 KB for 2560 columns) and four are read side by side,
                // so the hardware stream prefetcher loses the stream at every pass: fetch the
                // same stretch of the next pass's rows (ROWS rows further) ahead of use.
                let pf = w[r].add(b * BB).wrapping_add(ROWS * row_bytes);
                _mm_prefetch::<_MM_HINT_T0>(pf.cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(128).cast());
            }
            let dxs = [
                _mm_shuffle_ps::<0x00>(dx, dx),
                _mm_shuffle_ps::<0x55>(dx, dx),
                _mm_shuffle_ps::<0xaa>(dx, dx),
                _mm_shuffle_ps::<0xff>(dx, dx),
            ];
            for j in 0..4 {
                let xq = _mm256_loadu_si256(xp.add(j * BB + 2).cast());
                let dots = w.map(|wr| {
                    let wq = _mm256_loadu_si256(wr.add((b + j) * BB + 2).cast());
                    block_dot(_mm256_abs_epi8(wq), wq, xq)
                });
                // Each row's weight scale times the token's, as the batched kernel takes it.
                let d = _mm_mul_ps(dw[j], dxs[j]);
                acc = _mm256_fmadd_ps(quad(dots), _mm256_set_m128(d, d), acc);
            }
        }
        b += 4;
    }
    while b < nb {
        // SAFETY: block b is below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = _mm256_loadu_si256(xp.add(2).cast());
            let dx = _mm_set1_ps(q8_scale(xp));
            let dots = w.map(|wr| {
                let wq = _mm256_loadu_si256(wr.add(b * BB + 2).cast());
                block_dot(_mm256_abs_epi8(wq), wq, xq)
            });
            let dw = w.map(|wr| q8_scale(wr.add(b * BB)));
            let d = _mm_mul_ps(_mm_setr_ps(dw[0], dw[1], dw[2], dw[3]), dx);
            acc = _mm256_fmadd_ps(quad(dots), _mm256_set_m128(d, d), acc);
        }
        b += 1;
    }
    quad_sums(acc)
}

/// Q8_0 x Q8_0 dots of one weight row with `T <= TOKENS` activation rows `rb` bytes apart:
/// each weight block is loaded, and its |w| and scale taken, once for the `T` rows, and the
/// tokens' dots are gathered four to a vector (the last quad repeats the last token; its
/// scale lanes are zero). `dx` holds the activation scales of the tile as f32,
/// `[block][TOKENS]` (lanes past `T` zero).
///
/// # Safety
/// `w` must point at `nb` readable Q8_0 blocks, `x` at `T` rows of `nb` blocks `rb` bytes
/// apart, `dx` at `TOKENS * nb` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_tokens<const T: usize>(
    w: *const u8,
    x: *const u8,
    rb: usize,
    dx: *const f32,
    nb: usize,
) -> [f32; T] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    const { assert!(T <= TOKENS && TOKENS == 8) };
    let quads = T.div_ceil(4);
    let mut acc = [_mm256_setzero_ps(); 2];
    for b in 0..nb {
        // SAFETY: block b is below nb for the weight row and the T activation rows; dx holds
        // TOKENS * nb floats.
        unsafe {
            let wp = w.add(b * BB);
            // Only a hint: it may point past the row (prefetches never fault).
            _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(PREFETCH_BYTES).cast());
            let wq = _mm256_loadu_si256(wp.add(2).cast());
            let aw = _mm256_abs_epi8(wq);
            let dw = _mm256_set1_ps(q8_scale(wp));
            let dxb = dx.add(TOKENS * b);
            for (k, a) in acc.iter_mut().enumerate().take(quads) {
                let dots: [__m256i; 4] = std::array::from_fn(|l| {
                    let t = (4 * k + l).min(T - 1);
                    let xq = _mm256_loadu_si256(x.add(t * rb + b * BB + 2).cast());
                    block_dot(aw, wq, xq)
                });
                // The weight scale times four tokens' block scales, in both halves.
                let d = _mm256_mul_ps(dw, _mm256_broadcast_ps(&_mm_loadu_ps(dxb.add(4 * k))));
                *a = _mm256_fmadd_ps(quad(dots), d, *a);
            }
        }
    }
    let sums = [quad_sums(acc[0]), quad_sums(acc[1])];
    std::array::from_fn(|t| sums[t / 4][t % 4])
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_q8_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / QK8_0;
    let rb = nb * Q8_0_BLOCK_BYTES;
    let nr = rows.len();
    assert!(w.len() >= rows.end * rb && xq.len() >= n_tok * rb && out.len() >= n_tok * nr);
    if n_tok > 1 {
        // SAFETY: shapes checked above.
        return unsafe { matmul_tokens(w, nb, xq, n_tok, rows, out) };
    }
    let base = w.as_ptr();
    let xt = xq.as_ptr();
    let mut r = rows.start;
    while r < rows.end {
        let o = r - rows.start;
        // SAFETY: the rows used lie below rows.end, inside w (checked above).
        unsafe {
            // The last rows of the range take a pass of their own with the last row
            // repeated (a row's dot does not depend on its lane).
            let n = ROWS.min(rows.end - r);
            let p = [0, 1, 2, 3].map(|j| base.add((r + j.min(n - 1)) * rb));
            out[o..o + n].copy_from_slice(&dot_q8_rows(p, xt, nb)[..n]);
            r += n;
        }
    }
}

/// The batched product: each weight row against tiles of [`TOKENS`] activation rows (the row
/// stays in L1 between tiles).
///
/// # Safety
/// AVX2/FMA/F16C; `w` holds `rows.end` rows of `nb` blocks, `xq` `n_tok` such rows, `out`
/// `n_tok * rows.len()` floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn matmul_tokens(
    w: &[u8],
    nb: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    SCALES.with(|s| {
        let mut s = s.borrow_mut();
        let len = n_tok.div_ceil(TOKENS) * nb * TOKENS;
        if s.len() < len {
            s.resize(len, 0.0);
        }
        // The activation scales once per call, as f32 (a call covers many rows), laid out
        // `[tile][block][TOKENS]`; lanes past the last token stay zero.
        let dx = &mut s[..len];
        dx.fill(0.0);
        for t in 0..n_tok {
            for b in 0..nb {
                let at = ((t / TOKENS) * nb + b) * TOKENS + t % TOKENS;
                // SAFETY: block b of token t lies inside xq (checked by the caller).
                dx[at] = unsafe { q8_scale(xq.as_ptr().add((t * nb + b) * Q8_0_BLOCK_BYTES)) };
            }
        }
        // SAFETY: as this function's contract; dx holds the tiles' scales.
        unsafe { tiles(w, nb, xq, dx, n_tok, rows, out) }
    })
}

/// [`matmul_tokens`] with the activation scales `dx` converted (`[tile][block][TOKENS]`).
///
/// # Safety
/// As [`matmul_tokens`]; `dx` holds `n_tok.div_ceil(TOKENS) * nb * TOKENS` floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tiles(
    w: &[u8],
    nb: usize,
    xq: &[u8],
    dx: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let rb = nb * Q8_0_BLOCK_BYTES;
    let nr = rows.len();
    let (base, x, dxp) = (w.as_ptr(), xq.as_ptr(), dx.as_ptr());
    for (i, r) in rows.enumerate() {
        let mut t0 = 0;
        while t0 < n_tok {
            let tt = TOKENS.min(n_tok - t0);
            // SAFETY: row r lies inside w; tokens t0..t0 + tt inside xq and dx.
            unsafe {
                let (wp, xp, dp) = (base.add(r * rb), x.add(t0 * rb), dxp.add(t0 * nb));
                let mut put = |d: &[f32]| {
                    for (t, &v) in d.iter().enumerate() {
                        out[(t0 + t) * nr + i] = v;
                    }
                };
                match tt {
                    8 => put(&dot_q8_tokens::<8>(wp, xp, rb, dp, nb)),
                    7 => put(&dot_q8_tokens::<7>(wp, xp, rb, dp, nb)),
                    6 => put(&dot_q8_tokens::<6>(wp, xp, rb, dp, nb)),
                    5 => put(&dot_q8_tokens::<5>(wp, xp, rb, dp, nb)),
                    4 => put(&dot_q8_tokens::<4>(wp, xp, rb, dp, nb)),
                    3 => put(&dot_q8_tokens::<3>(wp, xp, rb, dp, nb)),
                    2 => put(&dot_q8_tokens::<2>(wp, xp, rb, dp, nb)),
                    _ => put(&dot_q8_tokens::<1>(wp, xp, rb, dp, nb)),
                }
            }
            t0 += tt;
        }
    }
}
