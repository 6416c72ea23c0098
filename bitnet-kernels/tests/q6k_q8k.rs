//! The Q6_K head's integer product (`matmul_q6k_q8k`): every kernel set gives the scalar
//! reference's bits on random rows, on the edges of the integer range (codes 0 and 63,
//! sub-block scales -128 and 127, activations ±127), on all-zero blocks and special f16
//! scales, for 1..=33 tokens and several row ranges; and the reference is the f32 product of
//! the dequantized rows, within the float budget against the dequantized activations and
//! within their Q8_K rounding against the original ones.

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;
use rand::rngs::StdRng;

/// Q6_K rows of random codes and sub-block scales (every byte value) with f16 block scales
/// drawn from `d`.
fn random_q6k_rows(r: &mut StdRng, n_rows: usize, cols: usize, d: (f32, f32)) -> Vec<u8> {
    let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
    let mut w: Vec<u8> = (0..n_rows * rb).map(|_| r.random()).collect();
    for blk in w.chunks_exact_mut(Q6K_BLOCK_BYTES) {
        blk[208..].copy_from_slice(&f32_to_f16(r.random_range(d.0..d.1)).to_le_bytes());
    }
    w
}

/// `n_tok` rows of roughly normal activations, quantized, with room for `capacity`.
fn random_acts(r: &mut StdRng, n_tok: usize, cols: usize, capacity: usize) -> (Vec<f32>, Q8KActs) {
    let x = normal_vec(r, n_tok * cols, 2.0);
    let mut a = Q8KActs::new(cols, capacity);
    for (t, row) in x.chunks_exact(cols).enumerate() {
        a.quantize_row(t, row);
    }
    (x, a)
}

/// Row ranges of `rows`: all, the first row, a middle stretch, the tail, none.
fn ranges(rows: usize) -> Vec<std::ops::Range<usize>> {
    let mut v = vec![0..rows, 0..1, rows / 3..rows, rows - 1..rows, 0..0];
    if rows > 4 {
        v.push(1..rows - 2);
    }
    v
}

/// Every set against the reference for `w` and `x` over `n_tok` tokens and every range.
fn check_sets(w: &[u8], rows: usize, cols: usize, x: &Q8KActs, n_tok: usize, what: &str) {
    for rr in ranges(rows) {
        let mut want = vec![f32::NAN; n_tok * rr.len()];
        matmul_q6k_q8k(Isa::Scalar, w, cols, x, n_tok, rr.clone(), &mut want);
        for isa in isas() {
            let mut got = vec![f32::NAN; n_tok * rr.len()];
            matmul_q6k_q8k(isa, w, cols, x, n_tok, rr.clone(), &mut got);
            assert_same(
                &got,
                &want,
                &format!("{isa} {what} {rows}x{cols} n_tok {n_tok} rows {rr:?}"),
            );
        }
    }
}

#[test]
fn every_set_gives_the_reference_bits() {
    let mut r = rng(61);
    for (rows, cols) in [(45, 2560), (7, 256), (19, 768), (1, 512)] {
        let w = random_q6k_rows(&mut r, rows, cols, (1e-4, 0.05));
        // Every token tile (1..=8), several tiles and a tail, more room than tokens.
        for n_tok in (1usize..=9).chain([16, 17, 32, 33]) {
            let (_, x) = random_acts(&mut r, n_tok, cols, n_tok + 2);
            check_sets(&w, rows, cols, &x, n_tok, "random");
        }
    }
}

#[test]
fn the_integer_edges_give_the_reference_bits() {
    let mut r = rng(62);
    let (rows, cols) = (13, 1024);
    let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
    let mut w = random_q6k_rows(&mut r, rows, cols, (0.5, 2.0));
    for (i, blk) in w.chunks_exact_mut(Q6K_BLOCK_BYTES).enumerate() {
        match i % 5 {
            // Every code 63 and the largest scales of either sign: the extreme block dots.
            0 => {
                blk[..192].fill(0xff);
                blk[192..208].fill(if i % 2 == 0 { 0x80 } else { 0x7f });
            }
            // Every code 0 (-32 after centring).
            1 => {
                blk[..192].fill(0);
                blk[192..208].fill(0x80);
            }
            // An all-zero block, scale included.
            2 => blk.fill(0),
            _ => {}
        }
    }
    // Activations all ±127 (a ±1 pattern), an all-zero row, and random rows.
    let n_tok = 33;
    let mut x = Q8KActs::new(cols, n_tok);
    for t in 0..n_tok {
        let row: Vec<f32> = match t % 4 {
            0 => vec![1.0; cols],
            1 => (0..cols)
                .map(|e| if e % 3 == 0 { -1.0 } else { 1.0 })
                .collect(),
            2 => vec![0.0; cols],
            _ => normal_vec(&mut r, cols, 1.0),
        };
        x.quantize_row(t, &row);
    }
    assert!(x.quants(0).iter().all(|&q| q == 127));
    for n in [1, 2, 5, 8, 33] {
        check_sets(&w, rows, cols, &x, n, "edges");
    }
    // The extreme blocks reach the widest sums the kernels hold.
    let mut out = vec![0.0f32; rows];
    matmul_q6k_q8k(Isa::Scalar, &w[..rows * rb], cols, &x, 1, 0..rows, &mut out);
    assert!(out.iter().all(|v| v.is_finite()));
}

#[test]
fn special_scales_give_the_reference_bits() {
    let mut r = rng(63);
    let (rows, cols) = (11, 512);
    let specials: [u16; 7] = [0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e00];
    let mut w = random_q6k_rows(&mut r, rows, cols, (1e-3, 0.1));
    for (i, blk) in w.chunks_exact_mut(Q6K_BLOCK_BYTES).enumerate() {
        if i % 3 == 0 {
            blk[208..].copy_from_slice(&specials[(i / 3) % specials.len()].to_le_bytes());
        }
    }
    let (_, x) = random_acts(&mut r, 4, cols, 4);
    for n in 1..=4 {
        check_sets(&w, rows, cols, &x, n, "special scales");
    }
}

/// Float error budget of the reference against the f64 dot of the dequantized rows and
/// activations, in units of `f32::EPSILON * Σ|w x|`: a rounding per block sum, three per
/// block term (two products and `isum` to f32), two per dequantized weight (`(d * sc) * q`).
fn float_budget(blocks: usize) -> f64 {
    (blocks + 6) as f64 * f64::from(f32::EPSILON)
}

#[test]
fn the_reference_is_the_dequantized_product() {
    let mut r = rng(64);
    for (rows, cols) in [(9, 2560), (5, 256)] {
        let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
        let w = random_q6k_rows(&mut r, rows, cols, (1e-3, 0.05));
        let n_tok = 3;
        let (xf, x) = random_acts(&mut r, n_tok, cols, n_tok);
        let mut out = vec![0.0f32; n_tok * rows];
        matmul_q6k_q8k(Isa::Scalar, &w, cols, &x, n_tok, 0..rows, &mut out);
        let mut wf = vec![0.0f32; cols];
        for i in 0..rows {
            dequantize_row(RowFormat::Q6K, &w[i * rb..(i + 1) * rb], &mut wf);
            for t in 0..n_tok {
                let got = f64::from(out[t * rows + i]);
                // Against the activations as quantized: only float rounding.
                let xhat: Vec<f32> = (0..cols)
                    .map(|e| x.scales(t)[e / QK_K] * f32::from(x.quants(t)[e]))
                    .collect();
                let (exact, cond) = dot64(wf.iter().copied(), &xhat);
                let tol = float_budget(cols / QK_K) * cond;
                assert!(
                    (got - exact).abs() <= tol,
                    "{rows}x{cols} row {i} token {t}: {got} vs {exact} (tol {tol:e})"
                );
                // Against the original activations: within half a Q8_K step per element.
                let xr = &xf[t * cols..(t + 1) * cols];
                let (plain, _) = dot64(wf.iter().copied(), xr);
                let q_err: f64 = (0..cols)
                    .map(|e| f64::from(wf[e].abs()) * f64::from(x.scales(t)[e / QK_K]) * 0.5)
                    .sum();
                assert!(
                    (got - plain).abs() <= q_err + tol,
                    "{rows}x{cols} row {i} token {t}: {got} vs f32 {plain} (tol {q_err:e})"
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "differ in width")]
fn a_width_mismatch_is_refused() {
    let w = vec![0u8; 2 * Q6K_BLOCK_BYTES];
    let x = Q8KActs::new(256, 1);
    let mut out = vec![0.0; 1];
    matmul_q6k_q8k(Isa::Scalar, &w, 512, &x, 1, 0..1, &mut out);
}

#[test]
#[should_panic(expected = "outside")]
fn rows_past_the_weights_are_refused() {
    let w = vec![0u8; Q6K_BLOCK_BYTES];
    let x = Q8KActs::new(256, 1);
    let mut out = vec![0.0; 2];
    matmul_q6k_q8k(Isa::Scalar, &w, 256, &x, 1, 0..2, &mut out);
}
