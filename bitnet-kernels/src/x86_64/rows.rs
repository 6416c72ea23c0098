//! The row walks the AVX2 and AVX-512 float kernels share: which weight rows (or cache
//! positions) meet which activation rows, in what groups and in what order. They do not
//! depend on the lane width, so they are written once; each set supplies the vector code,
//! the dots of a group of plain-float rows with one vector ([`RowDots`]) or of one quantized
//! row with a tile of token rows ([`TileDots`]).
//!
//! [`matmul_plain`] and [`attn_scores`] are `#[inline(always)]`: they inline into each set's
//! `#[target_feature]` entry point, where that set's dots inline in turn, so the whole loop
//! still compiles with the set's features. [`matmul_tiles`] calls the tile dots once per
//! row and tile, as the quantized-row kernels always did.

use std::ops::Range;

use crate::extent::{holds, holds_strided};
use crate::layout::rows::RowFormat;

/// Element kinds of the plain-float rows, as const parameters of the kernels.
pub(crate) const F32: u8 = 0;
pub(crate) const F16: u8 = 1;
pub(crate) const BF16: u8 = 2;

/// Bytes per element of kind `k`.
#[inline(always)]
pub(crate) const fn esize(k: u8) -> usize {
    if k == F32 { 4 } else { 2 }
}

/// Rows per pass of the mat-vec and attention-score walks: they share every load of the
/// activation vector.
pub(crate) const ROWS: usize = 4;

/// One SIMD set's dots of `R` rows of element kind `K` with one f32 vector.
pub(crate) trait RowDots: Copy {
    /// `[dot(row r, x) for r in w]` over `n` elements.
    ///
    /// # Safety
    /// The CPU features of the set; each `w[r]` points at `n` readable elements of kind `K`,
    /// `x` at `n` floats.
    unsafe fn dots<const K: u8, const R: usize>(
        self,
        w: [*const u8; R],
        x: *const f32,
        n: usize,
    ) -> [f32; R];
}

/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])` for rows of a plain float
/// format (F32, F16, BF16): groups of [`ROWS`] rows, every token against each group while the
/// group is hot in L1; the last rows one at a time.
///
/// # Safety
/// The CPU features of `D`. Shapes are checked here.
///
/// # Panics
/// If `fmt` is not a plain float format, or `data`, `x`, `out` are too short.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn matmul_plain<D: RowDots>(
    d: D,
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    // SAFETY: forwarded from the caller; each walk checks the shapes.
    unsafe {
        match fmt {
            RowFormat::F32 => matmul_kind::<D, F32>(d, data, row_len, x, n_tok, rows, out),
            RowFormat::F16 => matmul_kind::<D, F16>(d, data, row_len, x, n_tok, rows, out),
            RowFormat::BF16 => matmul_kind::<D, BF16>(d, data, row_len, x, n_tok, rows, out),
            _ => unreachable!("{} rows are not plain floats", fmt.name()),
        }
    }
}

/// [`matmul_plain`] for rows of kind `K`.
///
/// # Safety
/// As [`matmul_plain`].
#[inline(always)]
unsafe fn matmul_kind<D: RowDots, const K: u8>(
    d: D,
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
    let base = data.as_ptr();
    let mut r = rows.start;
    while r < rows.end {
        let left = rows.end - r;
        for t in 0..n_tok {
            let xt = x[t * row_len..].as_ptr();
            let o = t * nr + (r - rows.start);
            // SAFETY: rows r..r + ROWS (or the one row r) lie below rows.end, inside data
            // (checked above); xt has row_len floats; the caller guarantees D's features.
            unsafe {
                if left >= ROWS {
                    let p = [0, 1, 2, 3].map(|j| base.add((r + j) * rb));
                    let s = d.dots::<K, ROWS>(p, xt, row_len);
                    out[o..o + ROWS].copy_from_slice(&s);
                } else {
                    out[o] = d.dots::<K, 1>([base.add(r * rb)], xt, row_len)[0];
                }
            }
        }
        r += if left >= ROWS { ROWS } else { 1 };
    }
}

/// `out[p] = scale * dot(q, k[p * kv_stride..][..q.len()])` for `p < n_pos` over a cache of
/// kind `K` (elements of type `E`: `u16` for F16, `f32` for F32), [`ROWS`] positions a pass.
///
/// # Safety
/// The CPU features of `D`. The cache extent is checked here.
#[inline(always)]
pub(crate) unsafe fn attn_scores<D: RowDots, const K: u8, E>(
    d: D,
    q: &[f32],
    k: &[E],
    kv_stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    const { assert!(size_of::<E>() == esize(K)) };
    assert!(out.len() >= n_pos && holds_strided(k.len(), n_pos, kv_stride, q.len()));
    let (n, es, k_ptr) = (q.len(), esize(K), k.as_ptr().cast::<u8>());
    let mut p = 0;
    while p < n_pos {
        // SAFETY: positions below n_pos lie inside the cache (checked above); the caller
        // guarantees D's features.
        unsafe {
            if p + ROWS <= n_pos {
                let rows = [0, 1, 2, 3].map(|j| k_ptr.add((p + j) * kv_stride * es));
                let s = d.dots::<K, ROWS>(rows, q.as_ptr(), n);
                for j in 0..ROWS {
                    out[p + j] = scale * s[j];
                }
                p += ROWS;
            } else {
                let row = k_ptr.add(p * kv_stride * es);
                out[p] = scale * d.dots::<K, 1>([row], q.as_ptr(), n)[0];
                p += 1;
            }
        }
    }
}

/// The widest token tile of [`matmul_tiles`] (its dispatch has an arm for each width up to
/// this).
pub(crate) const MAX_TILE: usize = 8;

/// One SIMD set's dots of one quantized weight row with a tile of token rows.
pub(crate) trait TileDots: Copy {
    /// The row format these dots decode.
    const FORMAT: RowFormat;
    /// Token rows one decoded row is used for at a time: as many as keep the tile's
    /// accumulators in registers, at most [`MAX_TILE`].
    const TILE: usize;

    /// Dots of one row of `nb` blocks with `T` token rows of `x` (`xs` floats apart). Each
    /// token's sum is formed in the same order whatever `T` is, so a token's result does not
    /// depend on its tile.
    ///
    /// # Safety
    /// The CPU features of the set; `w` readable for `nb` blocks, `x + t * xs` for `nb`
    /// blocks of floats for every `t < T`.
    unsafe fn dots<const T: usize>(
        self,
        w: *const u8,
        x: *const f32,
        xs: usize,
        nb: usize,
    ) -> [f32; T];
}

/// `out[t * rows.len() + i] = dot(row rows.start + i, x[t])` for rows decoded by `d`. Each
/// row is decoded once for a tile of up to [`TileDots::TILE`] tokens (batched decode reads
/// and decodes the head once per step, not once per sequence); a token's result is the same
/// bits in any tile.
///
/// # Safety
/// The CPU features of `D`. Shapes are checked here.
pub(crate) unsafe fn matmul_tiles<D: TileDots>(
    d: D,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    let fmt = D::FORMAT;
    let rb = fmt.row_bytes(row_len).expect("whole blocks");
    let nb = row_len / fmt.block_len();
    let nr = rows.len();
    assert!(
        holds(data.len(), rows.end, rb)
            && holds(x.len(), n_tok, row_len)
            && holds(out.len(), n_tok, nr)
    );
    let tile = D::TILE;
    debug_assert!((1..=MAX_TILE).contains(&tile));
    for (i, r) in rows.enumerate() {
        let mut t0 = 0;
        while t0 < n_tok {
            let tt = tile.min(n_tok - t0);
            let mut s = [0.0f32; MAX_TILE];
            // SAFETY: row r < rows.end lies inside data and tokens t0..t0 + tt inside x
            // (checked above); the caller guarantees D's features.
            unsafe {
                let w = data.as_ptr().add(r * rb);
                let xt = x.as_ptr().add(t0 * row_len);
                match tt {
                    8 => s = d.dots::<8>(w, xt, row_len, nb),
                    7 => s[..7].copy_from_slice(&d.dots::<7>(w, xt, row_len, nb)),
                    6 => s[..6].copy_from_slice(&d.dots::<6>(w, xt, row_len, nb)),
                    5 => s[..5].copy_from_slice(&d.dots::<5>(w, xt, row_len, nb)),
                    4 => s[..4].copy_from_slice(&d.dots::<4>(w, xt, row_len, nb)),
                    3 => s[..3].copy_from_slice(&d.dots::<3>(w, xt, row_len, nb)),
                    2 => s[..2].copy_from_slice(&d.dots::<2>(w, xt, row_len, nb)),
                    1 => s[..1].copy_from_slice(&d.dots::<1>(w, xt, row_len, nb)),
                    _ => unreachable!("token tiles are 1 to {MAX_TILE} wide"),
                }
            }
            for (t, &v) in s.iter().enumerate().take(tt) {
                out[(t0 + t) * nr + i] = v;
            }
            t0 += tt;
        }
    }
}

// Each set's glue to the walks above, written once: the macros below expand in a set's
// files, where the set's own `dot_rows`, `attn_weighted_sum` and tile dots are in scope, with
// the `#[target_feature]` string of the set (`$features`) and its name for the docs (`$cpu`).

/// In a set's `float.rs`: `Dots`, its [`RowDots`] (the set's `dot_rows`), and
/// `matmul_plain`, the plain-float rows entry point (the walk inlined under `$features`).
macro_rules! plain_row_kernels {
    ($features:literal, $cpu:literal) => {
        /// This set's [`RowDots`](crate::x86_64::rows::RowDots) for the shared row walks.
        #[derive(Clone, Copy)]
        pub(super) struct Dots;

        impl crate::x86_64::rows::RowDots for Dots {
            #[inline(always)]
            unsafe fn dots<const K: u8, const R: usize>(
                self,
                w: [*const u8; R],
                x: *const f32,
                n: usize,
            ) -> [f32; R] {
                // SAFETY: forwarded from the caller (the set's features, readable rows and
                // vector).
                unsafe { dot_rows::<K, R>(w, x, n) }
            }
        }

        /// Plain-float rows (F32, F16, BF16) times `n_tok` vectors: the shared row walk
        /// (`crate::x86_64::rows::matmul_plain`) with this set's dots.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ".")]
        ///
        /// # Panics
        /// If `fmt` is not a plain float format, or the shapes do not hold.
        #[target_feature(enable = $features)]
        pub unsafe fn matmul_plain(
            fmt: crate::layout::rows::RowFormat,
            data: &[u8],
            row_len: usize,
            x: &[f32],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            // SAFETY: this function enables the features `Dots` needs; the walk checks the
            // shapes.
            unsafe {
                crate::x86_64::rows::matmul_plain(Dots, fmt, data, row_len, x, n_tok, rows, out)
            }
        }
    };
}

/// In a set's `attn.rs`: the f16 and f32 cache entry points, scores through the shared
/// position walk with the set's `Dots`, weighted sums through the set's own
/// `attn_weighted_sum::<K>` after checking the cache extent.
macro_rules! plain_attn_kernels {
    ($features:literal, $cpu:literal) => {
        crate::x86_64::rows::plain_attn_kernels!(
            $features,
            $cpu,
            attn_scores_f16,
            attn_weighted_sum_f16,
            u16,
            F16
        );
        crate::x86_64::rows::plain_attn_kernels!(
            $features,
            $cpu,
            attn_scores_f32,
            attn_weighted_sum_f32,
            f32,
            F32
        );
    };
    ($features:literal, $cpu:literal, $scores:ident, $wsum:ident, $t:ty, $k:ident) => {
        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ".")]
        #[target_feature(enable = $features)]
        pub unsafe fn $scores(
            q: &[f32],
            k: &[$t],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            use crate::x86_64::rows::{attn_scores, $k};
            // SAFETY: this function enables the features `Dots` needs; the walk checks the
            // cache extent.
            unsafe { attn_scores::<Dots, $k, $t>(Dots, q, k, kv_stride, n_pos, scale, out) }
        }

        /// Same contract as the scalar kernel of this name.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ".")]
        #[target_feature(enable = $features)]
        pub unsafe fn $wsum(w: &[f32], v: &[$t], kv_stride: usize, n_pos: usize, out: &mut [f32]) {
            use crate::x86_64::rows::$k;
            assert!(crate::extent::holds_strided(
                v.len(),
                n_pos,
                kv_stride,
                out.len()
            ));
            // SAFETY: the cache extent was checked just above.
            unsafe { attn_weighted_sum::<$k>(w, v.as_ptr().cast(), kv_stride, n_pos, out) }
        }
    };
}

/// In a set's `qrows.rs`: a [`TileDots`] type `$rows` for `$fmt` rows, `$tile` tokens a tile,
/// running the set's `$dots::<T>`, and the entry point `$matmul` (the shared tile walk).
macro_rules! tile_kernels {
    ($cpu:literal, $matmul:ident, $rows:ident, $fmt:expr, $tile:expr, $dots:ident) => {
        #[derive(Clone, Copy)]
        struct $rows;

        impl crate::x86_64::rows::TileDots for $rows {
            const FORMAT: crate::layout::rows::RowFormat = $fmt;
            const TILE: usize = $tile;

            #[inline]
            unsafe fn dots<const T: usize>(
                self,
                w: *const u8,
                x: *const f32,
                xs: usize,
                nb: usize,
            ) -> [f32; T] {
                // SAFETY: forwarded from the caller (the set's features, readable row and
                // tokens).
                unsafe { $dots::<T>(w, x, xs, nb) }
            }
        }

        /// the reference `matmul_f32` of `scalar/float.rs` for these rows, through the shared tile walk.
        ///
        /// # Safety
        #[doc = concat!("The CPU must support ", $cpu, ". Shapes are checked here.")]
        pub unsafe fn $matmul(
            data: &[u8],
            row_len: usize,
            x: &[f32],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            // SAFETY: the caller guarantees the features; the walk checks the shapes.
            unsafe { crate::x86_64::rows::matmul_tiles($rows, data, row_len, x, n_tok, rows, out) }
        }
    };
}

pub(crate) use {plain_attn_kernels, plain_row_kernels, tile_kernels};
