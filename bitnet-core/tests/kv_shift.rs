//! Moving cached positions (context shift, sliding window with attention sinks): after
//! `shift(keep, discard)` the sequence behaves as if its kept tokens had been evaluated
//! contiguously from scratch, blocks no longer needed go back to the pool, a window runs
//! in constant memory however long the generation, and the prefix cache never serves
//! shifted rows.

mod common;

use common::sched::{eval_last, seeded_tokens};

use std::sync::Arc;

use bitnet_core::engine::Engine;
use bitnet_core::kv::SeqId;
use bitnet_core::model::Model;
use common::models::{preset, synth_model};

fn model(tag: &str, name: &str) -> Arc<Model> {
    synth_model(tag, &preset(name), None).0
}

/// Passes of 32 tokens on one thread.
fn engine(model: &Arc<Model>, n_ctx: usize) -> Engine {
    common::models::engine(model, n_ctx, 32, 1)
}

fn row(e: &Engine, seq: SeqId, layer: usize, pos: usize, is_k: bool) -> Vec<f32> {
    let c = e.model().config();
    let mut out = vec![0.0; c.n_head_kv * c.head_dim];
    e.kv().read_row(seq, layer, pos, is_k, &mut out).unwrap();
    out
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn head_norms(v: &[f32], hd: usize) -> Vec<f32> {
    v.chunks(hd)
        .map(|h| h.iter().map(|x| x * x).sum::<f32>().sqrt())
        .collect()
}

/// After a shift the moved rows are the old ones, keys re-rotated: values bit-identical;
/// keys of the first layer (which depend only on the token and its position) equal to a
/// fresh evaluation of the kept tokens; keys of every layer keep their per-head norms.
fn check_shift_moves_rows(preset: &str) {
    let m = model(&format!("shift-{preset}"), preset);
    let (nv, nl, hd) = (m.n_vocab(), m.config().n_layer, m.config().head_dim);
    let toks = seeded_tokens(70, 3, nv);
    // keep and discard on and off block boundaries (blocks are 16 positions).
    for (keep, discard) in [(16, 32), (0, 5), (4, 20), (9, 61)] {
        let mut e = engine(&m, 256);
        let seq = e.kv_mut().new_sequence();
        eval_last(&mut e, seq, &toks, 32);
        let old: Vec<Vec<(Vec<f32>, Vec<f32>)>> = (0..nl)
            .map(|l| {
                (keep + discard..toks.len())
                    .map(|p| (row(&e, seq, l, p, true), row(&e, seq, l, p, false)))
                    .collect()
            })
            .collect();
        e.shift(seq, keep, discard).unwrap();
        assert_eq!(e.kv().sequence(seq).unwrap().len(), toks.len() - discard);

        let mut kept: Vec<u32> = toks[..keep].to_vec();
        kept.extend_from_slice(&toks[keep + discard..]);
        assert_eq!(e.kv().sequence(seq).unwrap().tokens(), &kept[..]);
        let mut f = engine(&m, 256);
        let fresh = f.kv_mut().new_sequence();
        eval_last(&mut f, fresh, &kept, 32);
        for (l, rows) in old.iter().enumerate() {
            for (i, (k_old, v_old)) in rows.iter().enumerate() {
                let p = keep + i;
                let (k, v) = (row(&e, seq, l, p, true), row(&e, seq, l, p, false));
                assert_eq!(&v, v_old, "{preset} layer {l} pos {p}: V moved as is");
                for (a, b) in head_norms(&k, hd).iter().zip(head_norms(k_old, hd)) {
                    assert!(
                        (a - b).abs() <= 2e-3 * b.max(1.0),
                        "{preset}: K norm {a} vs {b}"
                    );
                }
                if l == 0 {
                    let k_fresh = row(&f, fresh, 0, p, true);
                    let scale = k_fresh.iter().fold(1e-3f32, |m, x| m.max(x.abs()));
                    let d = max_abs_diff(&k, &k_fresh);
                    assert!(
                        d <= 2e-3 * scale,
                        "{preset} keep {keep} discard {discard} pos {p}: K off by {d}"
                    );
                    assert_eq!(v, row(&f, fresh, 0, p, false));
                }
            }
        }
        // Rows before `keep` are untouched.
        for p in 0..keep {
            assert_eq!(
                row(&e, seq, nl - 1, p, true),
                row(&f, fresh, nl - 1, p, true)
            );
        }
    }
}

#[test]
fn a_shift_moves_rows_and_re_rotates_keys() {
    // NeoX rotation (BitNet) and adjacent-pair rotation (Llama).
    check_shift_moves_rows("tiny-bitnet");
    check_shift_moves_rows("tiny-llama");
}

#[test]
fn a_window_with_sinks_runs_in_constant_memory_and_frees_every_block() {
    let m = model("shift-window", "tiny-bitnet");
    let nv = m.n_vocab();
    // A pool of 128 positions and a generation of 2,000 tokens: 4 sinks, a window of 96,
    // moved 32 positions at a time.
    let mut e = engine(&m, 128);
    let start = e.kv().available_blocks();
    let seq = e.kv_mut().new_sequence();
    let (sinks, window, chunk) = (4, 96, 32);
    let stream = seeded_tokens(2000, 5, nv);
    let mut most_blocks = 0;
    for &t in &stream {
        if e.kv().sequence(seq).unwrap().len() == sinks + window {
            e.shift(seq, sinks, chunk).unwrap();
        }
        let logits = eval_last(&mut e, seq, &[t], 32);
        assert!(logits.iter().all(|x| x.is_finite()));
        most_blocks = most_blocks.max(start - e.kv().available_blocks());
    }
    assert!(
        most_blocks <= (sinks + window).div_ceil(16),
        "{most_blocks} blocks in use at most"
    );
    assert_eq!(
        e.kv().sequence(seq).unwrap().shifted(),
        2000 - e.kv().sequence(seq).unwrap().len()
    );
    e.kv_mut().free_sequence(seq).unwrap();
    assert_eq!(
        e.kv().available_blocks(),
        start,
        "every block back in the pool"
    );
}

#[test]
fn the_prefix_cache_never_serves_shifted_rows() {
    let m = model("shift-cache", "tiny-bitnet");
    let nv = m.n_vocab();
    let toks = seeded_tokens(64, 11, nv);
    let mut e = engine(&m, 256);
    let a = e.kv_mut().new_sequence();
    let before = eval_last(&mut e, a, &toks, 32);
    // Shift, grow past where the old blocks were, and end the sequence.
    e.shift(a, 8, 24).unwrap();
    eval_last(&mut e, a, &seeded_tokens(40, 12, nv), 32);
    e.kv_mut().free_sequence(a).unwrap();
    // The same prompt again: whatever the cache gives must be the unshifted rows.
    let b = e.kv_mut().new_sequence();
    let reused = e.kv_mut().reuse_prefix(b, &toks).unwrap();
    let again = eval_last(&mut e, b, &toks[reused..], 32);
    assert_eq!(
        before, again,
        "reused {reused} tokens; logits bit-identical"
    );
    // Bad ranges are errors, not panics.
    assert!(e.shift(b, 60, 10).is_err());
    assert!(e.shift(b, usize::MAX, 1).is_err());
    e.shift(b, 3, 0).unwrap();
}
