//! AVX-512 float kernels: the same names and contracts as `scalar::float`, 512 bits wide.
//!
//! Every function is `unsafe` only because it enables AVX-512 F/BW/VL/DQ + VNNI (and the
//! AVX2/FMA/F16C they imply); the safe API in `crate::float` calls them after detection and
//! after checking shapes. Each kernel keeps its whole loop inside one `#[target_feature]`
//! function; tails use masked loads and stores, never a scalar loop. The hot paths (output
//! head mat-vecs, attention) process four rows per pass so activation loads are shared.

use std::arch::x86_64::*;
use std::ops::Range;

use crate::float::RowFormat;
use crate::float::formats::Q8_0_BLOCK_BYTES;
use crate::float::qrows_x86::{self as qrows, Kernel};
use crate::scalar::float as scalar;

/// Weight element kinds of the plain-float row kernels.
const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Rows per pass of the mat-vec and attention-score kernels.
const ROWS: usize = 4;

/// Lanes `0..n` of a 16-lane mask (`n <= 16`).
#[inline(always)]
fn mask16(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// 16 weights of kind `K` from element `i` of the row at `p`, lanes outside `m` zero.
///
/// # Safety
/// The masked-in elements `i..` of the row must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn load_w<const K: u8>(p: *const u8, i: usize, m: __mmask16) -> __m512 {
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

/// The plain-float mat-mul: groups of [`ROWS`] rows, every token against each group while
/// the group is hot in L1.
///
/// # Safety
/// AVX-512 as above; `data` holds `rows.end` rows of `row_len` elements of kind `K`, `x` is
/// `n_tok * row_len`, `out` is `n_tok * rows.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn matmul_plain<const K: u8>(
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let esize = if K == F32 { 4 } else { 2 };
    let rb = row_len * esize;
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
            // SAFETY: rows r.. r + ROWS (or the one row r) lie below rows.end, inside data
            // (checked above); xt has row_len floats.
            unsafe {
                if left >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    let d = dot_rows::<K, ROWS>(p, xt, row_len);
                    out[o..o + ROWS].copy_from_slice(&d);
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
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
        // SAFETY: as above (the Q8_0 decoder needs AVX2/FMA/F16C, and AVX-512 F/BW/VL/DQ).
        RowFormat::Q8_0 => unsafe {
            qrows::matmul(Kernel::Q8_0Avx512, data, row_len, x, n_tok, rows, out)
        },
        // SAFETY: as above.
        RowFormat::Q6K => unsafe {
            qrows::matmul(Kernel::Q6KAvx512, data, row_len, x, n_tok, rows, out)
        },
        _ => {
            // SAFETY: the closure runs only inside this call, where AVX-512 is enabled.
            let dot = |a: &[f32], b: &[f32]| unsafe { dot_f32(a, b) };
            scalar::matmul_by_chunks(fmt, data, row_len, x, n_tok, rows, out, &dot)
        }
    }
}

/// The f16 scales of two Q8_0 blocks (at `p` and `p + 34`) as lanes 0 and 1 of an xmm.
///
/// # Safety
/// Both blocks' first two bytes must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_scales2(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees both scale fields are readable.
    let (a, b) = unsafe {
        (
            p.cast::<u16>().read_unaligned(),
            p.add(Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned(),
        )
    };
    _mm_cvtph_ps(_mm_cvtsi32_si128(
        (u32::from(a) | (u32::from(b) << 16)) as i32,
    ))
}

/// The 32 quants of Q8_0 blocks `p` and `p + 34` as one 512-bit register.
///
/// # Safety
/// Both blocks must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_pair(p: *const u8) -> __m512i {
    // SAFETY: the caller guarantees both blocks are readable.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(p.add(2).cast())),
            _mm256_loadu_si256(p.add(Q8_0_BLOCK_BYTES + 2).cast()),
        )
    }
}

/// The f16 scales of four consecutive Q8_0 blocks at `p` as an xmm of f32.
///
/// # Safety
/// The four blocks' scale fields must be readable.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q8_scales4(p: *const u8) -> __m128 {
    let mut bits = 0u64;
    for j in 0..4 {
        // SAFETY: the caller guarantees the four scale fields are readable.
        let h = unsafe { p.add(j * Q8_0_BLOCK_BYTES).cast::<u16>().read_unaligned() };
        bits |= u64::from(h) << (16 * j);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(bits as i64))
}

/// Q8_0 x Q8_0 dots of `R` weight rows with one activation row of `nb` blocks, two blocks
/// per 512-bit register. The int8 products use `vpdpbusd` with an offset instead of signs:
/// `(w + 128)` is the unsigned operand (`w ^ 0x80`, one op per row) and the `128 * Σx` it
/// adds is cancelled by starting the accumulation at `-128 * Σx`, computed once per block
/// pair for all rows. Exact for every byte value of w and x. Scales are converted four
/// blocks at a time.
///
/// # Safety
/// Each `w[r]` and `x` must point at `nb` readable Q8_0 blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_q8_rows<const R: usize>(w: [*const u8; R], x: *const u8, nb: usize) -> [f32; R] {
    const BB: usize = Q8_0_BLOCK_BYTES;
    let mut acc_a = [_mm512_setzero_ps(); R];
    let mut acc_b = [_mm512_setzero_ps(); R];
    let zero = _mm512_setzero_si512();
    let c80 = _mm512_set1_epi8(-128);
    // Lanes 0..8 take scale j, lanes 8..16 scale j + 1.
    let idx_a = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    let idx_b = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    let mut b = 0;
    while b + 4 <= nb {
        // SAFETY: blocks b..b + 4 are below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let (xa, xb) = (q8_pair(xp), q8_pair(xp.add(2 * BB)));
            let na = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c80, xa));
            let nb_ = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c80, xb));
            let dx = q8_scales4(xp);
            for r in 0..R {
                let wp = w[r].add(b * BB);
                let ia = _mm512_dpbusd_epi32(na, _mm512_xor_si512(q8_pair(wp), c80), xa);
                let ib =
                    _mm512_dpbusd_epi32(nb_, _mm512_xor_si512(q8_pair(wp.add(2 * BB)), c80), xb);
                let d = _mm512_castps128_ps512(_mm_mul_ps(q8_scales4(wp), dx));
                let (da, db) = (
                    _mm512_permutexvar_ps(idx_a, d),
                    _mm512_permutexvar_ps(idx_b, d),
                );
                acc_a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia), da, acc_a[r]);
                acc_b[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ib), db, acc_b[r]);
            }
        }
        b += 4;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[r], acc_b[r]));
    }
    // Up to three blocks left: one at a time, 256 bits wide, same offset trick.
    let (zero, c80) = (_mm256_setzero_si256(), _mm256_set1_epi8(-128));
    while b < nb {
        // SAFETY: block b is below nb for x and every row.
        unsafe {
            let xp = x.add(b * BB);
            let xq = _mm256_loadu_si256(xp.add(2).cast());
            let neg = _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, c80, xq));
            let dx = _mm_cvtss_f32(q8_scales2(xp));
            for r in 0..R {
                let wp = w[r].add(b * BB);
                let wu = _mm256_xor_si256(_mm256_loadu_si256(wp.add(2).cast()), c80);
                let isum = _mm256_dpbusd_epi32(neg, wu, xq);
                let i = _mm_add_epi32(
                    _mm256_castsi256_si128(isum),
                    _mm256_extracti128_si256::<1>(isum),
                );
                let i = _mm_add_epi32(i, _mm_shuffle_epi32::<0b01_00_11_10>(i));
                let i = _mm_add_epi32(i, _mm_shuffle_epi32::<0b10_11_00_01>(i));
                let dw = _mm_cvtss_f32(q8_scales2(wp));
                out[r] += (dw * dx) * _mm_cvtsi128_si32(i) as f32;
            }
        }
        b += 1;
    }
    out
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_q8_0_q8_0(
    w: &[u8],
    row_len: usize,
    xq: &[u8],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let nb = row_len / 32;
    let rb = nb * Q8_0_BLOCK_BYTES;
    let nr = rows.len();
    assert!(
        crate::extent::holds(w.len(), rows.end, rb)
            && crate::extent::holds(xq.len(), n_tok, rb)
            && crate::extent::holds(out.len(), n_tok, nr)
    );
    let base = w.as_ptr();
    let mut r = rows.start;
    while r < rows.end {
        let left = rows.end - r;
        for t in 0..n_tok {
            let xt = xq[t * rb..].as_ptr();
            let o = t * nr + (r - rows.start);
            // SAFETY: the rows used lie below rows.end, inside w (checked above); xt has nb
            // blocks.
            unsafe {
                if left >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    let d = dot_q8_rows::<ROWS>(p, xt, nb);
                    out[o..o + ROWS].copy_from_slice(&d);
                } else {
                    out[o] = dot_q8_rows::<1>([base.add(r * rb)], xt, nb)[0];
                }
            }
        }
        r += if left >= ROWS { ROWS } else { 1 };
    }
}

/// `exp(x)`: Cody-Waite reduction `x = n ln2 + r`, Cephes' degree-6 polynomial on r, then
/// `scalef` for `2^n` (which underflows to 0 and overflows to infinity correctly).
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
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    for c in [1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5] {
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

elementwise!(silu(dst) => |d| silu512(d));
elementwise!(silu_mul(dst, up) => |d, u| _mm512_mul_ps(silu512(d), u));
elementwise!(relu2(dst) => |d| relu2_512(d));
elementwise!(relu2_mul(dst, up) => |d, u| _mm512_mul_ps(relu2_512(d), u));
elementwise!(add_inplace(dst, src) => |d, u| _mm512_add_ps(d, u));
elementwise!(mul_inplace(dst, src) => |d, u| _mm512_mul_ps(d, u));
elementwise!(scale_inplace(dst) where s: f32 => |d| _mm512_mul_ps(d, s));

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
    for h in 0..n_heads {
        let a = x[h * head_dim..].as_mut_ptr();
        let mut i = 0;
        while i < half {
            let m = mask16(half - i);
            // SAFETY: i + lanes <= half; the pairs (i, half + i) lie inside head h, and cos
            // and sin hold half values (checked above).
            unsafe {
                let x0 = _mm512_maskz_loadu_ps(m, a.add(i));
                let x1 = _mm512_maskz_loadu_ps(m, a.add(half + i));
                let c = _mm512_maskz_loadu_ps(m, cos.as_ptr().add(i));
                let s = _mm512_maskz_loadu_ps(m, sin.as_ptr().add(i));
                let y0 = _mm512_sub_ps(_mm512_mul_ps(x0, c), _mm512_mul_ps(x1, s));
                let y1 = _mm512_add_ps(_mm512_mul_ps(x0, s), _mm512_mul_ps(x1, c));
                _mm512_mask_storeu_ps(a.add(i), m, y0);
                _mm512_mask_storeu_ps(a.add(half + i), m, y1);
            }
            i += 16;
        }
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
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
    // Lane 2k and 2k + 1 take cos/sin k; even lanes negate sin (x0 c + x1 (-s)).
    let dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    let neg_even = _mm512_castsi512_ps(_mm512_set_epi32(
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
        0,
        -0x8000_0000,
    ));
    for h in 0..n_heads {
        let a = x[h * head_dim..].as_mut_ptr();
        let mut k = 0; // pair index
        while k < half {
            let pairs = (half - k).min(8);
            let m8 = mask16(pairs);
            let m16 = mask16(2 * pairs);
            // SAFETY: pairs k..k + pairs lie inside head h's first rope_dim values, and cos
            // and sin hold half values (checked above).
            unsafe {
                let v = _mm512_maskz_loadu_ps(m16, a.add(2 * k));
                let c = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, cos.as_ptr().add(k)));
                let s = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(m8, sin.as_ptr().add(k)));
                let s = _mm512_xor_ps(s, neg_even);
                let sw = _mm512_permute_ps::<0b10_11_00_01>(v);
                let y = _mm512_add_ps(_mm512_mul_ps(v, c), _mm512_mul_ps(sw, s));
                _mm512_mask_storeu_ps(a.add(2 * k), m16, y);
            }
            k += 8;
        }
    }
}

/// Attention scores over a cache of kind `K` (F16 or F32), [`ROWS`] positions per pass.
///
/// # Safety
/// AVX-512 as above; `k` holds `(n_pos - 1) * kv_stride + q.len()` elements of kind `K` at
/// `k_ptr`, `out` holds `n_pos`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn attn_scores<const K: u8>(
    q: &[f32],
    k_ptr: *const u8,
    esize: usize,
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    let mut p = 0;
    while p < n_pos {
        // SAFETY: positions p.. below n_pos lie inside the cache (caller's contract).
        unsafe {
            if p + ROWS <= n_pos {
                let rows = [0, 1, 2, 3].map(|j| k_ptr.add((p + j) * kv_stride * esize));
                let s = dot_rows::<K, ROWS>(rows, q.as_ptr(), d);
                for j in 0..ROWS {
                    out[p + j] = scale * s[j];
                }
                p += ROWS;
            } else {
                let row = k_ptr.add(p * kv_stride * esize);
                out[p] = scale * dot_rows::<K, 1>([row], q.as_ptr(), d)[0];
                p += 1;
            }
        }
    }
}

/// `out += Σ_p w[p] v_p` over a cache of kind `K`: 64 output lanes at a time stay in
/// registers while every position streams past.
///
/// # Safety
/// As [`attn_scores`], with `out.len()` in place of `q.len()` and `w` holding `n_pos`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn attn_weighted_sum<const K: u8>(
    w: &[f32],
    v_ptr: *const u8,
    esize: usize,
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len();
    assert!(w.len() >= n_pos);
    let mut c = 0;
    while c < d {
        let masks = [0, 1, 2, 3].map(|j| mask16(d.saturating_sub(c + 16 * j)));
        // Accumulate onto `out`: a cache walked block by block sums as one pass would.
        let mut acc = [0, 1, 2, 3].map(|j| {
            let src = out.as_ptr().wrapping_add(c + 16 * j);
            // SAFETY: the mask covers only elements below d (none if this vector is past d).
            unsafe { _mm512_maskz_loadu_ps(masks[j], src) }
        });
        for (p, &wp) in w.iter().enumerate().take(n_pos) {
            let wv = _mm512_set1_ps(wp);
            let row = p * kv_stride + c;
            for j in 0..4 {
                // SAFETY: masked-in lanes are elements c + 16j.. below d of position p,
                // inside the cache (caller's contract).
                let v = unsafe { load_w::<K>(v_ptr.wrapping_add(row * esize), 16 * j, masks[j]) };
                acc[j] = _mm512_fmadd_ps(wv, v, acc[j]);
            }
        }
        for j in 0..4 {
            let dst = out.as_mut_ptr().wrapping_add(c + 16 * j);
            // SAFETY: the mask covers only elements below d (none if this vector is past d).
            unsafe { _mm512_mask_storeu_ps(dst, masks[j], acc[j]) };
        }
        c += 64;
    }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_scores_f16(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert!(out.len() >= n_pos && crate::extent::holds_strided(k.len(), n_pos, kv_stride, q.len()));
    // SAFETY: the cache extent was checked just above.
    unsafe { attn_scores::<F16>(q, k.as_ptr().cast(), 2, kv_stride, n_pos, scale, out) }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_weighted_sum_f16(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert!(crate::extent::holds_strided(
        v.len(),
        n_pos,
        kv_stride,
        out.len()
    ));
    // SAFETY: the cache extent was checked just above.
    unsafe { attn_weighted_sum::<F16>(w, v.as_ptr().cast(), 2, kv_stride, n_pos, out) }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_scores_f32(
    q: &[f32],
    k: &[f32],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    assert!(out.len() >= n_pos && crate::extent::holds_strided(k.len(), n_pos, kv_stride, q.len()));
    // SAFETY: the cache extent was checked just above.
    unsafe { attn_scores::<F32>(q, k.as_ptr().cast(), 4, kv_stride, n_pos, scale, out) }
}

/// Same contract as the scalar kernel of this name.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_weighted_sum_f32(
    w: &[f32],
    v: &[f32],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    assert!(crate::extent::holds_strided(
        v.len(),
        n_pos,
        kv_stride,
        out.len()
    ));
    // SAFETY: the cache extent was checked just above.
    unsafe { attn_weighted_sum::<F32>(w, v.as_ptr().cast(), 4, kv_stride, n_pos, out) }
}

/// Same contract as the scalar kernel of this name (the kernel lives in
/// `float/qrows_x86.rs`, beside the other Q8_0-row decoders).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_scores_q8_0(
    q: &[f32],
    k: &[u8],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    // SAFETY: this function runs with every feature the kernel needs.
    unsafe { qrows::attn_scores_q8_0_avx512(q, k, kv_stride, n_pos, scale, out) }
}

/// Same contract as the scalar kernel of this name (kernel in `float/qrows_x86.rs`).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ/VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
pub unsafe fn attn_weighted_sum_q8_0(
    w: &[f32],
    v: &[u8],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    // SAFETY: this function runs with every feature the kernel needs.
    unsafe { qrows::attn_weighted_sum_q8_0_avx512(w, v, kv_stride, n_pos, out) }
}
