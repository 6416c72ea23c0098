//! AVX-512 dense float kernels: the same names and contracts as `scalar/float.rs`, 512 bits
//! wide: f16 conversions, dots and plain-float mat-muls, RMSNorm, softmax and the
//! element-wise activations. (Quantized rows are `qrows.rs`, Q8_0 x Q8_0 `q8q8.rs`, RoPE
//! `rope.rs`, attention `attn.rs`.)
//!
//! Every function is `unsafe` only because it enables AVX-512 F/BW/VL/DQ + VNNI (and the
//! AVX2/FMA/F16C they imply); the [`super::Avx512`] token calls them after detection, and
//! they check the shapes they read. Each kernel keeps its whole loop inside one
//! `#[target_feature]` function; tails use masked loads and stores, never a scalar loop.

use std::arch::x86_64::*;

use crate::x86_64::exp::{LN2_HI, LN2_LO, POLY};
use crate::x86_64::rows::{self, F16, F32};

/// Lanes `0..n` of a 16-lane mask (`n <= 16`).
#[inline(always)]
pub(super) fn mask16(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// 16 weights of kind `K` from element `i` of the row at `p`, lanes outside `m` zero.
///
/// # Safety
/// The masked-in elements `i..` of the row must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn load_w<const K: u8>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
    // SAFETY: the caller guarantees the masked-in elements are readable; masked-out lanes
    // are never accessed (AVX-512 masked loads suppress their faults), and the address is
    // formed with wrapping arithmetic in case every lane is masked out.
    unsafe {
        match K {
            F32 => _mm512_maskz_loadu_ps(m, p.cast::<f32>().wrapping_add(i)),
            F16 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p.cast::<i16>().wrapping_add(i))),
            _ => {
                let h = _mm256_maskz_loadu_epi16(m, p.cast::<i16>().wrapping_add(i));
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
            }
        }
    }
}

/// `[dot(row r, x) for r in w]` over `n` elements: `R` rows of kind `K` share every load
/// of `x`; two accumulators per row hide the FMA latency.
///
/// # Safety
/// Each `w[r]` must point at `n` readable elements of kind `K`, `x` at `n` floats.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_rows<const K: u8, const R: usize>(
    w: [*const u8; R],
    x: *const f32,
    n: usize,
) -> [f32; R] {
    let mut a0 = [_mm512_setzero_ps(); R];
    let mut a1 = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i + 32 <= n {
        // SAFETY: i + 32 <= n, so all 32 elements of x and of every row are readable.
        unsafe {
            let x0 = _mm512_loadu_ps(x.add(i));
            let x1 = _mm512_loadu_ps(x.add(i + 16));
            for r in 0..R {
                a0[r] = _mm512_fmadd_ps(load_w::<K>(w[r], i, !0), x0, a0[r]);
                a1[r] = _mm512_fmadd_ps(load_w::<K>(w[r], i + 16, !0), x1, a1[r]);
            }
        }
        i += 32;
    }
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n.
        unsafe {
            let x0 = _mm512_maskz_loadu_ps(m, x.add(i));
            for r in 0..R {
                a0[r] = _mm512_fmadd_ps(load_w::<K>(w[r], i, m), x0, a0[r]);
            }
        }
        i += 16;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
    }
    out
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn f16_to_f32_slice(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n, which both slices hold.
        unsafe {
            let h = _mm256_maskz_loadu_epi16(m, s.add(i).cast());
            _mm512_mask_storeu_ps(d.add(i), m, _mm512_cvtph_ps(h));
        }
        i += 16;
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn f32_to_f16_slice(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n, which both slices hold.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, s.add(i));
            let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_mask_storeu_epi16(d.add(i).cast(), m, h);
        }
        i += 16;
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: both slices hold n floats.
    unsafe { dot_rows::<F32, 1>([a.as_ptr().cast()], b.as_ptr(), n)[0] }
}

rows::plain_row_kernels!(
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c",
    "AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C"
);

/// `exp(x)` (`crate::x86_64::exp`), then `scalef` for `2^n` (which underflows to 0 and overflows to infinity correctly).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn exp512(x: __m512) -> __m512 {
    // Operand order matters: max/min return their second operand when one is NaN, so a NaN
    // input stays NaN (as f32::exp gives).
    let x = _mm512_min_ps(
        _mm512_set1_ps(89.0),
        _mm512_max_ps(_mm512_set1_ps(-104.0), x),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(POLY[0]);
    for &c in &POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    _mm512_scalef_ps(_mm512_add_ps(y, _mm512_set1_ps(1.0)), n)
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len().min(weight.len()).min(out.len());
    let xp = x.as_ptr();
    // SAFETY: x holds n floats.
    let ss = unsafe { dot_rows::<F32, 1>([xp.cast()], xp, n)[0] };
    let inv = 1.0 / (ss / n.max(1) as f32 + eps).sqrt();
    let vinv = _mm512_set1_ps(inv);
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n, which all three slices hold.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, xp.add(i));
            let g = _mm512_maskz_loadu_ps(m, weight.as_ptr().add(i));
            let y = _mm512_mul_ps(_mm512_mul_ps(v, vinv), g);
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), m, y);
        }
        i += 16;
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n.
        let v = unsafe { _mm512_mask_loadu_ps(vmax, m, p.add(i)) };
        vmax = _mm512_max_ps(vmax, v);
        i += 16;
    }
    let max = _mm512_reduce_max_ps(vmax);
    let vmax = _mm512_set1_ps(max);
    let mut sum = _mm512_setzero_ps();
    i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n.
        unsafe {
            let e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), vmax));
            let e = _mm512_maskz_mov_ps(m, e);
            sum = _mm512_add_ps(sum, e);
            _mm512_mask_storeu_ps(p.add(i), m, e);
        }
        i += 16;
    }
    let sum = _mm512_reduce_add_ps(sum);
    let inv = _mm512_set1_ps(1.0 / sum);
    i = 0;
    while i < n {
        let m = mask16(n - i);
        // SAFETY: the mask covers only elements below n.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, p.add(i));
            _mm512_mask_storeu_ps(p.add(i), m, _mm512_mul_ps(v, inv));
        }
        i += 16;
    }
    (max, sum)
}

/// Element-wise `dst[i] = f(dst[i], src[i])` with masked tails; `src` may be `dst` itself
/// for unary operations (then `N == 1`, only `dst` is read).
macro_rules! elementwise {
    ($(#[$m:meta])* $name:ident(dst $(, $src:ident)?) $(where $s:ident: f32)? => |$d:ident $(, $u:ident)?| $body:expr) => {
        $(#[$m])*
        /// # Safety
        /// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
        pub unsafe fn $name(dst: &mut [f32] $(, $src: &[f32])? $(, $s: f32)?) {
            let n = dst.len() $(.min($src.len()))?;
            let p = dst.as_mut_ptr();
            $(let $s = _mm512_set1_ps($s);)?
            let mut i = 0;
            while i < n {
                let m = mask16(n - i);
                // SAFETY: the mask covers only elements below n, which every slice holds.
                unsafe {
                    let $d = _mm512_maskz_loadu_ps(m, p.add(i));
                    $(let $u = _mm512_maskz_loadu_ps(m, $src.as_ptr().add(i));)?
                    _mm512_mask_storeu_ps(p.add(i), m, $body);
                }
                i += 16;
            }
        }
    };
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn silu512(v: __m512) -> __m512 {
    let e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), v));
    _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), e))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn relu2_512(v: __m512) -> __m512 {
    let r = _mm512_max_ps(v, _mm512_setzero_ps());
    _mm512_mul_ps(r, r)
}

/// `gelu_tanh(v) = v / (1 + exp(-2z))`, `z = sqrt(2/pi) (v + 0.044715 v^3)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
fn gelu_tanh512(v: __m512) -> __m512 {
    let inner = _mm512_fmadd_ps(
        _mm512_set1_ps(0.044_715),
        _mm512_mul_ps(v, v),
        _mm512_set1_ps(1.0),
    );
    let minus_2z = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(-2.0 * 0.797_884_6), v), inner);
    _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0), exp512(minus_2z)))
}

elementwise!(silu(dst) => |d| silu512(d));
elementwise!(gelu_tanh_mul(dst, up) => |d, u| _mm512_mul_ps(gelu_tanh512(d), u));
elementwise!(silu_mul(dst, up) => |d, u| _mm512_mul_ps(silu512(d), u));
elementwise!(relu2(dst) => |d| relu2_512(d));
elementwise!(relu2_mul(dst, up) => |d, u| _mm512_mul_ps(relu2_512(d), u));
elementwise!(add_inplace(dst, src) => |d, u| _mm512_add_ps(d, u));
elementwise!(mul_inplace(dst, src) => |d, u| _mm512_mul_ps(d, u));
elementwise!(scale_inplace(dst) where s: f32 => |d| _mm512_mul_ps(d, s));
