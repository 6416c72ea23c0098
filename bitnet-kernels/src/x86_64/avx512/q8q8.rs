//! AVX-512 Q8_0 x Q8_0 products: the `--head q8` output head, as `avx2/q8q8.rs` at 512
//! bits. Two blocks share a register; the int8 products use `vpdpbusd` with an offset
//! instead of signs (see [`dot_q8_rows`]). The four-scale F16C read is the shared x86 one
//! (`x86_64/f16c.rs`).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::extent::holds;
use crate::float::formats::{Q8_0_BLOCK_BYTES, QK8_0};
use crate::x86_64::f16c::q8_scales4;
use crate::x86_64::hsum::hsum_epi32;
use crate::x86_64::rows::ROWS;

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
    let mut acc_a = [_mm512_setzero_ps(); R];
    let mut acc_b = [_mm512_setzero_ps(); R];
    let zero = _mm512_setzero_si512();
    let c80 = _mm512_set1_epi8(-128);
    // Lanes 0..8 take scale j, lanes 8..16 scale j + 1.
    let idx_a = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    let idx_b = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    let mut b = 0;
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let (xa, xb) = (q8_pair(xp), q8_pair(xp.add(2 * BB)));
            let na = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c80, xa));
            let nb_ = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c80, xb));
            let dx = q8_scales4(xp);
            for r in 0..R {
                let wp = w[r].add(b * BB);
                // As the AVX2 kernel: rows are short and read side by side, so the hardware
                // stream prefetcher loses them at every pass; fetch the next pass's stretch.
                let pf = wp.wrapping_add(R * nb * BB);
                _mm_prefetch::<_MM_HINT_T0>(pf.cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64).cast());
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(128).cast());
                let ia = _mm512_dpbusd_epi32(na, _mm512_xor_si512(q8_pair(wp), c80), xa);
                let ib =
                    _mm512_dpbusd_epi32(nb_, _mm512_xor_si512(q8_pair(wp.add(2 * BB)), c80), xb);
                let d = _mm512_castps128_ps512(_mm_mul_ps(q8_scales4(wp), dx));
                let (da, db) = (
                    _mm512_permutexvar_ps(idx_a, d),
                    _mm512_permutexvar_ps(idx_b, d),
                );
                acc_a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), da, acc_a[r]);
                acc_b[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), db, acc_b[r]);
            }
        }
        b += 4;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[r], acc_b[r]));
    }
    // Up to three blocks left: one at a time, 256 bits wide, same offset trick.
    let (zero, c80) = (_mm256_setzero_si256(), _mm256_set1_epi8(-128));
    while b < nb {
        // SAFETY: block b is below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = _mm256_loadu_si256(xp.add(2).cast());
            let neg = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c80, xq));
            let dx = _mm_cvtss_f32(q8_scales2(xp));
            for r in 0..R {
                let wp = w[r].add(b * BB);
                let wu = _mm256_xor_si256(_mm256_loadu_si256(wp.add(2).cast()), c80);
                let isum = _mm256_dpbusd_epi32(neg, wu, xq);
                let dw = _mm_cvtss_f32(q8_scales2(wp));
                out[r] += (dw * dx) * hsum_epi32(isum) as f32;
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
    let base = w.as_ptr();
    let mut r = rows.start;
    while r < rows.end {
        let left = rows.end - r;
        for t in 0..n_tok {
            let xt = xq[t * rb..].as_ptr();
            let o = t * nr + (r - rows.start);
            // SAFETY: the rows used lie below rows.end, inside w (checked above); xt has nb
            // blocks.
            unsafe {
                if left >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    let d = dot_q8_rows::<ROWS>(p, xt, nb);
                    out[o..o + ROWS].copy_from_slice(&d);
                } else {
                    out[o] = dot_q8_rows::<1>([base.add(r * rb)], xt, nb)[0];
                }
            }
        }
        r += if left >= ROWS { ROWS } else { 1 };
    }
}
