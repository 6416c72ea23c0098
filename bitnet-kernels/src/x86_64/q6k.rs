//! The Q6_K code unpacking both x86 sets use: the 6-bit codes of a half-block rebuilt from
//! their low nibbles and 2-bit fields with 256-bit byte logic, and the block's 16 sub-block
//! scales spread to the 16-bit lanes of those codes. The float kernels of quantized rows take
//! the codes minus 32 ([`q6k_quarters`]; AVX-512's widens them to 512-bit floats), the integer
//! head product the unsigned codes ([`q6k_codes`], `vpmaddubsw`'s unsigned operand) and the
//! scales ([`q6k_scale_pairs`]), so the unpacking is shared here rather than written twice
//! (the Q6_K layout is `crate::layout::rows::Q6K_BLOCK_BYTES`).

use std::arch::x86_64::*;

/// The 6-bit codes (0..63) of the four 32-element quarters of Q6_K half-block `n` of the
/// block at `blk`, rebuilt with byte logic: low nibbles from `ql`, 2-bit fields from `qh`.
/// Quarter `g` holds elements `128 n + 32 g ..+ 32` in order.
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_codes(blk: *const u8, n: usize) -> [__m256i; 4] {
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
    [
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
    ]
}

/// The 6-bit codes (minus 32) of the four 32-element quarters of Q6_K half-block `n` of the
/// block at `blk` ([`q6k_codes`] re-centred).
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_quarters(blk: *const u8, n: usize) -> [__m256i; 4] {
    // SAFETY: forwarded from the caller.
    let q = unsafe { q6k_codes(blk, n) };
    q.map(|v| _mm256_sub_epi8(v, _mm256_set1_epi8(32)))
}

/// The byte shuffles of [`q6k_scale_pairs`]: row `g` repeats i16 `2 g` (bytes `4 g`,
/// `4 g + 1`) over the low 16 bytes and i16 `2 g + 1` over the high 16.
const SCALE_PICK: [[u8; 32]; 4] = {
    let mut t = [[0u8; 32]; 4];
    let mut g = 0;
    while g < 4 {
        let mut i = 0;
        while i < 32 {
            let first = if i < 16 { 4 * g } else { 4 * g + 2 };
            t[g][i] = (first + i % 2) as u8;
            i += 1;
        }
        g += 1;
    }
    t
};

/// The block's 16 sub-block scales as i16 (`.0`, scale `j` in lane `j`), and for half-block
/// `n`, quarter `g` the i16 multipliers of its codes' byte pairs (`.1[n][g]`): the low 128
/// bits (elements `0..16` of the quarter) hold scale `8 n + 2 g` eight times, the high 128
/// bits scale `8 n + 2 g + 1`, as `vpmaddwd` wants them after `vpmaddubsw` of
/// [`q6k_codes`]`(blk, n)[g]`.
///
/// # Safety
/// The block (210 bytes) must be readable; AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_scale_pairs(blk: *const u8) -> (__m256i, [[__m256i; 4]; 2]) {
    // SAFETY: the scales are bytes 192..208 of the block.
    let sc = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(blk.add(192).cast()) });
    // Both 128-bit halves of `h[n]` hold scales 8 n..8 n + 8; a byte shuffle (within
    // halves) then picks i16 `2 g` for the low half and `2 g + 1` for the high one.
    let h = [
        _mm256_permute4x64_epi64::<0x44>(sc),
        _mm256_permute4x64_epi64::<0xee>(sc),
    ];
    // SAFETY: each row of the table is 32 bytes.
    let ctl = SCALE_PICK.map(|c| unsafe { _mm256_loadu_si256(c.as_ptr().cast()) });
    (sc, h.map(|hn| ctl.map(|c| _mm256_shuffle_epi8(hn, c))))
}

/// Token rows a block's rebuilt codes serve at once in the Q6_K x Q8_K products (more: the
/// block is rebuilt from L1 for the next ones).
pub(super) const Q6K_TOKEN_TILE: usize = 8;

pub(super) use crate::shared::q8k::Q8kPtrs;

/// Writes `sums[t]` to `out[(t0 + t) * nr + i]`.
///
/// # Safety
/// `out` writable at those places.
#[inline(always)]
pub(super) unsafe fn store_sums<const T: usize>(
    sums: &[f32; T],
    out: *mut f32,
    t0: usize,
    nr: usize,
    i: usize,
) {
    for (t, &s) in sums.iter().enumerate() {
        // SAFETY: the caller's guarantee.
        unsafe { *out.add((t0 + t) * nr + i) = s };
    }
}

/// The walk of every x86 Q6_K x Q8_K product: row by row (one sequential stream), each row
/// against tiles of up to [`Q6K_TOKEN_TILE`] tokens, `$row_tokens::<T>(row, acts, t0, out,
/// nr, i)` writing the row's dots with tokens `t0..t0 + T` to `out[t * nr + i]` (the set's
/// kernel, which ends with [`store_sums`]). Expands to
/// the body of an `unsafe fn matmul_q6k_q8k` whose caller checked the shapes
/// (`crate::layout::q8k::check_matmul_q6k`) and whose features cover `$row_tokens`.
macro_rules! q6k_q8k_walk {
    ($row_tokens:ident, $w:expr, $row_len:expr, $x:expr, $n_tok:expr, $rows:expr, $out:expr) => {{
        use crate::layout::rows::{Q6K_BLOCK_BYTES, QK_K};
        use crate::x86_64::q6k::{Q6K_TOKEN_TILE, Q8kPtrs};
        let (w, x, n_tok, rows, out): (&[u8], &Q8KActs, usize, Range<usize>, &mut [f32]) =
            ($w, $x, $n_tok, $rows, $out);
        let rb = $row_len / QK_K * Q6K_BLOCK_BYTES;
        let acts = Q8kPtrs::new(x);
        let (nr, o) = (rows.len(), out.as_mut_ptr());
        for (i, r) in rows.enumerate() {
            // SAFETY: the checked shapes: rows below `rows.end` lie in `w`, tokens below
            // `n_tok` in the activations, `out` is `n_tok x nr`; the caller's features.
            unsafe {
                let row = w.as_ptr().add(r * rb);
                let mut t0 = 0;
                while t0 < n_tok {
                    let k = (n_tok - t0).min(Q6K_TOKEN_TILE);
                    match k {
                        1 => $row_tokens::<1>(row, acts, t0, o, nr, i),
                        2 => $row_tokens::<2>(row, acts, t0, o, nr, i),
                        3 => $row_tokens::<3>(row, acts, t0, o, nr, i),
                        4 => $row_tokens::<4>(row, acts, t0, o, nr, i),
                        5 => $row_tokens::<5>(row, acts, t0, o, nr, i),
                        6 => $row_tokens::<6>(row, acts, t0, o, nr, i),
                        7 => $row_tokens::<7>(row, acts, t0, o, nr, i),
                        _ => $row_tokens::<8>(row, acts, t0, o, nr, i),
                    }
                    t0 += k;
                }
            }
        }
    }};
}

pub(super) use q6k_q8k_walk;
