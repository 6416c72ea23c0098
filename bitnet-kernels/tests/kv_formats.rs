//! The quantized KV formats (q8_0, q8_r, fp8, q4_0, b1): the E4M3 conversion against the OCP
//! definition, the encoders' round-trip error within named budgets, and the attention kernels
//! of every kernel set against an f64 model of the decoded rows (random data, zeros, huge
//! values, one position, odd counts, several group sizes, misaligned caches, padded strides),
//! plus the weighted sums' block-by-block bit-exactness the paged cache relies on.
#![allow(clippy::needless_range_loop)]

mod float_util;

use bitnet_kernels::float::kv::{E4M3_MAX, e4m3_to_f32, f32_to_e4m3};
use bitnet_kernels::float::*;
use bitnet_kernels::scalar::kv::{Q4_0_WSUM_TILE, Q4_0_WSUM_WEIGHT_MAX, block_ints};
use float_util::*;

/// Q8R: each value is within half a step (`absmax / 127 / 2`) of its input.
const Q8R_ERR_STEPS: f64 = 0.5;
/// Q8_0: half a step (`absmax / 127 / 2`), plus the f16 rounding of the block scale times
/// the largest code (127 codes of half an f16 ulp of the scale; see [`f16_scale_err`]).
const Q8_0_ERR_STEPS: f64 = 0.5;
/// FP8 E4M3 (3 mantissa bits): within half an ulp, `|x| / 16`, plus `absmax / 1024` for the
/// subnormal step and the f16 rounding of the block scale (which may clip the largest value
/// by at most 2^-11 of it).
const FP8_ERR_REL: f64 = 1.0 / 16.0;
const FP8_ERR_ABSMAX: f64 = 1.0 / 1024.0;
/// Q4_0 (ggml's encoder): the value of largest magnitude maps to code -8, so values of the
/// other sign reach only +7 steps: within half a step (`absmax / 8 / 2`), or for those past
/// +7 steps `|x| - 7 steps` (at most one step); plus the f16 rounding of the scale times 8.
const Q4_0_ERR_STEPS: f64 = 0.5;
const Q4_0_TOP_CODE: f64 = 7.0;

/// How far an f16 scale `d` may be from the f32 one: half an ulp (2^-11 relative), or half
/// the subnormal step (2^-25) below f16's normal range.
fn f16_scale_err(d: f64) -> f64 {
    (d * 2f64.powi(-11)).max(2f64.powi(-25))
}

fn e4m3_reference(c: u8) -> f64 {
    let sign = if c & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((c >> 3) & 0x0f);
    let m = f64::from(c & 7);
    let mag = if e == 0 {
        m / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    };
    sign * mag
}

#[test]
fn e4m3_matches_the_ocp_definition() {
    for c in 0..=255u8 {
        if c & 0x7f == 0x7f {
            continue; // NaN codes: never written
        }
        let v = e4m3_to_f32(c);
        assert_eq!(f64::from(v), e4m3_reference(c), "decode {c:#04x}");
        // Every finite code round-trips (the sign of zero included).
        assert_eq!(f32_to_e4m3(v), c, "encode {v} ({c:#04x})");
    }
    assert_eq!(e4m3_to_f32(0x7e), E4M3_MAX);
    // Saturating, never a NaN code, NaN stored as 0.
    for (x, c) in [
        (1e30f32, 0x7e),
        (f32::INFINITY, 0x7e),
        (-500.0, 0xfe),
        (449.0, 0x7e),
        (f32::NAN, 0),
        (1e-30, 0),
        (-1e-30, 0x80),
    ] {
        assert_eq!(f32_to_e4m3(x), c, "encode {x}");
    }
    // Ties go to the even code; anything else to the nearest.
    let finite: Vec<(u8, f64)> = (0..0x7fu8).map(|c| (c, e4m3_reference(c))).collect();
    for w in finite.windows(2) {
        let ((c0, a), (c1, b)) = (w[0], w[1]);
        let mid = ((a + b) / 2.0) as f32;
        let even = if c0 % 2 == 0 { c0 } else { c1 };
        assert_eq!(f32_to_e4m3(mid), even, "tie between {a} and {b}");
        assert_eq!(f32_to_e4m3(-mid), even | 0x80, "tie between -{a} and -{b}");
        let below = f32::from_bits(mid.to_bits() - 1);
        let above = f32::from_bits(mid.to_bits() + 1);
        assert_eq!(f32_to_e4m3(below), c0, "just below the tie of {a} and {b}");
        assert_eq!(f32_to_e4m3(above), c1, "just above the tie of {a} and {b}");
    }
}

fn encode(fmt: KvQuant, d: usize, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let rb = fmt.row_bytes(d).unwrap();
    let mut enc = vec![0u8; x.len() / d * rb];
    kv_quantize(fmt, d, x, &mut enc);
    let mut dec = vec![0.0f32; x.len()];
    for (row, out) in enc.chunks_exact(rb).zip(dec.chunks_exact_mut(d)) {
        kv_dequantize(fmt, row, out);
    }
    (enc, dec)
}

/// The per-value error budget of `fmt` for a value `x` whose block (row for Q8R) has largest
/// magnitude `amax`.
fn value_budget(fmt: KvQuant, x: f64, amax: f64) -> f64 {
    let tiny = 1e-30;
    match fmt {
        KvQuant::Q8R => Q8R_ERR_STEPS * amax / 127.0 * (1.0 + 1e-6) + tiny,
        KvQuant::Fp8 => FP8_ERR_REL * x.abs() + FP8_ERR_ABSMAX * amax + tiny,
        KvQuant::Q8_0 => {
            let step = amax / 127.0;
            Q8_0_ERR_STEPS * step + 127.0 * f16_scale_err(step) + tiny
        }
        KvQuant::Q4_0 => {
            let step = amax / 8.0;
            let clipped = x.abs() - Q4_0_TOP_CODE * step;
            (Q4_0_ERR_STEPS * step).max(clipped) + 8.0 * f16_scale_err(step) + tiny
        }
        KvQuant::B1 => f64::INFINITY,
    }
}

/// The Q4_0 weighted sum's budget for its integer weights (output value `i` of one head): in
/// each tile of `Q4_0_WSUM_TILE` positions the weights `w_p s_p` (times the block's integers
/// `n_p - 8`) are rounded to multiples of `m / 127`, `m` the tile's largest, so each is at
/// most `m / 254` off (with slack for the f32 product).
fn q4_0_weight_rounding(w: &[f32], cache: &[u8], stride: usize, n_pos: usize, i: usize) -> f64 {
    let (b, j) = (i / QK_KV, i % QK_KV);
    let block = |p: usize| block_ints(KvQuant::Q4_0, &cache[p * stride..], b);
    let mut budget = 0.0;
    for t0 in (0..n_pos).step_by(Q4_0_WSUM_TILE) {
        let tile = t0..(t0 + Q4_0_WSUM_TILE).min(n_pos);
        let m = tile
            .clone()
            .map(|p| (f64::from(w[p]) * f64::from(block(p).0)).abs())
            .fold(0.0, f64::max);
        for p in tile {
            let n = f64::from(block(p).1[j]);
            budget += m / (2.0 * f64::from(Q4_0_WSUM_WEIGHT_MAX)) * n.abs();
        }
    }
    budget * 1.001
}

fn test_rows(r: &mut rand::rngs::StdRng, d: usize) -> Vec<Vec<f32>> {
    let mut rows = vec![
        vec![0.0; d],
        normal_vec(r, d, 1.0),
        normal_vec(r, d, 1e-3),
        normal_vec(r, d, 1e5),
        (0..d)
            .map(|i| if i % 7 == 0 { 40.0 } else { 0.01 })
            .collect(),
        (0..d).map(|i| -(i as f32)).collect(),
    ];
    let mut spiky = normal_vec(r, d, 0.5);
    spiky[d / 3] = 300.0;
    rows.push(spiky);
    rows
}

#[test]
fn encoders_round_trip_within_budget() {
    let mut r = rng(40);
    for fmt in KvQuant::ALL {
        for d in [32usize, 64, 128] {
            for x in test_rows(&mut r, d) {
                let (enc, dec) = encode(fmt, d, &x);
                assert!(dec.iter().all(|v| v.is_finite()), "{fmt:?}: finite output");
                let row_amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (b, (xb, yb)) in x.chunks(32).zip(dec.chunks(32)).enumerate() {
                    let amax = if fmt == KvQuant::Q8R {
                        row_amax
                    } else {
                        xb.iter().fold(0.0f32, |m, v| m.max(v.abs()))
                    };
                    if fmt == KvQuant::B1 {
                        // Signs kept, magnitude the block's mean |x| (as f16).
                        let mean = xb.iter().map(|v| v.abs()).sum::<f32>() / 32.0;
                        let s = f16_to_f32(f32_to_f16(mean));
                        assert_eq!(&enc[6 * b..6 * b + 2], &f32_to_f16(mean).to_le_bytes());
                        for (&xv, &yv) in xb.iter().zip(yb) {
                            assert_eq!(yv, if xv >= 0.0 { s } else { -s }, "b1 d={d}");
                        }
                        continue;
                    }
                    for (&xv, &yv) in xb.iter().zip(yb) {
                        let err = (f64::from(xv) - f64::from(yv)).abs();
                        let tol = value_budget(fmt, f64::from(xv), f64::from(amax));
                        assert!(err <= tol, "{fmt:?} d={d}: {xv} -> {yv}, err {err} > {tol}");
                    }
                }
            }
        }
    }
}

#[test]
fn encoders_saturate_instead_of_overflowing() {
    let d = 32;
    let mut x = vec![1.0f32; d];
    x[3] = 1e30;
    x[5] = -f32::MAX;
    for fmt in KvQuant::ALL {
        let (_, dec) = encode(fmt, d, &x);
        assert!(dec.iter().all(|v| v.is_finite()), "{fmt:?}: {dec:?}");
        assert!(
            dec[3] >= 0.0 && dec[5] < 0.0,
            "{fmt:?}: signs of the huge values"
        );
    }
}

/// Scores and weighted sums of every kernel set against the f64 model of the decoded rows.
#[test]
fn attention_kernels_match_the_f64_reference() {
    let mut r = rng(41);
    for fmt in KvQuant::ALL {
        for (d, extra) in [(32usize, 0usize), (64, 7), (128, 0), (96, 3)] {
            let rb = fmt.row_bytes(d).unwrap();
            let stride = rb + extra;
            for n_pos in [1usize, 2, 5, 17, 33] {
                let rows: Vec<Vec<f32>> = (0..n_pos)
                    .map(|p| match p % 6 {
                        0 if n_pos > 1 => vec![0.0; d],
                        3 => normal_vec(&mut r, d, 1e4),
                        _ => normal_vec(&mut r, d, 2.0),
                    })
                    .collect();
                let mut cache = vec![0u8; (n_pos - 1) * stride + rb];
                let mut exact = vec![0.0f32; n_pos * d];
                for (p, x) in rows.iter().enumerate() {
                    let row = &mut cache[p * stride..][..rb];
                    kv_quantize(fmt, d, x, row);
                    kv_dequantize(fmt, row, &mut exact[p * d..][..d]);
                }
                let (cbuf, cr) = misaligned(&cache);
                let cache = &cbuf[cr];
                for n_q in [1usize, 2, 3, 4, 8] {
                    let q = normal_vec(&mut r, n_q * d, 1.0);
                    let w = normal_vec(&mut r, n_q * n_pos, 0.3);
                    let start = normal_vec(&mut r, n_q * d, 1.0);
                    for isa in isas() {
                        let what = format!("{isa} {} d={d} n_pos={n_pos} n_q={n_q}", fmt.name());
                        let mut s = vec![f32::NAN; n_q * n_pos];
                        attn_scores_kv(isa, fmt, &q, n_q, cache, stride, n_pos, 0.25, &mut s);
                        let mut o = start.clone();
                        attn_weighted_sum_kv(isa, fmt, &w, n_q, cache, stride, n_pos, &mut o);
                        for h in 0..n_q {
                            for p in 0..n_pos {
                                let kp = exact[p * d..][..d].iter().copied();
                                let (want, cond) = dot64(kp, &q[h * d..][..d]);
                                let tol = 0.25 * dot_budget(d, cond);
                                let got = s[h * n_pos + p];
                                assert_close(
                                    got,
                                    0.25 * want,
                                    0.0,
                                    tol,
                                    &format!("{what} h={h} p={p}"),
                                );
                            }
                            for i in 0..d {
                                let col: Vec<f32> = (0..n_pos).map(|p| exact[p * d + i]).collect();
                                let wh = &w[h * n_pos..][..n_pos];
                                let (want, cond) = dot64(wh.iter().copied(), &col);
                                let st = f64::from(start[h * d + i]);
                                let mut tol = dot_budget(n_pos + 1, cond + st.abs());
                                if fmt == KvQuant::Q4_0 {
                                    tol += q4_0_weight_rounding(wh, cache, stride, n_pos, i);
                                }
                                let got = o[h * d + i];
                                assert_close(
                                    got,
                                    st + want,
                                    0.0,
                                    tol,
                                    &format!("{what} h={h} i={i}"),
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The weighted sums accumulate onto `out`: positions split into blocks give the bits of one
/// call (the engine walks a paged cache block by block).
#[test]
fn weighted_sums_accumulate_block_by_block_bit_exactly() {
    let mut r = rng(42);
    // Past two of the SIMD weighted sum's 64-position tiles.
    let (d, n_pos) = (64usize, 150usize);
    for fmt in KvQuant::ALL {
        let rb = fmt.row_bytes(d).unwrap();
        let x = normal_vec(&mut r, n_pos * d, 2.0);
        let (cache, _) = encode(fmt, d, &x);
        for n_q in [1usize, 2, 3, 4] {
            let w = normal_vec(&mut r, n_q * n_pos, 0.3);
            let start = normal_vec(&mut r, n_q * d, 1.0);
            for isa in isas() {
                let mut whole = start.clone();
                attn_weighted_sum_kv(isa, fmt, &w, n_q, &cache, rb, n_pos, &mut whole);
                // Q4_0's integer weights are tiled from a call's first position: its calls
                // give one call's bits when they start at multiples of the tile (as the
                // engine's blocks of 16 tokens or more do).
                let splits: &[usize] = if fmt == KvQuant::Q4_0 {
                    &[Q4_0_WSUM_TILE, 2 * Q4_0_WSUM_TILE, 4 * Q4_0_WSUM_TILE]
                } else {
                    &[1, 5, 16, 63, 100]
                };
                for &split in splits {
                    let mut parts = start.clone();
                    for b0 in (0..n_pos).step_by(split) {
                        let n = split.min(n_pos - b0);
                        let wb: Vec<f32> = (0..n_q)
                            .flat_map(|h| w[h * n_pos + b0..][..n].iter().copied())
                            .collect();
                        let cb = &cache[b0 * rb..];
                        attn_weighted_sum_kv(isa, fmt, &wb, n_q, cb, rb, n, &mut parts);
                    }
                    let what = format!("{isa} {} n_q={n_q} split={split}", fmt.name());
                    assert_eq!(bits(&whole), bits(&parts), "{what}");
                }
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn row_sizes() {
    assert_eq!(KvQuant::Q8_0.row_bytes(128), Some(136));
    assert_eq!(KvQuant::Q8R.row_bytes(128), Some(132));
    assert_eq!(KvQuant::Fp8.row_bytes(128), Some(136));
    assert_eq!(KvQuant::Q4_0.row_bytes(128), Some(72));
    assert_eq!(KvQuant::B1.row_bytes(128), Some(24));
    for fmt in KvQuant::ALL {
        assert_eq!(fmt.row_bytes(0), None);
        assert_eq!(fmt.row_bytes(48), None);
    }
}

/// A SIMD kernel and the scalar reference are each within the dot budget of the exact value,
/// so they are within this many budgets of each other.
const SIMD_VS_SCALAR_BUDGETS: f64 = 2.0;

/// Every SIMD kernel set against the scalar reference kernels directly, on random lengths and
/// group sizes (including ones with no dedicated group kernel), over a misaligned cache.
#[test]
fn simd_kernels_match_the_scalar_reference() {
    use bitnet_kernels::Isa;
    let mut r = rng(43);
    for fmt in KvQuant::ALL {
        for (d, extra) in [(32usize, 1usize), (128, 0), (160, 5)] {
            let rb = fmt.row_bytes(d).unwrap();
            let stride = rb + extra;
            for n_pos in [1usize, 3, 31, 64, 129] {
                let x = normal_vec(&mut r, n_pos * d, 3.0);
                let mut cache = vec![0u8; n_pos * stride];
                for p in 0..n_pos {
                    kv_quantize(fmt, d, &x[p * d..][..d], &mut cache[p * stride..][..rb]);
                }
                let (cbuf, cr) = misaligned(&cache);
                let cache = &cbuf[cr];
                let mut exact = vec![0.0f32; n_pos * d];
                for p in 0..n_pos {
                    kv_dequantize(fmt, &cache[p * stride..][..rb], &mut exact[p * d..][..d]);
                }
                for n_q in [1usize, 2, 4, 5, 8] {
                    let q = normal_vec(&mut r, n_q * d, 1.0);
                    let w = normal_vec(&mut r, n_q * n_pos, 0.1);
                    let (mut s0, mut o0) = (vec![0.0; n_q * n_pos], vec![0.5; n_q * d]);
                    attn_scores_kv(
                        Isa::Scalar,
                        fmt,
                        &q,
                        n_q,
                        cache,
                        stride,
                        n_pos,
                        0.1,
                        &mut s0,
                    );
                    attn_weighted_sum_kv(Isa::Scalar, fmt, &w, n_q, cache, stride, n_pos, &mut o0);
                    for isa in isas().into_iter().filter(|&i| i != Isa::Scalar) {
                        let what = format!("{isa} {} d={d} n_pos={n_pos} n_q={n_q}", fmt.name());
                        let (mut s, mut o) = (vec![0.0; n_q * n_pos], vec![0.5; n_q * d]);
                        attn_scores_kv(isa, fmt, &q, n_q, cache, stride, n_pos, 0.1, &mut s);
                        attn_weighted_sum_kv(isa, fmt, &w, n_q, cache, stride, n_pos, &mut o);
                        for h in 0..n_q {
                            for p in 0..n_pos {
                                let (_, cond) =
                                    dot64(exact[p * d..][..d].iter().copied(), &q[h * d..][..d]);
                                let tol = SIMD_VS_SCALAR_BUDGETS * 0.1 * dot_budget(d, cond);
                                let i = h * n_pos + p;
                                assert_close(s[i], f64::from(s0[i]), 0.0, tol, &what);
                            }
                            for i in 0..d {
                                let col: Vec<f32> = (0..n_pos).map(|p| exact[p * d + i]).collect();
                                let (_, cond) =
                                    dot64(w[h * n_pos..][..n_pos].iter().copied(), &col);
                                let tol =
                                    SIMD_VS_SCALAR_BUDGETS * dot_budget(n_pos + 1, cond + 0.5);
                                let j = h * d + i;
                                assert_close(o[j], f64::from(o0[j]), 0.0, tol, &what);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The Q4_0 integer-weighted sum of every kernel set gives its scalar reference's bits:
/// partial tiles, every group size (3: one head at a time), tiles whose weights are all 0
/// (they add nothing), and a NaN or infinite weight (its tile's outputs become NaN).
#[test]
fn q4_0_integer_weighted_sum_matches_its_reference_bit_for_bit() {
    use bitnet_kernels::Isa;
    let mut r = rng(44);
    let d = 64;
    let fmt = KvQuant::Q4_0;
    let rb = fmt.row_bytes(d).unwrap();
    for n_pos in [1usize, 15, 16, 17, 40] {
        let x = normal_vec(&mut r, n_pos * d, 2.0);
        let (cache, _) = encode(fmt, d, &x);
        for n_q in [1usize, 2, 3, 4, 8] {
            let mut w = normal_vec(&mut r, n_q * n_pos, 0.3);
            if n_pos > 16 {
                // Head 0's first tile all zero.
                w[..16].fill(0.0);
            }
            for poison in [None, Some(f32::NAN), Some(f32::INFINITY)] {
                let mut w = w.clone();
                if let Some(v) = poison {
                    w[(n_q - 1) * n_pos + n_pos / 2] = v;
                }
                let start = normal_vec(&mut r, n_q * d, 1.0);
                let mut want = start.clone();
                attn_weighted_sum_kv(Isa::Scalar, fmt, &w, n_q, &cache, rb, n_pos, &mut want);
                if poison.is_some() {
                    assert!(want[(n_q - 1) * d..].iter().all(|v| v.is_nan()));
                }
                if n_pos > 16 && poison.is_none() {
                    // The zero tile leaves head 0 as the second tile alone makes it.
                    let mut tail = start.clone();
                    let wt: Vec<f32> = (0..n_q)
                        .flat_map(|h| w[h * n_pos + 16..(h + 1) * n_pos].iter().copied())
                        .collect();
                    attn_weighted_sum_kv(
                        Isa::Scalar,
                        fmt,
                        &wt,
                        n_q,
                        &cache[16 * rb..],
                        rb,
                        n_pos - 16,
                        &mut tail,
                    );
                    assert_eq!(
                        bits(&want[..d]),
                        bits(&tail[..d]),
                        "zero tile n_pos={n_pos}"
                    );
                }
                for isa in isas() {
                    let mut got = start.clone();
                    attn_weighted_sum_kv(isa, fmt, &w, n_q, &cache, rb, n_pos, &mut got);
                    assert_eq!(
                        bits(&got),
                        bits(&want),
                        "{isa} n_pos={n_pos} n_q={n_q} poison={poison:?}"
                    );
                }
            }
        }
    }
}

/// Rows too far apart for the i32 offsets of the SIMD kernels' gathers (the Q4_0 weighted
/// sum gathers a tile's block scales, the B1 XNOR scores eight rows): the token declines and
/// the safe API runs the reference, so every kernel set still gives the reference's bits.
/// One position keeps the cache one row long however far apart rows are.
#[test]
fn rows_past_the_gathers_reach_take_the_reference() {
    use bitnet_kernels::Isa;
    let mut r = rng(45);
    let (d, n_pos) = (64, 1);
    // Past both reaches: `i32::MAX / 15` (Q4_0 tiles of 16) and `i32::MAX / 8` (B1).
    let far = i32::MAX as usize / 4;
    let (q4, _) = encode(KvQuant::Q4_0, d, &normal_vec(&mut r, d, 2.0));
    let (b1, _) = encode(KvQuant::B1, d, &normal_vec(&mut r, d, 2.0));
    for n_q in [1usize, 3, 4] {
        let w = normal_vec(&mut r, n_q * n_pos, 0.3);
        let start = normal_vec(&mut r, n_q * d, 1.0);
        let mut want_sum = start.clone();
        let q4_0 = KvQuant::Q4_0;
        attn_weighted_sum_kv(Isa::Scalar, q4_0, &w, n_q, &q4, far, n_pos, &mut want_sum);
        let q = normal_vec(&mut r, n_q * d, 1.0);
        let (mut qbits, mut qscales) = (vec![0u32; n_q * d / 32], vec![0.0f32; n_q * d / 32]);
        b1_sign_query(&q, &mut qbits, &mut qscales);
        let mut want_scores = vec![0.0f32; n_q * n_pos];
        attn_scores_b1_xnor(
            Isa::Scalar,
            &qbits,
            &qscales,
            n_q,
            &b1,
            far,
            n_pos,
            0.1,
            &mut want_scores,
        );
        for isa in isas() {
            let mut sum = start.clone();
            attn_weighted_sum_kv(isa, q4_0, &w, n_q, &q4, far, n_pos, &mut sum);
            assert_eq!(bits(&sum), bits(&want_sum), "{isa} q4_0 n_q={n_q}");
            let mut scores = vec![0.0f32; n_q * n_pos];
            attn_scores_b1_xnor(
                isa,
                &qbits,
                &qscales,
                n_q,
                &b1,
                far,
                n_pos,
                0.1,
                &mut scores,
            );
            assert_eq!(bits(&scores), bits(&want_scores), "{isa} b1 n_q={n_q}");
        }
    }
}
