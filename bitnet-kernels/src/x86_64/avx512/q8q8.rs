//! AVX-512 Q8_0 x Q8_0 products: the `--head q8` output head, as `avx2/q8q8.rs` at 512
//! bits. Two blocks share a register; the int8 products use `vpdpbusd` with an offset
//! instead of signs (see [`dot_q8_rows`]). One token streams four weight rows against its
//! activations; a batch takes each weight row against tiles of up to 8 tokens
//! ([`dot_q8_tokens`]), so a weight block is loaded, offset and its scale read once per tile.
//! The four-scale F16C read is the shared x86 one (`x86_64/f16c.rs`).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::extent::holds;
use crate::layout::rows::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::x86_64::f16c::q8_scales4;
use crate::x86_64::hsum::hsum_epi32;
use crate::x86_64::q8_tiles::{
    PREFETCH_BYTES, ScaleLayout, TOKENS, q8_one_token, q8_tiles, with_tile_scales,
};

/// The f16 scales of two Q8_0 blocks (at `p` and `p + 34`) as lanes 0 and 1 of an xmm.
///
/// # Safety
/// Both blocks' first two bytes must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_scales2(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees both scale fields are readable.
    let (a, b) = unsafe {
        (
            p.cast::<u16>().read_unaligned(),
            p.add(Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned(),
        )
    };
    _mm_cvtph_ps(_mm_cvtsi32_si128(
        (u32::from(a) | (u32::from(b) << 16)) as i32,
    ))
}

/// The 32 quants of Q8_0 blocks `p` and `p + 34` as one 512-bit register.
///
/// # Safety
/// Both blocks must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_pair(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees both blocks are readable.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(p.add(2).cast())),
            _mm256_loadu_si256(p.add(Q8_0_BLOCK_BYTES + 2).cast()),
        )
    }
}

/// The two registers of four consecutive blocks at `p` (blocks 0-1 and 2-3).
///
/// # Safety
/// The four blocks must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_quad(p: *const u8) -> [__m512i; 2] {
    // SAFETY: the caller guarantees the four blocks are readable.
    unsafe { [q8_pair(p), q8_pair(p.add(2 * Q8_0_BLOCK_BYTES))] }
}

/// The weight side of the offset trick: `w + 128` as unsigned bytes (`w ^ 0x80`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn offset(w: [__m512i; 2]) -> [__m512i; 2] {
    let c80 = _mm512_set1_epi8(-128);
    w.map(|v| _mm512_xor_si512(v, c80))
}

/// The activation side: `-128 * Σx` per i32 lane, where the offset weights' dot starts.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn neg_sums(x: [__m512i; 2]) -> [__m512i; 2] {
    let (zero, c80) = (_mm512_setzero_si512(), _mm512_set1_epi8(-128));
    x.map(|v| _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c80, v)))
}

/// Adds four blocks of one weight row (offset, `wu`) against the same blocks of one activation
/// row (`x`, with `neg = neg_sums(x)`) to the accumulators, block `j` scaled by lane `j` of
/// `d` (weight scale times activation scale): lanes 0..8 of `acc[0]` take block 0, lanes
/// 8..16 block 1, and `acc[1]` blocks 2 and 3.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn quad_dot(
    acc: &mut [__m512; 2],
    wu: [__m512i; 2],
    x: [__m512i; 2],
    neg: [__m512i; 2],
    d: __m128,
) {
    let d = _mm512_castps128_ps512(d);
    let idx = [
        _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
        _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2),
    ];
    for i in 0..2 {
        let isum = _mm512_dpbusd_epi32(neg[i], wu[i], x[i]);
        let di = _mm512_permutexvar_ps(idx[i], d);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), di, acc[i]);
    }
}

/// The dot of one block left past the last four (256 bits wide, the same offset trick),
/// scaled by `dw * dx`.
///
/// # Safety
/// Both blocks must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn tail_block(wp: *const u8, xp: *const u8, dw: f32, dx: f32) -> f32 {
    let (zero, c80) = (_mm256_setzero_si256(), _mm256_set1_epi8(-128));
    // SAFETY: the caller guarantees both blocks are readable.
    let (wq, xq) = unsafe {
        (
            _mm256_loadu_si256(wp.add(2).cast()),
            _mm256_loadu_si256(xp.add(2).cast()),
        )
    };
    let neg = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c80, xq));
    let isum = _mm256_dpbusd_epi32(neg, _mm256_xor_si256(wq, c80), xq);
    (dw * dx) * hsum_epi32(isum) as f32
}

/// Q8_0 x Q8_0 dots of `R` weight rows with one activation row of `nb` blocks, two blocks
/// per 512-bit register. The int8 products use `vpdpbusd` with an offset instead of signs:
/// `(w + 128)` is the unsigned operand (`w ^ 0x80`, one op per row) and the `128 * Σx` it
/// adds is cancelled by starting the accumulation at `-128 * Σx`, computed once per block
/// pair for all rows. Exact for every byte value of w and x. Scales are converted four
/// blocks at a time.
///
/// # Safety
/// Each `w[r]` and `x` must point at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q8_rows<const R: usize>(w: [*const u8; R], x: *const u8, nb: usize) -> [f32; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let mut b = 0;
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = q8_quad(xp);
            let neg = neg_sums(xq);
            let dx = q8_scales4(xp);
            for r in 0..R {
                let wp = w[r].add(b * BB);
                // As the AVX2 kernel: rows are short and read side by side, so the hardware
                // stream prefetcher loses them at every pass; fetch the next pass's stretch.
                let pf = wp.wrapping_add(R * nb * BB);
                _mm_prefetch::<_MM_HINT_T0>(pf.cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(128).cast());
                let d = _mm_mul_ps(q8_scales4(wp), dx);
                quad_dot(&mut acc[r], offset(q8_quad(wp)), xq, neg, d);
            }
        }
        b += 4;
    }
    let mut out = acc.map(|[a, b]| _mm512_reduce_add_ps(_mm512_add_ps(a, b)));
    // Up to three blocks left: one at a time.
    while b < nb {
        // SAFETY: block b is below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let dx = _mm_cvtss_f32(q8_scales2(xp));
            for r in 0..R {
                let wp = w[r].add(b * BB);
                out[r] += tail_block(wp, xp, _mm_cvtss_f32(q8_scales2(wp)), dx);
            }
        }
        b += 1;
    }
    out
}

/// Q8_0 x Q8_0 dots of one weight row with `T <= TOKENS` activation rows `rb` bytes apart,
/// each weight block pair loaded and offset once for the `T` rows; `dxs` holds the rows'
/// activation scales as f32, `nb` apart (`[token][block]`).
///
/// Per token the operations of [`dot_q8_rows`] in its order (the same lanes, the same two
/// accumulators, the same reduction and tail), so a token's result does not depend on the
/// batch it was computed in; what a tile shares is the weight side: its loads, offsets and
/// scales.
///
/// # Safety
/// `w` must point at `nb` readable Q8_0 blocks, `x` at `T` rows of `nb` blocks `rb` bytes
/// apart, `dxs` at `T * nb` floats.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q8_tokens<const T: usize>(
    w: *const u8,
    x: *const u8,
    rb: usize,
    dxs: *const f32,
    nb: usize,
) -> [f32; T] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    const { assert!(T <= TOKENS) };
    let mut acc = [[_mm512_setzero_ps(); 2]; T];
    let mut b = 0;
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for the row and every token; the token's
        // scales b..b + 4 lie inside dxs.
        unsafe {
            let wp = w.add(b * BB);
            // Only hints (prefetches never fault): the row stream, 136 bytes a pass.
            let pf = wp.wrapping_add(PREFETCH_BYTES);
            _mm_prefetch::<_MM_HINT_T0>(pf.cast());
            _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
            _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(128).cast());
            let wu = offset(q8_quad(wp));
            let dw = q8_scales4(wp);
            for (t, acc) in acc.iter_mut().enumerate() {
                let xq = q8_quad(x.add(t * rb + b * BB));
                let d = _mm_mul_ps(dw, _mm_loadu_ps(dxs.add(t * nb + b)));
                quad_dot(acc, wu, xq, neg_sums(xq), d);
            }
        }
        b += 4;
    }
    let mut out = acc.map(|[a, b]| _mm512_reduce_add_ps(_mm512_add_ps(a, b)));
    // Up to three blocks left, as in `dot_q8_rows`.
    while b < nb {
        // SAFETY: block b is below nb for the row and every token; dxs holds its scale.
        unsafe {
            let wp = w.add(b * BB);
            let dw = _mm_cvtss_f32(q8_scales2(wp));
            for (t, o) in out.iter_mut().enumerate() {
                let xp = x.add(t * rb + b * BB);
                *o += tail_block(wp, xp, dw, *dxs.add(t * nb + b));
            }
        }
        b += 1;
    }
    out
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
    assert!(
        holds(w.len(), rows.end, rb) && holds(xq.len(), n_tok, rb) && holds(out.len(), n_tok, nr)
    );
    if n_tok > 1 {
        // Each weight row against tiles of up to TOKENS activation rows (the row stays in L1
        // between tiles; `x86_64/q8_tiles.rs`); the closure keeps this function's features.
        return with_tile_scales(xq, nb, n_tok, ScaleLayout::TokenBlock, |dx| {
            q8_tiles!(dot_q8_tokens, w, nb, xq, dx, n_tok, rows, out)
        });
    }
    q8_one_token!(dot_q8_rows, w, nb, xq, rows, out);
}
