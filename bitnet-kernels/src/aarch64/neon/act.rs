//! NEON activation quantization. `absmax` folds `|x|` with `FMAXNM` (which returns the number
//! when one operand is NaN, so NaNs are ignored as in the reference). `quantize_i8` does the
//! reference's f32 multiply, then `FCVTNS` (round half to even, saturating) and the saturating
//! narrows `SQXTN` down to int8, which is the clamp to -128..=127; a NaN product is replaced
//! by -128 before narrowing, as `crate::shared::act::quantize_one` defines it, so the bytes are
//! identical to the scalar ones. `sign_bits` turns `FCMGT` masks into bits with a per-lane
//! bit weight and `ADDV`; `sum_bytes` widens with `UADALP`.

use std::arch::aarch64::*;

use crate::shared::act::quantize_one;

/// `max |x|`, NaNs ignored.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn absmax(x: &[f32]) -> f32 {
    let mut m = [vdupq_n_f32(0.0); 4];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (k, mk) in m.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 f32.
            let v = unsafe { vld1q_f32(c.as_ptr().add(4 * k)) };
            // FMAXNM keeps `mk` where the new value is NaN.
            *mk = vmaxnmq_f32(*mk, vabsq_f32(v));
        }
    }
    let mut r = vmaxnmvq_f32(vmaxnmq_f32(
        vmaxnmq_f32(m[0], m[1]),
        vmaxnmq_f32(m[2], m[3]),
    ));
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
/// The CPU must support NEON; `q.len() >= x.len()`.
#[target_feature(enable = "neon")]
pub unsafe fn quantize_i8(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    let s = vdupq_n_f32(scale);
    let nan_code = vdupq_n_s32(-128);
    let mut sum = vdupq_n_s32(0);
    let n16 = x.len() / 16 * 16;
    let mut i = 0;
    while i < n16 {
        // SAFETY: i + 16 <= x.len() <= q.len().
        unsafe {
            let mut r = [vdupq_n_s32(0); 4];
            for (k, rk) in r.iter_mut().enumerate() {
                let p = vmulq_f32(vld1q_f32(x.as_ptr().add(i + 4 * k)), s);
                // FCVTNS gives 0 for NaN; the reference gives -128.
                let ok = vceqq_f32(p, p);
                *rk = vbslq_s32(ok, vcvtnq_s32_f32(p), nan_code);
            }
            let h0 = vcombine_s16(vqmovn_s32(r[0]), vqmovn_s32(r[1]));
            let h1 = vcombine_s16(vqmovn_s32(r[2]), vqmovn_s32(r[3]));
            let b = vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
            vst1q_s8(q.as_mut_ptr().add(i), b);
            sum = vpadalq_s16(sum, vpaddlq_s8(b));
        }
        i += 16;
    }
    let mut total = vaddvq_s32(sum);
    for (o, &v) in q[n16..x.len()].iter_mut().zip(&x[n16..]) {
        *o = quantize_one(v, scale);
        total += *o as i32;
    }
    total
}

/// Sets bit `j` of `bits` where `x[j] > 0`; `bits` zeroed, `bits.len() >= ceil(x.len() / 64)`.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sign_bits(x: &[f32], bits: &mut [u64]) {
    let zero = vdupq_n_f32(0.0);
    const WEIGHTS: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    // SAFETY: `WEIGHTS` holds 16 bytes.
    let weights = unsafe { vld1q_u8(WEIGHTS.as_ptr()) };
    let chunks = x.chunks_exact(64);
    let n64 = x.len() / 64;
    let tail = chunks.remainder();
    for (wi, c) in chunks.enumerate() {
        let mut word = 0u64;
        for k in 0..4 {
            // SAFETY: `c` holds 64 f32, this reads 16 of them from 16 k.
            let m = unsafe {
                let p = c.as_ptr().add(16 * k);
                let m0 = vcgtq_f32(vld1q_f32(p), zero);
                let m1 = vcgtq_f32(vld1q_f32(p.add(4)), zero);
                let m2 = vcgtq_f32(vld1q_f32(p.add(8)), zero);
                let m3 = vcgtq_f32(vld1q_f32(p.add(12)), zero);
                let h0 = vcombine_u16(vmovn_u32(m0), vmovn_u32(m1));
                let h1 = vcombine_u16(vmovn_u32(m2), vmovn_u32(m3));
                vandq_u8(vcombine_u8(vmovn_u16(h0), vmovn_u16(h1)), weights)
            };
            let lo = vaddv_u8(vget_low_u8(m)) as u64;
            let hi = vaddv_u8(vget_high_u8(m)) as u64;
            word |= (lo | hi << 8) << (16 * k);
        }
        bits[wi] = word;
    }
    for (j, &v) in tail.iter().enumerate() {
        if v > 0.0 {
            bits[n64] |= 1 << j;
        }
    }
}

/// Sum of all bytes (the plain-read bandwidth probe): 4 x 16-byte loads per step, `UADALP`
/// into u16 lanes, flushed to u64 before they can overflow.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn sum_bytes(data: &[u8]) -> u64 {
    // Each step adds at most 2 * 255 to a u16 lane.
    const STEPS: usize = 128;
    let mut total = vdupq_n_u64(0);
    let chunks = data.chunks_exact(64);
    let tail = chunks.remainder();
    let mut acc = [vdupq_n_u16(0); 4];
    for (n, c) in chunks.enumerate() {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 64 bytes.
            let v = unsafe { vld1q_u8(c.as_ptr().add(16 * k)) };
            *a = vpadalq_u8(*a, v);
        }
        if n % STEPS == STEPS - 1 {
            for a in acc.iter_mut() {
                total = vpadalq_u32(total, vpaddlq_u16(*a));
                *a = vdupq_n_u16(0);
            }
        }
    }
    for a in acc {
        total = vpadalq_u32(total, vpaddlq_u16(a));
    }
    vaddvq_u64(total) + tail.iter().map(|&b| b as u64).sum::<u64>()
}
