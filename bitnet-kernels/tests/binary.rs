//! 1-bit kernels: sign weights x int8 and XNOR-popcount, every kernel set against exact sums.

use bitnet_kernels::formats::pack_q1;
use bitnet_kernels::{
    ActScale, BinaryMatrix, Isa, KernelError, binary_binary_matvec, binary_matmul, binary_matvec,
    quantize_act, quantize_act_binary,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Budget for float outputs against an f64 evaluation of the same definition.
const FLOAT_REL_BUDGET: f64 = 1e-5;

fn rand_signs(rng: &mut StdRng, n: usize) -> Vec<i8> {
    (0..n)
        .map(|_| if rng.random_bool(0.5) { 1 } else { -1 })
        .collect()
}

fn quantize_rows(isa: Isa, x: &[f32], cols: usize, pc: usize) -> (Vec<i8>, Vec<ActScale>) {
    let n_tok = x.len() / cols;
    let mut q = vec![0i8; n_tok * pc];
    let acts = (0..n_tok)
        .map(|t| {
            quantize_act(
                isa,
                &x[t * cols..(t + 1) * cols],
                &mut q[t * pc..(t + 1) * pc],
            )
        })
        .collect();
    (q, acts)
}

#[test]
fn sign_x_int8_matches_exact() {
    let mut rng = StdRng::seed_from_u64(20);
    for &(rows, cols, n_tok) in &[
        (1, 1, 1),
        (5, 100, 2),
        (9, 640, 1),
        (17, 2560, 9),
        (6, 3000, 4),
        // Token tails of 3 after none and after one 4-token tile.
        (3, 700, 3),
        (4, 300, 7),
    ] {
        let signs = rand_signs(&mut rng, rows * cols);
        let w = BinaryMatrix::from_signs(&signs, rows, cols, 0.5).unwrap();
        let pc = w.padded_cols();
        let x: Vec<f32> = (0..n_tok * cols)
            .map(|_| rng.random_range(-2.0f32..2.0))
            .collect();
        let (q, acts) = quantize_rows(Isa::Scalar, &x, cols, pc);
        let mut reference = vec![0f32; n_tok * rows];
        binary_matmul(Isa::Scalar, &w, &q, &acts, 0..rows, &mut reference);
        for t in 0..n_tok {
            for r in 0..rows {
                let dot: i64 = (0..cols)
                    .map(|c| signs[r * cols + c] as i64 * q[t * pc + c] as i64)
                    .sum();
                let want = dot as f64 * 0.5 / acts[t].scale as f64;
                let got = reference[t * rows + r] as f64;
                assert!(
                    (got - want).abs() <= FLOAT_REL_BUDGET * want.abs().max(1.0),
                    "{got} {want}"
                );
            }
        }
        for isa in Isa::available() {
            let mut got = vec![0f32; n_tok * rows];
            binary_matmul(isa, &w, &q, &acts, 0..rows, &mut got);
            assert_eq!(got, reference, "{isa} {rows}x{cols}x{n_tok}");
            let mut mv = vec![0f32; rows - rows / 2];
            binary_matvec(isa, &w, &q[..pc], acts[0], rows / 2..rows, &mut mv);
            assert_eq!(mv, reference[rows / 2..rows], "{isa}");
        }
    }
}

#[test]
fn xnor_popcount_matches_exact() {
    let mut rng = StdRng::seed_from_u64(21);
    for &(rows, cols) in &[(1, 1), (3, 64), (7, 300), (12, 2560), (5, 6912), (4, 1000)] {
        let signs = rand_signs(&mut rng, rows * cols);
        let w = BinaryMatrix::from_signs(&signs, rows, cols, 2.0).unwrap();
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let mut bits = vec![0u64; w.padded_cols() / 64];
        let s = quantize_act_binary(Isa::Scalar, &x, &mut bits);
        let mut reference = vec![0f32; rows];
        binary_binary_matvec(Isa::Scalar, &w, &bits, s, 0..rows, &mut reference);
        for r in 0..rows {
            let dot: i32 = (0..cols)
                .map(|c| signs[r * cols + c] as i32 * if x[c] > 0.0 { 1 } else { -1 })
                .sum();
            assert_eq!(reference[r], dot as f32 * (2.0 * s), "row {r}");
        }
        for isa in Isa::available() {
            let mut got = vec![0f32; rows];
            binary_binary_matvec(isa, &w, &bits, s, 0..rows, &mut got);
            assert_eq!(got, reference, "{isa} {rows}x{cols}");
            let mut sub = vec![0f32; rows - 1];
            binary_binary_matvec(isa, &w, &bits, s, 1..rows, &mut sub);
            assert_eq!(sub, reference[1..], "{isa}");
        }
    }
}

#[test]
fn q1_groups_uniform_and_per_group_scales() {
    let mut rng = StdRng::seed_from_u64(22);
    let (rows, cols) = (5, 640);
    let signs = rand_signs(&mut rng, rows * cols);
    let w = BinaryMatrix::from_q1_bits(&pack_q1(&signs, cols, 0.25).unwrap(), rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), Some(0.25));
    let mut row = vec![0f32; cols];
    w.dequantize_row(3, &mut row);
    assert_eq!(
        row,
        signs[3 * cols..4 * cols]
            .iter()
            .map(|&s| s as f32 * 0.25)
            .collect::<Vec<_>>()
    );

    // Per-group scales: rebuild the bytes group by group.
    let mut bytes = Vec::new();
    let mut gs = Vec::new();
    for (g, chunk) in signs.chunks(128).enumerate() {
        let s = 0.5 + (g % 3) as f32;
        gs.push(s);
        bytes.extend(pack_q1(chunk, 128, s).unwrap());
    }
    let w = BinaryMatrix::from_q1_bits(&bytes, rows, cols).unwrap();
    assert_eq!(w.tensor_scale(), None);
    let x: Vec<f32> = (0..2 * cols)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    let (q, acts) = quantize_rows(Isa::Scalar, &x, cols, w.padded_cols());
    let mut reference = vec![0f32; 2 * rows];
    binary_matmul(Isa::Scalar, &w, &q, &acts, 0..rows, &mut reference);
    let pc = w.padded_cols();
    for t in 0..2 {
        for r in 0..rows {
            let want: f64 = (0..cols)
                .map(|c| {
                    signs[r * cols + c] as f64
                        * gs[(r * cols + c) / 128] as f64
                        * q[t * pc + c] as f64
                })
                .sum::<f64>()
                / acts[t].scale as f64;
            let got = reference[t * rows + r] as f64;
            assert!(
                (got - want).abs() <= FLOAT_REL_BUDGET * want.abs().max(1.0),
                "{got} {want}"
            );
        }
    }
    let mut bits = vec![0u64; pc / 64];
    let s = quantize_act_binary(Isa::Scalar, &x[..cols], &mut bits);
    let mut bb_ref = vec![0f32; rows];
    binary_binary_matvec(Isa::Scalar, &w, &bits, s, 0..rows, &mut bb_ref);
    for r in 0..rows {
        let want: f64 = (0..cols)
            .map(|c| {
                signs[r * cols + c] as f64
                    * gs[(r * cols + c) / 128] as f64
                    * if x[c] > 0.0 { 1.0 } else { -1.0 }
            })
            .sum::<f64>()
            * s as f64;
        assert!((bb_ref[r] as f64 - want).abs() <= FLOAT_REL_BUDGET * want.abs().max(1.0));
    }
    for isa in Isa::available() {
        let mut got = vec![0f32; 2 * rows];
        binary_matmul(isa, &w, &q, &acts, 0..rows, &mut got);
        assert_eq!(got, reference, "{isa}");
        let mut bb = vec![0f32; rows];
        binary_binary_matvec(isa, &w, &bits, s, 0..rows, &mut bb);
        assert_eq!(bb, bb_ref, "{isa}");
    }
}

#[test]
fn bad_binary_sources_are_typed_errors() {
    assert!(matches!(
        BinaryMatrix::from_signs(&[1, 0, -1], 1, 3, 1.0),
        Err(KernelError::BadWeight { index: 1, .. })
    ));
    assert!(matches!(
        BinaryMatrix::from_q1_bits(&[0; 17], 1, 128),
        Err(KernelError::SourceLength { .. })
    ));
    assert!(matches!(
        BinaryMatrix::from_q1_bits(&[0; 18], 1, 100),
        Err(KernelError::BadShape { .. })
    ));
}

#[test]
fn misaligned_activation_buffers() {
    let mut rng = StdRng::seed_from_u64(23);
    let (rows, cols) = (6, 700);
    let signs = rand_signs(&mut rng, rows * cols);
    let w = BinaryMatrix::from_signs(&signs, rows, cols, 1.0).unwrap();
    let pc = w.padded_cols();
    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    for offset in [1usize, 5, 33] {
        let mut buf = vec![0i8; offset + pc];
        let a = quantize_act(Isa::Scalar, &x, &mut buf[offset..]);
        let q = &buf[offset..];
        let mut want = vec![0f32; rows];
        binary_matvec(Isa::Scalar, &w, q, a, 0..rows, &mut want);
        for r in 0..rows {
            let dot: i32 = (0..cols)
                .map(|c| signs[r * cols + c] as i32 * q[c] as i32)
                .sum();
            assert_eq!(want[r], dot as f32 * (1.0 / a.scale));
        }
        for isa in Isa::available() {
            let mut got = vec![0f32; rows];
            binary_matvec(isa, &w, q, a, 0..rows, &mut got);
            assert_eq!(got, want, "{isa} offset {offset}");
        }
    }
}
