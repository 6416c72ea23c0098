//! The reference integer product of Q6_K rows and Q8_K activations (`matmul_q6k_q8k`, the
//! specification the grouped Q6_K head's kernels match bit for bit: `tests/q6kr.rs`) is the
//! f32 product of the dequantized rows, within the float budget against the dequantized
//! activations and within their Q8_K rounding against the original ones; bad shapes are
//! refused.

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
