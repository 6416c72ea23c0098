//! The KV cache's Hadamard rotation and the XNOR/popcount scoring of B1 keys: every kernel
//! set against the scalar reference (bit for bit: both kernels perform the reference's
//! operations in its order), the references against explicit definitions (the Sylvester
//! Hadamard matrix in f64; the dot of the decoded sign rows), on random data and edge
//! cases (zeros, equal and opposite signs, huge values, one-hot rows, odd block counts,
//! head counts past one pass, misaligned caches and padded strides).
#![allow(clippy::needless_range_loop)]

mod float_util;

use bitnet_kernels::float::kv::B1_BLOCK_BYTES;
use bitnet_kernels::float::*;
use bitnet_kernels::scalar::hadamard::fwht;
use bitnet_kernels::scalar::kv as scalar_kv;
use float_util::*;
use rand::Rng;

const POW2: [usize; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Rows worth testing for a length `d`: random, zeros, all equal, one-hot, alternating,
/// huge and tiny magnitudes.
fn hadamard_cases(d: usize, seed: u64) -> Vec<(&'static str, Vec<f32>)> {
    let mut r = rng(seed);
    let mut one_hot = vec![0.0; d];
    one_hot[d / 3] = -2.5;
    vec![
        ("random", normal_vec(&mut r, 3 * d, 1.0)),
        ("zeros", vec![0.0; d]),
        ("equal", vec![0.75; d]),
        ("one-hot", one_hot),
        (
            "alternating",
            (0..d)
                .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
                .collect(),
        ),
        ("huge", normal_vec(&mut r, d, 1e30)),
        ("tiny", normal_vec(&mut r, d, 1e-40)),
    ]
}

/// `H / sqrt(d)` of the Sylvester construction: `H[i][j] = (-1)^popcount(i & j)`.
fn explicit_hadamard(x: &[f32]) -> Vec<f64> {
    let d = x.len();
    let s = 1.0 / (d as f64).sqrt();
    (0..d)
        .map(|i| {
            let sum: f64 = (0..d)
                .map(|j| {
                    let sign = if (i & j).count_ones() % 2 == 0 {
                        1.0
                    } else {
                        -1.0
                    };
                    sign * f64::from(x[j])
                })
                .sum();
            sum * s
        })
        .collect()
}

/// Rounding budget of the transform of a row: each of the `log2 d` stages and the final
/// scale round once, on sums bounded by `Σ|x|`.
fn fwht_budget(x: &[f32]) -> f64 {
    let d = x.len();
    let l1: f64 = x.iter().map(|v| f64::from(v.abs())).sum();
    (d.trailing_zeros() as f64 + 2.0) * f64::from(f32::EPSILON) * l1 + 1e-44
}

#[test]
fn hadamard_matches_the_explicit_matrix() {
    for d in POW2 {
        for (what, x) in hadamard_cases(d, d as u64) {
            let x = &x[..d];
            let want = explicit_hadamard(x);
            for isa in isas() {
                let mut got = x.to_vec();
                hadamard_rows(isa, d, &mut got);
                let tol = fwht_budget(x);
                for i in 0..d {
                    let err = (f64::from(got[i]) - want[i]).abs();
                    assert!(
                        err <= tol,
                        "{isa:?} d={d} {what} [{i}]: {} vs {} (err {err:e} > {tol:e})",
                        got[i],
                        want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn hadamard_simd_matches_scalar_bit_for_bit() {
    for d in POW2 {
        for (what, x) in hadamard_cases(d, 100 + d as u64) {
            let mut want = x.clone();
            want.chunks_exact_mut(d).for_each(fwht);
            for isa in isas() {
                // A view one float past an aligned allocation: the kernel loads unaligned.
                let (mut buf, range) = misaligned(&x);
                hadamard_rows(isa, d, &mut buf[range.clone()]);
                let got = &buf[range];
                for i in 0..x.len() {
                    assert_eq!(
                        got[i].to_bits(),
                        want[i].to_bits(),
                        "{isa:?} d={d} {what} [{i}]: {} vs {}",
                        got[i],
                        want[i]
                    );
                }
            }
        }
    }
}

#[test]
fn hadamard_is_its_own_inverse_and_keeps_dot_products() {
    let mut r = rng(7);
    for d in POW2 {
        for isa in isas() {
            let x = normal_vec(&mut r, d, 3.0);
            let y = normal_vec(&mut r, d, 0.5);
            let (mut hx, mut hy) = (x.clone(), y.clone());
            hadamard_rows(isa, d, &mut hx);
            hadamard_rows(isa, d, &mut hy);
            // <Hx, Hy> = <x, y>: scores of rotated queries against rotated keys.
            let (want, cond) = dot64(x.iter().copied(), &y);
            let (got, _) = dot64(hx.iter().copied(), &hy);
            // Each rotated entry is within its row's budget of exact: the dot moves by at
            // most that budget times the other row's L1 norm, plus its own rounding.
            let l1 = |v: &[f32]| v.iter().map(|a| f64::from(a.abs())).sum::<f64>();
            let tol = fwht_budget(&x) * l1(&hy) + fwht_budget(&y) * l1(&hx) + 1e-6 * cond;
            assert!((got - want).abs() <= tol, "{isa:?} d={d}: {got} vs {want}");
            // H H x = x.
            let mut back = hx.clone();
            hadamard_rows(isa, d, &mut back);
            let tol = 2.0 * fwht_budget(&x);
            for i in 0..d {
                let err = (f64::from(back[i]) - f64::from(x[i])).abs();
                assert!(err <= tol, "{isa:?} d={d} [{i}]: {} vs {}", back[i], x[i]);
            }
        }
    }
}

#[test]
#[should_panic(expected = "not a power of two")]
fn hadamard_refuses_a_row_length_not_a_power_of_two() {
    let mut x = vec![1.0f32; 96];
    hadamard_rows(bitnet_kernels::Isa::Scalar, 96, &mut x);
}

/// `n` B1 key rows of `d` values (encoded from `vals`), `pad` bytes past each row, the
/// first row `offset` bytes into the buffer.
fn b1_cache(vals: &[f32], d: usize, pad: usize, offset: usize) -> (Vec<u8>, usize) {
    let rb = KvQuant::B1.row_bytes(d).unwrap();
    let n = vals.len() / d;
    let mut rows = vec![0u8; n * rb];
    kv_quantize(KvQuant::B1, d, vals, &mut rows);
    let stride = rb + pad;
    let mut buf = vec![0xa5u8; offset + n * stride];
    for p in 0..n {
        buf[offset + p * stride..][..rb].copy_from_slice(&rows[p * rb..][..rb]);
    }
    (buf, stride)
}

#[test]
fn b1_xnor_reference_is_the_dot_of_the_sign_rows() {
    let mut r = rng(11);
    for d in [32, 96, 128, 160] {
        let nb = d / QK_KV;
        let (n_q, n_pos) = (3, 20);
        let q = normal_vec(&mut r, n_q * d, 2.0);
        let kv = normal_vec(&mut r, n_pos * d, 1.0);
        let (k, stride) = b1_cache(&kv, d, 0, 0);
        let (mut bits, mut qs) = (vec![0u32; n_q * nb], vec![0.0f32; n_q * nb]);
        b1_sign_query(&q, &mut bits, &mut qs);
        let mut out = vec![0.0f32; n_q * n_pos];
        let scale = 0.125f64;
        scalar_kv::attn_scores_b1_xnor(&bits, &qs, n_q, &k, stride, n_pos, scale as f32, &mut out);
        for h in 0..n_q {
            // The query's sign row: ±(mean |q| of its block), signs as the keys' (>= 0 is +).
            let qh = &q[h * d..][..d];
            let qdec: Vec<f32> = qh
                .chunks_exact(QK_KV)
                .flat_map(|b| {
                    let m = b.iter().map(|v| v.abs()).sum::<f32>() / QK_KV as f32;
                    b.iter().map(move |&v| if v >= 0.0 { m } else { -m })
                })
                .collect();
            for p in 0..n_pos {
                let mut kdec = vec![0.0f32; d];
                kv_dequantize(KvQuant::B1, &k[p * stride..][..stride], &mut kdec);
                let (want, cond) = dot64(qdec.iter().copied(), &kdec);
                assert_close(
                    out[h * n_pos + p],
                    scale * want,
                    1e-5,
                    1e-5 * scale * cond,
                    &format!("d={d} h={h} p={p}"),
                );
            }
        }
    }
}

#[test]
fn b1_xnor_equal_and_opposite_signs_score_plus_and_minus_the_scales() {
    let d = 96; // three blocks: an odd count
    let q = vec![0.5f32; d];
    let keys: Vec<f32> = (0..2 * d).map(|i| if i < d { 2.0 } else { -2.0 }).collect();
    let (k, stride) = b1_cache(&keys, d, 0, 0);
    let (mut bits, mut qs) = (vec![0u32; 3], vec![0.0f32; 3]);
    b1_sign_query(&q, &mut bits, &mut qs);
    assert_eq!(bits, [u32::MAX; 3]);
    assert_eq!(qs, [0.5; 3]);
    for isa in isas() {
        let mut out = [0.0f32; 2];
        attn_scores_b1_xnor(isa, &bits, &qs, 1, &k, stride, 2, 1.0, &mut out);
        // 3 blocks x 32 agreeing (or disagreeing) signs x 0.5 x 2.
        assert_eq!(out, [96.0, -96.0], "{isa:?}");
    }
}

#[test]
fn b1_xnor_simd_matches_scalar_bit_for_bit() {
    let mut r = rng(23);
    for d in [32, 64, 96, 128, 160, 256, 1024] {
        let nb = d / QK_KV;
        for n_q in [1, 2, 3, 4, 5, 8, 9, 16] {
            for n_pos in [1, 7, 8, 9, 16, 17, 63, 100] {
                for case in ["random", "zeros", "equal", "opposite", "huge", "sparse"] {
                    let (q, kv) = match case {
                        "random" => (
                            normal_vec(&mut r, n_q * d, 1.0),
                            normal_vec(&mut r, n_pos * d, 1.0),
                        ),
                        "zeros" => (vec![0.0; n_q * d], vec![0.0; n_pos * d]),
                        "equal" => (vec![1.5; n_q * d], vec![0.25; n_pos * d]),
                        "opposite" => (vec![-1.5; n_q * d], vec![0.25; n_pos * d]),
                        "huge" => (
                            normal_vec(&mut r, n_q * d, 1e4),
                            normal_vec(&mut r, n_pos * d, 3e4),
                        ),
                        _ => {
                            // Mostly zero, a few signs of either kind: zero reads as +.
                            let mut f = |n: usize| -> Vec<f32> {
                                (0..n)
                                    .map(|_| match r.random_range(0..8) {
                                        0 => -1.0,
                                        1 => 3.0,
                                        _ => 0.0,
                                    })
                                    .collect()
                            };
                            (f(n_q * d), f(n_pos * d))
                        }
                    };
                    let (mut bits, mut qs) = (vec![0u32; n_q * nb], vec![0.0f32; n_q * nb]);
                    b1_sign_query(&q, &mut bits, &mut qs);
                    let pad = [0, 1, 5][n_pos % 3];
                    let offset = n_q % 3; // a byte-misaligned cache
                    let (buf, stride) = b1_cache(&kv, d, pad, offset);
                    let k = &buf[offset..];
                    let scale = 1.0 / (d as f32).sqrt();
                    let mut want = vec![0.0f32; n_q * n_pos];
                    scalar_kv::attn_scores_b1_xnor(
                        &bits, &qs, n_q, k, stride, n_pos, scale, &mut want,
                    );
                    for isa in isas() {
                        let mut got = vec![f32::NAN; n_q * n_pos];
                        attn_scores_b1_xnor(
                            isa, &bits, &qs, n_q, k, stride, n_pos, scale, &mut got,
                        );
                        for i in 0..got.len() {
                            assert_eq!(
                                got[i].to_bits(),
                                want[i].to_bits(),
                                "{isa:?} d={d} n_q={n_q} n_pos={n_pos} {case} [{i}]: {} vs {}",
                                got[i],
                                want[i]
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn b1_xnor_long_runs_match_scalar() {
    // 4,096 positions (the longest context the commands default to) of a 2B-4T head group.
    let mut r = rng(5);
    let (d, n_q, n_pos) = (128, 4, 4096);
    let nb = d / QK_KV;
    let q = normal_vec(&mut r, n_q * d, 1.0);
    let kv = normal_vec(&mut r, n_pos * d, 1.0);
    let (buf, _) = b1_cache(&kv, d, 0, 0);
    // Rows of 5 KV heads per position: the stride is 5 rows.
    let rb = B1_BLOCK_BYTES * nb;
    let stride = 5 * rb;
    let mut k = vec![0u8; n_pos * stride];
    for p in 0..n_pos {
        k[p * stride + 2 * rb..][..rb].copy_from_slice(&buf[p * rb..][..rb]);
    }
    let k = &k[2 * rb..];
    let (mut bits, mut qs) = (vec![0u32; n_q * nb], vec![0.0f32; n_q * nb]);
    b1_sign_query(&q, &mut bits, &mut qs);
    let mut want = vec![0.0f32; n_q * n_pos];
    scalar_kv::attn_scores_b1_xnor(&bits, &qs, n_q, k, stride, n_pos, 0.1, &mut want);
    assert!(want.iter().any(|&s| s != 0.0));
    for isa in isas() {
        let mut got = vec![0.0f32; n_q * n_pos];
        attn_scores_b1_xnor(isa, &bits, &qs, n_q, k, stride, n_pos, 0.1, &mut got);
        assert_eq!(got, want, "{isa:?}");
    }
}
