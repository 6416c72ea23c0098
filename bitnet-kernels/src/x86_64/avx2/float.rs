//! AVX2 + FMA + F16C float kernels: the same names and contracts as `scalar::float`, 256
//! bits wide.
//!
//! Every function is `unsafe` only because it enables AVX2, FMA and F16C; the safe API in
//! `crate::float` calls them after detection and after checking shapes. AVX2 has no masked
//! 16-bit loads, so a tail is copied into a zero-padded stack buffer and run through the same
//! vector code (exact operations stay bit-exact with the scalar reference that way).

use std::arch::x86_64::*;
use std::ops::Range;

use crate::float::RowFormat;
use crate::float::qrows_x86::{self as qrows, Kernel};
use crate::scalar::float as scalar;

pub use super::q8q8::matmul_q8_0_q8_0;

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Rows per pass of the mat-vec and attention-score kernels.
const ROWS: usize = 4;

/// Bytes per element of kind `K`.
const fn esize(k: u8) -> usize {
    if k == F32 { 4 } else { 2 }
}

/// Up to 8 elements of kind `K` from `p`, zero-padded, as bytes of a 32-byte buffer.
///
/// # Safety
/// `n <= 8` elements of kind `K` at `p` must be readable.
#[inline]
unsafe fn pad_tail<const K: u8>(p: *const u8, n: usize) -> [u8; 32] {
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
unsafe fn load_w<const K: u8>(p: *const u8, i: usize) -> __m256 {
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

/// The sum of the eight lanes (also the Q8_0 x Q8_0 kernels' in `q8q8.rs`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

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

/// The plain-float mat-mul: groups of [`ROWS`] rows, every token against each group.
///
/// # Safety
/// AVX2/FMA/F16C; shapes as the safe API checks them (re-checked here).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn matmul_plain<const K: u8>(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let rb = row_len * esize(K);
    let nr = rows.len();
    assert!(
        crate::extent::holds(data.len(), rows.end, rb)
            && crate::extent::holds(x.len(), n_tok, row_len)
            && crate::extent::holds(out.len(), n_tok, nr)
    );
    let base = data.as_ptr();
    let mut r = rows.start;
    while r < rows.end {
        let left = rows.end - r;
        for t in 0..n_tok {
            let xt = x[t * row_len..].as_ptr();
            let o = t * nr + (r - rows.start);
            // SAFETY: the rows used lie below rows.end, inside data (checked above).
            unsafe {
                if left >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    out[o..o + ROWS].copy_from_slice(&dot_rows::<K, ROWS>(p, xt, row_len));
                } else {
                    out[o] = dot_rows::<K, 1>([base.add(r * rb)], xt, row_len)[0];
                }
            }
        }
        r += if left >= ROWS { ROWS } else { 1 };
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_f32(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // The plain kernels run with the features this function enables; they re-check shapes.
    match fmt {
        // SAFETY: as above.
        RowFormat::F32 => unsafe { matmul_plain::<F32>(data, row_len, x, n_tok, rows, out) },
        // SAFETY: as above.
        RowFormat::F16 => unsafe { matmul_plain::<F16>(data, row_len, x, n_tok, rows, out) },
        // SAFETY: as above.
        RowFormat::BF16 => unsafe { matmul_plain::<BF16>(data, row_len, x, n_tok, rows, out) },
        // SAFETY: as above (the Q8_0 decoder needs AVX2/FMA/F16C).
        RowFormat::Q8_0 => unsafe {
            qrows::matmul(Kernel::Q8_0Avx2, data, row_len, x, n_tok, rows, out)
        },
        // SAFETY: as above.
        RowFormat::Q6K => unsafe {
            qrows::matmul(Kernel::Q6KAvx2, data, row_len, x, n_tok, rows, out)
        },
        _ => {
            // SAFETY: the closure runs only inside this call, where AVX2/FMA are enabled.
            let dot = |a: &[f32], b: &[f32]| unsafe { dot_f32(a, b) };
            scalar::matmul_by_chunks(fmt, data, row_len, x, n_tok, rows, out, &dot)
        }
    }
}

/// `exp(x)`: Cody-Waite reduction, Cephes' polynomial, `2^n` built in the exponent field;
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
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
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

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rope_neox(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    let half = rope_dim / 2;
    assert!(head_dim.checked_mul(n_heads).is_some_and(|n| x.len() >= n) && rope_dim <= head_dim);
    assert!(cos.len() >= half && sin.len() >= half);
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let (a, b) = h[..rope_dim].split_at_mut(half);
        let mut i = 0;
        while i + 8 <= half {
            // SAFETY: i + 8 <= half, which a, b, cos and sin all hold.
            unsafe {
                let x0 = _mm256_loadu_ps(a.as_ptr().add(i));
                let x1 = _mm256_loadu_ps(b.as_ptr().add(i));
                let c = _mm256_loadu_ps(cos.as_ptr().add(i));
                let s = _mm256_loadu_ps(sin.as_ptr().add(i));
                let y0 = _mm256_sub_ps(_mm256_mul_ps(x0, c), _mm256_mul_ps(x1, s));
                let y1 = _mm256_add_ps(_mm256_mul_ps(x0, s), _mm256_mul_ps(x1, c));
                _mm256_storeu_ps(a.as_mut_ptr().add(i), y0);
                _mm256_storeu_ps(b.as_mut_ptr().add(i), y1);
            }
            i += 8;
        }
        for i in i..half {
            let (x0, x1, c, s) = (a[i], b[i], cos[i], sin[i]);
            a[i] = x0 * c - x1 * s;
            b[i] = x0 * s + x1 * c;
        }
    }
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn rope_normal(
    x: &mut [f32],
    head_dim: usize,
    n_heads: usize,
    rope_dim: usize,
    cos: &[f32],
    sin: &[f32],
) {
    let half = rope_dim / 2;
    assert!(head_dim.checked_mul(n_heads).is_some_and(|n| x.len() >= n) && rope_dim <= head_dim);
    assert!(cos.len() >= half && sin.len() >= half);
    let dup = _mm256_set_epi32(3, 3, 2, 2, 1, 1, 0, 0);
    let neg_even = _mm256_castsi256_ps(_mm256_set_epi32(
        0,
        i32::MIN,
        0,
        i32::MIN,
        0,
        i32::MIN,
        0,
        i32::MIN,
    ));
    for h in x.chunks_exact_mut(head_dim).take(n_heads) {
        let mut k = 0;
        while k + 4 <= half {
            // SAFETY: pairs k..k + 4 lie inside the head's first rope_dim values; cos and sin
            // hold half values.
            unsafe {
                let v = _mm256_loadu_ps(h.as_ptr().add(2 * k));
                let c = _mm256_castps128_ps256(_mm_loadu_ps(cos.as_ptr().add(k)));
                let s = _mm256_castps128_ps256(_mm_loadu_ps(sin.as_ptr().add(k)));
                let c = _mm256_permutevar8x32_ps(c, dup);
                let s = _mm256_xor_ps(_mm256_permutevar8x32_ps(s, dup), neg_even);
                let sw = _mm256_permute_ps::<0b10_11_00_01>(v);
                let y = _mm256_add_ps(_mm256_mul_ps(v, c), _mm256_mul_ps(sw, s));
                _mm256_storeu_ps(h.as_mut_ptr().add(2 * k), y);
            }
            k += 4;
        }
        for i in k..half {
            let (x0, x1, c, s) = (h[2 * i], h[2 * i + 1], cos[i], sin[i]);
            h[2 * i] = x0 * c - x1 * s;
            h[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}

/// Attention scores over a cache of kind `K`, [`ROWS`] positions per pass.
///
/// # Safety
/// AVX2/FMA/F16C; `k_ptr` holds `(n_pos - 1) * kv_stride + q.len()` elements of kind `K`,
/// `out` holds `n_pos`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attn_scores<const K: u8>(
    q: &[f32],
    k_ptr: *const u8,
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let (d, es) = (q.len(), esize(K));
    let mut p = 0;
    while p < n_pos {
        // SAFETY: positions below n_pos lie inside the cache (caller's contract).
        unsafe {
            if p + ROWS <= n_pos {
                let rows = [0, 1, 2, 3].map(|j| k_ptr.add((p + j) * kv_stride * es));
                let s = dot_rows::<K, ROWS>(rows, q.as_ptr(), d);
                for j in 0..ROWS {
                    out[p + j] = scale * s[j];
                }
                p += ROWS;
            } else {
                let row = k_ptr.add(p * kv_stride * es);
                out[p] = scale * dot_rows::<K, 1>([row], q.as_ptr(), d)[0];
                p += 1;
            }
        }
    }
}

/// `out += Σ_p w[p] v_p` over a cache of kind `K`: 32 output lanes at a time in registers
/// while the positions stream past; the last `d % 8` lanes go through padded rows.
///
/// # Safety
/// As [`attn_scores`], with `out.len()` in place of `q.len()`, `w` holding `n_pos`.
#[allow(clippy::needless_range_loop)] // acc[j] pairs with the j-th 8 lanes of each row
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn attn_weighted_sum<const K: u8>(
    w: &[f32],
    v_ptr: *const u8,
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let (d, es) = (out.len(), esize(K));
    assert!(w.len() >= n_pos);
    let full = d - d % 8;
    let mut c = 0;
    while c < full {
        let nv = ((full - c) / 8).min(4);
        // Accumulate onto `out`: a cache walked block by block sums as one pass would.
        let mut acc = [_mm256_setzero_ps(); 4];
        for (j, a) in acc.iter_mut().enumerate().take(nv) {
            // SAFETY: c + 8 j + 8 <= full <= d, inside out.
            *a = unsafe { _mm256_loadu_ps(out.as_ptr().add(c + 8 * j)) };
        }
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            let wv = _mm256_set1_ps(wp);
            // SAFETY: elements c..c + 8 nv <= d of position p lie inside the cache.
            let row = unsafe { v_ptr.add((p * kv_stride + c) * es) };
            for j in 0..nv {
                // SAFETY: as above.
                let v = unsafe { load_w::<K>(row, 8 * j) };
                acc[j] = _mm256_fmadd_ps(wv, v, acc[j]);
            }
        }
        for j in 0..nv {
            // SAFETY: c + 8 j + 8 <= full <= d, inside out.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * j), acc[j]) };
        }
        c += 8 * nv;
    }
    if full < d {
        let mut o = [0.0f32; 8];
        o[..d - full].copy_from_slice(&out[full..]);
        // SAFETY: o holds 8 floats.
        let mut acc = unsafe { _mm256_loadu_ps(o.as_ptr()) };
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            // SAFETY: the d - full < 8 tail elements of position p lie inside the cache.
            let v = unsafe {
                let buf = pad_tail::<K>(v_ptr.add((p * kv_stride + full) * es), d - full);
                load_w::<K>(buf.as_ptr(), 0)
            };
            acc = _mm256_fmadd_ps(_mm256_set1_ps(wp), v, acc);
        }
        // SAFETY: o holds 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), acc) };
        out[full..].copy_from_slice(&o[..d - full]);
    }
}

macro_rules! attn_entry {
    ($scores:ident, $wsum:ident, $t:ty, $k:expr) => {
        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $scores(
            q: &[f32],
            k: &[$t],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            assert!(out.len() >= n_pos);
            assert!(crate::extent::holds_strided(
                k.len(),
                n_pos,
                kv_stride,
                q.len()
            ));
            // SAFETY: the cache extent was checked just above.
            unsafe { attn_scores::<{ $k }>(q, k.as_ptr().cast(), kv_stride, n_pos, scale, out) }
        }

        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        /// The CPU must support AVX2, FMA and F16C.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $wsum(w: &[f32], v: &[$t], kv_stride: usize, n_pos: usize, out: &mut [f32]) {
            assert!(crate::extent::holds_strided(
                v.len(),
                n_pos,
                kv_stride,
                out.len()
            ));
            // SAFETY: the cache extent was checked just above.
            unsafe { attn_weighted_sum::<{ $k }>(w, v.as_ptr().cast(), kv_stride, n_pos, out) }
        }
    };
}

attn_entry!(attn_scores_f16, attn_weighted_sum_f16, u16, F16);
attn_entry!(attn_scores_f32, attn_weighted_sum_f32, f32, F32);

/// Same contract as the scalar kernel of this name (kernel in `float/qrows_x86.rs`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: this function runs with every feature the kernel needs.
    unsafe { qrows::attn_scores_q8_0_avx2(q, k, kv_stride, n_pos, scale, out) }
}

/// Same contract as the scalar kernel of this name (kernel in `float/qrows_x86.rs`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    // SAFETY: this function runs with every feature the kernel needs.
    unsafe { qrows::attn_weighted_sum_q8_0_avx2(w, v, kv_stride, n_pos, out) }
}
