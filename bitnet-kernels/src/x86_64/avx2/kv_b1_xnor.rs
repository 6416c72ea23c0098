//! AVX2 XNOR/popcount scores of B1 keys against a sign-quantized query (the reference is
//! `scalar/kv_b1_xnor.rs`): eight positions per pass, one lane each.
//! Per block, the eight keys' sign words and f16 scales are gathered once for all the
//! group's heads; each head's word is XORed in, the bits counted (nibble table), and
//! `(32 - 2 count) * s_k` multiplied-added with the head's block scale, in the reference's
//! block order and with its roundings, so the lanes are its results bit for bit. The last
//! `n_pos % 8` positions are scored one at a time by the definition of one row's score,
//! `crate::layout::kv::b1_xnor_row`.

// acc[h] pairs with head h0 + h; an index loop says that more plainly than a zip.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use crate::layout::kv::{B1_BLOCK_BYTES, b1_xnor_row};

/// Heads scored per pass over the keys (accumulators held in registers).
const HEADS: usize = 8;

/// Bits set in each 32-bit lane of `x`.
#[inline]
#[target_feature(enable = "avx2")]
fn popcount_epi32(x: __m256i) -> __m256i {
    let lut = _mm256_setr_epi8(
        0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3,
        3, 4,
    );
    let nib = _mm256_set1_epi8(0x0f);
    let lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, nib));
    let hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(x), nib));
    let bytes = _mm256_add_epi8(lo, hi);
    let pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi8(1));
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// Block `b`'s sign words and scales of the eight rows at `base + offs[i]`.
///
/// # Safety
/// Block `b` of each of the eight rows must be readable; AVX2/F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gather_block(base: *const u8, offs: __m256i, b: usize) -> (__m256i, __m256) {
    // SAFETY: the first gather reads bytes 0..4 of each block (the f16 scale and the
    // first half of the signs), the second bytes 2..6 (the signs): both inside the block.
    let (head, words) = unsafe {
        let blk = base.add(B1_BLOCK_BYTES * b);
        (
            _mm256_i32gather_epi32::<1>(blk.cast(), offs),
            _mm256_i32gather_epi32::<1>(blk.add(2).cast(), offs),
        )
    };
    // The low 16 bits of each lane are its f16 scale: pack them into 8 x u16 in lane order.
    let h = _mm256_and_si256(head, _mm256_set1_epi32(0xffff));
    let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi32(h, h));
    (words, _mm256_cvtph_ps(_mm256_castsi256_si128(packed)))
}

/// See the module docs; the safe wrapper checked the shapes, and `8 * kv_stride` fits an
/// `i32`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; shapes as `crate::layout::kv` checks them.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn attn_scores_b1_xnor(
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let nb = qbits.len() / n_q;
    let rb = nb * B1_BLOCK_BYTES;
    let offs = _mm256_mullo_epi32(
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        _mm256_set1_epi32(kv_stride as i32),
    );
    let full = n_pos / 8 * 8;
    let vscale = _mm256_set1_ps(scale);
    for h0 in (0..n_q).step_by(HEADS) {
        let hn = HEADS.min(n_q - h0);
        for p in (0..full).step_by(8) {
            // SAFETY: positions p..p + 8 are below n_pos, whose rows the caller checked.
            let base = unsafe { k.as_ptr().add(p * kv_stride) };
            let mut acc = [_mm256_setzero_ps(); HEADS];
            for b in 0..nb {
                // SAFETY: block b < nb of rows p..p + 8 (see above).
                let (words, ks) = unsafe { gather_block(base, offs, b) };
                for h in 0..hn {
                    let i = (h0 + h) * nb + b;
                    let x = _mm256_xor_si256(words, _mm256_set1_epi32(qbits[i] as i32));
                    let agree = _mm256_sub_epi32(
                        _mm256_set1_epi32(32),
                        _mm256_slli_epi32::<1>(popcount_epi32(x)),
                    );
                    let t = _mm256_mul_ps(_mm256_cvtepi32_ps(agree), ks);
                    acc[h] = _mm256_fmadd_ps(t, _mm256_set1_ps(qscales[i]), acc[h]);
                }
            }
            for h in 0..hn {
                let o = &mut out[(h0 + h) * n_pos + p..][..8];
                // SAFETY: o holds 8 floats.
                unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(acc[h], vscale)) };
            }
        }
        // The last n_pos % 8 positions, one at a time.
        for h in h0..h0 + hn {
            let (qb, qs) = (&qbits[h * nb..][..nb], &qscales[h * nb..][..nb]);
            for p in full..n_pos {
                let row = &k[p * kv_stride..][..rb];
                out[h * n_pos + p] = scale * b1_xnor_row(qb, qs, row);
            }
        }
    }
}
