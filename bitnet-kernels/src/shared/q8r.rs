//! What every kernel set's [`crate::layout::q8r::Q8R`] product shares: the walk
//! (`shared::group_walk` with this layout's sizes) and [`ActPtrs`], the activations as the
//! kernels index them. Only the super-block step depends on the set.

// Only the SIMD kernels read these.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use crate::layout::q8r::Q8Acts;

/// A [`Q8Acts`] as raw pointers, for the kernels' inner loops.
#[derive(Clone, Copy)]
pub(crate) struct ActPtrs {
    q: *const i8,
    s: *const f32,
    // Read by the kernels that multiply unsigned bytes: `vpdpbusd` and the Q4R ones.
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

/// The body of a set's `matmul_q8r`: [`crate::shared::group_walk::group_walk`] over a
/// [`crate::layout::q8r::Q8R`] (super-blocks of 2,176 bytes) and its [`Q8Acts`].
macro_rules! q8r_walk {
    ($sb:ident, $lanes:ident, $zero:expr, [$($t:literal),+], $w:expr, $x:expr, $n_tok:expr, $rows:expr, $out:expr) => {
        $crate::shared::group_walk::group_walk!(
            $crate::layout::q8r::Q8R,
            $crate::layout::q8r::Q8Acts,
            $crate::shared::q8r::ActPtrs,
            $crate::layout::q8r::Q8R_ROWS,
            $crate::layout::q8r::Q8R_SB_BYTES,
            $sb, $lanes, $zero, [$($t),+], $w, $x, $n_tok, $rows, $out
        )
    };
}
pub(crate) use q8r_walk;
