//! NEON dense float kernels: the same names and contracts as `scalar/float.rs`, 128 bits
//! wide: f16 slice conversions (`FCVTL`/`FCVTN`, exact and round-to-nearest-even like the
//! reference), dots and plain-float mat-muls (`FMLA`), RMSNorm, softmax and the
//! element-wise activations (the polynomial `exp` of `aarch64/exp.rs`). Quantized rows are
//! `qrows.rs`, Q8_0 x Q8_0 `q8q8.rs`, RoPE `rope.rs`.
//!
//! The plain-float mat-mul runs tiles of up to 4 rows x 2 tokens: each weight vector is
//! loaded and widened once for the tile's tokens, each activation vector once for its rows.
//! Every dot keeps its own two accumulators and takes the same operations in the same order
//! whatever tile it is in, so a token's result does not depend on its batch. Tails are
//! copied into zero-padded stack buffers and run through the same vector code.

use std::arch::aarch64::*;
use std::ops::Range;

use crate::aarch64::asm::{f16x4_to_f32x4, f32x4_to_f16x4};
use crate::aarch64::exp::exp4;
use crate::extent::holds;
use crate::layout::rows::RowFormat;

/// Element kinds of the plain-float rows, as const parameters of the kernels.
pub(super) const F32: u8 = 0;
pub(super) const F16: u8 = 1;
pub(super) const BF16: u8 = 2;

/// Bytes per element of kind `k`.
#[inline(always)]
pub(super) const fn esize(k: u8) -> usize {
    if k == F32 { 4 } else { 2 }
}

/// Rows per tile of the plain-float mat-mul.
const ROWS: usize = 4;
/// Tokens per tile of the plain-float mat-mul (4 x 2 dots of two accumulators each, plus the
/// tile's weight and activation vectors, fill the 32 vector registers).
const TOKENS: usize = 2;

/// 8 elements of kind `K` from element `i` of the row at `p`, as two f32 vectors.
///
/// # Safety
/// Elements `i..i + 8` must be readable; NEON.
#[inline(always)]
pub(super) unsafe fn load8<const K: u8>(p: *const u8, i: usize) -> [float32x4_t; 2] {
    // SAFETY: the caller guarantees 8 elements at i are readable (NEON loads need no
    // alignment).
    unsafe {
        match K {
            F32 => {
                let v = vld1q_f32_x2(p.cast::<f32>().add(i));
                [v.0, v.1]
            }
            F16 => {
                // One LD1 of two D registers, then FCVTL on each.
                let h = vld1_u16_x2(p.cast::<u16>().add(i));
                [f16x4_to_f32x4(h.0), f16x4_to_f32x4(h.1)]
            }
            _ => {
                // bf16 is the top half of an f32: SHLL/SHLL2 by 16.
                let h = vld1q_u16(p.cast::<u16>().add(i));
                [
                    vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                    vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
                ]
            }
        }
    }
}

/// 4 elements of kind `K` from element `i` of the row at `p`, as f32.
///
/// # Safety
/// Elements `i..i + 4` must be readable; NEON.
#[inline(always)]
pub(super) unsafe fn load4<const K: u8>(p: *const u8, i: usize) -> float32x4_t {
    // SAFETY: the caller guarantees 4 elements at i are readable.
    unsafe {
        match K {
            F32 => vld1q_f32(p.cast::<f32>().add(i)),
            F16 => f16x4_to_f32x4(vld1_u16(p.cast::<u16>().add(i))),
            _ => vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p.cast::<u16>().add(i)))),
        }
    }
}

/// Up to 4 elements of kind `K` from `p`, zero-padded, as f32.
///
/// # Safety
/// `m <= 4` elements of kind `K` at `p` must be readable; NEON.
#[inline(always)]
pub(super) unsafe fn load_tail<const K: u8>(p: *const u8, m: usize) -> float32x4_t {
    let mut buf = [0u8; 16];
    // SAFETY: m * esize(K) <= 16 bytes are readable at p (caller) and fit in buf.
    unsafe {
        std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), m * esize(K));
        load4::<K>(buf.as_ptr(), 0)
    }
}

/// `[[dot(row w[r], x[t]) for t] for r]` over `n` elements. Each dot sums elements `8k..8k+4`
/// into one accumulator and `8k+4..8k+8` into another, a 4-element rest into the first and a
/// shorter rest into the second, then adds the two and their lanes: the same operations for
/// any `R` and `T`.
///
/// # Safety
/// NEON; each `w[r]` points at `n` readable elements of kind `K`, each `x[t]` at `n` floats.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_tile<const K: u8, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [*const f32; T],
    n: usize,
) -> [[f32; T]; R] {
    let z = vdupq_n_f32(0.0);
    let mut a0 = [[z; T]; R];
    let mut a1 = [[z; T]; R];
    let mut i = 0;
    // SAFETY: every load is of elements below n (the caller's extent).
    unsafe {
        // Two 8-element steps a pass (the same operations as one at a time): the loads of
        // a pass share their address arithmetic.
        let mut step = |i: usize| {
            let xv = x.map(|p| load8::<F32>(p.cast(), i));
            for r in 0..R {
                let wv = load8::<K>(w[r], i);
                for t in 0..T {
                    a0[r][t] = vfmaq_f32(a0[r][t], wv[0], xv[t][0]);
                    a1[r][t] = vfmaq_f32(a1[r][t], wv[1], xv[t][1]);
                }
            }
        };
        while i + 16 <= n {
            step(i);
            step(i + 8);
            i += 16;
        }
        if i + 8 <= n {
            step(i);
            i += 8;
        }
        if i + 4 <= n {
            let xv = x.map(|p| load4::<F32>(p.cast(), i));
            for r in 0..R {
                let wv = load4::<K>(w[r], i);
                for t in 0..T {
                    a0[r][t] = vfmaq_f32(a0[r][t], wv, xv[t]);
                }
            }
            i += 4;
        }
        if i < n {
            let m = n - i;
            let xv = x.map(|p| load_tail::<F32>(p.add(i).cast(), m));
            for r in 0..R {
                let wv = load_tail::<K>(w[r].add(i * esize(K)), m);
                for t in 0..T {
                    a1[r][t] = vfmaq_f32(a1[r][t], wv, xv[t]);
                }
            }
        }
    }
    let mut out = [[0.0; T]; R];
    for r in 0..R {
        for t in 0..T {
            out[r][t] = vaddvq_f32(vaddq_f32(a0[r][t], a1[r][t]));
        }
    }
    out
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn f16_to_f32_slice(src: &[u16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, which both slices hold.
        unsafe {
            let h = vld1_u16_x2(s.add(i));
            vst1q_f32_x2(
                d.add(i),
                float32x4x2_t(f16x4_to_f32x4(h.0), f16x4_to_f32x4(h.1)),
            );
        }
        i += 8;
    }
    while i < n {
        let m = (n - i).min(4);
        let mut h = [0u16; 4];
        h[..m].copy_from_slice(&src[i..i + m]);
        let mut f = [0.0f32; 4];
        // SAFETY: both buffers hold 4 elements.
        unsafe { vst1q_f32(f.as_mut_ptr(), f16x4_to_f32x4(vld1_u16(h.as_ptr()))) };
        dst[i..i + m].copy_from_slice(&f[..m]);
        i += m;
    }
}

/// Same contract as the scalar kernel of this name (`FCVTN` rounds to nearest even under
/// the default FPCR, keeps subnormals, and quiets NaNs keeping their top payload bits, as
/// `crate::layout::half::f32_to_f16` does).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn f32_to_f16_slice(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, which both slices hold.
        unsafe {
            let v = vld1q_f32_x2(s.add(i));
            vst1_u16_x2(
                d.add(i),
                uint16x4x2_t(f32x4_to_f16x4(v.0), f32x4_to_f16x4(v.1)),
            );
        }
        i += 8;
    }
    while i < n {
        let m = (n - i).min(4);
        let mut f = [0.0f32; 4];
        f[..m].copy_from_slice(&src[i..i + m]);
        let mut h = [0u16; 4];
        // SAFETY: both buffers hold 4 elements.
        unsafe { vst1_u16(h.as_mut_ptr(), f32x4_to_f16x4(vld1q_f32(f.as_ptr()))) };
        dst[i..i + m].copy_from_slice(&h[..m]);
        i += m;
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    // SAFETY: both slices hold n floats.
    unsafe { dot_tile::<F32, 1, 1>([a.as_ptr().cast()], [b.as_ptr()], n)[0][0] }
}

/// Plain-float rows (F32, F16, BF16) times `n_tok` vectors:
/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])`.
///
/// # Safety
/// The CPU must support NEON. Shapes are checked here.
///
/// # Panics
/// If `fmt` is not a plain float format, or the shapes do not hold.
#[target_feature(enable = "neon")]
pub unsafe fn matmul_plain(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: this function enables NEON; the walk checks the shapes.
    unsafe {
        match fmt {
            RowFormat::F32 => matmul_kind::<F32>(data, row_len, x, n_tok, rows, out),
            RowFormat::F16 => matmul_kind::<F16>(data, row_len, x, n_tok, rows, out),
            RowFormat::BF16 => matmul_kind::<BF16>(data, row_len, x, n_tok, rows, out),
            _ => unreachable!("{} rows are not plain floats", fmt.name()),
        }
    }
}

/// [`matmul_plain`] for rows of kind `K`: groups of [`ROWS`] rows (the last ones one at a
/// time), every token against each group while it is hot in L1, [`TOKENS`] at a time.
///
/// # Safety
/// NEON. Shapes are checked here.
#[inline(always)]
unsafe fn matmul_kind<const K: u8>(
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
        holds(data.len(), rows.end, rb)
            && holds(x.len(), n_tok, row_len)
            && holds(out.len(), n_tok, nr)
    );
    let (base, xp) = (data.as_ptr(), x.as_ptr());
    let mut r = rows.start;
    while r < rows.end {
        let o = r - rows.start;
        let mut t = 0;
        // SAFETY: rows r..r + ROWS (or the one row r) lie below rows.end and tokens
        // t..t + TOKENS (or t) below n_tok, inside data and x (checked above).
        unsafe {
            if rows.end - r >= ROWS {
                let w = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                while t + TOKENS <= n_tok {
                    let xs = [0, 1].map(|k| xp.add((t + k) * row_len));
                    let s = dot_tile::<K, ROWS, TOKENS>(w, xs, row_len);
                    for (j, sj) in s.iter().enumerate() {
                        out[t * nr + o + j] = sj[0];
                        out[(t + 1) * nr + o + j] = sj[1];
                    }
                    t += TOKENS;
                }
                if t < n_tok {
                    let s = dot_tile::<K, ROWS, 1>(w, [xp.add(t * row_len)], row_len);
                    for (j, sj) in s.iter().enumerate() {
                        out[t * nr + o + j] = sj[0];
                    }
                }
                r += ROWS;
            } else {
                let w = [base.add(r * rb)];
                while t + TOKENS <= n_tok {
                    let xs = [0, 1].map(|k| xp.add((t + k) * row_len));
                    let s = dot_tile::<K, 1, TOKENS>(w, xs, row_len);
                    out[t * nr + o] = s[0][0];
                    out[(t + 1) * nr + o] = s[0][1];
                    t += TOKENS;
                }
                if t < n_tok {
                    out[t * nr + o] = dot_tile::<K, 1, 1>(w, [xp.add(t * row_len)], row_len)[0][0];
                }
                r += 1;
            }
        }
    }
}

/// Runs `f` over `x` 4 lanes at a time; a tail is padded with `pad` and run the same way.
#[inline(always)]
fn map4(x: &mut [f32], pad: f32, mut f: impl FnMut(float32x4_t) -> float32x4_t) {
    let n = x.len();
    let p = x.as_mut_ptr();
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: i + 4 <= n; NEON is in every caller's target features.
        unsafe { vst1q_f32(p.add(i), f(vld1q_f32(p.add(i)))) };
        i += 4;
    }
    if i < n {
        let mut a = [pad; 4];
        a[..n - i].copy_from_slice(&x[i..n]);
        // SAFETY: the buffer holds 4 floats.
        unsafe { vst1q_f32(a.as_mut_ptr(), f(vld1q_f32(a.as_ptr()))) };
        x[i..n].copy_from_slice(&a[..n - i]);
    }
}

/// `x[i] = f(x[i], y[i])`, 4 lanes at a time, tails through zero-padded buffers.
#[inline(always)]
fn zip4(x: &mut [f32], y: &[f32], f: impl Fn(float32x4_t, float32x4_t) -> float32x4_t) {
    let n = x.len().min(y.len());
    let (p, q) = (x.as_mut_ptr(), y.as_ptr());
    let mut i = 0;
    while i + 4 <= n {
        // SAFETY: i + 4 <= n, which both slices hold; NEON is in every caller's features.
        unsafe { vst1q_f32(p.add(i), f(vld1q_f32(p.add(i)), vld1q_f32(q.add(i)))) };
        i += 4;
    }
    if i < n {
        let (mut a, mut b) = ([0.0f32; 4], [0.0f32; 4]);
        a[..n - i].copy_from_slice(&x[i..n]);
        b[..n - i].copy_from_slice(&y[i..n]);
        // SAFETY: both buffers hold 4 floats.
        unsafe {
            let v = f(vld1q_f32(a.as_ptr()), vld1q_f32(b.as_ptr()));
            vst1q_f32(a.as_mut_ptr(), v);
        }
        x[i..n].copy_from_slice(&a[..n - i]);
    }
}

/// Same contract as the scalar kernel of this name (the sum of squares in f32, eight
/// partial sums, within `RMSNORM_REL_TOL` of the f64 reference).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len().min(weight.len()).min(out.len());
    // SAFETY: x holds n floats.
    let ss = unsafe { dot_tile::<F32, 1, 1>([x.as_ptr().cast()], [x.as_ptr()], n)[0][0] };
    let inv = vdupq_n_f32(1.0 / (ss / n.max(1) as f32 + eps).sqrt());
    out[..n].copy_from_slice(&x[..n]);
    zip4(&mut out[..n], weight, |v, g| {
        vmulq_f32(vmulq_f32(v, inv), g)
    });
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    let ninf = vdupq_n_f32(f32::NEG_INFINITY);
    let mut vmax = ninf;
    // FMAX propagates a NaN, so a NaN input makes every output NaN, as in the reference.
    map4(x, f32::NEG_INFINITY, |v| {
        vmax = vmaxq_f32(vmax, v);
        v
    });
    let max = vmaxvq_f32(vmax);
    let vm = vdupq_n_f32(max);
    let mut sum = vdupq_n_f32(0.0);
    // -inf inputs (masked positions, tail padding) give exactly 0: `exp4` is 0 below its
    // range.
    map4(x, f32::NEG_INFINITY, |v| {
        let e = exp4(vsubq_f32(v, vm));
        sum = vaddq_f32(sum, e);
        e
    });
    let sum = vaddvq_f32(sum);
    let inv = vdupq_n_f32(1.0 / sum);
    map4(x, 0.0, |v| vmulq_f32(v, inv));
    (max, sum)
}

/// `v / (1 + exp(-v))` on four lanes.
#[inline]
#[target_feature(enable = "neon")]
fn silu4(v: float32x4_t) -> float32x4_t {
    vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0), exp4(vnegq_f32(v))))
}

/// `max(v, 0)²` on four lanes: `FMAXNM`, like `f32::max`, returns the number for a NaN
/// operand (0), and squaring makes the sign of a zero irrelevant.
#[inline]
#[target_feature(enable = "neon")]
fn relu2_4(v: float32x4_t) -> float32x4_t {
    let r = vmaxnmq_f32(v, vdupq_n_f32(0.0));
    vmulq_f32(r, r)
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn silu(x: &mut [f32]) {
    map4(x, 0.0, |v| silu4(v));
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    zip4(gate, up, |g, u| vmulq_f32(silu4(g), u));
}

/// `gelu_tanh(v) = v / (1 + exp(-2z))`, `z = sqrt(2/pi) (v + 0.044715 v^3)` on four lanes.
#[inline]
#[target_feature(enable = "neon")]
fn gelu_tanh4(v: float32x4_t) -> float32x4_t {
    let inner = vfmaq_f32(vdupq_n_f32(1.0), vdupq_n_f32(0.044_715), vmulq_f32(v, v));
    let minus_2z = vmulq_f32(vmulq_n_f32(v, -2.0 * 0.797_884_6), inner);
    vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0), exp4(minus_2z)))
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn gelu_tanh_mul(gate: &mut [f32], up: &[f32]) {
    zip4(gate, up, |g, u| vmulq_f32(gelu_tanh4(g), u));
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn relu2(x: &mut [f32]) {
    map4(x, 0.0, |v| relu2_4(v));
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn relu2_mul(gate: &mut [f32], up: &[f32]) {
    zip4(gate, up, |g, u| vmulq_f32(relu2_4(g), u));
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn add_inplace(dst: &mut [f32], src: &[f32]) {
    zip4(dst, src, |a, b| vaddq_f32(a, b));
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn mul_inplace(dst: &mut [f32], src: &[f32]) {
    zip4(dst, src, |a, b| vmulq_f32(a, b));
}

/// Same contract as the scalar kernel of this name (bit-exact with it).
///
/// # Safety
/// The CPU must support NEON.
#[target_feature(enable = "neon")]
pub unsafe fn scale_inplace(x: &mut [f32], s: f32) {
    let s = vdupq_n_f32(s);
    map4(x, 0.0, |v| vmulq_f32(v, s));
}
