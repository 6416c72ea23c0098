//! The grouped Q6_K head (`Q6KR`) and its product: the layout holds the Q6_K rows' bytes
//! exactly (rows not a multiple of 16), the reference gives the row-layout product's bits,
//! and every kernel set gives the reference's bits for every tile shape of the token walk,
//! group-aligned row ranges and the padded last group, on random rows, on the edges of the
//! integer range (codes 0 and 63, scales -128 and 127, activations ±127) and on zero,
//! subnormal, infinite and NaN block scales.

mod float_util;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use float_util::*;
use rand::Rng;
use rand::rngs::StdRng;

/// Q6_K rows of random codes and sub-block scales (every byte value) with sane f16 scales.
fn random_q6k_rows(r: &mut StdRng, n_rows: usize, cols: usize) -> Vec<u8> {
    let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
    let mut w: Vec<u8> = (0..n_rows * rb).map(|_| r.random()).collect();
    for blk in w.chunks_exact_mut(Q6K_BLOCK_BYTES) {
        blk[208..].copy_from_slice(&f32_to_f16(r.random_range(1e-5..2e-3)).to_le_bytes());
    }
    w
}

fn random_acts(r: &mut StdRng, n_tok: usize, cols: usize, capacity: usize) -> Q8KActs {
    let x = normal_vec(r, n_tok * cols, 2.0);
    let mut a = Q8KActs::new(cols, capacity);
    for (t, row) in x.chunks_exact(cols).enumerate() {
        a.quantize_row(t, row);
    }
    a
}

/// Group-aligned ranges of `rows`: all, the first group, the padded tail, none, and the
/// middle where there is one.
fn ranges(rows: usize) -> Vec<std::ops::Range<usize>> {
    let last = (rows - 1) / Q6KR_ROWS * Q6KR_ROWS;
    let mut v = vec![0..rows, 0..Q6KR_ROWS.min(rows), last..rows, 0..0];
    if rows > 2 * Q6KR_ROWS {
        v.push(Q6KR_ROWS..2 * Q6KR_ROWS);
        v.push(Q6KR_ROWS..rows);
    }
    v
}

/// Every set against the reference, and the reference against the row-layout product.
fn check_sets(w: &[u8], rows: usize, cols: usize, x: &Q8KActs, n_tok: usize, what: &str) {
    let m = Q6KR::from_q6k_rows(w, rows, cols).unwrap();
    let mut rowwise = vec![f32::NAN; n_tok * rows];
    matmul_q6k_q8k(Isa::Scalar, w, cols, x, n_tok, 0..rows, &mut rowwise);
    for rr in ranges(rows) {
        let mut want = vec![f32::NAN; n_tok * rr.len()];
        matmul_q6kr(Isa::Scalar, &m, x, n_tok, rr.clone(), &mut want);
        for t in 0..n_tok {
            assert_same(
                &want[t * rr.len()..(t + 1) * rr.len()],
                &rowwise[t * rows + rr.start..t * rows + rr.end],
                &format!("reference {what} {rows}x{cols} token {t} rows {rr:?}"),
            );
        }
        for isa in isas() {
            let mut got = vec![f32::NAN; n_tok * rr.len()];
            matmul_q6kr(isa, &m, x, n_tok, rr.clone(), &mut got);
            assert_same(
                &got,
                &want,
                &format!("{isa} {what} {rows}x{cols} n_tok {n_tok} rows {rr:?}"),
            );
        }
    }
}

#[test]
fn the_layout_holds_the_rows_bytes() {
    let mut r = rng(31);
    for rows in [1, 15, 16, 17, 33] {
        for cols in [256, 512, 2560] {
            let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
            let src = random_q6k_rows(&mut r, rows, cols);
            let m = Q6KR::from_q6k_rows(&src, rows, cols).unwrap();
            assert_eq!((m.rows(), m.cols()), (rows, cols));
            assert_eq!(m.bytes().len(), m.groups() * m.group_bytes());
            let mut row = vec![0u8; rb];
            let (mut f, mut want) = (vec![0.0f32; cols], vec![0.0f32; cols]);
            for i in 0..rows {
                let src_row = &src[i * rb..(i + 1) * rb];
                m.q6k_row(i, &mut row);
                assert_eq!(row, src_row, "{rows}x{cols} row {i}");
                m.dequantize_row(i, &mut f);
                dequantize_row(RowFormat::Q6K, src_row, &mut want);
                assert_same(&f, &want, &format!("{rows}x{cols} row {i} decoded"));
            }
            // Group by group, as the loader writes it.
            let mut g = Q6KR::zeroed(rows, cols).unwrap();
            let gb = g.group_bytes();
            for (k, dst) in g.data_mut().chunks_exact_mut(gb).enumerate() {
                let end = ((k + 1) * Q6KR_ROWS).min(rows);
                Q6KR::write_group(cols, &src[k * Q6KR_ROWS * rb..end * rb], dst);
            }
            assert_eq!(g.bytes(), m.bytes(), "{rows}x{cols} written by group");
        }
    }
    assert!(Q6KR::zeroed(4, 320).is_err());
    assert!(Q6KR::from_q6k_rows(&[0; 209], 1, 256).is_err());
}

#[test]
fn every_set_gives_the_reference_bits() {
    let mut r = rng(32);
    for (rows, cols) in [(45, 2560), (16, 256), (70, 768), (3, 512)] {
        let w = random_q6k_rows(&mut r, rows, cols);
        // Every tile of the walks (1..=8), a pass and a half (32 tokens a pass), and more
        // room than tokens.
        for n_tok in (1usize..=9).chain([17, 33]) {
            let x = random_acts(&mut r, n_tok, cols, n_tok + 2);
            check_sets(&w, rows, cols, &x, n_tok, "random");
        }
    }
}

#[test]
fn the_edges_of_the_integer_range_give_the_reference_bits() {
    let mut r = rng(33);
    let (rows, cols) = (13, 1024);
    let rb = RowFormat::Q6K.row_bytes(cols).unwrap();
    let mut w = random_q6k_rows(&mut r, rows, cols);
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
    let mut r = rng(34);
    let (rows, cols) = (19, 512);
    let specials: [u16; 7] = [0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7e00];
    let mut w = random_q6k_rows(&mut r, rows, cols);
    for (i, blk) in w.chunks_exact_mut(Q6K_BLOCK_BYTES).enumerate() {
        if i % 3 == 0 {
            blk[208..].copy_from_slice(&specials[i % specials.len()].to_le_bytes());
        }
    }
    let mut a = random_acts(&mut r, 4, cols, 5);
    // One all-zero activation row (scale 0): every product is +0 or NaN.
    a.quantize_row(4, &vec![0.0; cols]);
    let m = Q6KR::from_q6k_rows(&w, rows, cols).unwrap();
    let mut want = vec![0.0f32; 5 * rows];
    matmul_q6kr(Isa::Scalar, &m, &a, 5, 0..rows, &mut want);
    assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()));
    check_sets(&w, rows, cols, &a, 5, "special scales");
}

#[test]
#[should_panic(expected = "whole groups")]
fn a_range_off_the_groups_is_refused() {
    let m = Q6KR::zeroed(40, 256).unwrap();
    let x = Q8KActs::new(256, 1);
    let mut out = vec![0.0; 8];
    matmul_q6kr(Isa::Scalar, &m, &x, 1, 8..16, &mut out);
}
