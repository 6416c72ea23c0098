//! Every float kernel on every kernel set this CPU runs, against the scalar reference and an
//! f64 model of the operation: random data (seeded), lengths with all kinds of tails,
//! misaligned slices, zeros, huge and negative values. Exact operations must match the
//! scalar kernel bit for bit; reductions must stay inside the named budgets.
#![allow(clippy::needless_range_loop)] // index loops read closer to the math here

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;

#[test]
fn dot_f32_within_budget_on_every_isa() {
    let mut r = rng(1);
    for n in lengths() {
        let a = normal_vec(&mut r, n, 3.0);
        let b = normal_vec(&mut r, n, 0.5);
        let (want, cond) = dot64(a.iter().copied(), &b);
        let (abuf, ar) = misaligned(&a);
        for isa in isas() {
            let got = dot_f32(isa, &abuf[ar.clone()], &b);
            assert_close(
                got,
                want,
                0.0,
                dot_budget(n, cond),
                &format!("{isa} dot n={n}"),
            );
        }
    }
    for isa in isas() {
        assert_eq!(dot_f32(isa, &[], &[]), 0.0);
        assert_eq!(dot_f32(isa, &[0.0; 100], &[1e30; 100]), 0.0);
        let big = vec![1e18f32; 64];
        let got = dot_f32(isa, &big, &big);
        assert_close(got, 64e36, 1e-6, 0.0, &format!("{isa}: huge but finite"));
    }
}

/// Row lengths valid for `fmt`, with tails for the 16/32-wide loops.
fn row_lens(fmt: RowFormat) -> Vec<usize> {
    match fmt.block_len() {
        1 => vec![
            1, 3, 15, 16, 17, 31, 32, 33, 47, 64, 100, 255, 256, 300, 2560,
        ],
        32 => vec![32, 64, 96, 160, 224, 288, 2560],
        _ => vec![256, 512, 768],
    }
}

/// A random matrix of `n_rows` rows in `fmt`, and its exact f32 values.
fn random_rows(fmt: RowFormat, n_rows: usize, row_len: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut r = rng(seed);
    let rb = fmt.row_bytes(row_len).unwrap();
    let mut data = vec![0u8; n_rows * rb];
    let vals = normal_vec(&mut r, n_rows * row_len, 0.7);
    for (row, x) in data.chunks_exact_mut(rb).zip(vals.chunks_exact(row_len)) {
        match fmt {
            RowFormat::F32 => {
                for (b, v) in row.chunks_exact_mut(4).zip(x) {
                    b.copy_from_slice(&v.to_le_bytes());
                }
            }
            RowFormat::F16 => {
                for (b, v) in row.chunks_exact_mut(2).zip(x) {
                    b.copy_from_slice(&f32_to_f16(*v).to_le_bytes());
                }
            }
            RowFormat::BF16 => {
                for (b, v) in row.chunks_exact_mut(2).zip(x) {
                    b.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
                }
            }
            RowFormat::Q8_0 => quantize_row_q8_0(x, row),
            RowFormat::Q4_0 => quantize_row_q4_0(x, row),
            RowFormat::Q6K => quantize_row_q6_k(x, row),
        }
    }
    let mut exact = vec![0.0f32; n_rows * row_len];
    for (row, out) in data.chunks_exact(rb).zip(exact.chunks_exact_mut(row_len)) {
        dequantize_row(fmt, row, out);
    }
    (data, exact)
}

#[test]
fn matmul_f32_every_format_within_budget() {
    let n_rows = 11;
    for fmt in RowFormat::ALL {
        for row_len in row_lens(fmt) {
            let (data, exact) = random_rows(fmt, n_rows, row_len, row_len as u64);
            // Misaligned by one byte: no kernel may assume aligned rows.
            let (buf, br) = misaligned(&data);
            let data = &buf[br];
            let mut r = rng(99);
            for (n_tok, rows) in [
                (1, 0..n_rows),
                (3, 2..n_rows),
                (2, 5..6),
                (1, 4..4),
                (9, 0..n_rows),
                (8, 3..10),
            ] {
                let x = normal_vec(&mut r, n_tok * row_len, 1.0);
                for isa in isas() {
                    let mut out = vec![f32::NAN; n_tok * rows.len()];
                    if n_tok == 1 {
                        matvec_f32(isa, fmt, data, row_len, &x, rows.clone(), &mut out);
                    } else {
                        matmul_f32(isa, fmt, data, row_len, &x, n_tok, rows.clone(), &mut out);
                    }
                    for t in 0..n_tok {
                        for (i, row) in rows.clone().enumerate() {
                            let w = &exact[row * row_len..(row + 1) * row_len];
                            let (want, cond) =
                                dot64(w.iter().copied(), &x[t * row_len..(t + 1) * row_len]);
                            assert_close(
                                out[t * rows.len() + i],
                                want,
                                0.0,
                                dot_budget(row_len, cond),
                                &format!("{isa} {fmt:?} len {row_len} tok {t} row {row}"),
                            );
                        }
                    }
                }
            }
        }
    }
}

/// A token's float-head row does not depend on its batch: the block-quantized kernels decode
/// a weight row once for a tile of tokens, and each token's result must still be, bit for
/// bit, what it gets alone (batched decode equals one sequence's decode exactly).
#[test]
fn matmul_f32_batched_rows_equal_single_rows() {
    let n_rows = 7;
    for fmt in RowFormat::ALL {
        let row_len = *row_lens(fmt).last().unwrap();
        let (data, _) = random_rows(fmt, n_rows, row_len, 5 + row_len as u64);
        let mut r = rng(7);
        for n_tok in 1usize..=11 {
            let x = normal_vec(&mut r, n_tok * row_len, 1.0);
            for rows in [0..n_rows, 2..5] {
                let nr = rows.len();
                for isa in isas() {
                    let mut batched = vec![f32::NAN; n_tok * nr];
                    matmul_f32(
                        isa,
                        fmt,
                        &data,
                        row_len,
                        &x,
                        n_tok,
                        rows.clone(),
                        &mut batched,
                    );
                    for t in 0..n_tok {
                        let mut single = vec![f32::NAN; nr];
                        let xt = &x[t * row_len..(t + 1) * row_len];
                        matvec_f32(isa, fmt, &data, row_len, xt, rows.clone(), &mut single);
                        assert_eq!(
                            bits(&batched[t * nr..(t + 1) * nr]),
                            bits(&single),
                            "{isa} {fmt:?} len {row_len} n_tok {n_tok} tok {t} rows {rows:?}"
                        );
                    }
                }
            }
        }
    }
}

/// Q8_0 rows of random quants (every byte value, -128 included) with sane f16 scales.
fn random_q8_rows(r: &mut rand::rngs::StdRng, n_rows: usize, row_len: usize) -> Vec<u8> {
    let rb = RowFormat::Q8_0.row_bytes(row_len).unwrap();
    let mut w: Vec<u8> = (0..n_rows * rb).map(|_| r.random()).collect();
    for blk in w.chunks_exact_mut(Q8_0_BLOCK_BYTES) {
        blk[..2].copy_from_slice(&f32_to_f16(r.random_range(1e-4..0.05)).to_le_bytes());
    }
    w
}

/// `n_tok` activation rows quantized to Q8_0.
fn random_q8_acts(r: &mut rand::rngs::StdRng, n_tok: usize, row_len: usize) -> Vec<u8> {
    let rb = RowFormat::Q8_0.row_bytes(row_len).unwrap();
    let x = normal_vec(r, n_tok * row_len, 2.0);
    let mut xq = vec![0u8; n_tok * rb];
    for (xr, qr) in x.chunks_exact(row_len).zip(xq.chunks_exact_mut(rb)) {
        quantize_row_q8_0(xr, qr);
    }
    xq
}

#[test]
fn matmul_q8_0_q8_0_within_budget() {
    let mut r = rng(5);
    // Every tail of the four-block pass, the 2B-4T width and one random length.
    let random_len = r.random_range(1..=120) * 32;
    for row_len in [32, 64, 96, 128, 160, 320, 2560, random_len] {
        let n_rows = 9;
        let nb = row_len / 32;
        let rb = RowFormat::Q8_0.row_bytes(row_len).unwrap();
        // Weights: any bytes at all for the quants (including -128), sane f16 scales.
        let w = random_q8_rows(&mut r, n_rows, row_len);
        // Every tile shape of the batched kernels (1..=9 tokens) and a long batch.
        for n_tok in (1usize..=9).chain([17]) {
            let xq = random_q8_acts(&mut r, n_tok, row_len);
            let rows = 1..n_rows;
            for isa in isas() {
                let mut out = vec![f32::NAN; n_tok * rows.len()];
                // Both operands misaligned by one byte.
                let (wbuf, wr) = misaligned(&w);
                let (xbuf, xr) = misaligned(&xq);
                if n_tok == 1 {
                    matvec_q8_0_q8_0(isa, &wbuf[wr], row_len, &xbuf[xr], rows.clone(), &mut out);
                } else {
                    let (w, x) = (&wbuf[wr], &xbuf[xr]);
                    matmul_q8_0_q8_0(isa, w, row_len, x, n_tok, rows.clone(), &mut out);
                }
                for t in 0..n_tok {
                    for (i, row) in rows.clone().enumerate() {
                        let (mut want, mut cond) = (0.0f64, 0.0f64);
                        for b in 0..nb {
                            let wb = &w[row * rb + b * 34..][..34];
                            let xb = &xq[t * rb + b * 34..][..34];
                            let d = f64::from(f16_to_f32(u16::from_le_bytes([wb[0], wb[1]])))
                                * f64::from(f16_to_f32(u16::from_le_bytes([xb[0], xb[1]])));
                            let isum: i64 = (2..34)
                                .map(|j| i64::from(wb[j] as i8) * i64::from(xb[j] as i8))
                                .sum();
                            // The condition counts every product: SIMD kernels scale
                            // partial lane sums of a block, not the block's exact sum.
                            let abs: i64 = (2..34)
                                .map(|j| (i64::from(wb[j] as i8) * i64::from(xb[j] as i8)).abs())
                                .sum();
                            want += d * isum as f64;
                            cond += (d * abs as f64).abs();
                        }
                        assert_close(
                            out[t * rows.len() + i],
                            want,
                            0.0,
                            dot_budget(nb, cond),
                            &format!("{isa} q8 len {row_len} n_tok {n_tok} tok {t} row {row}"),
                        );
                    }
                }
            }
        }
    }
}

/// A token's head row does not depend on the batch it is computed in: every kernel set gives
/// bit for bit the single-token result for each token of a batch (so batched logits equal
/// one sequence's logits exactly), over row ranges that start and end off any row group.
#[test]
fn matmul_q8_0_q8_0_batched_rows_equal_single_rows() {
    let mut r = rng(6);
    for row_len in [32, 224, 2560] {
        let n_rows = 13;
        let w = random_q8_rows(&mut r, n_rows, row_len);
        let rb = RowFormat::Q8_0.row_bytes(row_len).unwrap();
        for n_tok in 1usize..=9 {
            let xq = random_q8_acts(&mut r, n_tok, row_len);
            for rows in [0..n_rows, 3..10, 5..6] {
                let nr = rows.len();
                for isa in isas() {
                    let mut batched = vec![f32::NAN; n_tok * nr];
                    matmul_q8_0_q8_0(isa, &w, row_len, &xq, n_tok, rows.clone(), &mut batched);
                    for t in 0..n_tok {
                        let mut single = vec![f32::NAN; nr];
                        let x = &xq[t * rb..(t + 1) * rb];
                        matvec_q8_0_q8_0(isa, &w, row_len, x, rows.clone(), &mut single);
                        assert_eq!(
                            bits(&batched[t * nr..(t + 1) * nr]),
                            bits(&single),
                            "{isa} len {row_len} n_tok {n_tok} tok {t} rows {rows:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rmsnorm_matches_f64_reference() {
    let mut r = rng(3);
    for n in lengths() {
        for scale in [1e-3f32, 1.0, 300.0] {
            let x = normal_vec(&mut r, n, scale);
            let g = normal_vec(&mut r, n, 1.0);
            let eps = 1e-5f32;
            let ms: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / n as f64;
            let inv = 1.0 / (ms + f64::from(eps)).sqrt();
            let (xbuf, xr) = misaligned(&x);
            for isa in isas() {
                let mut out = vec![0.0f32; n];
                rmsnorm(isa, &xbuf[xr.clone()], &g, eps, &mut out);
                for i in 0..n {
                    let want = f64::from(x[i]) * inv * f64::from(g[i]);
                    let tol = f64::from(RMSNORM_REL_TOL);
                    assert_close(
                        out[i],
                        want,
                        tol,
                        1e-30,
                        &format!("{isa} rmsnorm n={n} i={i}"),
                    );
                }
            }
        }
    }
    for isa in isas() {
        let mut out = [1.0f32; 20];
        rmsnorm(isa, &[0.0; 20], &[1.0; 20], 1e-6, &mut out);
        assert!(out.iter().all(|&v| v == 0.0), "{isa}: zeros stay zeros");
    }
}

fn softmax64(x: &[f32]) -> Vec<f64> {
    let m = x
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
    let e: Vec<f64> = x.iter().map(|&v| (f64::from(v) - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|v| v / s).collect()
}

#[test]
fn softmax_matches_f64_reference() {
    let mut r = rng(4);
    for n in lengths() {
        for scale in [0.1f32, 5.0, 60.0] {
            let mut x = normal_vec(&mut r, n, scale);
            if n > 3 {
                x[n / 2] = f32::NEG_INFINITY; // a masked position
            }
            let want = softmax64(&x);
            let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let sum: f64 = x
                .iter()
                .map(|&v| (f64::from(v) - f64::from(max)).exp())
                .sum();
            for isa in isas() {
                let mut y = x.clone();
                // The statistics let rows softmaxed piecewise be merged (attention chunks).
                let (m, s) = softmax_inplace(isa, &mut y);
                assert_eq!(m, max, "{isa} softmax max n={n}");
                assert_close(s, sum, 1e-4, 0.0, &format!("{isa} softmax sum n={n}"));
                for i in 0..n {
                    let tol = f64::from(SOFTMAX_REL_TOL);
                    assert_close(
                        y[i],
                        want[i],
                        tol,
                        1e-37,
                        &format!("{isa} softmax n={n} i={i}"),
                    );
                }
            }
        }
    }
    for isa in isas() {
        let mut y = vec![f32::NEG_INFINITY; 33];
        let stats = softmax_inplace(isa, &mut y);
        assert_eq!(
            stats,
            (f32::NEG_INFINITY, 0.0),
            "{isa}: a masked row weighs nothing"
        );
        for nan_at in [0, 5, 32] {
            let mut y = vec![f32::NEG_INFINITY; 33];
            y[nan_at] = f32::NAN;
            let (_, sum) = softmax_inplace(isa, &mut y);
            assert!(
                sum.is_nan() && y.iter().all(|v| v.is_nan()),
                "{isa}: NaN at {nan_at}"
            );
            let mut y = vec![0.5f32; 33];
            y[nan_at] = f32::NAN;
            let (_, sum) = softmax_inplace(isa, &mut y);
            assert!(
                sum.is_nan() && y.iter().all(|v| v.is_nan()),
                "{isa}: NaN at {nan_at}"
            );
        }
        assert!(
            y.iter().all(|&v| v == 0.0),
            "{isa}: fully masked row gives zeros"
        );
        let mut y = vec![1e30f32, -1e30, 0.0];
        softmax_inplace(isa, &mut y);
        assert_eq!(y, [1.0, 0.0, 0.0], "{isa}: huge logits");
    }
}

fn silu64(v: f32) -> f64 {
    let v = f64::from(v);
    v / (1.0 + (-v).exp())
}

#[test]
fn activations_match_reference() {
    let mut r = rng(6);
    for n in lengths() {
        let mut x = normal_vec(&mut r, n, 6.0);
        if n > 4 {
            x[0] = -200.0;
            x[1] = 200.0;
            x[2] = -0.0;
            x[3] = -87.5;
        }
        let up = normal_vec(&mut r, n, 2.0);
        let tol = f64::from(SILU_REL_TOL);
        for isa in isas() {
            let mut y = x.clone();
            silu(isa, &mut y);
            let mut z = x.clone();
            silu_mul(isa, &mut z, &up);
            let mut gelu = x.clone();
            gelu_tanh_mul(isa, &mut gelu, &up);
            for i in 0..n {
                let v = f64::from(x[i]);
                let z64 = (2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v);
                // 0.5 v (1 + tanh z), without the cancellation of 1 + tanh z for v < 0.
                let want = v / (1.0 + (-2.0 * z64).exp()) * f64::from(up[i]);
                let what = format!("{isa} gelu_tanh_mul n={n} x={}", x[i]);
                assert_close(gelu[i], want, 2.0 * tol, 1e-30, &what);
            }
            for i in 0..n {
                let what = format!("{isa} silu n={n} x={}", x[i]);
                assert_close(y[i], silu64(x[i]), tol, 1e-30, &what);
                let want = silu64(x[i]) * f64::from(up[i]);
                assert_close(z[i], want, 2.0 * tol, 1e-30, &what);
            }
            // Exact operations: bit for bit with scalar.
            type Bin = fn(Isa, &mut [f32], &[f32]);
            let bins: [(&str, Bin); 3] = [
                ("relu2_mul", relu2_mul),
                ("add", add_inplace),
                ("mul", mul_inplace),
            ];
            for (name, f) in bins {
                let (mut a, mut b) = (x.clone(), x.clone());
                f(Isa::Scalar, &mut a, &up);
                f(isa, &mut b, &up);
                assert_eq!(bits(&a), bits(&b), "{isa} {name} n={n}");
            }
            let (mut a, mut b) = (x.clone(), x.clone());
            relu2(Isa::Scalar, &mut a);
            relu2(isa, &mut b);
            assert_eq!(bits(&a), bits(&b), "{isa} relu2 n={n}");
            assert!(b.iter().all(|&v| v >= 0.0));
            let (mut a, mut b) = (x.clone(), x.clone());
            scale_inplace(Isa::Scalar, &mut a, -0.37);
            scale_inplace(isa, &mut b, -0.37);
            assert_eq!(bits(&a), bits(&b), "{isa} scale n={n}");
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn rope_is_exact_across_isas_and_a_rotation() {
    let mut r = rng(8);
    for (head_dim, rope_dim, n_heads) in [
        (64, 64, 4),
        (128, 128, 2),
        (80, 64, 3),
        (6, 4, 5),
        (100, 36, 2),
    ] {
        let table = RopeTable::new(rope_dim, 10000.0, 64);
        let x = normal_vec(&mut r, head_dim * n_heads, 1.0);
        for pos in [0, 1, 17, 63] {
            let mut neox_ref = x.clone();
            table.apply_neox(Isa::Scalar, &mut neox_ref, head_dim, n_heads, pos);
            let mut norm_ref = x.clone();
            table.apply_normal(Isa::Scalar, &mut norm_ref, head_dim, n_heads, pos);
            for isa in isas() {
                let mut y = x.clone();
                table.apply_neox(isa, &mut y, head_dim, n_heads, pos);
                assert_eq!(
                    bits(&y),
                    bits(&neox_ref),
                    "{isa} neox hd={head_dim} pos={pos}"
                );
                let mut y = x.clone();
                table.apply_normal(isa, &mut y, head_dim, n_heads, pos);
                assert_eq!(
                    bits(&y),
                    bits(&norm_ref),
                    "{isa} normal hd={head_dim} pos={pos}"
                );
            }
            // Against an f64 rotation; dimensions past rope_dim untouched.
            let half = rope_dim / 2;
            for h in 0..n_heads {
                let o = h * head_dim;
                for i in 0..half {
                    let f = 10000f64.powf(-2.0 * i as f64 / rope_dim as f64) * pos as f64;
                    let (c, s) = (f.cos(), f.sin());
                    let (x0, x1) = (f64::from(x[o + i]), f64::from(x[o + half + i]));
                    assert_close(neox_ref[o + i], x0 * c - x1 * s, 1e-5, 1e-6, "neox rot");
                    assert_close(
                        neox_ref[o + half + i],
                        x0 * s + x1 * c,
                        1e-5,
                        1e-6,
                        "neox rot",
                    );
                    let (y0, y1) = (f64::from(x[o + 2 * i]), f64::from(x[o + 2 * i + 1]));
                    assert_close(
                        norm_ref[o + 2 * i],
                        y0 * c - y1 * s,
                        1e-5,
                        1e-6,
                        "normal rot",
                    );
                    assert_close(
                        norm_ref[o + 2 * i + 1],
                        y0 * s + y1 * c,
                        1e-5,
                        1e-6,
                        "normal",
                    );
                }
                assert_eq!(
                    &neox_ref[o + rope_dim..o + head_dim],
                    &x[o + rope_dim..o + head_dim]
                );
                assert_eq!(
                    &norm_ref[o + rope_dim..o + head_dim],
                    &x[o + rope_dim..o + head_dim]
                );
            }
        }
    }
}

#[test]
fn attention_over_f16_and_f32_caches() {
    let mut r = rng(10);
    for (d, kv_stride) in [(64, 64), (128, 256), (80, 96), (17, 17), (5, 9)] {
        for n_pos in [0usize, 1, 3, 4, 5, 9, 33] {
            let q = normal_vec(&mut r, d, 1.0);
            let len = if n_pos == 0 {
                0
            } else {
                (n_pos - 1) * kv_stride + d
            };
            let kf = normal_vec(&mut r, len, 2.0);
            let kh: Vec<u16> = kf.iter().map(|&v| f32_to_f16(v)).collect();
            let kx: Vec<f32> = kh.iter().map(|&h| f16_to_f32(h)).collect();
            let w = normal_vec(&mut r, n_pos, 0.3);
            let scale = 0.125f32;
            for isa in isas() {
                let mut s16 = vec![f32::NAN; n_pos];
                attn_scores_f16(isa, &q, &kh, kv_stride, n_pos, scale, &mut s16);
                let mut s32 = vec![f32::NAN; n_pos];
                attn_scores_f32(isa, &q, &kx, kv_stride, n_pos, scale, &mut s32);
                for p in 0..n_pos {
                    let (want, cond) = dot64(kx[p * kv_stride..][..d].iter().copied(), &q);
                    let tol = dot_budget(d, cond) * f64::from(scale);
                    let what = format!("{isa} scores d={d} p={p}");
                    assert_close(s16[p], want * f64::from(scale), 0.0, tol, &what);
                    assert_eq!(
                        s16[p].to_bits(),
                        s32[p].to_bits(),
                        "{what}: f16 == f32 cache"
                    );
                }
                let (mut o16, mut o32) = (vec![0.0; d], vec![0.0; d]);
                attn_weighted_sum_f16(isa, &w, &kh, kv_stride, n_pos, &mut o16);
                attn_weighted_sum_f32(isa, &w, &kx, kv_stride, n_pos, &mut o32);
                for i in 0..d {
                    let col: Vec<f32> = (0..n_pos).map(|p| kx[p * kv_stride + i]).collect();
                    let (want, cond) = dot64(w.iter().copied(), &col);
                    let what = format!("{isa} wsum d={d} n_pos={n_pos} i={i}");
                    assert_close(o16[i], want, 0.0, dot_budget(n_pos, cond), &what);
                    assert_eq!(
                        o16[i].to_bits(),
                        o32[i].to_bits(),
                        "{what}: f16 == f32 cache"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_over_a_q8_0_cache() {
    let mut r = rng(11);
    for (d, extra) in [(64usize, 0usize), (128, 34), (32, 7), (96, 1)] {
        let rb = RowFormat::Q8_0.row_bytes(d).unwrap();
        let stride = rb + extra;
        for n_pos in [0usize, 1, 2, 5, 17] {
            let q = normal_vec(&mut r, d, 1.0);
            let mut cache = vec![0u8; n_pos * stride];
            let mut exact = vec![0.0f32; n_pos * d];
            for p in 0..n_pos {
                let row = normal_vec(&mut r, d, 3.0);
                quantize_row_q8_0(&row, &mut cache[p * stride..p * stride + rb]);
                dequantize_row(
                    RowFormat::Q8_0,
                    &cache[p * stride..][..rb],
                    &mut exact[p * d..][..d],
                );
            }
            let (cbuf, cr) = misaligned(&cache);
            let cache = &cbuf[cr];
            let w = normal_vec(&mut r, n_pos, 0.3);
            for isa in isas() {
                let mut s = vec![f32::NAN; n_pos];
                attn_scores_q8_0(isa, &q, cache, stride, n_pos, 0.5, &mut s);
                for p in 0..n_pos {
                    let (want, cond) = dot64(exact[p * d..][..d].iter().copied(), &q);
                    let what = format!("{isa} q8 scores d={d} p={p}");
                    assert_close(s[p], 0.5 * want, 0.0, 0.5 * dot_budget(d, cond), &what);
                }
                let mut o = vec![0.0; d];
                attn_weighted_sum_q8_0(isa, &w, cache, stride, n_pos, &mut o);
                for i in 0..d {
                    let col: Vec<f32> = (0..n_pos).map(|p| exact[p * d + i]).collect();
                    let (want, cond) = dot64(w.iter().copied(), &col);
                    let what = format!("{isa} q8 wsum d={d} n_pos={n_pos} i={i}");
                    assert_close(o[i], want, 0.0, dot_budget(n_pos, cond), &what);
                }
            }
        }
    }
}

#[test]
fn nan_propagates_like_the_reference() {
    for isa in isas() {
        for n in [5usize, 16, 37] {
            let mut x: Vec<f32> = (0..n).map(|i| i as f32 * 0.1).collect();
            x[n / 2] = f32::NAN;
            let mut y = x.clone();
            softmax_inplace(isa, &mut y);
            assert!(
                y.iter().all(|v| v.is_nan()),
                "{isa}: softmax with a NaN is all NaN"
            );
            let mut y = x.clone();
            silu(isa, &mut y);
            assert!(y[n / 2].is_nan(), "{isa}: silu(NaN)");
            assert!(y.iter().enumerate().all(|(i, v)| i == n / 2 || !v.is_nan()));
        }
    }
}

#[test]
fn grouped_attention_matches_the_f64_reference() {
    let mut r = rng(12);
    for n_q in 1..=8usize {
        for (d, kv_stride) in [(64usize, 64usize), (128, 160), (80, 80), (17, 20), (5, 5)] {
            for n_pos in [0usize, 1, 2, 3, 7, 33, 70] {
                let q = normal_vec(&mut r, n_q * d, 1.0);
                let len = if n_pos == 0 {
                    0
                } else {
                    (n_pos - 1) * kv_stride + d
                };
                let kh: Vec<u16> = normal_vec(&mut r, len, 2.0)
                    .iter()
                    .map(|&v| f32_to_f16(v))
                    .collect();
                let vh: Vec<u16> = normal_vec(&mut r, len, 2.0)
                    .iter()
                    .map(|&v| f32_to_f16(v))
                    .collect();
                let kx: Vec<f32> = kh.iter().map(|&h| f16_to_f32(h)).collect();
                let vx: Vec<f32> = vh.iter().map(|&h| f16_to_f32(h)).collect();
                let w = normal_vec(&mut r, n_q * n_pos, 0.3);
                for isa in isas() {
                    let mut s = vec![f32::NAN; n_q * n_pos];
                    attn_scores_f16_group(isa, &q, n_q, &kh, kv_stride, n_pos, 0.25, &mut s);
                    let mut o = vec![0.0; n_q * d];
                    attn_weighted_sum_f16_group(isa, &w, n_q, &vh, kv_stride, n_pos, &mut o);
                    for h in 0..n_q {
                        for p in 0..n_pos {
                            let kp = kx[p * kv_stride..][..d].iter().copied();
                            let (want, cond) = dot64(kp, &q[h * d..][..d]);
                            let what = format!("{isa} group {n_q} d={d} h={h} p={p}");
                            let tol = 0.25 * dot_budget(d, cond);
                            assert_close(s[h * n_pos + p], 0.25 * want, 0.0, tol, &what);
                        }
                        for i in 0..d {
                            let col: Vec<f32> = (0..n_pos).map(|p| vx[p * kv_stride + i]).collect();
                            let (want, cond) = dot64(w[h * n_pos..][..n_pos].iter().copied(), &col);
                            let what = format!("{isa} group {n_q} wsum d={d} h={h} i={i}");
                            assert_close(o[h * d + i], want, 0.0, dot_budget(n_pos, cond), &what);
                        }
                    }
                }
            }
        }
    }
}

/// The weighted sums accumulate onto `out`, so a paged cache walked block by block gives
/// the bits of one call over every position (the engine relies on this: a sequence's
/// attention does not depend on how its positions are split into blocks).
#[test]
fn weighted_sums_accumulate_block_by_block_bit_exactly() {
    let mut r = rng(13);
    for (d, kv_stride) in [(64usize, 64usize), (128, 160), (80, 80), (17, 20)] {
        let n_pos = 37usize;
        let len = (n_pos - 1) * kv_stride + d;
        let vx = normal_vec(&mut r, len, 2.0);
        let vh: Vec<u16> = vx.iter().map(|&v| f32_to_f16(v)).collect();
        let q8 = if d % 32 == 0 {
            let rb = RowFormat::Q8_0.row_bytes(d).unwrap();
            let mut c = vec![0u8; n_pos * rb];
            for p in 0..n_pos {
                quantize_row_q8_0(&vx[p * kv_stride..][..d], &mut c[p * rb..][..rb]);
            }
            Some((c, rb))
        } else {
            None
        };
        for n_q in [1usize, 2, 3, 4, 8] {
            let w = normal_vec(&mut r, n_q * n_pos, 0.3);
            for isa in isas() {
                for split in [1usize, 5, 16, 32] {
                    let start = normal_vec(&mut r, n_q * d, 1.0);
                    // One call over everything, onto `start`.
                    let mut whole = start.clone();
                    attn_weighted_sum_f16_group(isa, &w, n_q, &vh, kv_stride, n_pos, &mut whole);
                    // The same positions in blocks of `split`, each onto the running sum.
                    let mut blocked = start.clone();
                    for b0 in (0..n_pos).step_by(split) {
                        let n = split.min(n_pos - b0);
                        let wb: Vec<f32> = (0..n_q)
                            .flat_map(|h| w[h * n_pos + b0..][..n].iter().copied())
                            .collect();
                        let vb = &vh[b0 * kv_stride..];
                        attn_weighted_sum_f16_group(isa, &wb, n_q, vb, kv_stride, n, &mut blocked);
                    }
                    let what = format!("{isa} f16 group {n_q} d={d} split={split}");
                    assert_eq!(bits(&whole), bits(&blocked), "{what}");
                    // Accumulating onto `start` is `start` plus the plain sum (within budget).
                    let mut plain = vec![0.0; n_q * d];
                    attn_weighted_sum_f16_group(isa, &w, n_q, &vh, kv_stride, n_pos, &mut plain);
                    for i in 0..n_q * d {
                        let want = f64::from(start[i]) + f64::from(plain[i]);
                        let tol = 1e-5 * (1.0 + want.abs());
                        assert_close(whole[i], want, 0.0, tol, &what);
                    }
                    if n_q == 1 {
                        let mut one = start[..d].to_vec();
                        let mut parts = start[..d].to_vec();
                        attn_weighted_sum_f32(isa, &w, &vx, kv_stride, n_pos, &mut one);
                        for b0 in (0..n_pos).step_by(split) {
                            let n = split.min(n_pos - b0);
                            let vb = &vx[b0 * kv_stride..];
                            attn_weighted_sum_f32(
                                isa,
                                &w[b0..b0 + n],
                                vb,
                                kv_stride,
                                n,
                                &mut parts,
                            );
                        }
                        assert_eq!(bits(&one), bits(&parts), "{isa} f32 d={d} split={split}");
                        if let Some((c, rb)) = &q8 {
                            let mut one = start[..d].to_vec();
                            let mut parts = start[..d].to_vec();
                            attn_weighted_sum_q8_0(isa, &w, c, *rb, n_pos, &mut one);
                            for b0 in (0..n_pos).step_by(split) {
                                let n = split.min(n_pos - b0);
                                let cb = &c[b0 * rb..];
                                attn_weighted_sum_q8_0(isa, &w[b0..b0 + n], cb, *rb, n, &mut parts);
                            }
                            assert_eq!(bits(&one), bits(&parts), "{isa} q8 d={d} split={split}");
                        }
                    }
                }
            }
        }
    }
}
