//! How the one-token ternary kernels ask for their weight stream ahead of use: the software
//! prefetch each CPU family measured best with, picked once per process (the policy itself,
//! portable, is [`crate::prefetch::StreamPrefetch`]).
//!
//! The same 4 KiB-ahead prefetch is worth opposite amounts on two AMD generations (one-token
//! decode over 1 GiB of 2B-4T layers, one thread, against an in-place read of the same bytes;
//! `bench/2026-12-07-issue50-zen4.md`): on Zen 5 into L1 it read 0.90 of the read against
//! 0.80 without; on Zen 4 into L1 it read 0.70-0.73 against 1.06-1.14 without (into L2
//! 0.92-1.03): Zen 4's hardware prefetchers keep up with one sequential stream, and the extra
//! requests only compete with them.

use std::arch::x86_64::{_MM_HINT_T0, _MM_HINT_T1, _mm_prefetch};

use crate::prefetch::StreamPrefetch;

/// How far ahead of the block in use the stream is prefetched.
pub(crate) const AHEAD: usize = 4096;

/// No software prefetch.
pub(crate) const OFF: u8 = 0;
/// Prefetch into L1 (`T0`).
pub(crate) const L1: u8 = 1;
/// Prefetch into L2 (`T1`).
pub(crate) const L2: u8 = 2;

/// The hint a kernel runs with: the process's policy, where the policy leaves it to the
/// kernel (`Tuned`), the kernel's own `tuned` one.
pub(crate) fn hint(tuned: u8) -> u8 {
    match crate::prefetch::stream_prefetch() {
        StreamPrefetch::Tuned => tuned,
        StreamPrefetch::Off => OFF,
        StreamPrefetch::L1 => L1,
        StreamPrefetch::L2 => L2,
    }
}

/// Prefetches the `lines` cache lines from `AHEAD` bytes past `at` with hint `HINT`
/// (nothing for [`OFF`]). Only a hint: the address may lie past the data.
#[inline(always)]
pub(crate) fn ahead<const HINT: u8>(at: *const u8, lines: usize) {
    let p = at.wrapping_add(AHEAD);
    for k in 0..lines {
        let line = p.wrapping_add(64 * k).cast::<i8>();
        // SAFETY: prefetching reads nothing into the program and never faults, whatever the
        // address; SSE is part of the x86-64 baseline.
        unsafe {
            match HINT {
                L1 => _mm_prefetch::<_MM_HINT_T0>(line),
                L2 => _mm_prefetch::<_MM_HINT_T1>(line),
                _ => {}
            }
        }
    }
}

/// Calls `$f::<HINT>($args)` with `HINT` the const of [`hint`]`($tuned)`: one-token kernels
/// are monomorphized per hint so the loop carries no branch.
macro_rules! with_hint {
    ($tuned:expr, $f:ident($($args:expr),* $(,)?)) => {
        match $crate::x86_64::stream::hint($tuned) {
            $crate::x86_64::stream::OFF => $f::<{ $crate::x86_64::stream::OFF }>($($args),*),
            $crate::x86_64::stream::L1 => $f::<{ $crate::x86_64::stream::L1 }>($($args),*),
            _ => $f::<{ $crate::x86_64::stream::L2 }>($($args),*),
        }
    };
}
pub(crate) use with_hint;
