//! Size checks of the safe wrappers whose SIMD kernels then index raw pointers. Every
//! product is checked: a size that wraps is refused instead of passing for a small one.

// Only the SIMD kernels and their tokens need these.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

/// `len >= a * b`; false where the product overflows.
pub(crate) fn holds(len: usize, a: usize, b: usize) -> bool {
    a.checked_mul(b).is_some_and(|n| len >= n)
}

/// `len` holds `n` runs `stride` apart, the last `last` long (`n == 0` needs nothing);
/// false where the extent overflows.
pub(crate) fn holds_strided(len: usize, n: usize, stride: usize, last: usize) -> bool {
    n == 0
        || (n - 1)
            .checked_mul(stride)
            .and_then(|o| o.checked_add(last))
            .is_some_and(|end| len >= end)
}

/// `n_tok * len`, refusing a product that wraps: a wrapped size would pass the length checks
/// the kernels' raw pointers rely on.
pub(crate) fn tokens_times(n_tok: usize, len: usize) -> usize {
    n_tok
        .checked_mul(len)
        .unwrap_or_else(|| panic!("{n_tok} token rows of {len} overflow usize"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapped_products_are_refused() {
        assert!(holds(12, 3, 4) && !holds(11, 3, 4));
        // (2^63 + 1) * 2 wraps to 2.
        assert!(!holds(2, (1 << 63) + 1, 2));
        assert!(holds_strided(0, 0, usize::MAX, usize::MAX));
        assert!(holds_strided(10, 3, 4, 2) && !holds_strided(9, 3, 4, 2));
        // (5 - 1) * 2^62 wraps to 0.
        assert!(!holds_strided(8, 5, 1 << 62, 8));
        assert!(!holds_strided(usize::MAX, 2, usize::MAX, 1));
    }
}
