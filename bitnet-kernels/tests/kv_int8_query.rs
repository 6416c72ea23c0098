//! Integer scoring of Q8_0, Q8R and Q4_0 keys against an int8 query: the query's
//! quantization against its definition, every kernel set against an f64 model of the
//! quantized product (random data, zeros, huge keys, one position, odd counts, group sizes
//! with and without a kernel, misaligned caches, padded strides), and the whole path against
//! the float-query scores within the query's rounding error.
#![allow(clippy::needless_range_loop)]

mod float_util;

use bitnet_kernels::float::*;
use float_util::*;

const INT_FORMATS: [KvQuant; 3] = [KvQuant::Q8_0, KvQuant::Q8R, KvQuant::Q4_0];

#[test]
fn only_integer_formats_have_int8_query_scores() {
    for fmt in KvQuant::ALL {
        assert_eq!(
            fmt.has_int8_query_scores(),
            INT_FORMATS.contains(&fmt),
            "{fmt:?}"
        );
    }
}

#[test]
fn int8_query_is_round_to_nearest_on_the_block_absmax() {
    let mut r = rng(51);
    let mut q = normal_vec(&mut r, 6 * QK_KV, 2.0);
    q[QK_KV..2 * QK_KV].fill(0.0); // a zero block: scale 0, codes 0
    q[2 * QK_KV + 5] = -300.0; // a spike: the block's other codes shrink
    q[3 * QK_KV + 1] = f32::NAN; // reads as 0, the rest of the block as usual
    q[4 * QK_KV..5 * QK_KV].fill(-1e-30); // tiny (subnormal scale territory)
    let mut codes = vec![0i8; q.len()];
    let mut scales = vec![f32::NAN; q.len() / QK_KV];
    int8_query(&q, &mut codes, &mut scales);
    for (b, qb) in q.chunks_exact(QK_KV).enumerate() {
        let amax = qb
            .iter()
            .filter(|v| !v.is_nan())
            .fold(0f32, |m, v| m.max(v.abs()));
        let d = scales[b];
        assert_eq!(d, amax / 127.0, "block {b} scale");
        for (j, &x) in qb.iter().enumerate() {
            let c = codes[b * QK_KV + j];
            assert!((-127..=127).contains(&c), "block {b} code {c}");
            if x.is_nan() || d == 0.0 {
                assert_eq!(c, 0, "block {b} value {j}");
                continue;
            }
            let err = (f64::from(x) - f64::from(d) * f64::from(c)).abs();
            assert!(
                err <= 0.5 * f64::from(d) * (1.0 + 1e-5),
                "block {b} value {j}: {x} -> {c} * {d}"
            );
        }
        if d > 0.0 {
            assert!(codes[b * QK_KV..][..QK_KV].iter().any(|c| c.abs() == 127));
        }
    }
}

/// Keys for the kernel tests: random rows, zero rows and rows of huge values.
fn key_rows(r: &mut rand::rngs::StdRng, n_pos: usize, d: usize) -> Vec<f32> {
    (0..n_pos)
        .flat_map(|p| match p % 5 {
            1 if n_pos > 1 => vec![0.0; d],
            3 => normal_vec(r, d, 1e4),
            _ => normal_vec(r, d, 2.0),
        })
        .collect()
}

/// The f64 model of a score and its condition: `scale * Σ_b s_q,b Σ_j code_j * key_j`, with
/// the keys as decoded (`s_k * int`, exact up to one f32 rounding each).
fn model(codes: &[i8], scales: &[f32], key: &[f32], scale: f32) -> (f64, f64) {
    let (mut s, mut c) = (0.0f64, 0.0f64);
    for (b, &qs) in scales.iter().enumerate() {
        for j in 0..QK_KV {
            let t = f64::from(qs) * f64::from(codes[b * QK_KV + j]) * f64::from(key[b * QK_KV + j]);
            s += t;
            c += t.abs();
        }
    }
    let sc = f64::from(scale);
    (sc * s, sc.abs() * c)
}

#[test]
fn every_kernel_set_matches_the_f64_model_of_the_quantized_product() {
    let mut r = rng(52);
    for fmt in INT_FORMATS {
        // 1,056 values: more blocks than the AVX2 kernel keeps its per-block query vectors
        // for on the stack (it takes the heap then).
        for (d, extra) in [(32usize, 1usize), (128, 0), (160, 5), (64, 7), (1056, 3)] {
            let nb = d / QK_KV;
            let rb = fmt.row_bytes(d).unwrap();
            let stride = rb + extra;
            for n_pos in [1usize, 2, 5, 17, 33, 70] {
                let x = key_rows(&mut r, n_pos, d);
                let mut cache = vec![0u8; (n_pos - 1) * stride + rb];
                let mut keys = vec![0.0f32; n_pos * d];
                for p in 0..n_pos {
                    let row = &mut cache[p * stride..][..rb];
                    kv_quantize(fmt, d, &x[p * d..][..d], row);
                    kv_dequantize(fmt, row, &mut keys[p * d..][..d]);
                }
                let (cbuf, cr) = misaligned(&cache);
                let cache = &cbuf[cr];
                for n_q in [1usize, 2, 3, 4, 5, 8] {
                    let mut q = normal_vec(&mut r, n_q * d, 1.0);
                    q[..QK_KV].fill(0.0); // head 0's first block is zero
                    let mut codes = vec![0i8; n_q * d];
                    let mut qs = vec![0.0f32; n_q * nb];
                    int8_query(&q, &mut codes, &mut qs);
                    for isa in isas() {
                        let what = format!("{isa} {} d={d} n_pos={n_pos} n_q={n_q}", fmt.name());
                        let mut s = vec![f32::NAN; n_q * n_pos];
                        attn_scores_kv_int8_query(
                            isa, fmt, &codes, &qs, n_q, cache, stride, n_pos, 0.125, &mut s,
                        );
                        for h in 0..n_q {
                            for p in 0..n_pos {
                                let (want, cond) = model(
                                    &codes[h * d..][..d],
                                    &qs[h * nb..][..nb],
                                    &keys[p * d..][..d],
                                    0.125,
                                );
                                // Each block's dot is exact; the block products, the keys'
                                // decoding and the sum of the scaled blocks round.
                                let tol = dot_budget(nb + 2, cond);
                                let got = s[h * n_pos + p];
                                assert_close(got, want, 0.0, tol, &format!("{what} h={h} p={p}"));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The int8 query moves a score by at most half a query step per value: `|Σ_j (q_j -
/// s_q,b c_j) k_j| <= Σ_b s_q,b / 2 Σ_j |k_j|`, plus both paths' float budgets.
#[test]
fn int8_query_scores_stay_within_the_query_rounding_of_the_float_scores() {
    let mut r = rng(53);
    let (d, n_pos, n_q) = (128usize, 40usize, 4usize);
    let nb = d / QK_KV;
    for fmt in INT_FORMATS {
        let rb = fmt.row_bytes(d).unwrap();
        let x = key_rows(&mut r, n_pos, d);
        let mut cache = vec![0u8; n_pos * rb];
        kv_quantize(fmt, d, &x, &mut cache);
        let mut keys = vec![0.0f32; n_pos * d];
        for p in 0..n_pos {
            kv_dequantize(fmt, &cache[p * rb..][..rb], &mut keys[p * d..][..d]);
        }
        let q = normal_vec(&mut r, n_q * d, 1.0);
        let mut codes = vec![0i8; n_q * d];
        let mut qs = vec![0.0f32; n_q * nb];
        int8_query(&q, &mut codes, &mut qs);
        for isa in isas() {
            let mut sf = vec![0.0f32; n_q * n_pos];
            let mut si = vec![0.0f32; n_q * n_pos];
            attn_scores_kv(isa, fmt, &q, n_q, &cache, rb, n_pos, 1.0, &mut sf);
            attn_scores_kv_int8_query(isa, fmt, &codes, &qs, n_q, &cache, rb, n_pos, 1.0, &mut si);
            let mut moved = 0usize;
            for h in 0..n_q {
                for p in 0..n_pos {
                    let key = &keys[p * d..][..d];
                    let rounding: f64 = (0..nb)
                        .map(|b| {
                            let k1: f64 = key[b * QK_KV..][..QK_KV]
                                .iter()
                                .map(|v| f64::from(v.abs()))
                                .sum();
                            0.5 * f64::from(qs[h * nb + b]) * k1
                        })
                        .sum();
                    let (_, cond) = dot64(key.iter().copied(), &q[h * d..][..d]);
                    let tol = rounding * (1.0 + 1e-5) + 2.0 * dot_budget(d, cond + rounding);
                    let (a, b) = (sf[h * n_pos + p], si[h * n_pos + p]);
                    let what = format!("{isa} {} h={h} p={p}", fmt.name());
                    assert_close(b, f64::from(a), 0.0, tol, &what);
                    moved += usize::from(a != b);
                }
            }
            // The check is not vacuous: the query's rounding does move the scores.
            assert!(
                moved > n_q * n_pos / 2,
                "{isa} {}: {moved} moved",
                fmt.name()
            );
        }
    }
}

/// Scores one row of `fmt` with `d` values against `n_codes` codes and `n_scales` scales.
fn score_one(fmt: KvQuant, d: usize, n_codes: usize, n_scales: usize) {
    let (codes, qs) = (vec![0i8; n_codes], vec![0.0f32; n_scales]);
    let k = vec![0u8; fmt.row_bytes(d).unwrap()];
    let mut out = vec![0.0f32; 1];
    let isa = bitnet_kernels::Isa::Scalar;
    attn_scores_kv_int8_query(isa, fmt, &codes, &qs, 1, &k, k.len(), 1, 1.0, &mut out);
}

#[test]
#[should_panic(expected = "hold no integer codes")]
fn fp8_keys_are_refused() {
    score_one(KvQuant::Fp8, 32, 32, 1);
}

#[test]
#[should_panic(expected = "one scale per 32 codes")]
fn a_missing_query_scale_is_refused() {
    score_one(KvQuant::Q8_0, 64, 64, 1);
}

#[test]
#[should_panic(expected = "a query code of -128")]
fn a_query_code_of_minus_128_is_refused() {
    let fmt = KvQuant::Q8_0;
    let (mut codes, qs) = (vec![0i8; 32], vec![1.0f32; 1]);
    codes[7] = i8::MIN;
    let k = vec![0u8; fmt.row_bytes(32).unwrap()];
    let mut out = vec![0.0f32; 1];
    let isa = bitnet_kernels::Isa::best();
    attn_scores_kv_int8_query(isa, fmt, &codes, &qs, 1, &k, k.len(), 1, 1.0, &mut out);
}

/// The engine splits a GQA group over threads (two units of half its heads) and walks a
/// sequence's cache a run of rows at a time, and asserts bit-identical logits whatever the
/// split: so a head's score against a row must not depend on the heads it is scored with,
/// nor on how many rows the call takes.
#[test]
fn a_heads_scores_do_not_depend_on_its_group_or_the_row_count() {
    let mut r = rng(53);
    for fmt in INT_FORMATS {
        for d in [64usize, 128] {
            let nb = d / QK_KV;
            let rb = fmt.row_bytes(d).unwrap();
            let n_pos = 70;
            let x = key_rows(&mut r, n_pos, d);
            let mut cache = vec![0u8; n_pos * rb];
            for p in 0..n_pos {
                kv_quantize(fmt, d, &x[p * d..][..d], &mut cache[p * rb..][..rb]);
            }
            let q = normal_vec(&mut r, 8 * d, 1.0);
            let mut codes = vec![0i8; 8 * d];
            let mut qs = vec![0.0f32; 8 * nb];
            int8_query(&q, &mut codes, &mut qs);
            for isa in isas() {
                let mut whole = vec![f32::NAN; 8 * n_pos];
                attn_scores_kv_int8_query(
                    isa, fmt, &codes, &qs, 8, &cache, rb, n_pos, 0.3, &mut whole,
                );
                for g in [1usize, 2, 4] {
                    for rows in [1usize, 3, 6, n_pos] {
                        for h0 in (0..8).step_by(g) {
                            let mut part = vec![f32::NAN; g * rows];
                            attn_scores_kv_int8_query(
                                isa,
                                fmt,
                                &codes[h0 * d..][..g * d],
                                &qs[h0 * nb..][..g * nb],
                                g,
                                &cache,
                                rb,
                                rows,
                                0.3,
                                &mut part,
                            );
                            for h in 0..g {
                                for p in 0..rows {
                                    assert_eq!(
                                        part[h * rows + p].to_bits(),
                                        whole[(h0 + h) * n_pos + p].to_bits(),
                                        "{isa} {} d={d} group {g} rows {rows} head {} pos {p}",
                                        fmt.name(),
                                        h0 + h
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
