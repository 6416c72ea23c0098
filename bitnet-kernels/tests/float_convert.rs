//! f16 / bf16 conversions: exact against their definitions, and bit-exact between the scalar
//! reference and every SIMD set (F16C), on all 65536 halves and many f32 edge cases.
#![allow(clippy::needless_range_loop)] // index loops read closer to the math here

mod float_util;

use bitnet_kernels::float::{
    bf16_to_f32, f16_to_f32, f16_to_f32_slice, f32_to_bf16, f32_to_f16, f32_to_f16_slice,
};
use float_util::*;
use rand::Rng;

/// The value of a non-NaN half from its fields, in f64.
fn f16_value(h: u16) -> f64 {
    let s = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((h >> 10) & 0x1f);
    let m = f64::from(h & 0x3ff);
    match e {
        0 => s * m * 2f64.powi(-24),
        31 => s * f64::INFINITY,
        _ => s * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

fn is_f16_nan(h: u16) -> bool {
    h & 0x7c00 == 0x7c00 && h & 0x3ff != 0
}

#[test]
fn f16_to_f32_is_exact_for_every_half() {
    for h in 0..=u16::MAX {
        let f = f16_to_f32(h);
        if is_f16_nan(h) {
            assert!(f.is_nan(), "{h:#06x}");
            assert_eq!(f.is_sign_negative(), h & 0x8000 != 0, "{h:#06x}");
            // Quiet, payload kept in the top bits.
            assert_eq!(
                f.to_bits() & 0x7fff_ffff,
                0x7fc0_0000 | (u32::from(h & 0x3ff) << 13)
            );
        } else {
            assert_eq!(f64::from(f), f16_value(h), "{h:#06x}");
            assert_eq!(f.is_sign_negative(), h & 0x8000 != 0, "{h:#06x}");
        }
    }
}

#[test]
fn f32_to_f16_round_trips_every_half() {
    for h in 0..=u16::MAX {
        let back = f32_to_f16(f16_to_f32(h));
        if is_f16_nan(h) {
            assert_eq!(back, h | 0x0200, "{h:#06x} comes back quiet");
        } else {
            assert_eq!(back, h, "{h:#06x}");
        }
    }
}

/// Checks `h = f32_to_f16(x)` is the nearest half, ties to even, overflow to infinity.
fn check_nearest(x: f32) {
    let h = f32_to_f16(x);
    if x.is_nan() {
        assert!(is_f16_nan(h), "{x:e}");
        return;
    }
    let xv = f64::from(x);
    let hv = f16_value(h);
    assert_eq!(h & 0x8000 != 0, x.is_sign_negative(), "sign of {x:e}");
    if hv.is_infinite() {
        assert!(xv.abs() >= 65520.0, "{x:e} overflowed to infinity");
        return;
    }
    assert!(
        xv.abs() < 65520.0,
        "{x:e} should overflow to infinity, got {h:#06x}"
    );
    let err = (xv - hv).abs();
    // The neighbours of h (towards and away from zero) must not be closer.
    for n in [h.wrapping_sub(1) & 0x7fff, (h & 0x7fff) + 1] {
        if n & 0x7fff >= 0x7c00 {
            continue; // infinity is not a rounding neighbour (checked above)
        }
        let nv = f16_value(n).abs();
        let nerr = (xv.abs() - nv).abs();
        assert!(
            err <= nerr,
            "{x:e} -> {h:#06x} ({hv}), but {n:#06x} ({nv}) is closer"
        );
        if err == nerr {
            assert_eq!(h & 1, 0, "{x:e}: a tie must go to the even half");
        }
    }
}

/// f32 inputs that stress f16 rounding: every half, the midpoints between neighbours and one
/// ulp either side, the overflow and underflow thresholds, and a stride over all f32 bits.
fn f32_cases() -> Vec<f32> {
    let mut v = Vec::new();
    for h in 0..0x7c00u16 {
        let a = f16_to_f32(h);
        let b = f16_to_f32(h + 1);
        let mid = ((f64::from(a) + f64::from(b)) / 2.0) as f32; // exact in f32
        for x in [
            a,
            mid,
            f32::from_bits(mid.to_bits() - 1),
            f32::from_bits(mid.to_bits() + 1),
        ] {
            v.push(x);
            v.push(-x);
        }
    }
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        65504.0,
        65519.99,
        65520.0,
        65536.0,
        1e-8,
        2.98e-8,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffa0_0000),
        f32::from_bits(0x3300_0000),
        f32::from_bits(0x3300_0001),
        f32::from_bits(0x387f_ffff),
    ]);
    let mut bits = 0u32;
    while let Some(next) = bits.checked_add(40_009) {
        v.push(f32::from_bits(bits));
        bits = next;
    }
    v
}

#[test]
fn f32_to_f16_is_nearest_even() {
    for x in f32_cases() {
        check_nearest(x);
    }
}

#[test]
fn simd_f16_conversions_are_bit_exact() {
    let halves: Vec<u16> = (0..=u16::MAX).collect();
    let want: Vec<u32> = halves.iter().map(|&h| f16_to_f32(h).to_bits()).collect();
    let floats = f32_cases();
    let want_h: Vec<u16> = floats.iter().map(|&x| f32_to_f16(x)).collect();
    for isa in isas() {
        let mut got = vec![0.0f32; halves.len()];
        f16_to_f32_slice(isa, &halves, &mut got);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), *w, "{isa}: half {i:#06x}");
        }
        let mut got_h = vec![0u16; floats.len()];
        f32_to_f16_slice(isa, &floats, &mut got_h);
        for ((g, w), x) in got_h.iter().zip(&want_h).zip(&floats) {
            assert_eq!(g, w, "{isa}: f32 {x:e} ({:#010x})", x.to_bits());
        }
        // Short and misaligned slices exercise the tails.
        for n in lengths() {
            let (buf, r) = misaligned(&halves[1000..1000 + n]);
            let mut out = vec![0.0f32; n + 1];
            f16_to_f32_slice(isa, &buf[r.clone()], &mut out[1..]);
            for (i, o) in out[1..].iter().enumerate() {
                assert_eq!(o.to_bits(), want[1000 + i], "{isa}: len {n}");
            }
            let (fbuf, r) = misaligned(&floats[777..777 + n]);
            let mut hout = vec![0u16; n + 1];
            f32_to_f16_slice(isa, &fbuf[r], &mut hout[1..]);
            assert_eq!(&hout[1..], &want_h[777..777 + n], "{isa}: len {n}");
        }
    }
}

#[test]
fn bf16_conversions_round_to_nearest_even() {
    for h in 0..=u16::MAX {
        let f = bf16_to_f32(h);
        assert_eq!(f.to_bits(), u32::from(h) << 16);
        if f.is_nan() {
            assert!(bf16_to_f32(f32_to_bf16(f)).is_nan());
        } else {
            assert_eq!(f32_to_bf16(f), h);
        }
    }
    let mut r = rng(7);
    for _ in 0..200_000 {
        let x = f32::from_bits(r.random::<u32>());
        let h = f32_to_bf16(x);
        if x.is_nan() {
            assert!(bf16_to_f32(h).is_nan(), "{:#010x}", x.to_bits());
            continue;
        }
        let lo = x.to_bits() & 0xffff;
        let trunc = (x.to_bits() >> 16) as u16;
        let want = if lo > 0x8000 || (lo == 0x8000 && trunc & 1 == 1) {
            trunc + 1
        } else {
            trunc
        };
        assert_eq!(h, want, "{:#010x}", x.to_bits());
    }
    assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "max rounds up to infinity");
    assert_eq!(f32_to_bf16(1.0), 0x3f80);
}
