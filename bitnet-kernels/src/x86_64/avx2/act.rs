//! AVX2 activation quantization: 8 lanes at a time, the same f32 multiply and round-half-even
//! conversion as the reference (`scalar/act.rs`), so the int8 results are identical; tails
//! round with the definition of one value, `crate::shared::act::quantize_one`.

use std::arch::x86_64::*;

use crate::shared::act::quantize_one;

/// `max |x|`, NaNs ignored.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn absmax(x: &[f32]) -> f32 {
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let mut m = _mm256_setzero_ps();
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds 8 f32.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        // max(a, m) returns `m` where `a` is NaN.
        m = _mm256_max_ps(_mm256_and_ps(v, abs), m);
    }
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds 8 f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
    let mut r = lanes.iter().fold(0f32, |a, &b| a.max(b));
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
/// The CPU must support AVX2; `q.len() >= x.len()`.
#[target_feature(enable = "avx2")]
pub unsafe fn quantize_i8(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    let s = _mm256_set1_ps(scale);
    let lo = _mm256_set1_epi32(-128);
    let hi = _mm256_set1_epi32(127);
    let indefinite = _mm256_set1_epi32(i32::MIN);
    // Undo the lane interleave of packs_epi32 + packs_epi16.
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let mut sum = _mm256_setzero_si256();
    let n32 = x.len() / 32 * 32;
    let mut i = 0;
    while i < n32 {
        // SAFETY: i + 32 <= x.len() <= q.len().
        unsafe {
            let mut r = [_mm256_setzero_si256(); 4];
            for (k, rk) in r.iter_mut().enumerate() {
                let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i + 8 * k)), s);
                let c = _mm256_cvtps_epi32(v);
                let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
                let c = _mm256_blendv_epi8(c, indefinite, nan);
                *rk = _mm256_min_epi32(_mm256_max_epi32(c, lo), hi);
                sum = _mm256_add_epi32(sum, *rk);
            }
            let p = _mm256_packs_epi16(
                _mm256_packs_epi32(r[0], r[1]),
                _mm256_packs_epi32(r[2], r[3]),
            );
            _mm256_storeu_si256(
                q.as_mut_ptr().add(i).cast(),
                _mm256_permutevar8x32_epi32(p, perm),
            );
        }
        i += 32;
    }
    let mut lanes = [0i32; 8];
    // SAFETY: `lanes` holds 8 i32.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum) };
    let mut total: i32 = lanes.iter().sum();
    for (o, &v) in q[n32..x.len()].iter_mut().zip(&x[n32..]) {
        *o = quantize_one(v, scale);
        total += *o as i32;
    }
    total
}

/// Sets bit `j` of `bits` where `x[j] > 0`; `bits` zeroed, `bits.len() >= ceil(x.len() / 64)`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn sign_bits(x: &[f32], bits: &mut [u64]) {
    let zero = _mm256_setzero_ps();
    let chunks = x.chunks_exact(64);
    let n64 = x.len() / 64;
    let tail = chunks.remainder();
    for (wi, c) in chunks.enumerate() {
        let mut word = 0u64;
        for k in 0..8 {
            // SAFETY: `c` holds 64 f32.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * k)) };
            let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(v, zero)) as u64;
            word |= m << (8 * k);
        }
        bits[wi] = word;
    }
    for (j, &v) in tail.iter().enumerate() {
        if v > 0.0 {
            bits[n64] |= 1 << j;
        }
    }
}

/// Sum of all bytes (the plain-read bandwidth probe): 4 x 32-byte loads per step, `vpsadbw`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn sum_bytes(data: &[u8]) -> u64 {
    let zero = _mm256_setzero_si256();
    let mut acc = [zero; 4];
    let chunks = data.chunks_exact(128);
    let tail = chunks.remainder();
    for c in chunks {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 128 bytes.
            let v = unsafe { _mm256_loadu_si256(c.as_ptr().add(32 * k).cast()) };
            *a = _mm256_add_epi64(*a, _mm256_sad_epu8(v, zero));
        }
    }
    let s = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` holds 4 u64.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), s) };
    lanes.iter().sum::<u64>() + tail.iter().map(|&b| b as u64).sum::<u64>()
}
