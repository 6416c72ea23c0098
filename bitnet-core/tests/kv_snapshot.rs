//! Saved KV rows: a prompt's cached rows written to a file, read by a fresh engine (a server
//! restarted), put into its prefix cache, and the next request evaluating only its new
//! tokens with the same log probabilities as a warm cache and the same tokens as a cold one.

mod common;

use std::sync::Arc;

use bitnet_core::kv::snapshot_file::{SnapshotError, SnapshotKey, read_snapshot, write_snapshot};
use bitnet_core::model::Model;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{Event, GenParams, GenStats, Scheduler, SubmitOptions};
use bitnet_kernels::Isa;
use common::models::{synth_model, tiny};
use common::sched::random_tokens;

fn greedy(max_tokens: usize) -> GenParams {
    GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        ..GenParams::default()
    }
}

/// Each sampled token's log probability and the top 5 beside it.
type Logprobs = Vec<(f32, Vec<(u32, f32)>)>;

/// One request to its end: its stats and its log probabilities.
fn run(s: &mut Scheduler, prompt: &[u32]) -> (GenStats, Logprobs) {
    let extra = SubmitOptions {
        logprobs: Some(5),
        ..SubmitOptions::default()
    };
    let id = s.submit_with(prompt, greedy(6), extra).unwrap();
    let (mut done, mut probs) = (None, Vec::new());
    while !s.is_idle() {
        s.step(&mut |ev| match ev {
            Event::Token {
                seq,
                logprobs: Some(l),
                ..
            } if seq == id => probs.push((l.logprob, l.top.clone())),
            Event::Done { seq, stats } if seq == id => done = Some(stats),
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        })
        .unwrap();
    }
    (done.unwrap(), probs)
}

fn sched(m: &Arc<Model>) -> Scheduler {
    common::models::sched(m, 1024, 64, 4, 2)
}

#[test]
fn saved_rows_put_back_after_a_restart_read_only_the_new_tokens_and_answer_the_same() {
    let (m, path) = synth_model("kv-snapshot", &tiny(2), Some(Isa::Scalar));
    let system = random_tokens(150, 3);
    let mut turn = system.clone();
    turn.extend(random_tokens(20, 4));

    // The first run reads the system prompt, and saves what its cache holds of it.
    let mut first = sched(&m);
    run(&mut first, &system);
    let snap = first.export_cached(&system).unwrap().unwrap();
    assert_eq!(snap.tokens(), &system[..], "the whole prompt was cached");
    let key = SnapshotKey::new(&path, &m).unwrap();
    let file = std::env::temp_dir().join(format!("bitnet-kv-{}.bkv", std::process::id()));
    write_snapshot(&file, &key, &snap).unwrap();
    let (warm, warm_probs) = run(&mut first, &turn);
    assert_eq!(warm.cached_tokens, 150);

    // A fresh engine (the restart): the key agrees, the rows go into its prefix cache.
    let mut restarted = sched(&m);
    let key2 = SnapshotKey::new(&path, restarted.engine().model()).unwrap();
    assert_eq!(key, key2);
    let back = read_snapshot(&file, &key2, restarted.max_seq_len()).unwrap();
    assert_eq!(restarted.import_cached(&back).unwrap(), 150);
    let before = restarted.engine().evaluated_tokens();
    let (restored, restored_probs) = run(&mut restarted, &turn);
    assert_eq!(restored.cached_tokens, 150);
    // 20 new prompt tokens, then 5 sampled tokens fed back (the 6th ends it).
    assert_eq!(restarted.engine().evaluated_tokens() - before, 20 + 5);
    assert_eq!(restored.tokens, warm.tokens);
    assert_eq!(restored_probs, warm_probs, "bit for bit the warm cache's");

    // And the tokens of a cold run, which reads everything.
    let mut cold = sched(&m);
    let (cold_stats, _) = run(&mut cold, &turn);
    assert_eq!(cold_stats.cached_tokens, 0);
    assert_eq!(cold_stats.tokens, restored.tokens);

    // Another model file (other weights) does not take the file.
    let mut spec = tiny(2);
    spec.seed += 1;
    let (other, reseeded) = synth_model("kv-snapshot-reseeded", &spec, Some(Isa::Scalar));
    let o = sched(&other);
    let key3 = SnapshotKey::new(&reseeded, o.engine().model()).unwrap();
    assert!(matches!(
        read_snapshot(&file, &key3, 1024),
        Err(SnapshotError::OtherModel { .. })
    ));
    for p in [&file, &path, &reseeded] {
        std::fs::remove_file(p).ok();
    }
}

#[test]
fn rows_that_do_not_fit_beside_running_requests_are_refused_and_nothing_changes() {
    let (m, path) = synth_model("kv-snapshot-room", &tiny(2), Some(Isa::Scalar));
    let prompt = random_tokens(100, 9);
    let mut a = sched(&m);
    run(&mut a, &prompt);
    let snap = a.export_cached(&prompt).unwrap().unwrap();
    // A pool of 128 positions with a request running that may take all of it.
    let mut small = common::models::sched(&m, 128, 64, 4, 2);
    small.submit(&random_tokens(8, 10), greedy(100)).unwrap();
    small.step(&mut |_| {}).unwrap();
    let stats = small.engine().pool_stats();
    assert!(small.import_cached(&snap).is_err());
    assert_eq!(small.engine().pool_stats(), stats);
    std::fs::remove_file(&path).ok();
}
