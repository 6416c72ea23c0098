//! Cache-line prefetch hints for loops whose source the hardware prefetchers lose (at 4 KiB
//! page boundaries). Not a kernel: x86-64's prefetch is baseline SSE and AArch64's `PRFM` is
//! in the base ISA, so neither needs a token.

/// Asks for the `n` cache lines of `bytes` from `at` on (those that exist) to be fetched;
/// nothing on targets without a hint here.
#[inline(always)]
pub(crate) fn prefetch_lines(bytes: &[u8], at: usize, n: usize) {
    #[cfg(target_arch = "x86_64")]
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: prefetching reads nothing into the program and cannot fault; SSE is
            // part of the x86-64 baseline; the address is inside `bytes`.
            unsafe { _mm_prefetch::<{ _MM_HINT_T0 }>(std::ptr::from_ref(p).cast()) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    for k in 0..n {
        if let Some(p) = bytes.get(at + 64 * k) {
            // SAFETY: `PRFM` is a hint: it reads nothing into the program and cannot fault;
            // it is in the AArch64 base ISA; the address is inside `bytes`.
            unsafe {
                std::arch::asm!(
                    "prfm pldl1keep, [{0}]",
                    in(reg) std::ptr::from_ref(p),
                    options(nostack, readonly, preserves_flags)
                )
            };
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = (bytes, at, n);
}
