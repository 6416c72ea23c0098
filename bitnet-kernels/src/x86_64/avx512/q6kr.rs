//! AVX-512 product of the grouped Q6_K head (`crate::layout::q6kr`): the step of
//! `x86_64/q6kr.rs` with a whole 64-byte code line (four codes of each of a group's 16 rows)
//! in one register and `vpdpbusd` as its core; `vpternlogd` joins each code's two parts.
//! Exact i32 lanes, then the scalar reference's float steps per lane: its bits.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::layout::q6kr::{
    Q6KR, Q6KR_BLOCK_BYTES, Q6KR_CODES, Q6KR_ROWS, Q6KR_SCALES, Q6KR_SUB_BYTES,
};
use crate::layout::q8k::{Q8K_SUB, Q8K_SUMS, Q8KActs};
use crate::shared::group_walk::group_walk;
use crate::shared::q8k::Q8kPtrs;
use crate::x86_64::q6kr::PF_DIST;

/// The four code lines of the sub-block whose three lines start at `sub`.
///
/// # Safety
/// The sub-block's 192 bytes are readable and 64-byte aligned; the CPU supports the set.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn code_lines(sub: *const u8) -> [__m512i; 4] {
    let (m4, m30) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    // SAFETY: the caller's guarantees.
    let (n0, n1, hb) = unsafe {
        (
            _mm512_load_si512(sub.cast()),
            _mm512_load_si512(sub.add(64).cast()),
            _mm512_load_si512(sub.add(128).cast()),
        )
    };
    // (lo & 0x0f) | (hi & 0x30), the second mask first; 0xEA is `(a & b) | c`. 16-bit
    // shifts: the bits a byte takes from its neighbour fall outside its mask.
    let join = |lo: __m512i, hi: __m512i| {
        _mm512_ternarylogic_epi32::<0xEA>(lo, m4, _mm512_and_si512(hi, m30))
    };
    [
        join(n0, _mm512_slli_epi16::<4>(hb)),
        join(n1, _mm512_slli_epi16::<2>(hb)),
        join(_mm512_srli_epi16::<4>(n0), hb),
        join(_mm512_srli_epi16::<4>(n1), _mm512_srli_epi16::<2>(hb)),
    ]
}

/// One block of a group (`p`) against tokens `t0..t0 + T`, added to `acc`; with `pf`, a
/// prefetch for each of its lines `PF_DIST` ahead.
///
/// # Safety
/// The block is readable and 64-byte aligned; the tokens are below the activations'
/// capacity and `b` below their blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn sb<const T: usize>(
    p: *const u8,
    x: Q8kPtrs,
    t0: usize,
    b: usize,
    acc: &mut [__m512; T],
    pf: bool,
) {
    // SAFETY: every load lies inside the block or the tokens' activations, aligned as the
    // layout says (the caller's guarantees); prefetches never fault.
    unsafe {
        if pf {
            for l in 0..Q6KR_CODES / 64 {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST + 64 * l).cast());
            }
        }
        let mut dot = [_mm512_setzero_si512(); T];
        for j in 0..Q8K_SUMS {
            let sub = p.add(Q6KR_CODES + j * Q6KR_SUB_BYTES);
            if pf {
                for l in 0..3 {
                    _mm_prefetch::<_MM_HINT_T0>(sub.wrapping_add(PF_DIST + 64 * l).cast());
                }
            }
            let c = code_lines(sub);
            let sc_at = p.add(Q6KR_SCALES + Q6KR_ROWS * j);
            let sc = _mm512_cvtepi8_epi32(_mm_load_si128(sc_at.cast()));
            for t in 0..T {
                let a = x.codes(t0 + t, b).add(Q8K_SUB * j);
                let bsum = i32::from(*x.sums(t0 + t, b).add(j));
                let mut d = _mm512_set1_epi32(-32 * bsum);
                for (i, &ci) in c.iter().enumerate() {
                    let quad = a.add(4 * i).cast::<i32>().read_unaligned();
                    d = _mm512_dpbusd_epi32(d, ci, _mm512_set1_epi32(quad));
                }
                dot[t] = _mm512_add_epi32(dot[t], _mm512_mullo_epi32(d, sc));
            }
        }
        let dw = _mm512_cvtph_ps(_mm256_load_si256(p.cast()));
        for t in 0..T {
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(x.scale(t0 + t, b)));
            let pr = _mm512_mul_ps(d, _mm512_cvtepi32_ps(dot[t]));
            acc[t] = _mm512_add_ps(acc[t], pr);
        }
    }
}

/// A token's 16 row sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn lanes(a: __m512) -> [f32; Q6KR_ROWS] {
    let mut v = [0.0f32; Q6KR_ROWS];
    // SAFETY: `v` holds 16 floats.
    unsafe { _mm512_storeu_ps(v.as_mut_ptr(), a) };
    v
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support the AVX-512 set; the shapes were checked
/// (`crate::layout::q6kr::check_matmul`) and `rows` is not empty.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_q6kr(
    w: &Q6KR,
    x: &Q8KActs,
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let zero = _mm512_setzero_ps();
    group_walk!(
        Q6KR,
        Q8KActs,
        Q8kPtrs,
        Q6KR_ROWS,
        Q6KR_BLOCK_BYTES,
        sb,
        lanes,
        zero,
        [1, 2, 3, 4, 5, 6, 7, 8],
        w,
        x,
        n_tok,
        rows,
        out
    );
}
