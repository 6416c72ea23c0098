//! What every Hadamard kernel shares: the rows it takes, the shortest row a SIMD kernel
//! rotates, and the one scale factor (so every set gives the reference's bits).

/// Whether rows of `d` values can be rotated (`d` a power of two).
pub fn hadamard_supported(d: usize) -> bool {
    d.is_power_of_two()
}

/// The shortest rows the SIMD kernels rotate (one vector of 8 lanes); shorter ones take the
/// reference, which gives the same bits.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)] // used by the SIMD levels only
pub(crate) const SIMD_MIN_ROW: usize = 8;

/// `1 / sqrt(n)` as every Hadamard kernel scales by it (computed in f64, rounded once).
pub(crate) fn inv_sqrt(n: usize) -> f32 {
    (1.0 / (n as f64).sqrt()) as f32
}

/// The shapes of [`crate::float::hadamard_rows`] (checked there, and again by the SIMD token methods).
pub(crate) fn check_rows(d: usize, x: &[f32]) {
    assert!(
        hadamard_supported(d),
        "hadamard_rows: the row length {d} is not a power of two"
    );
    assert!(
        x.len().is_multiple_of(d),
        "hadamard_rows: {} values are not rows of {d}",
        x.len()
    );
}
