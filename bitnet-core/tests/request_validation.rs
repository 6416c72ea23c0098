//! A request is checked once, at submit: each way it can be refused comes back as its own
//! [`RequestError`] (inside `CoreError::Request`) with the text users see, and leaves
//! nothing behind.

mod common;

use std::sync::Arc;

use bitnet_core::CoreError;
use bitnet_core::model::Model;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{
    ContextPolicy, Event, GenParams, RequestError, Scheduler, SpecParams, SubmitOptions,
};
use bitnet_kernels::Isa;
use common::models::{synth_model, tiny};
use common::sched::random_tokens;

const N_CTX: usize = 128;

fn model(tag: &str) -> Arc<Model> {
    synth_model(tag, &tiny(1), Some(Isa::Scalar)).0
}

fn sched(m: &Arc<Model>) -> Scheduler {
    common::models::sched(m, N_CTX, 32, 4, 1)
}

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

fn with_policy(context: ContextPolicy) -> GenParams {
    GenParams {
        context,
        ..greedy(4)
    }
}

const STRICT: SubmitOptions = SubmitOptions {
    logprobs: None,
    after: None,
    heal: String::new(),
    strict_context: true,
};

/// The refusal of `result`, which must be one.
fn refusal<T: std::fmt::Debug>(result: Result<T, CoreError>) -> RequestError {
    match result {
        Err(CoreError::Request(e)) => e,
        other => panic!("expected a refused request, got {other:?}"),
    }
}

/// Whether a refusal is the one expected.
type IsRefusal = fn(&RequestError) -> bool;

fn run_all(s: &mut Scheduler) {
    while !s.is_idle() {
        s.step(&mut |ev| {
            if let Event::Error { error, .. } = ev {
                panic!("{error}");
            }
        })
        .unwrap();
    }
}

#[test]
fn prompts_and_tokens_are_checked_at_submit() {
    let m = model("refuse-prompt");
    let mut s = sched(&m);
    let e = refusal(s.submit(&[], greedy(4)));
    assert!(matches!(e, RequestError::EmptyPrompt), "{e:?}");
    assert_eq!(e.to_string(), "no tokens to evaluate");
    let e = refusal(s.submit(&[3, 100_000], greedy(4)));
    assert!(
        matches!(
            e,
            RequestError::TokenOutOfRange {
                token: 100_000,
                index: 1,
                n_vocab: 512
            }
        ),
        "{e:?}"
    );
    let e = refusal(s.submit(&random_tokens(N_CTX + 1, 1), greedy(4)));
    assert!(
        matches!(
            e,
            RequestError::PromptPastContext {
                n_past: 0,
                n_new: 129,
                n_ctx: N_CTX
            }
        ),
        "{e:?}"
    );
    assert!(e.is_context());
    assert_eq!(
        e.to_string(),
        "context overflow: 0 tokens in the context + 129 new exceed n_ctx = 128 by 1"
    );
    assert_eq!(s.engine().kv().stats().sequences, 0, "nothing left behind");
    // A prompt that fills the context exactly runs (and stops at once: context full).
    s.submit(&random_tokens(N_CTX, 2), greedy(4)).unwrap();
    run_all(&mut s);
}

#[test]
fn a_strict_context_refuses_what_would_be_cut_short() {
    let m = model("refuse-strict");
    let mut s = sched(&m);
    let full = random_tokens(N_CTX, 3);
    let e = refusal(s.submit_with(&full, greedy(4), STRICT));
    assert!(
        matches!(
            e,
            RequestError::NoRoomToGenerate {
                prompt: 128,
                n_ctx: 128
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "the prompt is 128 tokens, the context holds 128: no room to generate"
    );
    let prompt = random_tokens(100, 4);
    let e = refusal(s.submit_with(&prompt, greedy(29), STRICT));
    assert!(
        matches!(
            e,
            RequestError::MaxTokensPastContext {
                prompt: 100,
                max_tokens: 29,
                n_ctx: 128
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "this model's context is 128 tokens; you asked for 129 (100 in the prompt, 29 to generate)"
    );
    assert!(e.is_context());
    // What fits is taken, and a shifting policy has room for anything.
    s.submit_with(&prompt, greedy(28), STRICT).unwrap();
    let shifting = GenParams {
        context: ContextPolicy::Shift { keep: 4 },
        ..greedy(1000)
    };
    s.submit_with(&full, shifting, STRICT).unwrap();
    // Not strict, the same requests are cut short instead.
    s.submit(&prompt, greedy(29)).unwrap();
    s.submit(&full, greedy(4)).unwrap();
    run_all(&mut s);
}

#[test]
fn context_policies_are_checked_against_the_context() {
    let m = model("refuse-policy");
    let mut s = sched(&m);
    let prompt = random_tokens(8, 5);
    let cases: [(ContextPolicy, IsRefusal); 6] = [
        (ContextPolicy::Shift { keep: 64 }, |e| {
            matches!(
                e,
                RequestError::ShiftKeepsTooMuch {
                    keep: 64,
                    max_len: 128
                }
            )
        }),
        (
            ContextPolicy::Window {
                sinks: 4,
                window: 3,
            },
            |e| matches!(e, RequestError::WindowTooSmall { window: 3 }),
        ),
        (
            ContextPolicy::Window {
                sinks: 4,
                window: 200,
            },
            |e| matches!(e, RequestError::WindowPastContext { window: 200, .. }),
        ),
        (
            ContextPolicy::HeavyHitters {
                sinks: 4,
                recent: 8,
                budget: 200,
            },
            |e| matches!(e, RequestError::BudgetPastContext { budget: 200, .. }),
        ),
        (
            ContextPolicy::HeavyHitters {
                sinks: 4,
                recent: 0,
                budget: 64,
            },
            |e| matches!(e, RequestError::NoRecentPositions),
        ),
        (
            ContextPolicy::HeavyHitters {
                sinks: 4,
                recent: 8,
                budget: 14,
            },
            |e| matches!(e, RequestError::BudgetTooSmall { budget: 14, .. }),
        ),
    ];
    for (policy, expected) in cases {
        let e = refusal(s.submit(&prompt, with_policy(policy)));
        assert!(expected(&e), "{policy:?}: {e:?}");
        assert!(e.is_context(), "{e:?}");
        assert!(
            e.to_string().starts_with("invalid option context policy: "),
            "{e}"
        );
        // The same check as the one a command line's policy gets before anything runs.
        assert_eq!(
            policy.validate(N_CTX).unwrap_err().to_string(),
            e.to_string()
        );
    }
    // A continuation on a sequence longer than its new policy lets it be.
    let kept = GenParams {
        keep: true,
        ..greedy(4)
    };
    let id = s.submit(&random_tokens(40, 6), kept).unwrap();
    run_all(&mut s);
    let held = s.held(id).len();
    let window = ContextPolicy::Window {
        sinks: 4,
        window: 16,
    };
    let e = refusal(s.submit_on(id, &[7], with_policy(window)));
    assert!(
        matches!(e, RequestError::PastPolicyLimit { held: h, limit: 20 } if h == held),
        "{e:?}"
    );
    assert_eq!(
        s.held(id).len(),
        held,
        "a refused continuation changes nothing"
    );
    s.free(id).unwrap();
    assert_eq!(s.engine().kv().stats().sequences, 0);
}

#[test]
fn parameters_are_checked_at_submit() {
    let m = model("refuse-params");
    let mut s = sched(&m);
    let prompt = random_tokens(8, 7);
    let hot = GenParams {
        sampler: SamplerConfig {
            temperature: -1.0,
            ..SamplerConfig::default()
        },
        ..greedy(4)
    };
    let e = refusal(s.submit(&prompt, hot));
    assert!(matches!(e, RequestError::Sampler(_)), "{e:?}");
    assert!(!e.is_context());
    let bad_ngram = GenParams {
        speculate: Some(SpecParams::lookup(0)),
        ..greedy(4)
    };
    let e = refusal(s.submit(&prompt, bad_ngram));
    assert!(
        matches!(
            e,
            RequestError::Speculation {
                option: "lookup_ngram",
                ..
            }
        ),
        "{e:?}"
    );
    let drafted = GenParams {
        speculate: Some(SpecParams::model()),
        ..greedy(4)
    };
    let e = refusal(s.submit(&prompt, drafted));
    assert!(matches!(e, RequestError::NoDraftModel), "{e:?}");
    let snowman = SubmitOptions {
        heal: "\u{2603}".into(),
        ..SubmitOptions::default()
    };
    let e = refusal(s.submit_with(&prompt, greedy(4), snowman));
    assert!(
        matches!(&e, RequestError::NothingToHeal(h) if h == "\u{2603}"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "invalid option heal: no token of the vocabulary begins with \"\u{2603}\""
    );
    assert_eq!(s.engine().kv().stats().sequences, 0, "nothing left behind");
}

#[test]
fn continuations_are_checked_at_submit() {
    let m = model("refuse-continuation");
    let mut s = sched(&m);
    let kept = GenParams {
        keep: true,
        ..greedy(4)
    };
    let id = s.submit(&random_tokens(8, 8), kept.clone()).unwrap();
    let e = refusal(s.submit_on(id, &[5], kept.clone()));
    assert!(
        matches!(e, RequestError::SequenceBusy(seq) if seq == id),
        "{e:?}"
    );
    run_all(&mut s);
    let after = SubmitOptions {
        after: Some(id),
        ..SubmitOptions::default()
    };
    let e = refusal(s.submit_on_with(id, &[5], kept.clone(), after));
    assert!(matches!(e, RequestError::SharedContinuation), "{e:?}");
    // Emptied, the sequence has no last token to generate from.
    s.truncate(id, 0).unwrap();
    let e = refusal(s.submit_on(id, &[], kept));
    assert!(matches!(e, RequestError::EmptyPrompt), "{e:?}");
    s.free(id).unwrap();
    assert!(s.free(id).is_err(), "a freed sequence is gone");
}

/// A chat hears a refused reply as [`SessionError::Refused`], with the scheduler's text,
/// and keeps its conversation as it was.
#[test]
fn a_chat_hears_a_refusal_as_its_own_error() {
    use bitnet_core::chat::{
        ChatSession, ChatTemplate, Conversation, ReplyIo, ReplySettings, SessionError,
    };
    use bitnet_core::scheduler::ContextMode;
    use bitnet_core::{Engine, LoadOptions};

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
    let m = Arc::new(Model::load(path, &LoadOptions::default()).unwrap());
    let template = ChatTemplate::for_model(&m, None).unwrap();
    let settings = ReplySettings {
        sampler: SamplerConfig {
            top_p: 2.0,
            ..SamplerConfig::default()
        },
        max_tokens: 8,
        stop: Vec::new(),
        context: ContextMode::Stop,
        constraint: None,
        speculate: None,
    };
    let engine = Engine::new(m, &common::models::unpinned()).unwrap();
    let sched = Scheduler::new(engine, Default::default());
    let mut chat = ChatSession::new(sched, Conversation::new(template), settings).unwrap();
    let io = ReplyIo {
        on_text: &mut |_| true,
        interrupted: &|| false,
        on_status: &mut |_| {},
    };
    let e = chat.send("Good morrow", io).unwrap_err();
    let SessionError::Refused(RequestError::Sampler(s)) = &e else {
        panic!("expected a refused sampler, got {e:?}");
    };
    assert_eq!(e.to_string(), s.to_string());
    assert!(e.to_string().contains("top_p"), "{e}");
    assert!(chat.conversation().messages().is_empty());
    assert_eq!(chat.context_used(), 0);
}
