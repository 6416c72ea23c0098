//! Helpers of the tests that drive sequences past their context: request parameters, token
//! streams, a stepping loop that checks the bounds after every step, and a plain
//! evaluation of tokens on one sequence.

use bitnet_core::engine::{BatchItem, Engine, Logits};
use bitnet_core::kv::SeqId;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::GenStats;
use bitnet_core::scheduler::{ContextPolicy, Event, GenParams, Scheduler};

/// Greedy, end-of-generation ignored, sequence kept after it ends (so the test can look at
/// what it holds), under `context`.
pub fn bounded_params(max_tokens: usize, context: ContextPolicy) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        ignore_eos: true,
        keep: true,
        context,
        ..GenParams::default()
    }
}

/// `n` token ids below `n_vocab`, spread over it and different for each `seed`.
pub fn seeded_tokens(n: usize, seed: u32, n_vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(7919).wrapping_add(seed * 104_729 + 13)) % n_vocab as u32)
        .collect()
}

/// `n` pseudo-random token ids in `3..503` (xorshift from `seed`).
pub fn random_tokens(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 500) as u32 + 3
        })
        .collect()
}

/// Steps until `seq` is done, checking after every step that its sequence never holds more
/// than `max_len` positions and the pool never lends more than `max_blocks` blocks; from
/// step `steady_after` on (when given), that the blocks lent no longer change.
pub fn run_bounded(
    s: &mut Scheduler,
    seq: SeqId,
    max_len: usize,
    max_blocks: usize,
    steady_after: Option<usize>,
) -> GenStats {
    let (mut done, mut steps, mut most) = (None, 0, 0);
    while done.is_none() {
        s.step(&mut |ev| match ev {
            Event::Done { seq: d, stats } if d == seq => done = Some(stats),
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        })
        .unwrap();
        let len = s.engine().kv().sequence(seq).unwrap().len();
        assert!(len <= max_len, "step {steps}: {len} positions held");
        let used = s.engine().kv().stats().pool.used;
        assert!(used <= max_blocks, "step {steps}: {used} blocks lent");
        if steady_after.is_some_and(|from| steps > from) {
            most = most.max(used);
            assert_eq!(used, most, "step {steps}: the block count stays constant");
        }
        steps += 1;
        assert!(steps < 100_000, "the request does not finish");
    }
    done.unwrap()
}

/// Evaluates `toks` after what `seq` holds, one forward pass per `chunk` tokens; the last
/// token's logits.
pub fn eval_last(e: &mut Engine, seq: SeqId, toks: &[u32], chunk: usize) -> Vec<f32> {
    let mut out = Vec::new();
    for c in toks.chunks(chunk) {
        let item = BatchItem {
            seq,
            tokens: c,
            logits: Logits::Last,
        };
        e.forward(&[item], |_, _, row| out = row.to_vec()).unwrap();
    }
    out
}
