//! Ternary kernels: every kernel set against the scalar reference and against a plain dot of
//! the trits, for every file layout, odd shapes, row sub-ranges and per-block scales.

use bitnet_kernels::formats::{pack_i2s, pack_tq1_0, pack_tq2_0};
use bitnet_kernels::ternary::{ternary_int_dots, ternary_int_dots_multi};
use bitnet_kernels::{
    ActScale, Isa, KernelError, TernaryMatrix, TernarySource, quantize_act, ternary_matmul,
    ternary_matvec,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Float outputs of the same integer dot through the same scaling code are identical; this is
/// the budget for comparing against an f64 reference of the dequantized product.
const FLOAT_REL_BUDGET: f32 = 1e-5;

fn rand_trits(rng: &mut StdRng, n: usize) -> Vec<i8> {
    (0..n).map(|_| rng.random_range(-1i8..=1)).collect()
}

fn rand_acts(rng: &mut StdRng, n: usize, padded: usize) -> Vec<i8> {
    let mut q: Vec<i8> = (0..n)
        .map(|_| rng.random_range(-128i16..=127) as i8)
        .collect();
    q.resize(padded, 0);
    q
}

fn exact_dot(trits: &[i8], cols: usize, r: usize, q: &[i8]) -> i32 {
    trits[r * cols..(r + 1) * cols]
        .iter()
        .zip(q)
        .map(|(&w, &a)| w as i32 * a as i32)
        .sum()
}

#[test]
fn int_dots_match_exact_for_every_isa_and_shape() {
    let mut rng = StdRng::seed_from_u64(1);
    for &(rows, cols) in &[
        (1, 1),
        (3, 100),
        (4, 256),
        (13, 300),
        (37, 640),
        (64, 3200),
        (9, 1000),
    ] {
        let trits = rand_trits(&mut rng, rows * cols);
        let w = TernaryMatrix::from_trits(&trits, rows, cols, 0.5).unwrap();
        assert_eq!(w.padded_cols() % 256, 0);
        let q = rand_acts(&mut rng, cols, w.padded_cols());
        let want: Vec<i32> = (0..rows).map(|r| exact_dot(&trits, cols, r, &q)).collect();
        for isa in Isa::available() {
            // whole range and a misaligned sub-range
            let mut got = vec![0; rows];
            ternary_int_dots(isa, &w, &q, 0..rows, &mut got);
            assert_eq!(got, want, "{isa} {rows}x{cols}");
            let (a, b) = (rows / 3, rows - rows / 5);
            let mut sub = vec![0; b - a];
            ternary_int_dots(isa, &w, &q, a..b, &mut sub);
            assert_eq!(sub, want[a..b], "{isa} {rows}x{cols} rows {a}..{b}");
        }
    }
}

#[test]
fn multi_token_dots_match_exact() {
    let mut rng = StdRng::seed_from_u64(2);
    // Every token count of the batched-decode kernels (1..=13: the group kernel, each register
    // tile, two even tiles) on rows that end off a row group, and longer batches (uneven
    // tiles, several column passes).
    let shapes = (1..=13).map(|n_tok| (7, 520, n_tok)).chain([
        (5, 256, 1),
        (16, 2304, 9),
        (33, 700, 17),
        (4, 4096, 8),
        (9, 6912, 25),
        (5, 2560, 12),
    ]);
    for (rows, cols, n_tok) in shapes {
        let trits = rand_trits(&mut rng, rows * cols);
        let w = TernaryMatrix::from_trits(&trits, rows, cols, 1.0).unwrap();
        let pc = w.padded_cols();
        let q: Vec<i8> = (0..n_tok)
            .flat_map(|_| rand_acts(&mut rng, cols, pc))
            .collect();
        // The activations also one byte off their allocation's alignment.
        let qbuf: Vec<i8> = std::iter::once(0).chain(q.iter().copied()).collect();
        for isa in Isa::available() {
            for (range, q) in [(0..rows, &q[..]), (1..rows - 1, &qbuf[1..])] {
                let n = range.len();
                let mut got = vec![0; n_tok * n];
                ternary_int_dots_multi(isa, &w, q, n_tok, range.clone(), &mut got);
                for t in 0..n_tok {
                    for (i, r) in range.clone().enumerate() {
                        assert_eq!(
                            got[t * n + i],
                            exact_dot(&trits, cols, r, &q[t * pc..]),
                            "{isa} {rows}x{cols} tok {t} row {r}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn extreme_values_do_not_overflow() {
    // All +1 / all -1 weights against all -128 / all 127 activations, long rows.
    let cols = 8640;
    for wv in [-1i8, 0, 1] {
        let trits = vec![wv; 4 * cols];
        let w = TernaryMatrix::from_trits(&trits, 4, cols, 1.0).unwrap();
        for av in [-128i8, 127] {
            let mut q = vec![av; cols];
            q.resize(w.padded_cols(), 0);
            for isa in Isa::available() {
                let mut got = vec![0; 4];
                ternary_int_dots(isa, &w, &q, 0..4, &mut got);
                assert_eq!(
                    got,
                    vec![wv as i32 * av as i32 * cols as i32; 4],
                    "{isa} w={wv} a={av}"
                );
                // The group kernel (2 tokens), the register tiles (4 and 8 tokens) and even
                // tiles (12 tokens: 6 + 6; 13: 7 + 6; 24: three of 8), over several passes.
                for n_tok in [2, 4, 8, 12, 13, 24] {
                    let mut got = vec![0; 4 * n_tok];
                    let qn = q.repeat(n_tok);
                    ternary_int_dots_multi(isa, &w, &qn, n_tok, 0..4, &mut got);
                    assert!(
                        got.iter()
                            .all(|&g| g == wv as i32 * av as i32 * cols as i32),
                        "{isa} n_tok {n_tok}"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_over_several_kernel_calls_matches_the_exact_dots() {
    // More rows than one kernel call takes (`ternary_matmul` cuts a product into calls of
    // about 256 rows, each packing the tiles' activations again; of one size from 16
    // tokens), ranges off every boundary (two calls, the longest single call, three calls)
    // and two or three token tiles: every output is the exact integer dot of its row,
    // scaled as the API says, whatever call and tile computed it.
    let mut rng = StdRng::seed_from_u64(41);
    let (rows, cols, w_scale) = (700, 3200, 0.5f32);
    let trits = rand_trits(&mut rng, rows * cols);
    let w = TernaryMatrix::from_trits(&trits, rows, cols, w_scale).unwrap();
    let pc = w.padded_cols();
    let mut q = vec![0i8; 17 * pc];
    let acts: Vec<ActScale> = (0..17)
        .map(|t| {
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
            quantize_act(Isa::Scalar, &x, &mut q[t * pc..(t + 1) * pc])
        })
        .collect();
    for n_tok in [9, 17] {
        let (q, acts) = (&q[..n_tok * pc], &acts[..n_tok]);
        for range in [5..597, 0..383, 1..700] {
            let n = range.len();
            for isa in Isa::available() {
                let mut got = vec![0f32; n_tok * n];
                ternary_matmul(isa, &w, q, acts, range.clone(), &mut got);
                for (t, act) in acts.iter().enumerate() {
                    let mut dots = vec![0i32; n];
                    let qt = &q[t * pc..(t + 1) * pc];
                    ternary_int_dots(Isa::Scalar, &w, qt, range.clone(), &mut dots);
                    let mul = w_scale / act.scale;
                    let want: Vec<f32> = dots.iter().map(|&d| d as f32 * mul).collect();
                    let at = format!("{isa} {n_tok} tokens {range:?} token {t}");
                    assert_eq!(got[t * n..(t + 1) * n], want[..], "{at}");
                }
            }
        }
    }
}

#[test]
fn per_block_scales_over_several_kernel_calls_match_the_block_sums() {
    // The per-block-scale path (TQ2_0 with a d per block) cut into several calls, of one
    // size from 16 tokens: each output is the sum over blocks, in block order, of the exact
    // integer dot of the block times its d, divided by the token's scale, as the API says.
    let mut rng = StdRng::seed_from_u64(43);
    let (rows, cols) = (700, 1024);
    let blocks = cols / 256;
    let trits = rand_trits(&mut rng, rows * cols);
    let d_of = |i: usize| 0.125 * (1 + i % 5) as f32;
    let bytes: Vec<u8> = trits
        .chunks(256)
        .enumerate()
        .flat_map(|(i, blk)| pack_tq2_0(blk, d_of(i)).unwrap())
        .collect();
    let w = TernaryMatrix::from_source(TernarySource::Tq2_0(&bytes), rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), None);
    let pc = w.padded_cols();
    let n_tok = 17;
    let mut q = vec![0i8; n_tok * pc];
    let acts: Vec<ActScale> = (0..n_tok)
        .map(|t| {
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0f32..2.0)).collect();
            quantize_act(Isa::Scalar, &x, &mut q[t * pc..(t + 1) * pc])
        })
        .collect();
    let want_row = |t: usize, r: usize| {
        let mut acc = 0f32;
        for b in 0..blocks {
            let dot: i32 = (b * 256..(b + 1) * 256)
                .map(|c| trits[r * cols + c] as i32 * q[t * pc + c] as i32)
                .sum();
            acc += dot as f32 * d_of(r * blocks + b);
        }
        acc / acts[t].scale
    };
    for range in [5..597, 1..700] {
        let n = range.len();
        for isa in Isa::available() {
            let mut got = vec![0f32; n_tok * n];
            ternary_matmul(isa, &w, &q, &acts, range.clone(), &mut got);
            for t in 0..n_tok {
                for (i, r) in range.clone().enumerate() {
                    let at = format!("{isa} {range:?} token {t} row {r}");
                    assert_eq!(got[t * n + i], want_row(t, r), "{at}");
                }
            }
        }
    }
}

#[test]
fn matvec_floats_are_identical_across_isas_and_match_matmul() {
    let mut rng = StdRng::seed_from_u64(3);
    let (rows, cols, n_tok) = (70, 3200, 5);
    let trits = rand_trits(&mut rng, rows * cols);
    let w = TernaryMatrix::from_trits(&trits, rows, cols, 0.75).unwrap();
    let pc = w.padded_cols();
    let mut q = vec![0i8; n_tok * pc];
    let mut acts = Vec::new();
    let mut xs = Vec::new();
    for t in 0..n_tok {
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-3.0f32..3.0)).collect();
        acts.push(quantize_act(Isa::Scalar, &x, &mut q[t * pc..(t + 1) * pc]));
        xs.push(x);
    }
    let mut reference = vec![0f32; n_tok * rows];
    ternary_matmul(Isa::Scalar, &w, &q, &acts, 0..rows, &mut reference);
    for isa in Isa::available() {
        let mut mm = vec![0f32; n_tok * rows];
        ternary_matmul(isa, &w, &q, &acts, 0..rows, &mut mm);
        assert_eq!(mm, reference, "{isa} matmul");
        for t in 0..n_tok {
            let mut mv = vec![0f32; rows - 3];
            ternary_matvec(isa, &w, &q[t * pc..(t + 1) * pc], acts[t], 3..rows, &mut mv);
            assert_eq!(
                mv,
                reference[t * rows + 3..(t + 1) * rows],
                "{isa} matvec tok {t}"
            );
        }
    }
    // Against the definition: (sum w q) * w_scale / act.scale, in f64.
    for t in 0..n_tok {
        for r in 0..rows {
            let d = exact_dot(&trits, cols, r, &q[t * pc..]) as f64 * 0.75 / acts[t].scale as f64;
            let got = reference[t * rows + r] as f64;
            assert!(
                (got - d).abs() <= FLOAT_REL_BUDGET as f64 * d.abs().max(1.0),
                "{got} vs {d}"
            );
        }
    }
}

fn dequant_all(w: &TernaryMatrix) -> Vec<f32> {
    let mut out = vec![0f32; w.rows() * w.cols()];
    for r in 0..w.rows() {
        w.dequantize_row(r, &mut out[r * w.cols()..(r + 1) * w.cols()]);
    }
    out
}

#[test]
fn file_layouts_round_trip() {
    let mut rng = StdRng::seed_from_u64(4);
    let (rows, cols) = (6, 768);
    let trits = rand_trits(&mut rng, rows * cols);
    let want: Vec<f32> = trits.iter().map(|&t| t as f32 * 0.5).collect();
    let i2s = pack_i2s(&trits, 0.5).unwrap();
    let tq2 = pack_tq2_0(&trits, 0.5).unwrap();
    let tq1 = pack_tq1_0(&trits, 0.5).unwrap();
    for src in [
        TernarySource::I2S(&i2s),
        TernarySource::Tq2_0(&tq2),
        TernarySource::Tq1_0(&tq1),
    ] {
        let w = TernaryMatrix::from_source(src, rows, cols).unwrap();
        assert_eq!(w.tensor_scale(), Some(0.5), "{src:?}");
        assert_eq!(dequant_all(&w), want, "{src:?}");
        let h = w.value_histogram();
        for (k, v) in [-1i8, 0, 1].iter().enumerate() {
            assert_eq!(h[k], trits.iter().filter(|&&t| t == *v).count() as u64);
        }
    }
    // I2_S blocks may straddle rows when cols is not a multiple of 128.
    let (rows, cols) = (16, 200);
    let trits = rand_trits(&mut rng, rows * cols);
    let w = TernaryMatrix::from_source(
        TernarySource::I2S(&pack_i2s(&trits, 2.0).unwrap()),
        rows,
        cols,
    )
    .unwrap();
    assert_eq!(
        dequant_all(&w),
        trits.iter().map(|&t| t as f32 * 2.0).collect::<Vec<_>>()
    );
    // Histogram excludes the padding columns (200 -> 256) and rows.
    let h = w.value_histogram();
    for (k, v) in [-1i8, 0, 1].iter().enumerate() {
        assert_eq!(h[k], trits.iter().filter(|&&t| t == *v).count() as u64);
    }
}

#[test]
fn i2s_whole_blocks_repack_like_the_trits() {
    // Rows of whole 256-blocks take I2_S's bit-moving path; it must give the bytes the
    // trit-by-trit path gives, padding rows (rows % 4 != 0) included.
    let mut rng = StdRng::seed_from_u64(11);
    for (rows, cols) in [(1, 256), (3, 512), (4, 768), (13, 2560), (6, 6912)] {
        let trits = rand_trits(&mut rng, rows * cols);
        let i2s = pack_i2s(&trits, 0.25).unwrap();
        let fast = TernaryMatrix::from_source(TernarySource::I2S(&i2s), rows, cols).unwrap();
        let slow = TernaryMatrix::from_trits(&trits, rows, cols, 0.25).unwrap();
        assert_eq!(fast.packed_bytes(), slow.packed_bytes(), "{rows}x{cols}");
        assert_eq!(fast.tensor_scale(), Some(0.25));
    }
}

#[test]
fn tq2_0_blocks_repack_like_the_trits() {
    // TQ2_0 takes a bit-moving path; it must give the bytes the trit-by-trit path gives,
    // padding rows (rows % 4 != 0) included, and the scales the format carries.
    let mut rng = StdRng::seed_from_u64(12);
    for (rows, cols) in [(1, 256), (3, 512), (4, 768), (13, 2560), (6, 6912)] {
        let trits = rand_trits(&mut rng, rows * cols);
        let tq2 = pack_tq2_0(&trits, 0.25).unwrap();
        let fast = TernaryMatrix::from_source(TernarySource::Tq2_0(&tq2), rows, cols).unwrap();
        let slow = TernaryMatrix::from_trits(&trits, rows, cols, 0.25).unwrap();
        assert_eq!(fast.packed_bytes(), slow.packed_bytes(), "{rows}x{cols}");
        assert_eq!(fast.tensor_scale(), Some(0.25));
    }
    // A d per block, every code and every field position: per-block scales.
    let (rows, cols) = (5, 1024);
    let trits: Vec<i8> = (0..rows * cols).map(|i| (i % 3) as i8 - 1).collect();
    let mut bytes = Vec::new();
    let mut ds = Vec::new();
    for (i, blk) in trits.chunks(256).enumerate() {
        let d = 0.125 * (1 + i % 3) as f32;
        ds.push(d);
        bytes.extend(pack_tq2_0(blk, d).unwrap());
    }
    let w = TernaryMatrix::from_source(TernarySource::Tq2_0(&bytes), rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), None);
    for (i, (&t, &v)) in trits.iter().zip(&dequant_all(&w)).enumerate() {
        assert_eq!(v, t as f32 * ds[i / 256], "value {i}");
    }
    // Code 3 anywhere, and a non-finite d, are the typed errors of the general path.
    let n = rows * cols;
    for j in [0, 1, 33, 64, 127, 128, 255, n / 2 + 37, n - 1] {
        let mut b = pack_tq2_0(&vec![0; n], 1.0).unwrap();
        let (blk, k) = (j / 256, j % 256);
        b[blk * 66 + 32 * (k / 128) + k % 32] |= 3 << (2 * (k % 128 / 32));
        let e = TernaryMatrix::from_source(TernarySource::Tq2_0(&b), rows, cols).unwrap_err();
        assert!(
            matches!(e, KernelError::BadWeight { index, value: 2, .. } if index == j),
            "value {j}: {e:?}"
        );
    }
    let mut b = pack_tq2_0(&trits, 1.0).unwrap();
    b[3 * 66 + 64..3 * 66 + 66].copy_from_slice(&0x7C00u16.to_le_bytes());
    let e = TernaryMatrix::from_source(TernarySource::Tq2_0(&b), rows, cols).unwrap_err();
    assert!(matches!(e, KernelError::NonFinite { .. }), "{e:?}");
}

#[test]
fn i2s_bad_code_is_reported_where_it_is() {
    // Code 3 in the first, a middle and the last value of a whole-block (fast path) matrix
    // and of one that is not (the general path): the same typed error with the value's index either way.
    for (rows, cols) in [(5, 512), (3, 384)] {
        let n = rows * cols;
        for j in [0, n / 2 + 37, n - 1] {
            let mut b = pack_i2s(&vec![0; n], 1.0).unwrap();
            let (blk, k) = (j / 128, j % 128);
            b[blk * 32 + k % 32] |= 3 << (6 - 2 * (k / 32));
            let e = TernaryMatrix::from_source(TernarySource::I2S(&b), rows, cols).unwrap_err();
            assert!(
                matches!(e, KernelError::BadWeight { index, value: 2, .. } if index == j),
                "{rows}x{cols} value {j}: {e:?}"
            );
        }
    }
}

#[test]
fn tq_per_block_scales_and_zero_blocks() {
    let mut rng = StdRng::seed_from_u64(5);
    let (rows, cols) = (9, 1024);
    let mut trits = rand_trits(&mut rng, rows * cols);
    // Blocks 0..256 of row 0 are all zero and carry d = 0: still a per-tensor scale.
    trits[..256].fill(0);
    let mut bytes = pack_tq2_0(&trits, 0.25).unwrap();
    bytes[64..66].copy_from_slice(&[0, 0]);
    let w = TernaryMatrix::from_source(TernarySource::Tq2_0(&bytes), rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), Some(0.25));

    // Different d per block: per-block path.
    let mut bytes = Vec::new();
    let mut ds = Vec::new();
    for (i, blk) in trits.chunks(256).enumerate() {
        let d = 0.125 * (1 + i % 5) as f32;
        ds.push(d);
        bytes.extend(pack_tq1_0(blk, d).unwrap());
    }
    let w = TernaryMatrix::from_source(TernarySource::Tq1_0(&bytes), rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), None);
    let deq = dequant_all(&w);
    for (i, (&t, &v)) in trits.iter().zip(&deq).enumerate() {
        assert_eq!(v, t as f32 * ds[i / 256]);
    }
    let pc = w.padded_cols();
    let n_tok = 3;
    let x: Vec<f32> = (0..n_tok * cols)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let mut q = vec![0i8; n_tok * pc];
    let acts: Vec<ActScale> = (0..n_tok)
        .map(|t| {
            quantize_act(
                Isa::Scalar,
                &x[t * cols..(t + 1) * cols],
                &mut q[t * pc..(t + 1) * pc],
            )
        })
        .collect();
    let mut reference = vec![0f32; n_tok * rows];
    ternary_matmul(Isa::Scalar, &w, &q, &acts, 0..rows, &mut reference);
    for t in 0..n_tok {
        for r in 0..rows {
            let want: f64 = (0..cols)
                .map(|c| deq[r * cols + c] as f64 * q[t * pc + c] as f64)
                .sum::<f64>()
                / acts[t].scale as f64;
            let got = reference[t * rows + r] as f64;
            assert!(
                (got - want).abs() <= 1e-4 * want.abs().max(1.0),
                "{got} vs {want}"
            );
        }
    }
    for isa in Isa::available() {
        let mut got = vec![0f32; n_tok * rows];
        ternary_matmul(isa, &w, &q, &acts, 0..rows, &mut got);
        assert_eq!(got, reference, "{isa}");
        let mut mv = vec![0f32; rows - 2];
        ternary_matvec(isa, &w, &q[pc..2 * pc], acts[1], 1..rows - 1, &mut mv);
        assert_eq!(mv, reference[rows + 1..2 * rows - 1], "{isa}");
    }
}

#[test]
fn bad_sources_are_typed_errors() {
    let e = TernaryMatrix::from_source(TernarySource::Tq2_0(&[0; 65]), 1, 256).unwrap_err();
    assert!(matches!(
        e,
        KernelError::SourceLength {
            expected: 66,
            got: 65,
            ..
        }
    ));
    let e = TernaryMatrix::from_source(TernarySource::Tq1_0(&[0; 54]), 1, 200).unwrap_err();
    assert!(matches!(e, KernelError::BadShape { .. }));
    let e = TernaryMatrix::from_source(TernarySource::I2S(&[0; 10]), 1, 128).unwrap_err();
    assert!(matches!(e, KernelError::SourceLength { .. }));
    let e = TernaryMatrix::from_trits(&[0, 2, 0], 1, 3, 1.0).unwrap_err();
    assert!(matches!(
        e,
        KernelError::BadWeight {
            index: 1,
            value: 2,
            ..
        }
    ));
    assert!(TernaryMatrix::from_trits(&[], 0, 0, 1.0).is_err());
    // Too wide for exact i32 dots: refused before any allocation.
    assert!(matches!(
        TernaryMatrix::from_source(TernarySource::Tq2_0(&[]), 1, 1 << 23),
        Err(KernelError::BadShape { .. })
    ));
    // I2_S code 3 is not a trit.
    let mut b = pack_i2s(&[0; 128], 1.0).unwrap();
    b[5] = 0xFF;
    assert!(matches!(
        TernaryMatrix::from_source(TernarySource::I2S(&b), 1, 128),
        Err(KernelError::BadWeight { .. })
    ));
}

#[test]
fn misaligned_activation_buffers() {
    // The engine may hand activations at any byte offset: every kernel uses unaligned loads.
    let mut rng = StdRng::seed_from_u64(6);
    let (rows, cols, n_tok) = (12, 520, 3);
    let trits = rand_trits(&mut rng, rows * cols);
    let w = TernaryMatrix::from_trits(&trits, rows, cols, 1.0).unwrap();
    let pc = w.padded_cols();
    for offset in [1usize, 3, 17, 63] {
        let mut buf = vec![0i8; offset + n_tok * pc];
        for t in 0..n_tok {
            let row = rand_acts(&mut rng, cols, pc);
            buf[offset + t * pc..offset + (t + 1) * pc].copy_from_slice(&row);
        }
        let q = &buf[offset..];
        for isa in Isa::available() {
            let mut got = vec![0; rows];
            ternary_int_dots(isa, &w, q, 0..rows, &mut got);
            let mut multi = vec![0; n_tok * rows];
            ternary_int_dots_multi(isa, &w, q, n_tok, 0..rows, &mut multi);
            for r in 0..rows {
                assert_eq!(
                    got[r],
                    exact_dot(&trits, cols, r, q),
                    "{isa} offset {offset}"
                );
                for t in 0..n_tok {
                    assert_eq!(
                        multi[t * rows + r],
                        exact_dot(&trits, cols, r, &q[t * pc..])
                    );
                }
            }
        }
    }
}

#[test]
fn long_rows_multi_token_extremes() {
    // Rows longer than 64 blocks (the SMMLA kernel folds its scaled accumulators every 64
    // blocks), the largest products (+1 weights, i.e. code 2, x -128) and odd token counts,
    // also over a block sub-range and a row range inside one group.
    let cols = 64 * 256 * 2 + 300;
    let mut rng = StdRng::seed_from_u64(3);
    let mut trits = vec![1i8; 4 * cols];
    for t in trits[3 * cols..].iter_mut() {
        *t = rng.random_range(-1i8..=1);
    }
    let w = TernaryMatrix::from_trits(&trits, 4, cols, 1.0).unwrap();
    let pc = w.padded_cols();
    for n_tok in [1usize, 2, 3, 5] {
        let mut q = vec![-128i8; n_tok * pc];
        for t in 0..n_tok {
            q[t * pc + cols..(t + 1) * pc].fill(0);
            if t % 2 == 1 {
                for v in q[t * pc..t * pc + cols].iter_mut() {
                    *v = rng.random_range(-128i16..=127) as i8;
                }
            }
        }
        for isa in Isa::available() {
            for range in [0..4, 1..3] {
                let n = range.len();
                let mut got = vec![0; n_tok * n];
                ternary_int_dots_multi(isa, &w, &q, n_tok, range.clone(), &mut got);
                for t in 0..n_tok {
                    for (i, r) in range.clone().enumerate() {
                        assert_eq!(
                            got[t * n + i],
                            exact_dot(&trits, cols, r, &q[t * pc..]),
                            "{isa} n_tok {n_tok} tok {t} row {r}"
                        );
                    }
                }
            }
            let mut one = vec![0; 3];
            ternary_int_dots(isa, &w, &q[..pc], 1..4, &mut one);
            for (i, r) in (1..4).enumerate() {
                assert_eq!(one[i], exact_dot(&trits, cols, r, &q), "{isa} row {r}");
            }
        }
    }
}
