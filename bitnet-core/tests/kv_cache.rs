//! KV cache tests: rows read back within f16 / Q8_0 precision at the documented offsets,
//! length bookkeeping (set_len, truncate, rollback, clear), typed errors for every bad
//! index or size, and the byte figures `inspect` reports.

use bitnet_core::kv_cache::{KvCache, KvCacheError, KvType};
use bitnet_kernels::float::f16_to_f32;

/// f16 has an 11-bit significand: relative rounding error at most 2^-11.
const F16_REL_ERR: f32 = 1.0 / 2048.0;
/// Q8_0 rounds to a step of absmax/127 per block: error at most half a step (plus the f16
/// rounding of the scale).
const Q8_ABS_ERR_PER_ABSMAX: f32 = 0.5 / 127.0 + 1.0 / 1024.0;

fn row(seed: usize, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((seed * 131 + i * 17) % 97) as f32 / 13.0 - 3.5)
        .collect()
}

#[test]
fn f16_rows_read_back_at_the_documented_layout() {
    let (n_layer, n_ctx, heads, hd) = (3, 10, 2, 8);
    let mut c = KvCache::new(n_layer, n_ctx, heads, hd, KvType::F16).unwrap();
    let kv_dim = heads * hd;
    assert_eq!(c.kv_dim(), kv_dim);
    for layer in 0..n_layer {
        for pos in 0..n_ctx {
            c.write(
                layer,
                pos,
                &row(layer * 100 + pos, kv_dim),
                &row(layer * 100 + pos + 50, kv_dim),
            )
            .unwrap();
        }
    }
    let mut out = vec![0.0; kv_dim];
    for layer in 0..n_layer {
        let k = c.k_layer(layer);
        let v = c.v_layer(layer);
        assert_eq!(k.len(), n_ctx * kv_dim);
        for pos in 0..n_ctx {
            let (ek, ev) = (
                row(layer * 100 + pos, kv_dim),
                row(layer * 100 + pos + 50, kv_dim),
            );
            for h in 0..heads {
                for d in 0..hd {
                    let i = h * hd + d;
                    let got = f16_to_f32(k[pos * kv_dim + h * hd + d]);
                    assert!(
                        (got - ek[i]).abs() <= ek[i].abs() * F16_REL_ERR,
                        "{got} vs {}",
                        ek[i]
                    );
                    let got = f16_to_f32(v[pos * kv_dim + i]);
                    assert!((got - ev[i]).abs() <= ev[i].abs() * F16_REL_ERR);
                }
            }
            c.k_row_dequant(layer, pos, &mut out).unwrap();
            assert!(
                out.iter()
                    .zip(&ek)
                    .all(|(a, b)| (a - b).abs() <= b.abs() * F16_REL_ERR)
            );
            c.v_row_dequant(layer, pos, &mut out).unwrap();
            assert!(
                out.iter()
                    .zip(&ev)
                    .all(|(a, b)| (a - b).abs() <= b.abs() * F16_REL_ERR)
            );
        }
    }
    // Exactly representable values come back exactly.
    let exact: Vec<f32> = (0..kv_dim).map(|i| i as f32 * 0.25 - 2.0).collect();
    c.write(1, 4, &exact, &exact).unwrap();
    c.k_row_dequant(1, 4, &mut out).unwrap();
    assert_eq!(out, exact);
}

#[test]
fn write_rows_equals_row_by_row_writes() {
    for ty in [KvType::F16, KvType::Q8_0] {
        let (heads, hd) = (2, 32);
        let kv_dim = heads * hd;
        let mut a = KvCache::new(2, 8, heads, hd, ty).unwrap();
        let mut b = KvCache::new(2, 8, heads, hd, ty).unwrap();
        let k: Vec<f32> = (0..3).flat_map(|p| row(p, kv_dim)).collect();
        let v: Vec<f32> = (0..3).flat_map(|p| row(p + 9, kv_dim)).collect();
        a.write_rows(1, 2, &k, &v).unwrap();
        for p in 0..3 {
            let s = p * kv_dim..(p + 1) * kv_dim;
            b.write(1, 2 + p, &k[s.clone()], &v[s]).unwrap();
        }
        let (mut x, mut y) = (vec![0.0; kv_dim], vec![0.0; kv_dim]);
        for pos in 0..8 {
            a.k_row_dequant(1, pos, &mut x).unwrap();
            b.k_row_dequant(1, pos, &mut y).unwrap();
            assert_eq!(x, y);
            a.v_row_dequant(1, pos, &mut x).unwrap();
            b.v_row_dequant(1, pos, &mut y).unwrap();
            assert_eq!(x, y);
        }
        // Untouched layer 0 is still zero.
        a.k_row_dequant(0, 3, &mut x).unwrap();
        assert!(x.iter().all(|&e| e == 0.0));
    }
}

#[test]
fn q8_rows_read_back_within_block_precision() {
    let (heads, hd) = (3, 64);
    let kv_dim = heads * hd;
    let mut c = KvCache::new(2, 5, heads, hd, KvType::Q8_0).unwrap();
    assert!(c.try_k_layer(0).is_err(), "no f16 view of a Q8 cache");
    let k = row(3, kv_dim);
    let v: Vec<f32> = row(4, kv_dim).iter().map(|x| x * 100.0).collect();
    c.write(1, 4, &k, &v).unwrap();
    let mut out = vec![0.0; kv_dim];
    for (src, is_k) in [(&k, true), (&v, false)] {
        if is_k {
            c.k_row_dequant(1, 4, &mut out).unwrap();
        } else {
            c.v_row_dequant(1, 4, &mut out).unwrap();
        }
        for (blk_out, blk_src) in out.chunks(32).zip(src.chunks(32)) {
            let amax = blk_src.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            for (a, b) in blk_out.iter().zip(blk_src) {
                assert!((a - b).abs() <= amax * Q8_ABS_ERR_PER_ABSMAX, "{a} vs {b}");
            }
        }
    }
    let raw = c.k_layer_q8(1).unwrap();
    assert_eq!(raw.len(), 5 * kv_dim / 32 * 34);
    assert!(
        raw[..4 * kv_dim / 32 * 34].iter().all(|&b| b == 0),
        "only pos 4 written"
    );
    assert!(c.v_layer_q8(1).is_ok());
}

#[test]
fn length_bookkeeping_truncate_rollback_clear() {
    let mut c = KvCache::new(1, 16, 1, 4, KvType::F16).unwrap();
    assert_eq!((c.len(), c.capacity(), c.remaining()), (0, 16, 16));
    assert!(c.is_empty());
    c.set_len(10).unwrap();
    assert_eq!((c.len(), c.remaining()), (10, 6));
    c.truncate(12);
    assert_eq!(c.len(), 10, "truncate never grows");
    c.truncate(7);
    assert_eq!(c.len(), 7);
    c.rollback(3).unwrap();
    assert_eq!(c.len(), 4);
    assert_eq!(
        c.rollback(5),
        Err(KvCacheError::RollbackTooFar {
            n_tokens: 5,
            len: 4
        })
    );
    assert_eq!(c.len(), 4, "a failed rollback changes nothing");
    c.rollback(4).unwrap();
    assert!(c.is_empty());
    c.set_len(16).unwrap();
    assert_eq!(
        c.set_len(17),
        Err(KvCacheError::LengthOutOfRange {
            len: 17,
            capacity: 16
        })
    );
    c.clear();
    assert_eq!(c.len(), 0);
    // Rolled-back rows keep their data until rewritten.
    c.write(0, 2, &[1.0, 2.0, 3.0, 4.0], &[0.5; 4]).unwrap();
    c.set_len(3).unwrap();
    c.rollback(2).unwrap();
    c.set_len(3).unwrap();
    let mut out = [0.0; 4];
    c.k_row_dequant(0, 2, &mut out).unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn bad_writes_and_reads_are_typed_errors() {
    let mut c = KvCache::new(2, 4, 2, 2, KvType::F16).unwrap();
    let r = [1.0f32; 4];
    assert!(matches!(
        c.write(0, 4, &r, &r),
        Err(KvCacheError::PositionOutOfRange {
            pos: 4,
            n_ctx: 4,
            ..
        })
    ));
    assert!(matches!(
        c.write(0, usize::MAX, &r, &r),
        Err(KvCacheError::PositionOutOfRange { .. })
    ));
    assert!(matches!(
        c.write(2, 0, &r, &r),
        Err(KvCacheError::LayerOutOfRange {
            layer: 2,
            n_layer: 2
        })
    ));
    assert!(matches!(
        c.write(0, 0, &r[..3], &r),
        Err(KvCacheError::RowLength { what: "k", .. })
    ));
    assert!(matches!(
        c.write(0, 0, &r, &r[..3]),
        Err(KvCacheError::RowLength { what: "v", .. })
    ));
    // A batch running past the end is rejected as a whole.
    let batch = [0.0f32; 12];
    assert!(matches!(
        c.write_rows(0, 2, &batch, &batch),
        Err(KvCacheError::PositionOutOfRange {
            pos: 2,
            count: 3,
            ..
        })
    ));
    assert!(matches!(
        c.write_rows(0, 0, &[], &[]),
        Err(KvCacheError::RowLength { .. })
    ));
    c.write_rows(0, 1, &batch, &batch).unwrap();
    let mut out = [0.0; 4];
    assert!(c.k_row_dequant(0, 4, &mut out).is_err());
    assert!(c.v_row_dequant(5, 0, &mut out).is_err());
    assert!(c.k_row_dequant(0, 0, &mut out[..2]).is_err());
    assert!(matches!(
        c.k_layer_q8(0),
        Err(KvCacheError::WrongType {
            wanted: KvType::Q8_0,
            actual: KvType::F16
        })
    ));
    assert!(c.try_v_layer(2).is_err());
}

#[test]
#[should_panic(expected = "out of range")]
fn k_layer_panics_on_a_bad_layer() {
    let c = KvCache::new(1, 1, 1, 1, KvType::F16).unwrap();
    let _ = c.k_layer(1);
}

#[test]
fn bad_dimensions_and_huge_sizes_are_errors_not_aborts() {
    assert!(matches!(
        KvCache::new(0, 8, 1, 8, KvType::F16),
        Err(KvCacheError::ZeroDimension { .. })
    ));
    assert!(matches!(
        KvCache::new(1, 8, 1, 0, KvType::F16),
        Err(KvCacheError::ZeroDimension { .. })
    ));
    assert!(matches!(
        KvCache::new(1, 8, 2, 48, KvType::Q8_0),
        Err(KvCacheError::Q8HeadDim { head_dim: 48 })
    ));
    assert!(matches!(
        KvCache::new(usize::MAX, usize::MAX, 8, 128, KvType::F16),
        Err(KvCacheError::TooLarge { bytes: u64::MAX })
    ));
    // Representable but far beyond any machine: must fail cleanly.
    let r = KvCache::new(1 << 20, 1 << 20, 1, 64, KvType::F16);
    assert!(
        matches!(
            r,
            Err(KvCacheError::TooLarge { .. } | KvCacheError::AllocFailed { .. })
        ),
        "{r:?}"
    );
}

#[test]
fn bytes_for_figures() {
    // BitNet b1.58 2B4T: 30 layers, 5 KV heads of 128, 4096 context.
    let f16 = KvCache::bytes_for(30, 4096, 5, 128, KvType::F16);
    assert_eq!(f16, 2 * 30 * 4096 * 640 * 2);
    assert_eq!(f16, 314_572_800);
    let q8 = KvCache::bytes_for(30, 4096, 5, 128, KvType::Q8_0);
    assert_eq!(q8, 2 * 30 * 4096 * (640 / 32) * 34);
    assert_eq!(q8 * 32, f16 * 17, "Q8_0 is 17/32 of f16");
    assert_eq!(KvCache::bytes_for(1, 1, 1, 1, KvType::F16), 4);
    assert_eq!(
        KvCache::bytes_for(1, 1, 1, 1, KvType::Q8_0),
        68,
        "a partial block is a block"
    );
    assert_eq!(
        KvCache::bytes_for(usize::MAX, usize::MAX, 2, 2, KvType::F16),
        u64::MAX
    );
    let c = KvCache::new(2, 16, 2, 32, KvType::Q8_0).unwrap();
    assert_eq!(c.bytes(), KvCache::bytes_for(2, 16, 2, 32, KvType::Q8_0));
    assert_eq!(c.k_layer_q8(0).unwrap().len() as u64 * 4, c.bytes());
    let c = KvCache::new(3, 7, 2, 8, KvType::F16).unwrap();
    assert_eq!(c.k_layer(2).len() as u64 * 2 * 2 * 3, c.bytes());
    assert_eq!((KvType::F16.name(), KvType::Q8_0.name()), ("f16", "q8_0"));
}
