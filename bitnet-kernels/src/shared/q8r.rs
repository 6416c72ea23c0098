//! The walk every kernel set's [`crate::layout::q8r::Q8R`] product shares: per row group, the
//! group's super-blocks in order, each against tiles of the tokens (a super-block, 2,176
//! bytes, stays in L1 while the tiles after the first read it, so the weights come from
//! memory once per call whatever the batch); and [`ActPtrs`], the activations as the kernels
//! index them. Only the super-block step depends on the set.

// Only the SIMD kernels read these.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use crate::layout::q8r::Q8Acts;

/// Token rows whose accumulators a walk holds through a group (more: the group is walked
/// again for the next ones, from L2).
pub(crate) const PASS: usize = 32;

/// A [`Q8Acts`] as raw pointers, for the kernels' inner loops.
#[derive(Clone, Copy)]
pub(crate) struct ActPtrs {
    q: *const i8,
    s: *const f32,
    // Read by the `vpdpbusd` kernels only (the ARM ones multiply signed bytes).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    bias: *const i32,
    pc: usize,
    pb: usize,
}

impl ActPtrs {
    pub(crate) fn new(x: &Q8Acts) -> ActPtrs {
        let (q, s, bias) = x.raw();
        ActPtrs {
            q: q.as_ptr(),
            s: s.as_ptr(),
            bias: bias.as_ptr(),
            pc: x.padded_cols(),
            pb: x.padded_blocks(),
        }
    }

    /// Token `t`'s quants from column `c` on.
    ///
    /// # Safety
    /// `t` below the capacity and `c` at most the padded width.
    #[inline(always)]
    pub(crate) unsafe fn at(self, t: usize, c: usize) -> *const i8 {
        // SAFETY: inside the quants buffer (the caller's guarantee).
        unsafe { self.q.add(t * self.pc + c) }
    }

    /// Token `t`'s quants `c..c + 4` as the bytes of an i32.
    ///
    /// # Safety
    /// `t` below the capacity and `c + 4` at most the padded width.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) unsafe fn quad(self, t: usize, c: usize) -> i32 {
        // SAFETY: the four bytes lie inside the quants buffer (the caller's guarantee).
        unsafe { self.at(t, c).cast::<i32>().read_unaligned() }
    }

    /// Token `t`'s scale of block `b`.
    ///
    /// # Safety
    /// `t` below the capacity and `b` below the padded block count.
    #[inline(always)]
    pub(crate) unsafe fn scale(self, t: usize, b: usize) -> f32 {
        // SAFETY: inside the scales buffer (the caller's guarantee).
        unsafe { *self.s.add(t * self.pb + b) }
    }

    /// Token `t`'s `-128 * sum(q)` of block `b`.
    ///
    /// # Safety
    /// As [`ActPtrs::scale`].
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub(crate) unsafe fn bias(self, t: usize, b: usize) -> i32 {
        // SAFETY: inside the bias buffer (the caller's guarantee).
        unsafe { *self.bias.add(t * self.pb + b) }
    }
}

/// The body of a set's `matmul_q8r`: for every row group of `$rows`, its super-blocks in
/// order against tiles of at most the largest of `$tiles` tokens,
/// `$sb::<T>(super-block pointer, ActPtrs, first token, super-block index, &mut [Acc; T],
/// prefetch)` adding each super-block's products to the tokens' accumulators (`$zero` at
/// the start of a group), and `$lanes(acc) -> [f32; 16]` giving a token's 16 row sums at the
/// end. Only the first tile of a super-block asks for prefetches (the later ones read it
/// from L1). Rows past `$rows.end` (the padding of the last group) are not stored.
///
/// A macro, not a function, so that it expands inside the set's `#[target_feature]` entry,
/// where `$sb` and `$lanes` inline. The caller checked the shapes
/// (`crate::layout::q8r::check_matmul`), and `$rows` is not empty.
macro_rules! q8r_walk {
    ($sb:ident, $lanes:ident, $zero:expr, [$($t:literal),+], $w:expr, $x:expr, $n_tok:expr, $rows:expr, $out:expr) => {{
        use $crate::layout::q8r::{Q8R_ROWS, Q8R_SB_BYTES};
        use $crate::shared::q8r::{ActPtrs, PASS};
        let (w, x, n_tok, rows, out): (
            &$crate::layout::q8r::Q8R,
            &$crate::layout::q8r::Q8Acts,
            usize,
            std::ops::Range<usize>,
            &mut [f32],
        ) = ($w, $x, $n_tok, $rows, $out);
        const TILE: usize = { let mut m = 0; $(if $t > m { m = $t; })+ m };
        let xp = ActPtrs::new(x);
        let (gb, n_sb, base, nr) = (w.group_bytes(), w.super_blocks(), w.bytes().as_ptr(), rows.len());
        let mut acc = [$zero; PASS];
        for g in rows.start / Q8R_ROWS..rows.end.div_ceil(Q8R_ROWS) {
            let r0 = g * Q8R_ROWS;
            let (first, live) = (r0 - rows.start, (rows.end - r0).min(Q8R_ROWS));
            let mut p0 = 0;
            while p0 < n_tok {
                let pn = (n_tok - p0).min(PASS);
                acc[..pn].fill($zero);
                for s in 0..n_sb {
                    // SAFETY: group g and its super-block s lie inside the matrix (rows.end
                    // <= w.rows, checked by the caller).
                    let sbp = unsafe { base.add(g * gb + s * Q8R_SB_BYTES) };
                    let mut t0 = 0;
                    while t0 < pn {
                        let tt = (pn - t0).min(TILE);
                        let pf = t0 == 0;
                        // SAFETY: the super-block is whole; tokens p0 + t0.. p0 + t0 + tt are
                        // below n_tok <= the activations' capacity, and s below their
                        // super-blocks (same width); shapes checked by the caller.
                        unsafe {
                            match tt {
                                $($t => $sb::<$t>(
                                    sbp,
                                    xp,
                                    p0 + t0,
                                    s,
                                    <&mut [_; $t]>::try_from(&mut acc[t0..t0 + $t])
                                        .expect("a tile of the pass"),
                                    pf,
                                ),)+
                                _ => unreachable!("tiles cover 1..=TILE"),
                            }
                        }
                        t0 += tt;
                    }
                }
                for t in 0..pn {
                    let v: [f32; Q8R_ROWS] = $lanes(acc[t]);
                    let at = (p0 + t) * nr + first;
                    out[at..at + live].copy_from_slice(&v[..live]);
                }
                p0 += pn;
            }
        }
    }};
}
pub(crate) use q8r_walk;
