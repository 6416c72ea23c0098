//! AVX2 grouped-query attention over an f16 KV cache: the `n_q` query heads that share one
//! KV head are scored (and their values summed) in one pass, so each K and V row is loaded
//! and converted once per group instead of once per head.
//!
//! The per-head kernels in `attn.rs` stay the reference shape; these sum in another order
//! and are held to the same dot budget. Group sizes 2, 4 and 8 have register-resident
//! kernels; for other sizes [`scores_group`] and [`wsum_group`] return `false` and the caller
//! runs the per-head kernels head by head.

// acc[j][h] pairs position j with head h; index loops say that more plainly than zips.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

/// How many positions ahead the grouped score kernels prefetch K rows.
const PREFETCH_POS: usize = 16;

/// The 8 sums of 8 accumulators in one vector: lane `i` is the sum of `a[i]`'s lanes.
///
/// # Safety
/// AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce8(a: [__m256; 8]) -> __m256 {
    // Pairwise adds within 128-bit halves, then the two halves of each sum added: 7 adds
    // and 2 permutes for 8 sums instead of 8 separate horizontal sums.
    let t0 = _mm256_hadd_ps(a[0], a[1]);
    let t1 = _mm256_hadd_ps(a[2], a[3]);
    let t2 = _mm256_hadd_ps(a[4], a[5]);
    let t3 = _mm256_hadd_ps(a[6], a[7]);
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(u0, u1),
        _mm256_permute2f128_ps::<0x31>(u0, u1),
    )
}

/// Scores of `G` heads against the positions `p0..p0 + P` (`G * P <= 8`; full tiles take
/// `P = 8 / G`, the last positions `P = 1`): lane `j * G + h` of the result is
/// `dot(q_h, k_{p0 + j})`, lanes past `G * P` are 0. Eight independent accumulators keep
/// both FMA pipes busy (one head against one position is a chain bound by FMA latency), and
/// one reduction serves all eight sums. Lanes past the last multiple of 8 are scalar.
///
/// # Safety
/// AVX2 + FMA + F16C; `q` holds `G * d` floats (head `h` at `h * d`); `k` holds `d` halves
/// of each position `p0..p0 + P`, position `p` at `p * kv_stride`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_tile8<const G: usize, const P: usize>(
    q: *const f32,
    d: usize,
    k: *const u16,
    kv_stride: usize,
    p0: usize,
) -> [f32; 8] {
    debug_assert!(G * P <= 8);
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut c = 0;
    while c + 8 <= d {
        // SAFETY: lanes c..c + 8 <= d of each position and head (caller's contract).
        unsafe {
            let kv: [__m256; P] = std::array::from_fn(|j| {
                let row = k.add((p0 + j) * kv_stride + c);
                _mm256_cvtph_ps(_mm_loadu_si128(row.cast()))
            });
            for h in 0..G {
                let qv = _mm256_loadu_ps(q.add(h * d + c));
                for j in 0..P {
                    acc[j * G + h] = _mm256_fmadd_ps(qv, kv[j], acc[j * G + h]);
                }
            }
        }
        c += 8;
    }
    let mut out = [0.0f32; 8];
    // SAFETY: `out` holds 8 floats.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), reduce8(acc)) };
    for j in 0..P {
        for h in 0..G {
            for i in c..d {
                // SAFETY: element i < d of position p0 + j and head h (caller's contract).
                let (kh, qi) = unsafe { (*k.add((p0 + j) * kv_stride + i), *q.add(h * d + i)) };
                out[j * G + h] += qi * crate::layout::half::f16_to_f32(kh);
            }
        }
    }
    out
}

/// # Safety
/// As [`scores_tile8`] for every position below `n_pos`; `out` holds `G * n_pos`;
/// `G * P == 8`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_g<const G: usize, const P: usize>(
    q: &[f32],
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len() / G;
    let mut p = 0;
    while p + P <= n_pos {
        // One head's rows are a few hundred bytes, `kv_stride` apart: a stride the hardware
        // prefetchers follow poorly across pages, so the rows PREFETCH_POS positions ahead
        // are asked for here (a prefetch never faults; past the end it is wasted).
        for j in 0..P {
            let row = k.as_ptr().wrapping_add((p + PREFETCH_POS + j) * kv_stride);
            let mut c = 0;
            while c < d {
                // A hint: it reads nothing and never faults, even past the end.
                _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(c).cast());
                c += 32;
            }
        }
        // SAFETY: positions p..p + P lie below n_pos, inside k (checked by the safe API).
        let s = unsafe { scores_tile8::<G, P>(q.as_ptr(), d, k.as_ptr(), kv_stride, p) };
        for j in 0..P {
            for h in 0..G {
                out[h * n_pos + p + j] = scale * s[j * G + h];
            }
        }
        p += P;
    }
    while p < n_pos {
        // SAFETY: position p < n_pos lies inside k (checked by the safe API).
        let s = unsafe { scores_tile8::<G, 1>(q.as_ptr(), d, k.as_ptr(), kv_stride, p) };
        for (h, &v) in s[..G].iter().enumerate() {
            out[h * n_pos + p] = scale * v;
        }
        p += 1;
    }
}

/// Positions per tile of the AVX2 grouped weighted sum: their rows (8 KiB for 4 heads of
/// 128 f16) stay in L1 while every 16-lane slice of the output passes over them.
const WSUM_TILE_POS: usize = 32;

/// `out[h] += Σ_p w[h][p] v_p` for `G` heads, 16 output lanes per pass (tail lanes scalar).
/// Positions are taken a tile at a time, each output slice passing over the tile's rows, so
/// every V row comes from memory once (a pass over all positions per slice would fetch each
/// row's lines again for every slice, from far below L1); the next tile's rows are
/// prefetched during the first pass.
///
/// # Safety
/// AVX2 + FMA + F16C; shapes as the safe API checks them (`w` is `[G][n_pos]`, `out` is
/// `[G][d]`, every position's `d` values inside `v`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn wsum_g<const G: usize>(
    w: &[f32],
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) {
    let d = out.len() / G;
    let full = d - d % 8;
    let mut t0 = 0;
    while t0 < n_pos {
        let t1 = (t0 + WSUM_TILE_POS).min(n_pos);
        let mut c = 0;
        while c < full {
            let two = c + 16 <= full;
            // Accumulate onto `out` (a cache walked block by block sums as one pass would).
            let mut acc = [[_mm256_setzero_ps(); 2]; G];
            for (h, a) in acc.iter_mut().enumerate() {
                // SAFETY: lanes c..c + 8 (c + 16 when `two`) lie below d of head h's output row.
                unsafe {
                    a[0] = _mm256_loadu_ps(out.as_ptr().add(h * d + c));
                    if two {
                        a[1] = _mm256_loadu_ps(out.as_ptr().add(h * d + c + 8));
                    }
                }
            }
            for p in t0..t1 {
                if c % 32 == 0 && p + WSUM_TILE_POS < n_pos {
                    // The next tile's rows, a line of each per pass that starts one: asked
                    // for all at once at the tile's start, the requests outnumbered the
                    // misses a core keeps in flight and most were dropped (the sum read V
                    // from memory far slower than the scores read K).
                    let line = v.as_ptr().wrapping_add((p + WSUM_TILE_POS) * kv_stride + c);
                    // A hint: it reads nothing and never faults.
                    _mm_prefetch::<_MM_HINT_T0>(line.cast());
                }
                // SAFETY: lanes c..c + 8 (and c + 8..c + 16 when `two`) lie below full <= d
                // of position p < n_pos, inside v.
                let (v0, v1) = unsafe {
                    let row = v.as_ptr().add(p * kv_stride + c);
                    let v0 = _mm256_cvtph_ps(_mm_loadu_si128(row.cast()));
                    let v1 = if two {
                        _mm256_cvtph_ps(_mm_loadu_si128(row.add(8).cast()))
                    } else {
                        _mm256_setzero_ps()
                    };
                    (v0, v1)
                };
                for (h, a) in acc.iter_mut().enumerate() {
                    let wv = _mm256_set1_ps(w[h * n_pos + p]);
                    a[0] = _mm256_fmadd_ps(wv, v0, a[0]);
                    a[1] = _mm256_fmadd_ps(wv, v1, a[1]);
                }
            }
            for (h, a) in acc.iter().enumerate() {
                // SAFETY: lanes c..c + 8 (c + 16 when `two`) lie below d of head h's output row.
                unsafe {
                    _mm256_storeu_ps(out.as_mut_ptr().add(h * d + c), a[0]);
                    if two {
                        _mm256_storeu_ps(out.as_mut_ptr().add(h * d + c + 8), a[1]);
                    }
                }
            }
            c += if two { 16 } else { 8 };
        }
        t0 = t1;
    }
    for h in 0..G {
        for i in full..d {
            let mut acc = out[h * d + i];
            for p in 0..n_pos {
                acc += w[h * n_pos + p] * crate::layout::half::f16_to_f32(v[p * kv_stride + i]);
            }
            out[h * d + i] = acc;
        }
    }
}

/// Grouped scores: `q` is `[n_q][d]`, `out` `[n_q][n_pos]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; shapes as `crate::shared::attn` checks them.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scores_group(
    q: &[f32],
    n_q: usize,
    k: &[u16],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes. A tile holds 8 / G
    // positions (eight accumulators).
    unsafe {
        match n_q {
            2 => scores_g::<2, 4>(q, k, kv_stride, n_pos, scale, out),
            4 => scores_g::<4, 2>(q, k, kv_stride, n_pos, scale, out),
            8 => scores_g::<8, 1>(q, k, kv_stride, n_pos, scale, out),
            _ => return false,
        }
    }
    true
}

/// Grouped weighted sums: `w` is `[n_q][n_pos]`, `out` `[n_q][d]`. Returns `false` (and does
/// nothing) for group sizes without a kernel here.
///
/// # Safety
/// As [`scores_group`].
pub(crate) unsafe fn wsum_group(
    w: &[f32],
    n_q: usize,
    v: &[u16],
    kv_stride: usize,
    n_pos: usize,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller guarantees the CPU features and the shapes.
    unsafe {
        match n_q {
            2 => wsum_g::<2>(w, v, kv_stride, n_pos, out),
            4 => wsum_g::<4>(w, v, kv_stride, n_pos, out),
            8 => wsum_g::<8>(w, v, kv_stride, n_pos, out),
            _ => return false,
        }
    }
    true
}
