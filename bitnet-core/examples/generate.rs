//! Generating text with the engine, as a program embeds it: load a GGUF model, make an
//! engine and a scheduler, and stream one request's text as it becomes final.
//!
//! `cargo run --release -p bitnet-core --example generate -- MODEL.gguf ["PROMPT"] [TOKENS]`
//! (CI runs it on the shipped model, `models/shakespeare.gguf`.)

use std::error::Error;
use std::io::{self, Write};
use std::sync::Arc;

use bitnet_core::sampling::SamplerConfig;
use bitnet_core::{
    Engine, EngineOptions, GenParams, LoadOptions, Model, Scheduler, SchedulerOptions, generate,
};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: generate MODEL.gguf [PROMPT] [TOKENS]")?;
    let prompt = args.get(2).map_or("ROMEO:", String::as_str);
    let max_tokens: usize = args.get(3).map_or(Ok(64), |n| n.parse())?;

    // The model is immutable once loaded and shared: an engine holds an `Arc` of it.
    let model = Arc::new(Model::load(path, &LoadOptions::default())?);
    let tokenizer = model.tokenizer().ok_or("the model file has no tokenizer")?;
    let tokens = tokenizer.encode(prompt, true, false);

    // The engine allocates its thread pool, buffers and KV cache here, once; the
    // scheduler runs requests on it.
    let engine = Engine::new(model.clone(), &EngineOptions::default())?;
    let mut sched = Scheduler::new(engine, SchedulerOptions::default());
    let params = GenParams {
        max_tokens,
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        ..GenParams::default()
    };

    let mut out = io::stdout().lock();
    write!(out, "{prompt}")?;
    // Text arrives as whole UTF-8 pieces; returning false would stop the request.
    let (_, stats) = generate(&mut sched, &tokens, params, |text| {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_ok()
    })?;
    writeln!(out)?;
    eprintln!(
        "{} prompt tokens at {:.1} tok/s, {} generated at {:.1} tok/s, stop: {}",
        stats.prompt_tokens,
        stats.prompt_tps(),
        stats.gen_tokens,
        stats.gen_tps(),
        stats.stop_reason.name()
    );
    if stats.gen_tokens == 0 {
        return Err("nothing was generated".into());
    }
    Ok(())
}
