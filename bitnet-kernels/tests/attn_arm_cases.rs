//! Attention and KV cases the other files leave out, added with the AArch64 kernels: runs
//! of positions past the weighted sums' position tiles (64 for one head's f16/f32/Q8_0 sums)
//! with head dims whose lanes end in every kind of pass (32-lane, 16, 8, 4, and a padded
//! tail), checked against the f64 model on every kernel set; and Q4_0 integer-weighted sums
//! for group sizes that split into passes of four heads plus a remainder, bit for bit
//! against the reference.

#![allow(clippy::needless_range_loop)]

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;

#[test]
fn long_runs_over_f16_and_f32_caches() {
    let mut r = rng(71);
    for (d, kv_stride) in [(128usize, 136usize), (60, 64), (44, 44), (7, 9)] {
        for n_pos in [65usize, 150] {
            let q = normal_vec(&mut r, d, 1.0);
            let len = (n_pos - 1) * kv_stride + d;
            let kh: Vec<u16> = normal_vec(&mut r, len, 2.0)
                .iter()
                .map(|&v| f32_to_f16(v))
                .collect();
            let kx: Vec<f32> = kh.iter().map(|&h| f16_to_f32(h)).collect();
            let w = normal_vec(&mut r, n_pos, 0.3);
            let start = normal_vec(&mut r, d, 1.0);
            for isa in isas() {
                let (mut s16, mut s32) = (vec![f32::NAN; n_pos], vec![f32::NAN; n_pos]);
                attn_scores_f16(isa, &q, &kh, kv_stride, n_pos, 0.5, &mut s16);
                attn_scores_f32(isa, &q, &kx, kv_stride, n_pos, 0.5, &mut s32);
                for p in 0..n_pos {
                    let (want, cond) = dot64(kx[p * kv_stride..][..d].iter().copied(), &q);
                    let what = format!("{isa} scores d={d} n_pos={n_pos} p={p}");
                    assert_close(s16[p], 0.5 * want, 0.0, 0.5 * dot_budget(d, cond), &what);
                    assert_eq!(s16[p].to_bits(), s32[p].to_bits(), "{what}: f16 == f32");
                }
                let (mut o16, mut o32) = (start.clone(), start.clone());
                attn_weighted_sum_f16(isa, &w, &kh, kv_stride, n_pos, &mut o16);
                attn_weighted_sum_f32(isa, &w, &kx, kv_stride, n_pos, &mut o32);
                for i in 0..d {
                    let col: Vec<f32> = (0..n_pos).map(|p| kx[p * kv_stride + i]).collect();
                    let (want, cond) = dot64(w.iter().copied(), &col);
                    let st = f64::from(start[i]);
                    let tol = dot_budget(n_pos + 1, cond + st.abs());
                    let what = format!("{isa} wsum d={d} n_pos={n_pos} i={i}");
                    assert_close(o16[i], st + want, 0.0, tol, &what);
                    assert_eq!(o16[i].to_bits(), o32[i].to_bits(), "{what}: f16 == f32");
                }
            }
        }
    }
}

#[test]
fn long_runs_over_a_q8_0_cache() {
    let mut r = rng(72);
    for (d, extra) in [(128usize, 2usize), (32, 0), (96, 5)] {
        let rb = RowFormat::Q8_0.row_bytes(d).unwrap();
        let stride = rb + extra;
        for n_pos in [65usize, 150] {
            let q = normal_vec(&mut r, d, 1.0);
            let mut cache = vec![0u8; n_pos * stride];
            let mut exact = vec![0.0f32; n_pos * d];
            for p in 0..n_pos {
                let row = normal_vec(&mut r, d, 3.0);
                quantize_row_q8_0(&row, &mut cache[p * stride..][..rb]);
                dequantize_row(
                    RowFormat::Q8_0,
                    &cache[p * stride..][..rb],
                    &mut exact[p * d..][..d],
                );
            }
            let (cbuf, cr) = misaligned(&cache);
            let cache = &cbuf[cr];
            let w = normal_vec(&mut r, n_pos, 0.3);
            let start = normal_vec(&mut r, d, 1.0);
            for isa in isas() {
                let mut s = vec![f32::NAN; n_pos];
                attn_scores_q8_0(isa, &q, cache, stride, n_pos, 0.5, &mut s);
                for p in 0..n_pos {
                    let (want, cond) = dot64(exact[p * d..][..d].iter().copied(), &q);
                    let what = format!("{isa} q8 scores d={d} n_pos={n_pos} p={p}");
                    assert_close(s[p], 0.5 * want, 0.0, 0.5 * dot_budget(d, cond), &what);
                }
                let mut o = start.clone();
                attn_weighted_sum_q8_0(isa, &w, cache, stride, n_pos, &mut o);
                for i in 0..d {
                    let col: Vec<f32> = (0..n_pos).map(|p| exact[p * d + i]).collect();
                    let (want, cond) = dot64(w.iter().copied(), &col);
                    let st = f64::from(start[i]);
                    let tol = dot_budget(n_pos + 1, cond + st.abs());
                    let what = format!("{isa} q8 wsum d={d} n_pos={n_pos} i={i}");
                    assert_close(o[i], st + want, 0.0, tol, &what);
                }
            }
        }
    }
}

#[test]
fn q4_0_integer_weighted_sums_of_uneven_groups_match_the_reference_bits() {
    let mut r = rng(73);
    let fmt = KvQuant::Q4_0;
    for (d, extra) in [(64usize, 0usize), (96, 3)] {
        let rb = fmt.row_bytes(d).unwrap();
        let stride = rb + extra;
        for n_pos in [9usize, 33, 80] {
            let x = normal_vec(&mut r, n_pos * d, 2.0);
            let mut cache = vec![0u8; n_pos * stride];
            for p in 0..n_pos {
                kv_quantize(fmt, d, &x[p * d..][..d], &mut cache[p * stride..][..rb]);
            }
            let (cbuf, cr) = misaligned(&cache);
            let cache = &cbuf[cr];
            for n_q in [5usize, 6, 7, 12] {
                let w = normal_vec(&mut r, n_q * n_pos, 0.3);
                let start = normal_vec(&mut r, n_q * d, 1.0);
                let mut want = start.clone();
                attn_weighted_sum_kv(Isa::Scalar, fmt, &w, n_q, cache, stride, n_pos, &mut want);
                for isa in isas() {
                    let mut got = start.clone();
                    attn_weighted_sum_kv(isa, fmt, &w, n_q, cache, stride, n_pos, &mut got);
                    for i in 0..n_q * d {
                        assert_eq!(
                            got[i].to_bits(),
                            want[i].to_bits(),
                            "{isa} d={d} n_pos={n_pos} n_q={n_q} i={i}"
                        );
                    }
                }
            }
        }
    }
}
