//! Embedding requests on the scheduler (`Scheduler::submit_embedding`) and the runtime
//! (`Handle::embed`), on the shipped model: their chunks ride in the same passes as a
//! generation's tokens, their vectors are bit for bit those `embed_batch` gives for the same
//! tokens (every pooling, inputs longer than a pass, a prompt served from the prefix cache),
//! a cancel ends one with no vectors, refusals leave nothing behind, and every sequence and
//! KV block is given back.

use std::collections::HashMap;
use std::sync::Arc;

use bitnet_core::embed::{Normalize, Pooling, embed_batch};
use bitnet_core::runtime::{EmbedRequest, Reply, Runtime, RuntimeOptions};
use bitnet_core::scheduler::{EmbedParams, Event, GenParams, RequestError};
use bitnet_core::{
    CoreError, Engine, EngineOptions, LoadOptions, Model, Scheduler, SchedulerOptions, SeqId,
    StopReason,
};

/// Tokens one pass evaluates: small, so the longer inputs span passes.
const BATCH: usize = 16;

fn model() -> Arc<Model> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
    Arc::new(Model::load(path, &LoadOptions::default()).expect("the shipped model loads"))
}

fn engine(m: &Arc<Model>) -> Engine {
    let opts = EngineOptions {
        threads: 1,
        pin: false,
        n_ctx: 256,
        batch: BATCH,
        ..EngineOptions::default()
    };
    Engine::new(m.clone(), &opts).expect("an engine")
}

fn scheduler(m: &Arc<Model>) -> Scheduler {
    Scheduler::new(engine(m), SchedulerOptions { max_running: 4 })
}

/// Inputs of several lengths: one token, a few, more than a pass holds.
fn inputs(m: &Model) -> Vec<Vec<u32>> {
    let tok = m.tokenizer().expect("a tokenizer");
    [
        "ROMEO:",
        "But soft, what light through yonder window breaks? It is the east.",
        "O",
    ]
    .iter()
    .map(|t| tok.encode(t, true, false))
    .chain([vec![7u32]])
    .collect()
}

/// What `embed_batch` gives for `inputs` on an engine of its own.
fn reference(m: &Arc<Model>, inputs: &[Vec<u32>], params: EmbedParams) -> Vec<Vec<Vec<f32>>> {
    let refs: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
    embed_batch(&mut engine(m), &refs, params.pooling, params.normalize).unwrap()
}

/// What the events of a run said: each sequence's vectors and end, and the tokens each
/// generation sampled.
#[derive(Default)]
struct Heard {
    vectors: HashMap<SeqId, Vec<Vec<f32>>>,
    ends: HashMap<SeqId, StopReason>,
    tokens: HashMap<SeqId, usize>,
}

impl Heard {
    fn on(&mut self, ev: Event<'_>) {
        match ev {
            Event::Embedding { seq, embedding } => {
                assert!(!self.ends.contains_key(&seq), "vectors after the end");
                assert!(
                    self.vectors.insert(seq, embedding).is_none(),
                    "vectors twice"
                );
            }
            Event::Done { seq, stats } => {
                assert!(
                    self.ends.insert(seq, stats.stop_reason).is_none(),
                    "two ends"
                );
            }
            Event::Error { seq, error } => panic!("{seq}: {error}"),
            Event::Token { seq, .. } => *self.tokens.entry(seq).or_default() += 1,
            Event::Text { .. } => {}
        }
    }

    /// Steps `s` until it is idle.
    fn run(&mut self, s: &mut Scheduler) {
        let mut steps = 0;
        while !s.is_idle() {
            s.step(&mut |ev| self.on(ev)).unwrap();
            steps += 1;
            assert!(steps < 10_000, "the scheduler does not finish");
        }
    }
}

fn assert_all_given_back(s: &Scheduler) {
    let st = s.engine().kv().stats();
    assert_eq!(st.sequences, 0, "{st:?}");
    assert_eq!(st.pool.used, 0, "blocks still held: {st:?}");
}

#[test]
fn embeddings_equal_embed_batch_for_every_pooling_and_share_passes_with_a_generation() {
    let m = model();
    let inputs = inputs(&m);
    for pooling in [Pooling::Last, Pooling::Mean, Pooling::Cls, Pooling::None] {
        let params = EmbedParams {
            pooling,
            normalize: Normalize(2),
        };
        let want = reference(&m, &inputs, params);
        let mut s = scheduler(&m);
        // A generation decoding when the embeddings come.
        let generation = GenParams {
            max_tokens: 12,
            ignore_eos: true,
            ..GenParams::default()
        };
        let g = s.submit(&[1, 40, 41, 42], generation).unwrap();
        let mut heard = Heard::default();
        s.step(&mut |ev| heard.on(ev)).unwrap();
        assert_eq!(heard.tokens[&g], 1, "the generation is decoding");
        let seqs: Vec<SeqId> = inputs
            .iter()
            .map(|t| s.submit_embedding(t, params).unwrap())
            .collect();
        // The next pass holds the generation's decode token and the embeddings' chunks.
        let evaluated = s.step(&mut |ev| heard.on(ev)).unwrap();
        assert_eq!(
            heard.tokens[&g], 2,
            "{pooling:?}: the generation decoded in it"
        );
        assert_eq!(evaluated, BATCH, "{pooling:?}: a full pass of both kinds");
        heard.run(&mut s);
        assert_eq!(heard.ends[&g], StopReason::MaxTokens);
        for (i, seq) in seqs.iter().enumerate() {
            assert_eq!(
                heard.ends[seq],
                StopReason::MaxTokens,
                "{pooling:?} input {i}"
            );
            assert_eq!(heard.vectors[seq], want[i], "{pooling:?} input {i}");
        }
        assert!(
            !heard.vectors.contains_key(&g),
            "a generation hears no vectors"
        );
        assert_all_given_back(&s);

        // The same inputs again: last-token pooling starts them from the prefix cache the
        // first run left, and the vectors stay the same.
        let again: Vec<SeqId> = inputs
            .iter()
            .map(|t| s.submit_embedding(t, params).unwrap())
            .collect();
        let mut heard = Heard::default();
        heard.run(&mut s);
        for (i, seq) in again.iter().enumerate() {
            assert_eq!(heard.vectors[seq], want[i], "{pooling:?} input {i}, again");
        }
        assert_all_given_back(&s);
    }
}

#[test]
fn a_cancelled_embedding_ends_without_vectors_and_refusals_leave_nothing() {
    let m = model();
    let mut s = scheduler(&m);
    let params = EmbedParams {
        pooling: Pooling::Mean,
        normalize: Normalize(2),
    };
    let long: Vec<u32> = (0..3 * BATCH as u32).map(|i| 10 + i).collect();
    let seq = s.submit_embedding(&long, params).unwrap();
    s.step(&mut |ev| panic!("nothing ends in the first pass: {ev:?}"))
        .unwrap();
    assert!(s.cancel(seq));
    let mut heard = Heard::default();
    heard.run(&mut s);
    assert!(heard.vectors.is_empty());
    assert_eq!(heard.ends[&seq], StopReason::Cancelled);
    assert_all_given_back(&s);

    let refused = |r: Result<SeqId, CoreError>| match r {
        Err(CoreError::Request(e)) => e,
        other => panic!("not refused: {other:?}"),
    };
    assert!(matches!(
        refused(s.submit_embedding(&[], params)),
        RequestError::EmptyPrompt
    ));
    let n_vocab = s.engine().n_vocab() as u32;
    assert!(matches!(
        refused(s.submit_embedding(&[1, n_vocab], params)),
        RequestError::TokenOutOfRange { index: 1, .. }
    ));
    let past = vec![5u32; s.max_seq_len() + 1];
    assert!(matches!(
        refused(s.submit_embedding(&past, params)),
        RequestError::PromptPastContext { .. }
    ));
    assert!(s.is_idle());
    assert_all_given_back(&s);
}

#[test]
fn the_runtime_answers_each_input_with_its_vectors_then_its_end() {
    let m = model();
    let inputs = inputs(&m);
    let params = EmbedParams {
        pooling: Pooling::Last,
        normalize: Normalize(2),
    };
    let want = reference(&m, &inputs, params);
    let mm = m.clone();
    let rt = Runtime::spawn(RuntimeOptions::default(), move || {
        Ok::<_, CoreError>(scheduler(&mm))
    })
    .unwrap();
    let replies = rt
        .handle()
        .embed(EmbedRequest {
            inputs: inputs.clone(),
            params,
        })
        .unwrap();
    let mut got: Vec<Option<Vec<Vec<f32>>>> = vec![None; inputs.len()];
    let mut ended = vec![false; inputs.len()];
    for r in replies {
        match r {
            Reply::Embedding { index, embedding } => {
                assert!(!ended[index], "input {index}: vectors after its end");
                got[index] = Some(embedding);
            }
            Reply::Done { index, stats } => {
                assert_eq!(stats.stop_reason, StopReason::MaxTokens);
                assert_eq!(stats.prompt_tokens, inputs[index].len());
                ended[index] = true;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(ended.iter().all(|&e| e), "every input ended");
    for (i, g) in got.into_iter().enumerate() {
        assert_eq!(g.as_ref(), Some(&want[i]), "input {i}");
    }
    rt.shutdown().unwrap();
}
