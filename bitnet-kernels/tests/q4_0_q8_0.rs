//! The Q4_0 x Q8_0 product (`matmul_q4_0_q8_0`, the `--head q4_0` head): every kernel set
//! this CPU runs gives the scalar reference's bits (random and edge blocks, every tile shape
//! of the token walks from 1 to 33 tokens, row counts and ranges off every row group,
//! misaligned buffers), and the reference stays within the crate's dot budget of the exact
//! dot of the dequantized rows.

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;
use rand::rngs::StdRng;

/// Q4_0 rows of random nibbles (every byte value) with sane f16 scales.
fn random_q4_rows(r: &mut StdRng, n_rows: usize, cols: usize) -> Vec<u8> {
    let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
    let mut w: Vec<u8> = (0..n_rows * rb).map(|_| r.random()).collect();
    for blk in w.chunks_exact_mut(Q4_0_BLOCK_BYTES) {
        blk[..2].copy_from_slice(&f32_to_f16(r.random_range(1e-4..0.05)).to_le_bytes());
    }
    w
}

/// `n_tok` activation rows quantized to Q8_0.
fn random_q8_acts(r: &mut StdRng, n_tok: usize, cols: usize) -> Vec<u8> {
    let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
    let x = normal_vec(r, n_tok * cols, 2.0);
    let mut xq = vec![0u8; n_tok * rb];
    for (xr, qr) in x.chunks_exact(cols).zip(xq.chunks_exact_mut(rb)) {
        quantize_row_q8_0(xr, qr);
    }
    xq
}

fn product(
    isa: Isa,
    w: &[u8],
    cols: usize,
    xq: &[u8],
    n_tok: usize,
    rows: std::ops::Range<usize>,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_tok * rows.len()];
    // Both operands misaligned by one byte.
    let (wbuf, wr) = misaligned(w);
    let (xbuf, xr) = misaligned(xq);
    matmul_q4_0_q8_0(isa, &wbuf[wr], cols, &xbuf[xr], n_tok, rows, &mut out);
    out
}

/// Every set against the reference on `w` (`n_rows` rows) and `xq`, over ranges that start
/// and end off the four-row groups.
fn check_all_sets(w: &[u8], n_rows: usize, cols: usize, xq: &[u8], n_tok: usize, what: &str) {
    let mut ranges = vec![0..n_rows, 0..0, n_rows - 1..n_rows];
    if n_rows > 9 {
        ranges.extend([3..10, 5..6, 1..n_rows]);
    }
    for rows in ranges {
        let want = product(Isa::Scalar, w, cols, xq, n_tok, rows.clone());
        for isa in isas() {
            let got = product(isa, w, cols, xq, n_tok, rows.clone());
            assert_same(
                &got,
                &want,
                &format!("{isa} {what} cols {cols} n_tok {n_tok} rows {rows:?}"),
            );
        }
    }
}

#[test]
fn every_set_gives_the_reference_bits_on_random_rows() {
    let mut r = rng(41);
    // Every tail of the four-block pass, the 2B-4T width and one random length.
    let random_len = r.random_range(1..=120) * 32;
    for cols in [32, 64, 96, 128, 160, 224, 2560, random_len] {
        // 13 rows: three groups of four and a tail row.
        let n_rows = 13;
        let w = random_q4_rows(&mut r, n_rows, cols);
        let tokens: Vec<usize> = if cols == 2560 {
            vec![1, 2, 5, 8, 9, 17, 33]
        } else {
            (1..=33).collect()
        };
        for n_tok in tokens {
            let xq = random_q8_acts(&mut r, n_tok, cols);
            check_all_sets(&w, n_rows, cols, &xq, n_tok, "random");
        }
    }
}

/// Blocks at the edges of the format: all-zero blocks, every nibble 0 or 15 against
/// activations of +-127 (and -128, which no quantizer writes but every kernel takes
/// exactly), the largest, smallest normal and subnormal f16 scales, and infinite and NaN
/// scales, each mixed with ordinary blocks.
#[test]
fn every_set_gives_the_reference_bits_on_edge_blocks() {
    let mut r = rng(42);
    let cols = 320;
    let n_rows = 11;
    let scales = [0.0f32, 65504.0, 6.1e-5, 6e-8, -3.5, f32::INFINITY, f32::NAN];
    for case in 0..8 {
        let mut w = random_q4_rows(&mut r, n_rows, cols);
        let mut xq = random_q8_acts(&mut r, 5, cols);
        for (k, blk) in w.chunks_exact_mut(Q4_0_BLOCK_BYTES).enumerate() {
            let pick = r.random_range(0..4);
            match (case, pick) {
                (0, _) => blk.fill(0),
                (1, 0) => blk[2..].fill(0x00),
                (1, 1) => blk[2..].fill(0xFF),
                (1, 2) => blk[2..].fill(0x0F),
                (2 | 3, _) => blk[2..].fill(if k % 2 == 0 { 0x00 } else { 0xFF }),
                (4..=7, 0) => {
                    let s = scales[r.random_range(0..scales.len())];
                    blk[..2].copy_from_slice(&f32_to_f16(s).to_le_bytes());
                }
                _ => {}
            }
        }
        for blk in xq.chunks_exact_mut(Q8_0_BLOCK_BYTES) {
            match case {
                2 => blk[2..].fill(127),
                3 => {
                    for (j, q) in blk[2..].iter_mut().enumerate() {
                        *q = [127u8, 0x81, 0x80][j % 3];
                    }
                }
                6 => {
                    let s = scales[r.random_range(0..scales.len())];
                    blk[..2].copy_from_slice(&f32_to_f16(s).to_le_bytes());
                }
                7 => blk[2..].fill(0x81),
                _ => {}
            }
        }
        for n_tok in [1, 2, 5] {
            let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
            check_all_sets(
                &w,
                n_rows,
                cols,
                &xq[..n_tok * rb],
                n_tok,
                &format!("edge case {case}"),
            );
        }
    }
}

/// The reference against the dot of the dequantized rows in f64 (exact: a dequantized
/// weight or activation is an f16 scale times a small integer, exact in f32), within the
/// crate's dot budget `(n + DOT_SLACK_TERMS) * DOT_EPS_PER_TERM * sum |w_i a_i|` for
/// `n = row_len` (the f32 product of the two scales and the lane sums' roundings are far
/// inside it).
#[test]
fn the_reference_is_within_the_dot_budget_of_the_dequantized_dot() {
    let mut r = rng(43);
    for cols in [32, 96, 2560] {
        let n_rows = 6;
        let n_tok = 3;
        let w = random_q4_rows(&mut r, n_rows, cols);
        let xq = random_q8_acts(&mut r, n_tok, cols);
        let (wrb, xrb) = (
            RowFormat::Q4_0.row_bytes(cols).unwrap(),
            RowFormat::Q8_0.row_bytes(cols).unwrap(),
        );
        let got = product(Isa::Scalar, &w, cols, &xq, n_tok, 0..n_rows);
        let mut wf = vec![0f32; cols];
        let mut xf = vec![0f32; cols];
        for t in 0..n_tok {
            dequantize_row(RowFormat::Q8_0, &xq[t * xrb..(t + 1) * xrb], &mut xf);
            for row in 0..n_rows {
                dequantize_row(RowFormat::Q4_0, &w[row * wrb..(row + 1) * wrb], &mut wf);
                let (want, cond) = dot64(wf.iter().copied(), &xf);
                assert_close(
                    got[t * n_rows + row],
                    want,
                    0.0,
                    dot_budget(cols, cond),
                    &format!("cols {cols} tok {t} row {row}"),
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "xq must be n_tok Q8_0 rows")]
fn activations_of_the_wrong_size_panic() {
    let w = vec![0u8; 2 * Q4_0_BLOCK_BYTES];
    let xq = vec![0u8; Q8_0_BLOCK_BYTES];
    let mut out = vec![0f32; 4];
    matmul_q4_0_q8_0(Isa::Scalar, &w, 32, &xq, 2, 0..2, &mut out);
}

#[test]
#[should_panic(expected = "need")]
fn rows_past_the_matrix_panic() {
    let w = vec![0u8; 2 * Q4_0_BLOCK_BYTES];
    let xq = vec![0u8; Q8_0_BLOCK_BYTES];
    let mut out = vec![0f32; 3];
    matmul_q4_0_q8_0(Isa::Scalar, &w, 32, &xq, 1, 0..3, &mut out);
}
