//! The grouped Q6_K head's product ([`crate::layout::q6kr`]) at 256 bits, as the AVX2,
//! AVX-VNNI and AVX-512 trees run it: one step, written once as [`q6kr_kernels!`], which
//! each tree's `q6kr.rs` expands with its features and its integer core (`vpmaddubsw` +
//! `vpmaddwd`, or `vpdpbusd`). A 64-byte code line is two registers, rows 0-7 and 8-15.
//!
//! Per sub-block (16 columns), its three lines give four code lines of unsigned 6-bit codes
//! ([`code_lines`]); each is multiplied by the token's four activation bytes broadcast to
//! every row, into lanes that start from `-32 * bsum` (so they hold `sum (code - 32) a`),
//! then scaled by the 16 rows' sub-block scales (one sign-extending load) into the block's
//! lanes. Everything up to there is exact i32, so every core gives the same lanes; then the
//! scalar reference's float steps per lane (`d = d_w * d_a`, `p = d * dot`, `acc = acc + p`,
//! no FMA): the reference's bits.

use std::arch::x86_64::*;

use crate::layout::q6kr::Q6KR_SUB_BYTES;

/// How far ahead of the line in use the stream is prefetched, in bytes.
pub(crate) const PF_DIST: usize = 4096;

/// The four code lines (columns `4 i..4 i + 4` of a sub-block, `i < 4`) of the half `h` (rows
/// `8 h..8 h + 8`) of the sub-block whose three lines start at `sub`.
///
/// # Safety
/// The sub-block's 192 bytes are readable and 32-byte aligned; the CPU supports AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn code_lines(sub: *const u8, h: usize) -> [__m256i; 4] {
    const _: () = assert!(Q6KR_SUB_BYTES == 192);
    let (m4, m30) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    // SAFETY: the caller's guarantees.
    let (n0, n1, hb) = unsafe {
        (
            _mm256_load_si256(sub.add(32 * h).cast()),
            _mm256_load_si256(sub.add(64 + 32 * h).cast()),
            _mm256_load_si256(sub.add(128 + 32 * h).cast()),
        )
    };
    // 16-bit shifts: the bits a byte takes from its neighbour fall outside its mask.
    let join = |lo: __m256i, hi: __m256i| {
        _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(hi, m30))
    };
    [
        join(n0, _mm256_slli_epi16::<4>(hb)),
        join(n1, _mm256_slli_epi16::<2>(hb)),
        join(_mm256_srli_epi16::<4>(n0), hb),
        join(_mm256_srli_epi16::<4>(n1), _mm256_srli_epi16::<2>(hb)),
    ]
}

/// Expands, in a tree's `q6kr.rs`, to that tree's `pub unsafe fn matmul_q6kr` (same
/// contract as the scalar kernel), compiled with `$feat`, around the tree's
/// `$core(acc, codes, a) -> __m256i`: `acc` plus, per i32 lane, the four products of the
/// unsigned codes and the signed activation bytes.
macro_rules! q6kr_kernels {
    ($feat:literal, $core:ident) => {
        use std::ops::Range;

        use $crate::layout::q6kr::{Q6KR, Q6KR_CODES, Q6KR_ROWS, Q6KR_SCALES, Q6KR_SUB_BYTES};
        use $crate::layout::q8k::{Q8K_SUB, Q8K_SUMS, Q8KActs};
        use $crate::shared::q8k::Q8kPtrs;
        use $crate::x86_64::q6kr::{PF_DIST, code_lines};

        /// One block of a group (`p`) against tokens `t0..t0 + T`, added to `acc` (rows 0-7,
        /// 8-15 of each token); with `pf`, a prefetch for each of its lines `PF_DIST` ahead.
        ///
        /// # Safety
        /// The block is readable and 64-byte aligned; the tokens are below the activations'
        /// capacity and `b` below their blocks.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn sb<const T: usize>(
            p: *const u8,
            x: Q8kPtrs,
            t0: usize,
            b: usize,
            acc: &mut [[__m256; 2]; T],
            pf: bool,
        ) {
            // SAFETY: every load lies inside the block or the tokens' activations, aligned
            // as the layout says (the caller's guarantees); prefetches never fault.
            unsafe {
                if pf {
                    for l in 0..Q6KR_CODES / 64 {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_DIST + 64 * l).cast());
                    }
                }
                let mut dot = [[_mm256_setzero_si256(); 2]; T];
                for j in 0..Q8K_SUMS {
                    let sub = p.add(Q6KR_CODES + j * Q6KR_SUB_BYTES);
                    if pf {
                        for l in 0..3 {
                            _mm_prefetch::<_MM_HINT_T0>(sub.wrapping_add(PF_DIST + 64 * l).cast());
                        }
                    }
                    for h in 0..2 {
                        let c = code_lines(sub, h);
                        let sc_at = p.add(Q6KR_SCALES + Q6KR_ROWS * j + 8 * h);
                        let sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(sc_at.cast()));
                        for t in 0..T {
                            let a = x.codes(t0 + t, b).add(Q8K_SUB * j);
                            let bsum = i32::from(*x.sums(t0 + t, b).add(j));
                            let mut d = _mm256_set1_epi32(-32 * bsum);
                            for (i, &ci) in c.iter().enumerate() {
                                let quad = a.add(4 * i).cast::<i32>().read_unaligned();
                                d = $core(d, ci, _mm256_set1_epi32(quad));
                            }
                            dot[t][h] = _mm256_add_epi32(dot[t][h], _mm256_mullo_epi32(d, sc));
                        }
                    }
                }
                let dw = [
                    _mm256_cvtph_ps(_mm_load_si128(p.cast())),
                    _mm256_cvtph_ps(_mm_load_si128(p.add(16).cast())),
                ];
                for t in 0..T {
                    let dx = _mm256_set1_ps(x.scale(t0 + t, b));
                    for h in 0..2 {
                        let d = _mm256_mul_ps(dw[h], dx);
                        let pr = _mm256_mul_ps(d, _mm256_cvtepi32_ps(dot[t][h]));
                        acc[t][h] = _mm256_add_ps(acc[t][h], pr);
                    }
                }
            }
        }

        /// A token's 16 row sums.
        #[inline]
        #[target_feature(enable = $feat)]
        fn lanes(a: [__m256; 2]) -> [f32; Q6KR_ROWS] {
            let mut v = [0.0f32; Q6KR_ROWS];
            // SAFETY: `v` holds 16 floats.
            unsafe {
                _mm256_storeu_ps(v.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(v.as_mut_ptr().add(8), a[1]);
            }
            v
        }

        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        /// The CPU must support the set's features; the shapes were checked
        /// (`crate::layout::q6kr::check_matmul`) and `rows` is not empty.
        #[target_feature(enable = $feat)]
        pub unsafe fn matmul_q6kr(
            w: &Q6KR,
            x: &Q8KActs,
            n_tok: usize,
            rows: Range<usize>,
            out: &mut [f32],
        ) {
            let zero = [_mm256_setzero_ps(); 2];
            $crate::shared::group_walk::group_walk!(
                Q6KR,
                Q8KActs,
                Q8kPtrs,
                Q6KR_ROWS,
                $crate::layout::q6kr::Q6KR_BLOCK_BYTES,
                sb,
                lanes,
                zero,
                [1, 2, 3, 4],
                w,
                x,
                n_tok,
                rows,
                out
            );
        }
    };
}
pub(crate) use q6kr_kernels;
