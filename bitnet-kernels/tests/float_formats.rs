//! Weight-row formats: hand-built blocks decode to the values ggml defines, Q6_K's element
//! order matches a transcription of ggml's `dequantize_row_q6_K` loop, and every reference
//! encoder round-trips through `dequantize_row` within its named error budget.
#![allow(clippy::needless_range_loop)] // index loops read closer to the math here

mod float_util;

use bitnet_kernels::float::formats::{
    Q4_0_RMSE_BUDGET, Q6K_RMSE_BUDGET, Q8_0_RMSE_BUDGET, q6k_position,
};
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;

fn f16_bytes(x: f32) -> [u8; 2] {
    f32_to_f16(x).to_le_bytes()
}

#[test]
fn q8_0_block_decodes_as_d_times_q() {
    let mut b = vec![0u8; 2 * Q8_0_BLOCK_BYTES];
    b[..2].copy_from_slice(&f16_bytes(0.5));
    b[34..36].copy_from_slice(&f16_bytes(-0.25));
    for j in 0..32 {
        b[2 + j] = (j as i8 - 16) as u8;
        b[36 + j] = if j == 0 { 0x80 } else { 127 };
    }
    let mut out = vec![0.0f32; 64];
    dequantize_row(RowFormat::Q8_0, &b, &mut out);
    for j in 0..32 {
        assert_eq!(out[j], 0.5 * (j as f32 - 16.0));
    }
    assert_eq!(out[32], -0.25 * -128.0);
    assert_eq!(out[33], -0.25 * 127.0);
}

#[test]
fn q4_0_block_low_nibbles_first_half_high_nibbles_second() {
    let mut b = vec![0u8; Q4_0_BLOCK_BYTES];
    b[..2].copy_from_slice(&f16_bytes(2.0));
    for j in 0..16 {
        b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
    }
    let mut out = vec![0.0f32; 32];
    dequantize_row(RowFormat::Q4_0, &b, &mut out);
    for j in 0..16 {
        assert_eq!(out[j], (j as f32 - 8.0) * 2.0, "element {j}");
        assert_eq!(out[j + 16], (7.0 - j as f32) * 2.0, "element {}", j + 16);
    }
}

/// ggml's `dequantize_row_q6_K`, transcribed loop for loop: two halves of 128, each four
/// groups of 32 read from `ql[l]`, `ql[l + 32]` (low/high nibbles) and `qh[l]` (2 bits each).
fn ggml_q6k_block(b: &[u8], y: &mut [f32]) {
    let d = f16_to_f32(u16::from_le_bytes([b[208], b[209]]));
    for n in 0..2 {
        let ql = &b[64 * n..];
        let qh = &b[128 + 32 * n..];
        let sc = |i: usize| f32::from(b[192 + 8 * n + i] as i8);
        let y = &mut y[128 * n..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0xf) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc(is) * q1 as f32;
            y[l + 32] = d * sc(is + 2) * q2 as f32;
            y[l + 64] = d * sc(is + 4) * q3 as f32;
            y[l + 96] = d * sc(is + 6) * q4 as f32;
        }
    }
}

#[test]
fn q6k_matches_ggml_element_order() {
    let mut r = rng(21);
    for _ in 0..50 {
        let mut b: Vec<u8> = (0..2 * Q6K_BLOCK_BYTES).map(|_| r.random()).collect();
        for blk in b.chunks_exact_mut(Q6K_BLOCK_BYTES) {
            blk[208..].copy_from_slice(&f16_bytes(r.random_range(-0.01..0.01)));
        }
        let mut got = vec![0.0f32; 512];
        dequantize_row(RowFormat::Q6K, &b, &mut got);
        let mut want = vec![0.0f32; 512];
        ggml_q6k_block(&b[..210], &mut want[..256]);
        ggml_q6k_block(&b[210..], &mut want[256..]);
        assert_eq!(bits(&got), bits(&want));
    }
    // The position map agrees with the element each bit decodes to.
    let mut b = vec![0u8; Q6K_BLOCK_BYTES];
    b[208..].copy_from_slice(&f16_bytes(1.0));
    b[192..208].fill(1);
    for e in [0usize, 15, 16, 31, 32, 63, 64, 100, 127, 128, 200, 255] {
        let mut blk = b.clone();
        let (qli, high, qhi, shift) = q6k_position(e);
        blk[qli] |= if high { 0x50 } else { 0x05 };
        blk[128 + qhi] |= 2 << shift;
        let mut y = vec![0.0f32; 256];
        ggml_q6k_block(&blk, &mut y);
        for (i, &v) in y.iter().enumerate() {
            let want = if i == e { (0x25 - 32) as f32 } else { -32.0 };
            assert_eq!(v, want, "bit of element {e} decoded at {i}");
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Relative RMS error of encoding `x` in `fmt` and decoding it again.
fn round_trip(fmt: RowFormat, x: &[f32]) -> (f64, Vec<u8>, Vec<f32>) {
    let mut q = vec![0u8; fmt.row_bytes(x.len()).unwrap()];
    match fmt {
        RowFormat::Q8_0 => quantize_row_q8_0(x, &mut q),
        RowFormat::Q4_0 => quantize_row_q4_0(x, &mut q),
        RowFormat::Q6K => quantize_row_q6_k(x, &mut q),
        _ => unreachable!(),
    }
    let mut y = vec![0.0f32; x.len()];
    dequantize_row(fmt, &q, &mut y);
    let err: f64 = x
        .iter()
        .zip(&y)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let norm: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    ((err / norm.max(f64::MIN_POSITIVE)).sqrt(), q, y)
}

#[test]
fn encoders_round_trip_within_budget() {
    let mut r = rng(22);
    let cases = [
        (RowFormat::Q8_0, Q8_0_RMSE_BUDGET),
        (RowFormat::Q4_0, Q4_0_RMSE_BUDGET),
        (RowFormat::Q6K, Q6K_RMSE_BUDGET),
    ];
    for (fmt, budget) in cases {
        let mut worst = 0.0f64;
        for (n, scale) in [(256, 1.0f32), (2560, 0.02), (512, 300.0), (4096, 1e-3)] {
            let mut x = normal_vec(&mut r, n, scale);
            if n == 512 {
                x[7] = 40.0 * scale; // one outlier
            }
            let (rel, _, _) = round_trip(fmt, &x);
            worst = worst.max(rel);
            assert!(
                rel <= f64::from(budget),
                "{fmt:?} n={n} scale={scale}: rel RMSE {rel} > {budget}"
            );
        }
        eprintln!("{fmt:?}: worst relative RMSE {worst:.5} (budget {budget})");
        // Zeros encode to zeros, and a constant block exactly when every scale involved is
        // representable (-127/64 gives d = 1/64, 127/512, and 127/2048 with sc = -128).
        let (_, _, y) = round_trip(fmt, &vec![0.0; 256]);
        assert!(y.iter().all(|&v| v == 0.0), "{fmt:?}: zeros");
        let (rel, _, _) = round_trip(fmt, &vec![-127.0 / 64.0; 256]);
        assert_eq!(rel, 0.0, "{fmt:?}: constant block");
    }
}

#[test]
fn q8_0_encoder_bounds_each_element_and_never_writes_minus_128() {
    let mut r = rng(23);
    let x = normal_vec(&mut r, 32 * 200, 5.0);
    let (_, q, y) = round_trip(RowFormat::Q8_0, &x);
    for (b, blk) in q.chunks_exact(Q8_0_BLOCK_BYTES).enumerate() {
        let d = f16_to_f32(u16::from_le_bytes([blk[0], blk[1]]));
        let amax = x[32 * b..32 * b + 32]
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        // d is amax / 127 rounded to f16.
        assert!((d - amax / 127.0).abs() <= amax / 127.0 * 1e-3, "block {b}");
        assert!(blk[2..].iter().all(|&v| v as i8 != -128), "block {b}");
        for j in 0..32 {
            let e = (x[32 * b + j] - y[32 * b + j]).abs();
            // Half a step, plus the f16 rounding of d times at most 127 steps.
            assert!(
                e <= 0.5 * d + 127.0 * d * 1e-3,
                "block {b} elem {j}: err {e}, d {d}"
            );
        }
    }
}

#[test]
fn q6k_and_q4_0_rows_feed_the_matvec() {
    // An encoded head row is read by matvec_f32 exactly as dequantize_row decodes it.
    let mut r = rng(24);
    for fmt in [RowFormat::Q4_0, RowFormat::Q6K, RowFormat::Q8_0] {
        let x = normal_vec(&mut r, 3 * 512, 1.0);
        let mut data = Vec::new();
        for row in x.chunks_exact(512) {
            let (_, q, _) = round_trip(fmt, row);
            data.extend(q);
        }
        let act = normal_vec(&mut r, 512, 1.0);
        for isa in isas() {
            let mut out = [0.0f32; 3];
            matvec_f32(isa, fmt, &data, 512, &act, 0..3, &mut out);
            for (i, o) in out.iter().enumerate() {
                let rb = fmt.row_bytes(512).unwrap();
                let mut w = vec![0.0f32; 512];
                dequantize_row(fmt, &data[i * rb..(i + 1) * rb], &mut w);
                let (want, cond) = dot64(w, &act);
                assert_close(
                    *o,
                    want,
                    0.0,
                    dot_budget(512, cond),
                    &format!("{isa} {fmt:?}"),
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "needs")]
fn dequantize_row_rejects_a_short_row() {
    let mut out = [0.0f32; 32];
    dequantize_row(RowFormat::Q8_0, &[0u8; 33], &mut out);
}

/// Shapes are checked by the safe API before any kernel touches memory, on every ISA.
#[test]
fn bad_shapes_panic_before_any_kernel_runs() {
    use std::panic::catch_unwind;
    for isa in isas() {
        let rb = RowFormat::F16.row_bytes(64).unwrap();
        let data = vec![0u8; 3 * rb];
        let x = vec![0.0f32; 64];
        // Row range past the data.
        let r = catch_unwind(|| {
            let mut out = vec![0.0f32; 4];
            matvec_f32(isa, RowFormat::F16, &data, 64, &x, 0..4, &mut out);
        });
        assert!(r.is_err(), "{isa}: rows past the data");
        // Row length not a whole number of Q8_0 blocks.
        let r = catch_unwind(|| {
            let mut out = vec![0.0f32; 1];
            matvec_q8_0_q8_0(isa, &data, 40, &data[..34], 0..1, &mut out);
        });
        assert!(r.is_err(), "{isa}: partial block");
        // A KV cache too short for n_pos positions.
        let r = catch_unwind(|| {
            let mut out = vec![0.0f32; 3];
            attn_scores_f16(isa, &x, &[0u16; 100], 64, 3, 1.0, &mut out);
        });
        assert!(r.is_err(), "{isa}: short cache");
        let r = catch_unwind(|| {
            let mut out = vec![0.0f32; 64];
            attn_weighted_sum_q8_0(isa, &[1.0; 2], &[0u8; 100], 68, 2, &mut out);
        });
        assert!(r.is_err(), "{isa}: short q8 cache");
        // RoPE past the table.
        let r = catch_unwind(|| {
            let t = RopeTable::new(8, 10000.0, 4);
            t.apply_neox(isa, &mut [0.0; 16], 8, 2, 4);
        });
        assert!(r.is_err(), "{isa}: position past the rope table");
    }
}

/// The reference re-quantization: decode the row to f32, encode that as Q8_0.
fn requant_reference(fmt: RowFormat, src: &[u8], n: usize) -> Vec<u8> {
    let mut x = vec![0.0f32; n];
    dequantize_row(fmt, src, &mut x);
    let mut q = vec![0u8; RowFormat::Q8_0.row_bytes(n).unwrap()];
    quantize_row_q8_0(&x, &mut q);
    q
}

#[test]
fn requantized_rows_match_the_reference_bytes() {
    // Every F16 bit pattern, in random blocks (so each block mixes magnitudes), then blocks
    // of one pattern each (all-equal, zeros, subnormals, infinities, NaNs), then normally
    // distributed rows in every format a head comes in.
    let mut r = rng(21);
    let mut all: Vec<u16> = (0..=u16::MAX).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, r.random_range(0..=i));
    }
    let finite: Vec<u16> = all
        .iter()
        .copied()
        .filter(|h| h & 0x7c00 != 0x7c00)
        .collect();
    let mut rows: Vec<Vec<u8>> = [&all, &finite]
        .iter()
        .map(|hs| {
            hs[..hs.len() / 32 * 32]
                .iter()
                .flat_map(|h| h.to_le_bytes())
                .collect()
        })
        .collect();
    for h in [
        0u16, 0x8000, 0x0001, 0x83ff, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
    ] {
        let mut row = vec![h; 64];
        row[5] = 0x3555;
        rows.push(
            [h; 32]
                .iter()
                .chain(&row)
                .flat_map(|h| h.to_le_bytes())
                .collect(),
        );
    }
    for isa in isas() {
        let mut scratch = Vec::new();
        for src in &rows {
            let n = src.len() / 2;
            let want = requant_reference(RowFormat::F16, src, n);
            let mut got = vec![0xAAu8; want.len()];
            requantize_row_q8_0(isa, RowFormat::F16, src, &mut got, &mut scratch);
            assert_eq!(got, want, "{isa}, row of {n}");
        }
        for fmt in RowFormat::ALL {
            let n = 512;
            let x = normal_vec(&mut r, n, 0.02);
            let mut src = vec![0u8; fmt.row_bytes(n).unwrap()];
            match fmt {
                RowFormat::F32 => {
                    for (b, v) in src.chunks_exact_mut(4).zip(&x) {
                        b.copy_from_slice(&v.to_le_bytes());
                    }
                }
                RowFormat::F16 | RowFormat::BF16 => {
                    let enc = if fmt == RowFormat::F16 {
                        f32_to_f16
                    } else {
                        f32_to_bf16
                    };
                    for (b, &v) in src.chunks_exact_mut(2).zip(&x) {
                        b.copy_from_slice(&enc(v).to_le_bytes());
                    }
                }
                RowFormat::Q8_0 => quantize_row_q8_0(&x, &mut src),
                RowFormat::Q4_0 => quantize_row_q4_0(&x, &mut src),
                RowFormat::Q6K => quantize_row_q6_k(&x, &mut src),
            }
            let want = requant_reference(fmt, &src, n);
            let mut got = vec![0u8; want.len()];
            requantize_row_q8_0(isa, fmt, &src, &mut got, &mut scratch);
            assert_eq!(got, want, "{isa}, {}", fmt.name());
        }
    }
}
