//! [`Q8KActs`] as raw pointers, for the inner loops of every set's Q6_K products (the row
//! layout's `q6k_q8k` and the grouped `q6kr`).

// Only the SIMD kernels read these.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use crate::layout::q8k::{Q8K_SUMS, Q8KActs};
use crate::layout::rows::QK_K;

/// Q8_K activations ([`Q8KActs`]) as raw pointers, for the Q6_K x Q8_K inner loops.
#[derive(Clone, Copy)]
pub(crate) struct Q8kPtrs {
    q: *const i8,
    d: *const f32,
    bs: *const i16,
    cols: usize,
    /// Blocks of a row.
    pub(crate) nb: usize,
}

impl Q8kPtrs {
    pub(crate) fn new(x: &Q8KActs) -> Q8kPtrs {
        let (q, d, bs) = x.raw();
        Q8kPtrs {
            q: q.as_ptr(),
            d: d.as_ptr(),
            bs: bs.as_ptr(),
            cols: x.cols(),
            nb: x.blocks(),
        }
    }

    /// Token `t`'s 256 codes of block `b`.
    ///
    /// # Safety
    /// `t` below the capacity, `b` below the blocks.
    #[inline(always)]
    pub(crate) unsafe fn codes(self, t: usize, b: usize) -> *const i8 {
        // SAFETY: inside the codes buffer (the caller's guarantee).
        unsafe { self.q.add(t * self.cols + b * QK_K) }
    }

    /// Token `t`'s 16 sub-block sums of block `b`.
    ///
    /// # Safety
    /// As [`Q8kPtrs::codes`].
    #[inline(always)]
    pub(crate) unsafe fn sums(self, t: usize, b: usize) -> *const i16 {
        // SAFETY: inside the sums buffer (the caller's guarantee).
        unsafe { self.bs.add((t * self.nb + b) * Q8K_SUMS) }
    }

    /// Token `t`'s scale of block `b`.
    ///
    /// # Safety
    /// As [`Q8kPtrs::codes`].
    #[inline(always)]
    pub(crate) unsafe fn scale(self, t: usize, b: usize) -> f32 {
        // SAFETY: inside the scales buffer (the caller's guarantee).
        unsafe { *self.d.add(t * self.nb + b) }
    }
}
