//! How the register-tile ternary matmuls of the x86 trees (`avx2/ternary.rs`,
//! `avxvnni/ternary.rs`) cut a product: the token rows into even tiles of at most the tile's
//! register capacity, the columns into passes whose activations (the widest tile's tokens x
//! the pass's blocks) stay in L1 while every row's weights stream past them. The cut does not
//! depend on the instruction set, only the tile kernel does.
//!
//! Each tile's activations for a pass are first copied into one buffer, block by block and
//! token by token ([`PackedActs`]): every activation run the tile kernel reads is then at a
//! constant offset from the pass's start, so the kernel's loads need no address arithmetic.
//! With the token rows `padded_cols` apart (a run-time stride) the AVX2 8-token block took
//! 287 instructions, about 50 of them scalar address sums, and spilled more; packed, 177 (175
//! with its step in `asm!`). The copy is read back by every row of the call
//! (`ternary::MATMUL_CALL_ROWS`, about), a few thousandths of the loads.

use std::mem::MaybeUninit;
use std::ops::Range;

use crate::layout::ternary::BLOCK;

/// Column blocks per pass at most.
const PASS_BLOCKS_MAX: usize = 16;
/// The activations one tile reads per pass are read again for every row: they must stay in
/// L1 (32 KiB on Zen 3 and older Intel cores, 48 KiB on newer ones), beside the row's
/// weights streaming through.
const TILE_ACT_BYTES: usize = 32 << 10;

/// The token tiles and column passes of one product.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TilePlan {
    tiles: usize,
    base: usize,
    extra: usize,
    pass_blocks: usize,
}

impl TilePlan {
    /// The plan for `n_tok` token rows over `n_blocks` column blocks with tiles of at most
    /// `tile_tokens` rows.
    pub(crate) fn new(n_tok: usize, n_blocks: usize, tile_tokens: usize) -> Self {
        let tiles = n_tok.div_ceil(tile_tokens).max(1);
        let (base, extra) = (n_tok / tiles, n_tok % tiles);
        let widest = (base + usize::from(extra > 0)).max(1);
        let max_blocks = (TILE_ACT_BYTES / (widest * BLOCK)).clamp(1, PASS_BLOCKS_MAX);
        // Even passes, as long as the widest tile's activations fit TILE_ACT_BYTES.
        let pass_blocks = n_blocks
            .div_ceil(n_blocks.div_ceil(max_blocks).max(1))
            .max(1);
        TilePlan {
            tiles,
            base,
            extra,
            pass_blocks,
        }
    }

    /// The column passes over `blocks`: `(first block, blocks in the pass)`.
    pub(crate) fn passes(&self, blocks: Range<usize>) -> impl Iterator<Item = (usize, usize)> {
        let step = self.pass_blocks;
        blocks
            .clone()
            .step_by(step)
            .map(move |kb| (kb, step.min(blocks.end - kb)))
    }

    /// The token tiles: `(first token row, rows in the tile)`, in order.
    pub(crate) fn tiles(&self) -> impl Iterator<Item = (usize, usize)> {
        let (base, extra) = (self.base, self.extra);
        (0..self.tiles).scan(0, move |t0, i| {
            let tt = base + usize::from(i < extra);
            let start = *t0;
            *t0 += tt;
            Some((start, tt))
        })
    }
}

/// One tile's activations for one pass, as the tile kernels read them: the run of token `t`
/// of block `b` (of the pass) at `(b * T + t) * BLOCK`, for a tile of `T` tokens.
#[repr(C, align(64))]
pub(crate) struct PackedActs(MaybeUninit<[i8; TILE_ACT_BYTES]>);

impl PackedActs {
    pub(crate) fn new() -> Self {
        PackedActs(MaybeUninit::uninit())
    }

    /// Packs token rows `t0..t0 + tt` (each `stride` values apart in `q`) over blocks
    /// `kb..kb + nblk`; the result is what [`TilePlan`] plans fit (`tt * nblk` blocks of
    /// [`TILE_ACT_BYTES`] at most).
    pub(crate) fn pack(
        &mut self,
        q: &[i8],
        stride: usize,
        (t0, tt): (usize, usize),
        (kb, nblk): (usize, usize),
    ) -> &[i8] {
        let len = tt * nblk * BLOCK;
        assert!(len <= TILE_ACT_BYTES, "a tile pass of {tt} x {nblk} blocks");
        let dst = self.0.as_mut_ptr().cast::<i8>();
        for b in 0..nblk {
            for t in 0..tt {
                let src = &q[(t0 + t) * stride + (kb + b) * BLOCK..][..BLOCK];
                // SAFETY: (b * tt + t + 1) * BLOCK <= len <= TILE_ACT_BYTES, and `src` is
                // another object.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        dst.add((b * tt + t) * BLOCK),
                        BLOCK,
                    )
                };
            }
        }
        // SAFETY: the loops above wrote every one of the first `len` values.
        unsafe { std::slice::from_raw_parts(dst, len) }
    }
}

/// The body of a register-tile `raw_dots_multi` (`crate::layout::ternary::check_raw_dots` shapes): runs
/// `$tile::<T>(w, acts, nblk, out, ostride)`, the set's kernel adding one row's raw dots with
/// `T` token rows (1..=8, packed as [`PackedActs`] lays them out) to `out[t * ostride]`, over
/// every pass, tile and row of the plan.
/// A macro, not a function, so it expands inside the caller's `#[target_feature]` function and
/// the tile kernels inline into it.
macro_rules! tile_matmul {
    ($tile:ident, $tile_tokens:expr, $w:expr, $q:expr, $n_tok:expr, $rows:expr, $blocks:expr, $out:expr) => {{
        let (w, q, n_tok, rows, blocks, out): (
            &$crate::layout::ternary::TernaryMatrix,
            &[i8],
            usize,
            std::ops::Range<usize>,
            std::ops::Range<usize>,
            &mut [i32],
        ) = ($w, $q, $n_tok, $rows, $blocks, $out);
        out.fill(0);
        if !(rows.is_empty() || blocks.is_empty() || n_tok == 0) {
            let pc = w.padded_cols();
            let n = rows.len();
            let plan = $crate::x86_64::tile_plan::TilePlan::new(n_tok, blocks.len(), $tile_tokens);
            let mut packed = $crate::x86_64::tile_plan::PackedActs::new();
            for (kb, nblk) in plan.passes(blocks) {
                for (t0, tt) in plan.tiles() {
                    let qp = packed.pack(q, pc, (t0, tt), (kb, nblk)).as_ptr();
                    for (i, r) in rows.clone().enumerate() {
                        // SAFETY: row `r` blocks kb..kb+nblk exist (the caller's checked
                        // shapes), `qp` holds the tile's tt x nblk blocks, and
                        // out[(t0 + t) * n + i] is in bounds for t < tt.
                        unsafe {
                            let wp = w.data.as_ptr().add(w.offset(r, kb));
                            let op = out.as_mut_ptr().add(t0 * n + i);
                            match tt {
                                8 => $tile::<8>(wp, qp, nblk, op, n),
                                7 => $tile::<7>(wp, qp, nblk, op, n),
                                6 => $tile::<6>(wp, qp, nblk, op, n),
                                5 => $tile::<5>(wp, qp, nblk, op, n),
                                4 => $tile::<4>(wp, qp, nblk, op, n),
                                3 => $tile::<3>(wp, qp, nblk, op, n),
                                2 => $tile::<2>(wp, qp, nblk, op, n),
                                _ => $tile::<1>(wp, qp, nblk, op, n),
                            }
                        }
                    }
                }
            }
        }
    }};
}
pub(crate) use tile_matmul;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_every_token_once_and_evenly() {
        for n_tok in 1..40 {
            let plan = TilePlan::new(n_tok, 10, 8);
            let tiles: Vec<_> = plan.tiles().collect();
            let mut next = 0;
            for &(t0, tt) in &tiles {
                assert_eq!(t0, next);
                assert!((1..=8).contains(&tt), "{n_tok}: tile of {tt}");
                next += tt;
            }
            assert_eq!(next, n_tok);
            let (lo, hi) = tiles.iter().fold((usize::MAX, 0), |(lo, hi), &(_, tt)| {
                (lo.min(tt), hi.max(tt))
            });
            assert!(hi - lo <= 1, "{n_tok}: uneven tiles {tiles:?}");
        }
    }

    #[test]
    fn passes_cover_the_blocks_and_fit_l1() {
        for n_blocks in [1, 2, 10, 16, 17, 27, 100] {
            for n_tok in [1, 3, 8, 13] {
                let plan = TilePlan::new(n_tok, n_blocks, 8);
                let passes: Vec<_> = plan.passes(5..5 + n_blocks).collect();
                let mut next = 5;
                for &(kb, nblk) in &passes {
                    assert_eq!(kb, next);
                    assert!((1..=PASS_BLOCKS_MAX).contains(&nblk));
                    let widest = n_tok.div_ceil(n_tok.div_ceil(8));
                    assert!(nblk * BLOCK * widest <= TILE_ACT_BYTES);
                    next += nblk;
                }
                assert_eq!(next, 5 + n_blocks);
            }
        }
    }
}
