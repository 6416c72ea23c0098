//! The engine on its own thread, shared by many client threads: what a server does. Each
//! client submits a request through a cloned [`Handle`] and reads its replies from its own
//! channel; the runtime decodes all running requests together (continuous batching). One
//! client asks for two answers to one prompt (its prompt is evaluated once), and one
//! cancels, after a few tokens, a request that would otherwise never end (a sliding window
//! keeps making room for it).
//!
//! `cargo run --release -p bitnet-core --example serve_threads -- MODEL.gguf [CLIENTS]`
//! (CI runs it on the shipped model, `models/shakespeare.gguf`.)

use std::error::Error;
use std::sync::Arc;

use bitnet_core::runtime::{Handle, Reply, Request, Runtime, RuntimeOptions};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::ContextPolicy;
use bitnet_core::{
    CoreError, Engine, EngineOptions, GenParams, LoadOptions, Model, Scheduler, SchedulerOptions,
    StopReason,
};

/// One client: submits `prompt` (for `n` answers) and collects the answers' text, stopping
/// after `cancel_after` tokens when given.
fn client(
    engine: Handle,
    prompt: Vec<u32>,
    params: GenParams,
    n: usize,
    cancel_after: Option<usize>,
) -> Result<Vec<(String, StopReason)>, String> {
    let request = Request {
        n,
        ..Request::new(prompt, params)
    };
    let replies = engine.stream(request).map_err(|e| e.to_string())?;
    let id = replies.id();
    let mut answers = vec![(String::new(), StopReason::MaxTokens); n];
    let mut tokens = 0;
    for reply in replies {
        match reply {
            Reply::Token { .. } => {
                tokens += 1;
                if cancel_after == Some(tokens) {
                    engine.cancel(id);
                }
            }
            Reply::Text { index, text } => answers[index].0.push_str(&text),
            // This example submits no embedding request.
            Reply::Embedding { .. } => {}
            Reply::Done { index, stats } => answers[index].1 = stats.stop_reason,
            Reply::Error { error, .. } => return Err(error.to_string()),
        }
    }
    Ok(answers)
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: serve_threads MODEL.gguf [CLIENTS]")?;
    let clients: usize = args.get(2).map_or(Ok(4), |n| n.parse())?;

    let model = Arc::new(Model::load(path, &LoadOptions::default())?);
    let tokenizer = model.tokenizer().ok_or("the model file has no tokenizer")?;
    let prompts: Vec<Vec<u32>> = ["ROMEO:", "JULIET:", "First Citizen:", "KING HENRY:"]
        .iter()
        .map(|p| tokenizer.encode(p, true, false))
        .collect();

    // The engine is made on the runtime's thread (its thread pool pins that thread).
    let runtime = Runtime::spawn(RuntimeOptions::default(), {
        let model = model.clone();
        move || {
            let engine = Engine::new(model, &EngineOptions::default())?;
            let opts = SchedulerOptions { max_running: 8 };
            Ok::<_, CoreError>(Scheduler::new(engine, opts))
        }
    })?;

    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let engine = runtime.handle();
            let prompt = prompts[i % prompts.len()].clone();
            let mut params = GenParams {
                max_tokens: 32,
                sampler: SamplerConfig {
                    seed: i as u64,
                    ..SamplerConfig::default()
                },
                ..GenParams::default()
            };
            // Client 0 wants two answers. Client 1 stops, after 5 tokens, a request with no
            // end of its own: no token limit, no end-of-generation token, and a window that
            // makes room in the cache as it fills.
            let n = if i == 0 { 2 } else { 1 };
            let cancel_after = (i == 1).then_some(5);
            if i == 1 {
                params.max_tokens = usize::MAX;
                params.ignore_eos = true;
                params.context = ContextPolicy::Window {
                    sinks: 4,
                    window: 64,
                };
            }
            std::thread::spawn(move || client(engine, prompt, params, n, cancel_after))
        })
        .collect();
    let mut failed = false;
    for (i, t) in threads.into_iter().enumerate() {
        let answers = t.join().map_err(|_| "a client thread panicked")??;
        for (j, (text, stop)) in answers.iter().enumerate() {
            println!("client {i} answer {j} ({}): {text:?}", stop.name());
        }
        let cancelled = answers.iter().any(|(_, s)| *s == StopReason::Cancelled);
        failed |= cancelled != (i == 1);
    }
    runtime.shutdown()?;
    if failed {
        return Err("only client 1's request should have been cancelled".into());
    }
    Ok(())
}
