//! Activation quantization: every kernel set bit-identical to the scalar reference, and the
//! reference checked against the definition.

use bitnet_kernels::{Isa, quantize_act, quantize_act_binary, quantize_act_int4};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn int8_quantization_is_identical_across_isas() {
    let mut rng = StdRng::seed_from_u64(10);
    for len in [
        0usize, 1, 7, 15, 16, 31, 33, 100, 255, 256, 257, 2560, 3200, 6913,
    ] {
        for offset in [0usize, 1, 3] {
            let buf: Vec<f32> = (0..len + offset)
                .map(|_| rng.random_range(-4.0f32..4.0))
                .collect();
            let x = &buf[offset..];
            let padded = len.div_ceil(256) * 256 + 256;
            let mut want = vec![9i8; padded];
            let a = quantize_act(Isa::Scalar, x, &mut want);
            assert!(want[len..].iter().all(|&v| v == 0), "padding zeroed");
            assert_eq!(a.sum, want.iter().map(|&v| v as i32).sum::<i32>());
            let absmax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_eq!(a.scale, 127.0 / absmax.max(1e-5));
            for (&xi, &qi) in x.iter().zip(&want) {
                assert_eq!(
                    qi as f32,
                    (xi * a.scale).round_ties_even().clamp(-128.0, 127.0)
                );
            }
            for isa in Isa::available() {
                let mut got = vec![5i8; padded];
                let b = quantize_act(isa, x, &mut got);
                assert_eq!(b, a, "{isa} len {len}");
                assert_eq!(got, want, "{isa} len {len}");
            }
        }
    }
}

#[test]
fn int8_edge_cases() {
    // Exact halves round to even; zeros; a huge outlier.
    let x = [0.5f32, 1.5, 2.5, -0.5, -1.5, 127.0, -127.0, 0.0, 3.5];
    let mut x_long = x.repeat(5);
    x_long.push(254.0 * 0.5);
    for isa in Isa::available() {
        let mut q = vec![0i8; x_long.len()];
        let a = quantize_act(isa, &x_long, &mut q);
        assert_eq!(a.scale, 1.0);
        assert_eq!(&q[..9], &[0, 2, 2, 0, -2, 127, -127, 0, 4], "{isa}");
        let zeros = vec![0f32; 40];
        let mut q = vec![1i8; 40];
        let a = quantize_act(isa, &zeros, &mut q);
        assert_eq!((a.sum, a.scale), (0, 127.0 / 1e-5));
        assert!(q.iter().all(|&v| v == 0));
    }
}

#[test]
fn int4_quantization_is_identical_across_isas_and_stays_in_range() {
    let mut rng = StdRng::seed_from_u64(12);
    for len in [0usize, 1, 15, 33, 256, 257, 2560, 6913] {
        let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-4.0f32..4.0)).collect();
        if len > 2 {
            // An exact half after scaling (absmax 7: scale 1) and the extremes.
            x[0] = 7.0;
            x[1] = 2.5;
            x[2] = -7.0;
        }
        let padded = len.div_ceil(256) * 256 + 256;
        let mut want = vec![9i8; padded];
        let a = quantize_act_int4(Isa::Scalar, &x, &mut want);
        assert!(want[len..].iter().all(|&v| v == 0), "padding zeroed");
        assert!(
            want.iter().all(|v| (-7..=7).contains(v)),
            "len {len}: out of -7..=7"
        );
        let absmax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_eq!(a.scale, 7.0 / absmax.max(1e-5));
        assert_eq!(a.sum, want.iter().map(|&v| v as i32).sum::<i32>());
        for (&xi, &qi) in x.iter().zip(&want) {
            assert_eq!(qi as f32, (xi * a.scale).round_ties_even());
        }
        if len > 2 {
            assert_eq!(&want[..3], &[7, 2, -7], "half to even, extremes kept");
        }
        for isa in Isa::available() {
            let mut got = vec![5i8; padded];
            assert_eq!(quantize_act_int4(isa, &x, &mut got), a, "{isa} len {len}");
            assert_eq!(got, want, "{isa} len {len}");
        }
    }
}

#[test]
fn sign_bits_identical_across_isas() {
    let mut rng = StdRng::seed_from_u64(11);
    for len in [1usize, 63, 64, 65, 200, 2560, 3201] {
        let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        x[0] = 0.0; // zero is -1
        let words = len.div_ceil(256) * 4;
        let mut want = vec![!0u64; words];
        let s = quantize_act_binary(Isa::Scalar, &x, &mut want);
        let mean = x.iter().map(|v| v.abs() as f64).sum::<f64>() / len as f64;
        assert!((s as f64 - mean).abs() <= 1e-6 * mean);
        for (j, &v) in x.iter().enumerate() {
            assert_eq!((want[j / 64] >> (j % 64)) & 1 == 1, v > 0.0);
        }
        for j in len..words * 64 {
            assert_eq!((want[j / 64] >> (j % 64)) & 1, 0, "padding bit {j}");
        }
        for isa in Isa::available() {
            let mut got = vec![!0u64; words];
            assert_eq!(quantize_act_binary(isa, &x, &mut got), s);
            assert_eq!(got, want, "{isa} len {len}");
        }
    }
}

#[test]
fn int8_nan_and_infinity_match_the_reference() {
    // NaN inputs quantize to -128 and are ignored by absmax; an infinite input makes the
    // scale 0, so its product is NaN too. Positions hit the vector body and the tail.
    let mut rng = StdRng::seed_from_u64(12);
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0] {
        for len in [5usize, 16, 37, 70] {
            let mut x: Vec<f32> = (0..len).map(|_| rng.random_range(-3.0f32..3.0)).collect();
            for j in [0, len / 2, len - 1] {
                x[j] = special;
            }
            let mut want = vec![0i8; len];
            let a = quantize_act(Isa::Scalar, &x, &mut want);
            for isa in Isa::available() {
                let mut got = vec![3i8; len];
                let b = quantize_act(isa, &x, &mut got);
                assert_eq!(b.sum, a.sum, "{isa} {special} len {len}");
                assert_eq!(b.scale.to_bits(), a.scale.to_bits(), "{isa} {special}");
                assert_eq!(got, want, "{isa} {special} len {len}");
            }
        }
    }
}

#[test]
fn sum_bytes_matches_a_plain_sum() {
    use bitnet_kernels::probe::sum_bytes;
    let mut rng = StdRng::seed_from_u64(13);
    // Long enough for the u16 lanes to be flushed several times; all-0xFF is the worst case.
    for len in [0usize, 1, 63, 64, 65, 1000, 64 * 300 + 17] {
        let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let ff = vec![0xFFu8; len];
        for d in [&data, &ff] {
            let want: u64 = d.iter().map(|&b| b as u64).sum();
            for isa in Isa::available() {
                assert_eq!(sum_bytes(isa, d), want, "{isa} len {len}");
            }
        }
    }
}
