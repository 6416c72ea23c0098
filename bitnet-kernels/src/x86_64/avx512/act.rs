//! AVX-512 activation quantization: 16 lanes at a time, the same f32 multiply and
//! round-half-even conversion as the reference (`scalar/act.rs`), so the int8 results are
//! identical; tails round with the definition of one value, `crate::shared::act::quantize_one`.

use std::arch::x86_64::*;

use crate::shared::act::quantize_one;

/// `max |x|`, NaNs ignored (as the scalar reference does).
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub unsafe fn absmax(x: &[f32]) -> f32 {
    let abs = _mm512_set1_epi32(0x7FFF_FFFF);
    let mut m = _mm512_setzero_ps();
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds 16 f32.
        let v = unsafe { _mm512_loadu_ps(c.as_ptr()) };
        let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs));
        // max(a, m) returns `m` where `a` is NaN.
        m = _mm512_max_ps(a, m);
    }
    let mut r = _mm512_reduce_max_ps(m);
    for &v in tail {
        if v.abs() > r {
            r = v.abs();
        }
    }
    r
}

/// `q[i] = clamp(round_half_even(x[i] * scale), -128, 127)`; returns the sum of `q`.
///
/// # Safety
/// The CPU must support AVX-512 F; `q.len() >= x.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_i8(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    let s = _mm512_set1_ps(scale);
    let lo = _mm512_set1_epi32(-128);
    let hi = _mm512_set1_epi32(127);
    let indefinite = _mm512_set1_epi32(i32::MIN);
    let mut sum = _mm512_setzero_si512();
    let n16 = x.len() / 16 * 16;
    let mut i = 0;
    while i < n16 {
        // SAFETY: i + 16 <= x.len() <= q.len().
        unsafe {
            let v = _mm512_mul_ps(_mm512_loadu_ps(x.as_ptr().add(i)), s);
            // Default MXCSR rounding: nearest, ties to even. NaN -> i32::MIN -> -128.
            let r = _mm512_cvtps_epi32(v);
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
            let r = _mm512_mask_mov_epi32(r, nan, indefinite);
            let r = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
            sum = _mm512_add_epi32(sum, r);
            _mm_storeu_si128(q.as_mut_ptr().add(i).cast(), _mm512_cvtepi32_epi8(r));
        }
        i += 16;
    }
    let mut total = _mm512_reduce_add_epi32(sum);
    for (o, &v) in q[n16..x.len()].iter_mut().zip(&x[n16..]) {
        *o = quantize_one(v, scale);
        total += *o as i32;
    }
    total
}

/// Sets bit `j` of `bits` where `x[j] > 0`; `bits` zeroed, `bits.len() >= ceil(x.len() / 64)`.
///
/// # Safety
/// The CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub unsafe fn sign_bits(x: &[f32], bits: &mut [u64]) {
    let zero = _mm512_setzero_ps();
    let chunks = x.chunks_exact(64);
    let n64 = x.len() / 64;
    let tail = chunks.remainder();
    for (wi, c) in chunks.enumerate() {
        let mut word = 0u64;
        for k in 0..4 {
            // SAFETY: `c` holds 64 f32.
            let v = unsafe { _mm512_loadu_ps(c.as_ptr().add(16 * k)) };
            word |= (_mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, zero) as u64) << (16 * k);
        }
        bits[wi] = word;
    }
    for (j, &v) in tail.iter().enumerate() {
        if v > 0.0 {
            bits[n64] |= 1 << j;
        }
    }
}

/// Sum of all bytes (the plain-read bandwidth probe): 4 x 64-byte loads per step, `vpsadbw`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn sum_bytes(data: &[u8]) -> u64 {
    let zero = _mm512_setzero_si512();
    let mut acc = [zero; 4];
    let chunks = data.chunks_exact(256);
    let tail = chunks.remainder();
    for c in chunks {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 256 bytes.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().add(64 * k).cast()) };
            *a = _mm512_add_epi64(*a, _mm512_sad_epu8(v, zero));
        }
    }
    let s = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    _mm512_reduce_add_epi64(s) as u64 + tail.iter().map(|&b| b as u64).sum::<u64>()
}
