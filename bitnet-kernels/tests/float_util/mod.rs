//! Shared helpers of the float kernel tests: seeded random data, misaligned views, and the
//! f64 references the error budgets are measured against.
#![allow(dead_code)]

use bitnet_kernels::Isa;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Every kernel set this CPU runs (scalar first); with `BITNET_KERNEL` set (the CI's scalar
/// job), only the sets up to the forced one.
pub fn isas() -> Vec<Isa> {
    let forced = Isa::from_env().expect("BITNET_KERNEL names a kernel set this CPU runs");
    Isa::available()
        .into_iter()
        .filter(|&i| i <= forced)
        .collect()
}

/// Lengths with every kind of tail: 1..=70, then assorted odd and block-multiple sizes.
pub fn lengths() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=70).collect();
    v.extend([
        95, 127, 128, 129, 191, 255, 256, 257, 300, 511, 512, 640, 1000, 2560,
    ]);
    v
}

/// `n` values, roughly normal (sum of uniforms) times `scale`.
pub fn normal_vec(r: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let s: f32 = (0..4).map(|_| r.random::<f32>()).sum::<f32>() - 2.0;
            s * scale
        })
        .collect()
}

/// A copy of `v` that starts one element past an aligned allocation (misaligned view).
pub fn misaligned<T: Copy + Default>(v: &[T]) -> (Vec<T>, std::ops::Range<usize>) {
    let mut buf = vec![T::default(); v.len() + 1];
    buf[1..].copy_from_slice(v);
    (buf, 1..v.len() + 1)
}

/// Exact-ish dot in f64 and the sum of |a_i b_i| (the condition of the dot).
pub fn dot64(a: impl IntoIterator<Item = f32>, b: &[f32]) -> (f64, f64) {
    let mut s = 0.0f64;
    let mut c = 0.0f64;
    for (x, &y) in a.into_iter().zip(b) {
        let p = f64::from(x) * f64::from(y);
        s += p;
        c += p.abs();
    }
    (s, c)
}

/// The dot budget of `bitnet_kernels::float` for `n` terms of condition `cond`.
pub fn dot_budget(n: usize, cond: f64) -> f64 {
    (n + bitnet_kernels::float::DOT_SLACK_TERMS) as f64
        * f64::from(bitnet_kernels::float::DOT_EPS_PER_TERM)
        * cond
        + f64::from(f32::MIN_POSITIVE)
}

/// `|got - want| <= rel * |want| + abs`, with a message naming the case.
#[track_caller]
pub fn assert_close(got: f32, want: f64, rel: f64, abs: f64, what: &str) {
    let err = (f64::from(got) - want).abs();
    assert!(
        err <= rel * want.abs() + abs,
        "{what}: got {got}, want {want}, err {err:e} > {rel:e} * |want| + {abs:e}"
    );
}

/// Equal bits element by element (any NaN matches any NaN): what a kernel that promises the
/// scalar reference's bits must give.
pub fn assert_same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "{what}: element {i}: {g:e} ({:#x}) != {w:e} ({:#x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}
