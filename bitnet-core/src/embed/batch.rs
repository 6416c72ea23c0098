//! Many inputs embedded together: their tokens packed into shared forward passes (each input
//! its own sequence of the KV cache, freed as soon as it is done), as `llama-embedding`
//! fills a batch with several prompts. A pass carries up to the engine's batch of tokens; an
//! input longer than that spans passes, an input starts only when the cache has room for all
//! of it, and the outputs come back in input order.

use super::{Normalize, Pooling, pool};
use crate::engine::{BatchItem, Engine, Logits};
use crate::error::CoreError;
use crate::kv::SeqId;

/// One input under way: its sequence, how many of its tokens are in, and its hidden rows.
struct Running {
    input: usize,
    seq: SeqId,
    done: usize,
    hidden: Vec<f32>,
}

/// The embeddings of each of `inputs` (token lists as the tokenizer made them, specials and
/// all), pooled and normalized: one vector an input, or one a token with [`Pooling::None`].
/// Every input is checked before any is run: an empty one is [`CoreError::EmptyInput`], one
/// longer than a sequence may hold is [`CoreError::ContextOverflow`]. The engine's
/// sequences are left as they were; the blocks the inputs filled stay in the prefix cache,
/// evictable, like any finished request's.
pub fn embed_batch(
    engine: &mut Engine,
    inputs: &[&[u32]],
    pooling: Pooling,
    normalize: Normalize,
) -> Result<Vec<Vec<Vec<f32>>>, CoreError> {
    let max = engine.max_seq_len();
    for t in inputs {
        if t.is_empty() {
            return Err(CoreError::EmptyInput);
        }
        if t.len() > max {
            return Err(CoreError::ContextOverflow {
                n_past: 0,
                n_new: t.len(),
                n_ctx: max,
            });
        }
        engine.check_token_ids(t)?;
    }
    let mut running: Vec<Running> = Vec::new();
    let r = run(engine, inputs, pooling, &mut running);
    // On an error the inputs under way still hold sequences: give them back.
    for r in running.drain(..) {
        engine.free_sequence(r.seq)?;
    }
    let mut out = r?;
    for v in out.iter_mut().flatten() {
        normalize.apply(v);
    }
    Ok(out)
}

fn run(
    engine: &mut Engine,
    inputs: &[&[u32]],
    pooling: Pooling,
    running: &mut Vec<Running>,
) -> Result<Vec<Vec<Vec<f32>>>, CoreError> {
    let e = engine.model().config.n_embd;
    let all = pooling != Pooling::Last;
    let mut out: Vec<Vec<Vec<f32>>> = vec![Vec::new(); inputs.len()];
    let mut next = 0;
    let budget = engine.max_batch();
    while next < inputs.len() || !running.is_empty() {
        // Start inputs while the pass has room for their first token and the cache for
        // their whole length (a lone input always starts: it was checked to fit).
        let mut planned: usize = running.iter().map(|r| inputs[r.input].len() - r.done).sum();
        while next < inputs.len() && planned < budget {
            let n = inputs[next].len();
            let seq = engine.new_sequence();
            let need = engine.kv().blocks_needed(seq, n)?;
            let reserved: usize = running
                .iter()
                .map(|r| engine.kv().blocks_needed(r.seq, inputs[r.input].len()))
                .sum::<Result<usize, _>>()?;
            if !running.is_empty() && need + reserved > engine.kv().available_blocks() {
                engine.free_sequence(seq)?;
                break;
            }
            running.push(Running {
                input: next,
                seq,
                done: 0,
                hidden: Vec::with_capacity(if all { n * e } else { e }),
            });
            planned += n;
            next += 1;
        }
        // One pass: the running inputs' next tokens, oldest first, up to the budget.
        let mut left = budget;
        let mut items = Vec::with_capacity(running.len());
        let mut counts = Vec::with_capacity(running.len());
        for r in running.iter() {
            let tokens = inputs[r.input];
            let n = (tokens.len() - r.done).min(left);
            if n == 0 {
                break;
            }
            let ends = r.done + n == tokens.len();
            let logits = match (all, ends) {
                (true, _) => Logits::HiddenAll,
                (false, true) => Logits::HiddenLast,
                (false, false) => Logits::None,
            };
            items.push(BatchItem {
                seq: r.seq,
                tokens: &tokens[r.done..r.done + n],
                logits,
            });
            counts.push(n);
            left -= n;
        }
        engine.forward(&items, |item, _, row| {
            running[item].hidden.extend_from_slice(row)
        })?;
        for (r, n) in running.iter_mut().zip(counts) {
            r.done += n;
        }
        // Finished inputs leave, in order.
        let mut i = 0;
        while i < running.len() {
            if running[i].done == inputs[running[i].input].len() {
                let r = running.remove(i);
                engine.free_sequence(r.seq)?;
                out[r.input] = pool(&r.hidden, e, pooling);
            } else {
                i += 1;
            }
        }
    }
    Ok(out)
}
