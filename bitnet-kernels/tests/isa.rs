//! Which kernel sets this CPU runs. An integration test (not a unit test of `isa.rs`) so the
//! emulated ARM pass of `scripts/test-arm.sh` runs it with the kernel tests without building
//! the library's unit tests for that target.

use bitnet_kernels::Isa;

/// The emulated ARM pass names the sets each CPU model must offer, so a test run that
/// silently lost a set (an emulator without dotprod, a detection bug) fails instead of
/// testing less.
#[test]
fn this_cpu_runs_the_sets_the_test_run_expects() {
    let Ok(expected) = std::env::var("BITNET_EXPECT_KERNELS") else {
        return;
    };
    let names: Vec<&str> = Isa::available().into_iter().map(Isa::name).collect();
    assert_eq!(names.join(","), expected.trim());
}

#[cfg(target_arch = "aarch64")]
#[test]
fn every_aarch64_cpu_runs_neon_and_the_levels_nest() {
    assert!(Isa::Neon.is_available());
    assert!(!Isa::Avx2.is_available());
    if Isa::I8mm.is_available() {
        assert!(Isa::Dotprod.is_available());
    }
}

#[test]
fn best_is_available_and_scalar_always_is() {
    assert!(Isa::Scalar.is_available());
    assert!(Isa::best().is_available());
    assert!(Isa::available().contains(&Isa::best()));
}
