//! AVX2 + FMA + F16C dense float kernels: the same names and contracts as `scalar/float.rs`,
//! 256 bits wide: f16 conversions, dots and plain-float mat-muls, RMSNorm, softmax and the
//! element-wise activations. (Quantized rows are `qrows.rs`, Q8_0 x Q8_0 `q8q8.rs`, RoPE
//! `rope.rs`, attention `attn.rs`.)
//!
//! Every function is `unsafe` only because it enables AVX2, FMA and F16C; the [`super::Avx2`]
//! token calls them after detection, and they check the shapes they read. AVX2 has no masked
//! 16-bit loads, so a tail is copied into a zero-padded stack buffer and run through the same
//! vector code (exact operations stay bit-exact with the scalar reference that way).

use std::arch::x86_64::*;

use crate::x86_64::exp::{LN2_HI, LN2_LO, POLY};
use crate::x86_64::rows::{self, F16, F32, esize};

/// Up to 8 elements of kind `K` from `p`, zero-padded, as bytes of a 32-byte buffer.
///
/// # Safety
/// `n <= 8` elements of kind `K` at `p` must be readable.
#[inline]
pub(super) unsafe fn pad_tail<const K: u8>(p: *const u8, n: usize) -> [u8; 32] {
    let mut buf = [0u8; 32];
    // SAFETY: n * esize(K) <= 32 bytes are readable at p (caller) and fit in buf.
    unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n * esize(K)) };
    buf
}

/// 8 weights of kind `K` from element `i` of the row at `p`.
///
/// # Safety
/// Elements `i..i + 8` of the row must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load_w<const K: u8>(p: *const u8, i: usize) -> __m256 {
    // SAFETY: the caller guarantees 8 elements at i are readable.
    unsafe {
        match K {
            F32 => _mm256_loadu_ps(p.cast::<f32>().add(i)),
            F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<u16>().add(i).cast())),
            _ => {
                let h = _mm_loadu_si128(p.cast::<u16>().add(i).cast());
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
            }
        }
    }
}

/// The sum of the eight lanes (the other AVX2 float files use it too).
pub(super) use crate::x86_64::hsum::hsum_ps as hsum;

/// `[dot(row r, x) for r in w]` over `n` elements; `R` rows share every load of `x`.
///
/// # Safety
/// Each `w[r]` must point at `n` readable elements of kind `K`, `x` at `n` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows<const K: u8, const R: usize>(
    w: [*const u8; R],
    x: *const f32,
    n: usize,
) -> [f32; R] {
    let mut a0 = [_mm256_setzero_ps(); R];
    let mut a1 = [_mm256_setzero_ps(); R];
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n.
        unsafe {
            let x0 = _mm256_loadu_ps(x.add(i));
            let x1 = _mm256_loadu_ps(x.add(i + 8));
            for r in 0..R {
                a0[r] = _mm256_fmadd_ps(load_w::<K>(w[r], i), x0, a0[r]);
                a1[r] = _mm256_fmadd_ps(load_w::<K>(w[r], i + 8), x1, a1[r]);
            }
        }
        i += 16;
    }
    while i < n {
        let m = (n - i).min(8);
        // SAFETY: m elements at i are below n; shorter chunks go through padded buffers.
        unsafe {
            if m == 8 {
                let x0 = _mm256_loadu_ps(x.add(i));
                for r in 0..R {
                    a0[r] = _mm256_fmadd_ps(load_w::<K>(w[r], i), x0, a0[r]);
                }
            } else {
                let xb = pad_tail::<F32>(x.add(i).cast(), m);
                let x0 = _mm256_loadu_ps(xb.as_ptr().cast());
                for r in 0..R {
                    let wb = pad_tail::<K>(w[r].add(i * esize(K)), m);
                    a0[r] = _mm256_fmadd_ps(load_w::<K>(wb.as_ptr(), 0), x0, a0[r]);
                }
            }
        }
        i += m;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = hsum(_mm256_add_ps(a0[r], a1[r]));
    }
    out
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_to_f32_slice(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, which both slices hold.
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(i).cast());
            _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
        }
        i += 8;
    }
    if i < n {
        let mut h = [0u16; 8];
        h[..n - i].copy_from_slice(&src[i..n]);
        let mut f = [0.0f32; 8];
        // SAFETY: both buffers hold 8 elements.
        unsafe {
            _mm256_storeu_ps(
                f.as_mut_ptr(),
                _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr().cast())),
            )
        };
        dst[i..n].copy_from_slice(&f[..n - i]);
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f32_to_f16_slice(src: &[f32], dst: &mut [u16]) {
    const RNE: i32 = _MM_FROUND_TO_NEAREST_INT; // imm8 = 0: round to nearest even
    let n = src.len().min(dst.len());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, which both slices hold.
        unsafe {
            let h = _mm256_cvtps_ph::<RNE>(_mm256_loadu_ps(src.as_ptr().add(i)));
            _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
        }
        i += 8;
    }
    if i < n {
        let mut f = [0.0f32; 8];
        f[..n - i].copy_from_slice(&src[i..n]);
        let mut h = [0u16; 8];
        // SAFETY: both buffers hold 8 elements.
        unsafe {
            let v = _mm256_cvtps_ph::<RNE>(_mm256_loadu_ps(f.as_ptr()));
            _mm_storeu_si128(h.as_mut_ptr().cast(), v);
        }
        dst[i..n].copy_from_slice(&h[..n - i]);
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: both slices hold n floats.
    unsafe { dot_rows::<F32, 1>([a.as_ptr().cast()], b.as_ptr(), n)[0] }
}

rows::plain_row_kernels!("avx2,fma,f16c", "AVX2, FMA and F16C");

/// `exp(x)` (`crate::x86_64::exp`), `2^n` built in the exponent field;
/// 0 below -87.33, infinity above 88.72 (and the few values between 88.3 and 88.72 saturate
/// at exp(88.3)).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp256(x0: __m256) -> __m256 {
    let x = _mm256_min_ps(
        _mm256_set1_ps(88.3),
        _mm256_max_ps(_mm256_set1_ps(-87.3), x0),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(POLY[0]);
    for &c in &POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let e = _mm256_mul_ps(y, _mm256_castsi256_ps(pow2));
    // Outside the clamp: 0 below (as -inf gives), infinity above; NaN stays NaN (min/max
    // return their second operand on NaN, and the compares are unordered-true).
    let e = _mm256_and_ps(e, _mm256_cmp_ps::<_CMP_NLT_UQ>(x0, _mm256_set1_ps(-87.33)));
    _mm256_blendv_ps(
        e,
        _mm256_set1_ps(f32::INFINITY),
        _mm256_cmp_ps::<_CMP_GT_OQ>(x0, _mm256_set1_ps(88.72)),
    )
}

/// Runs `f` over `x` 8 lanes at a time; a tail is padded with `pad` and run the same way.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn map8(x: &mut [f32], pad: f32, mut f: impl FnMut(__m256) -> __m256) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n.
        unsafe { _mm256_storeu_ps(p.add(i), f(_mm256_loadu_ps(p.add(i)))) };
        i += 8;
    }
    if i < n {
        let mut a = [pad; 8];
        a[..n - i].copy_from_slice(&x[i..n]);
        // SAFETY: the buffer holds 8 floats.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), f(_mm256_loadu_ps(a.as_ptr()))) };
        x[i..n].copy_from_slice(&a[..n - i]);
    }
}

/// `x[i] = f(x[i], y[i])`, 8 lanes at a time, tails through zero-padded buffers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn zip8(x: &mut [f32], y: &[f32], f: impl Fn(__m256, __m256) -> __m256) {
    let n = x.len().min(y.len());
    let (p, q) = (x.as_mut_ptr(), y.as_ptr());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, which both slices hold.
        unsafe {
            _mm256_storeu_ps(
                p.add(i),
                f(_mm256_loadu_ps(p.add(i)), _mm256_loadu_ps(q.add(i))),
            )
        };
        i += 8;
    }
    if i < n {
        let (mut a, mut b) = ([0.0f32; 8], [0.0f32; 8]);
        a[..n - i].copy_from_slice(&x[i..n]);
        b[..n - i].copy_from_slice(&y[i..n]);
        // SAFETY: both buffers hold 8 floats.
        unsafe {
            let v = f(_mm256_loadu_ps(a.as_ptr()), _mm256_loadu_ps(b.as_ptr()));
            _mm256_storeu_ps(a.as_mut_ptr(), v);
        }
        x[i..n].copy_from_slice(&a[..n - i]);
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len().min(weight.len()).min(out.len());
    // SAFETY: x holds n floats.
    let ss = unsafe { dot_rows::<F32, 1>([x.as_ptr().cast()], x.as_ptr(), n)[0] };
    let inv = _mm256_set1_ps(1.0 / (ss / n.max(1) as f32 + eps).sqrt());
    out[..n].copy_from_slice(&x[..n]);
    zip8(&mut out[..n], weight, |v, g| {
        _mm256_mul_ps(_mm256_mul_ps(v, inv), g)
    });
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut vmax = ninf;
    map8(x, f32::NEG_INFINITY, |v| {
        vmax = _mm256_max_ps(vmax, v);
        v
    });
    let m = _mm256_max_ps(vmax, _mm256_permute2f128_ps::<1>(vmax, vmax));
    let m = _mm256_max_ps(m, _mm256_permute_ps::<0b01_00_11_10>(m));
    let vmax = _mm256_max_ps(m, _mm256_permute_ps::<0b10_11_00_01>(m));
    let mut sum = _mm256_setzero_ps();
    // -inf inputs (masked positions, tail padding) give exactly 0, as in the reference.
    map8(x, f32::NEG_INFINITY, |v| {
        let e = exp256(_mm256_sub_ps(v, vmax));
        let e = _mm256_and_ps(e, _mm256_cmp_ps::<_CMP_NEQ_UQ>(v, ninf));
        sum = _mm256_add_ps(sum, e);
        e
    });
    let sum = hsum(sum);
    let inv = _mm256_set1_ps(1.0 / sum);
    map8(x, 0.0, |v| _mm256_mul_ps(v, inv));
    (_mm256_cvtss_f32(vmax), sum)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn silu256(v: __m256) -> __m256 {
    let e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), v));
    _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), e))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn relu2_256(v: __m256) -> __m256 {
    let r = _mm256_max_ps(v, _mm256_setzero_ps());
    _mm256_mul_ps(r, r)
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu(x: &mut [f32]) {
    map8(x, 0.0, |v| silu256(v));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    zip8(gate, up, |g, u| _mm256_mul_ps(silu256(g), u));
}

/// `gelu_tanh(v) = 0.5 v (1 + tanh(z)) = v / (1 + exp(-2z))`, `z = sqrt(2/pi) (v +
/// 0.044715 v^3)`: one exponential, as silu takes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn gelu_tanh256(v: __m256) -> __m256 {
    let v2 = _mm256_mul_ps(v, v);
    let inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044_715), v2, _mm256_set1_ps(1.0));
    let minus_2z = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0 * 0.797_884_6), v), inner);
    _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0), exp256(minus_2z)))
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    zip8(gate, up, |g, u| _mm256_mul_ps(gelu_tanh256(g), u));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn relu2(x: &mut [f32]) {
    map8(x, 0.0, |v| relu2_256(v));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn relu2_mul(gate: &mut [f32], up: &[f32]) {
    zip8(gate, up, |g, u| _mm256_mul_ps(relu2_256(g), u));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn add_inplace(dst: &mut [f32], src: &[f32]) {
    zip8(dst, src, |a, b| _mm256_add_ps(a, b));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn mul_inplace(dst: &mut [f32], src: &[f32]) {
    zip8(dst, src, |a, b| _mm256_mul_ps(a, b));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn scale_inplace(x: &mut [f32], s: f32) {
    let s = _mm256_set1_ps(s);
    map8(x, 0.0, |v| _mm256_mul_ps(v, s));
}
