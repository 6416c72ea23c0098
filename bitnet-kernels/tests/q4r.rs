//! The grouped Q4_0 head (`Q4R`) and its product: the layout holds the Q4_0 rows' bytes
//! exactly (rows not a multiple of 16, columns not a multiple of 128, every nibble value),
//! the reference is the exact block dots combined in f32 (checked against f64 and against
//! the row-layout product), and every kernel set gives the reference's bits for every tile
//! shape of the token walk, group-aligned row ranges and the padded last group, and for
//! zero, subnormal, infinite and NaN scales.

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;
use rand::rngs::StdRng;

/// Q4_0 rows of random nibbles (every value) with sane f16 scales.
fn random_q4_rows(r: &mut StdRng, n_rows: usize, cols: usize) -> Vec<u8> {
    let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
    let mut w: Vec<u8> = (0..n_rows * rb).map(|_| r.random()).collect();
    for blk in w.chunks_exact_mut(Q4_0_BLOCK_BYTES) {
        blk[..2].copy_from_slice(&f32_to_f16(r.random_range(1e-4..0.05)).to_le_bytes());
    }
    w
}

/// `n_tok` activation rows quantized to Q8_0 (never a -128 quant).
fn random_q8_acts(r: &mut StdRng, n_tok: usize, cols: usize) -> Vec<u8> {
    let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
    let x = normal_vec(r, n_tok * cols, 2.0);
    let mut xq = vec![0u8; n_tok * rb];
    for (xr, qr) in x.chunks_exact(cols).zip(xq.chunks_exact_mut(rb)) {
        quantize_row_q8_0(xr, qr);
    }
    xq
}

fn acts(xq: &[u8], cols: usize, capacity: usize) -> Q8Acts {
    let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
    let mut a = Q8Acts::new(cols, capacity);
    for (t, row) in xq.chunks_exact(rb).enumerate() {
        a.set_row(t, row);
    }
    a
}

/// Group-aligned ranges of `rows`: all, the first group, the middle, the padded tail.
fn ranges(rows: usize) -> Vec<std::ops::Range<usize>> {
    let last = (rows - 1) / Q4R_ROWS * Q4R_ROWS;
    let mut v = vec![0..rows, 0..Q4R_ROWS.min(rows), last..rows, 0..0];
    if rows > 2 * Q4R_ROWS {
        v.push(Q4R_ROWS..2 * Q4R_ROWS);
        v.push(Q4R_ROWS..rows);
    }
    v
}

#[test]
fn the_layout_holds_the_rows_bytes() {
    let mut r = rng(31);
    for rows in [1, 15, 16, 17, 33, 40] {
        for cols in [32, 96, 128, 160, 416, 2560] {
            let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
            let src = random_q4_rows(&mut r, rows, cols);
            let m = Q4R::from_q4_0_rows(&src, rows, cols).unwrap();
            assert_eq!((m.rows(), m.cols(), m.blocks()), (rows, cols, cols / 32));
            assert_eq!(m.bytes().len(), m.groups() * m.group_bytes());
            let mut row = vec![0u8; rb];
            let mut f = vec![0.0f32; cols];
            let mut want = vec![0.0f32; cols];
            for i in 0..rows {
                let src_row = &src[i * rb..(i + 1) * rb];
                m.q4_0_row(i, &mut row);
                assert_eq!(row, src_row, "{rows}x{cols} row {i}");
                m.dequantize_row(i, &mut f);
                dequantize_row(RowFormat::Q4_0, src_row, &mut want);
                assert_same(&f, &want, &format!("{rows}x{cols} row {i} decoded"));
            }
            // Group by group, as the loader writes it.
            let mut g = Q4R::zeroed(rows, cols).unwrap();
            let gb = g.group_bytes();
            for (k, dst) in g.data_mut().chunks_exact_mut(gb).enumerate() {
                let end = ((k + 1) * Q4R_ROWS).min(rows);
                Q4R::write_group(cols, &src[k * Q4R_ROWS * rb..end * rb], dst);
            }
            assert_eq!(g.bytes(), m.bytes(), "{rows}x{cols} written by group");
        }
    }
}

#[test]
fn the_reference_is_the_exact_product_rounded_once_a_block() {
    let mut r = rng(32);
    for (rows, cols) in [(37, 160), (16, 2560), (5, 32)] {
        let w = random_q4_rows(&mut r, rows, cols);
        let m = Q4R::from_q4_0_rows(&w, rows, cols).unwrap();
        let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
        let xrb = RowFormat::Q8_0.row_bytes(cols).unwrap();
        for n_tok in [1, 3] {
            let xq = random_q8_acts(&mut r, n_tok, cols);
            let x = acts(&xq, cols, n_tok);
            let mut got = vec![f32::NAN; n_tok * rows];
            let mut rows_product = vec![f32::NAN; n_tok * rows];
            matmul_q4r(Isa::Scalar, &m, &x, n_tok, 0..rows, &mut got);
            matmul_q4_0_q8_0(
                Isa::Scalar,
                &w,
                cols,
                &xq,
                n_tok,
                0..rows,
                &mut rows_product,
            );
            let mut wf = vec![0.0f32; cols];
            let mut xf = vec![0.0f32; cols];
            for t in 0..n_tok {
                dequantize_row(RowFormat::Q8_0, &xq[t * xrb..(t + 1) * xrb], &mut xf);
                for i in 0..rows {
                    dequantize_row(RowFormat::Q4_0, &w[i * rb..(i + 1) * rb], &mut wf);
                    let (exact, mag) = dot64(wf.iter().copied(), &xf);
                    let what = format!("{rows}x{cols} token {t} row {i}");
                    let budget = 1e-5 * mag + 1e-12;
                    assert!(
                        (f64::from(got[t * rows + i]) - exact).abs() <= budget,
                        "{what}: {} vs {exact}",
                        got[t * rows + i]
                    );
                    assert!(
                        (f64::from(rows_product[t * rows + i]) - exact).abs() <= budget,
                        "{what} (rows)"
                    );
                }
            }
        }
    }
}

#[test]
fn every_set_gives_the_reference_bits() {
    let mut r = rng(33);
    for (rows, cols) in [(45, 2560), (16, 96), (70, 416), (3, 128)] {
        let w = random_q4_rows(&mut r, rows, cols);
        let m = Q4R::from_q4_0_rows(&w, rows, cols).unwrap();
        // Every tile of the walks (1..=8), a pass and a half (32 rows a pass), and more
        // room than tokens.
        for n_tok in (1usize..=9).chain([17, 32, 33]) {
            let xq = random_q8_acts(&mut r, n_tok, cols);
            let x = acts(&xq, cols, n_tok + 2);
            for rr in ranges(rows) {
                let mut want = vec![f32::NAN; n_tok * rr.len()];
                matmul_q4r(Isa::Scalar, &m, &x, n_tok, rr.clone(), &mut want);
                for isa in isas() {
                    let mut got = vec![f32::NAN; n_tok * rr.len()];
                    matmul_q4r(isa, &m, &x, n_tok, rr.clone(), &mut got);
                    assert_same(
                        &got,
                        &want,
                        &format!("{isa} {rows}x{cols} n_tok {n_tok} rows {rr:?}"),
                    );
                }
            }
        }
    }
}

#[test]
fn extreme_codes_and_activations_give_the_reference_bits() {
    // Every nibble 0 (code -8) or 15 (code 7) against activations of +-127: the largest
    // block dots either sign, where a kernel's unsigned codes and bias must not overflow.
    let (rows, cols) = (32, 2560);
    let rb = RowFormat::Q4_0.row_bytes(cols).unwrap();
    let xrb = RowFormat::Q8_0.row_bytes(cols).unwrap();
    for (nib, act) in [(0x00u8, 127i8), (0xFF, 127), (0x00, -127), (0xFF, -127)] {
        let mut w = vec![nib; rows * rb];
        for blk in w.chunks_exact_mut(Q4_0_BLOCK_BYTES) {
            blk[..2].copy_from_slice(&f32_to_f16(0.01).to_le_bytes());
        }
        let mut xq = vec![act as u8; xrb];
        for blk in xq.chunks_exact_mut(Q8_0_BLOCK_BYTES) {
            blk[..2].copy_from_slice(&f32_to_f16(0.02).to_le_bytes());
        }
        let m = Q4R::from_q4_0_rows(&w, rows, cols).unwrap();
        let x = acts(&xq, cols, 1);
        let mut want = vec![0.0f32; rows];
        matmul_q4r(Isa::Scalar, &m, &x, 1, 0..rows, &mut want);
        // Every block's dot is 32 * code * act: the sign of every row's sum is theirs.
        let code = if nib == 0 { -8.0f32 } else { 7.0 };
        assert!(
            want.iter()
                .all(|&v| v.signum() == (code * f32::from(act)).signum())
        );
        for isa in isas() {
            let mut got = vec![0.0f32; rows];
            matmul_q4r(isa, &m, &x, 1, 0..rows, &mut got);
            assert_same(&got, &want, &format!("{isa} nibbles {nib:#x} acts {act}"));
        }
    }
}

#[test]
fn special_scales_give_the_reference_bits() {
    let mut r = rng(34);
    let (rows, cols) = (19, 256);
    let specials: [u16; 7] = [
        0x0000, // +0
        0x8000, // -0
        0x0001, // smallest subnormal
        0x83ff, // largest negative subnormal
        0x7c00, // +inf
        0xfc00, // -inf
        0x7e00, // NaN
    ];
    let mut w = random_q4_rows(&mut r, rows, cols);
    let mut xq = random_q8_acts(&mut r, 5, cols);
    for (i, blk) in w.chunks_exact_mut(Q4_0_BLOCK_BYTES).enumerate() {
        if i % 3 == 0 {
            blk[..2].copy_from_slice(&specials[i % specials.len()].to_le_bytes());
        }
    }
    for (i, blk) in xq.chunks_exact_mut(Q8_0_BLOCK_BYTES).enumerate() {
        if i % 5 == 1 {
            blk[..2].copy_from_slice(&specials[(i / 5) % specials.len()].to_le_bytes());
        }
    }
    // One all-zero activation row: every product is +0 or NaN.
    let rb = RowFormat::Q8_0.row_bytes(cols).unwrap();
    xq[4 * rb..].fill(0);
    let m = Q4R::from_q4_0_rows(&w, rows, cols).unwrap();
    let x = acts(&xq, cols, 5);
    let mut want = vec![0.0f32; 5 * rows];
    matmul_q4r(Isa::Scalar, &m, &x, 5, 0..rows, &mut want);
    assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()));
    for isa in isas() {
        for n_tok in [1, 5] {
            let mut got = vec![0.0f32; n_tok * rows];
            matmul_q4r(isa, &m, &x, n_tok, 0..rows, &mut got);
            assert_same(&got, &want[..n_tok * rows], &format!("{isa} n_tok {n_tok}"));
        }
    }
}
