//! Sizes whose products wrap are refused by the safe wrappers before any SIMD kernel reads or
//! writes through raw pointers (in a release build a wrapped `n_tok * cols` used to pass the
//! length checks: the AVX2 products then wrote past `out`). Each case expects the wrappers'
//! own message, not the overflow panic of a debug build's arithmetic.

// The wrapping sizes below are 64-bit values.
#![cfg(target_pointer_width = "64")]

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use bitnet_kernels::dispatch::{Level, kernels};
use bitnet_kernels::float::RopeTable;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use bitnet_kernels::ops::Kernels;
use bitnet_kernels::ternary::ternary_int_dots_multi;
use bitnet_kernels::{BinaryMatrix, Isa, TernaryMatrix};

/// 2^56 + 1 rows of 256 wrap to 256.
const WRAPPING_TOKENS: usize = (1 << 56) + 1;

fn kernel_sets() -> Vec<Isa> {
    Isa::available()
}

#[test]
fn ternary_products_refuse_a_token_count_that_wraps() {
    let w = TernaryMatrix::from_trits(&[1i8; 256 * 256], 256, 256, 1.0).unwrap();
    assert_eq!(w.padded_cols(), 256);
    for isa in kernel_sets() {
        let q = vec![1i8; 256];
        let mut out = vec![0i32; 256];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ternary_int_dots_multi(isa, &w, &q, WRAPPING_TOKENS, 0..256, &mut out)
        }));
        let msg = panic_message(r.expect_err("a wrapping token count must be refused"));
        assert!(msg.contains("overflow usize"), "{isa:?}: {msg}");
    }
}

/// The per-kernel-set entry point checks on its own, not only through the wrapper above.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn simd_ternary_products_refuse_a_token_count_that_wraps() {
    let w = TernaryMatrix::from_trits(&[1i8; 256 * 256], 256, 256, 1.0).unwrap();
    for isa in kernel_sets() {
        // The reference is not under test: the safe wrappers check for it.
        let simd = match kernels(isa) {
            Level::Scalar(_) => continue,
            simd => simd,
        };
        let q = vec![1i8; 256];
        let mut out = vec![0i32; 256];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            simd.ternary_raw_dots_multi(&w, &q, WRAPPING_TOKENS, 0..256, 0..1, &mut out)
        }));
        let msg = panic_message(r.expect_err("a wrapping token count must be refused"));
        assert!(msg.contains("overflow usize"), "{isa:?}: {msg}");
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn binary_products_refuse_a_token_count_that_wraps() {
    let w = BinaryMatrix::from_signs(&[1i8; 256 * 256], 256, 256, 1.0).unwrap();
    let pc = w.padded_cols();
    assert_eq!(pc, 256);
    for isa in kernel_sets() {
        // The reference is not under test: the safe wrappers check for it.
        let simd = match kernels(isa) {
            Level::Scalar(_) => continue,
            simd => simd,
        };
        let q = vec![1i8; pc];
        let mut out = vec![0i32; 256];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            simd.binary_raw_dots_multi(&w, &q, WRAPPING_TOKENS, 0..256, 0..pc / 64, &mut out)
        }));
        let msg = panic_message(r.expect_err("a wrapping token count must be refused"));
        assert!(msg.contains("overflow usize"), "{isa:?}: {msg}");
    }
}

#[test]
fn rope_refuses_a_head_size_that_wraps() {
    let table = RopeTable::new(128, 10_000.0, 4);
    for isa in kernel_sets() {
        let mut x = vec![0f32; 64];
        // (2^63 + 32) * 2 wraps to 64 = x.len().
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            table.apply_neox(isa, &mut x, (1 << 63) + 32, 2, 0)
        }));
        let msg = panic_message(r.expect_err("a wrapping head size must be refused"));
        assert!(msg.contains("n_heads x head_dim"), "{isa:?}: {msg}");
    }
}

fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
