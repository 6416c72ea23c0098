//! A multi-turn chat, as a program embeds it: a [`ChatSession`] keeps the conversation in
//! the KV cache between turns, so each turn evaluates only its own new tokens.
//!
//! `cargo run --release -p bitnet-core --example chat -- MODEL.gguf ["first message" ...]`
//! (CI runs it on the shipped model, `models/shakespeare.gguf`: a base model trained on
//! Shakespeare, so expect verse rather than answers.)

use std::error::Error;
use std::io::{self, Write};
use std::sync::Arc;

use bitnet_core::chat::{ChatSession, ChatTemplate, Conversation, ReplyIo, ReplySettings};
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::ContextMode;
use bitnet_core::{Engine, EngineOptions, LoadOptions, Model, Scheduler, SchedulerOptions};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: chat MODEL.gguf [MESSAGE ...]")?;
    let mut messages: Vec<String> = args[2..].to_vec();
    if messages.is_empty() {
        messages = vec!["Good morrow, what news?".into(), "Who art thou?".into()];
    }

    let model = Arc::new(Model::load(path, &LoadOptions::default())?);
    // The file's own chat template, else a plain one.
    let template = ChatTemplate::for_model(&model, None)?;
    let settings = ReplySettings {
        sampler: SamplerConfig {
            seed: 1,
            ..SamplerConfig::default()
        },
        max_tokens: 48,
        stop: template.stop_strings().to_vec(),
        context: ContextMode::Stop,
        constraint: None,
        speculate: None,
    };
    let engine = Engine::new(model, &EngineOptions::default())?;
    let sched = Scheduler::new(engine, SchedulerOptions { max_running: 1 });
    let mut chat = ChatSession::new(sched, Conversation::new(template), settings)?;

    for text in &messages {
        println!("> {text}");
        let mut out = io::stdout().lock();
        let mut on_text = |piece: &str| out.write_all(piece.as_bytes()).is_ok();
        let io = ReplyIo {
            on_text: &mut on_text,
            interrupted: &|| false,
            on_status: &mut |_| {},
        };
        let turn = chat.send(text, io)?;
        println!();
        eprintln!(
            "({} new prompt tokens, {} kept from the cache; {} reply tokens, stop: {})",
            turn.evaluated,
            turn.kept,
            turn.reply.gen_tokens,
            turn.reply.stop_reason.name()
        );
    }
    // Every turn is in the conversation, and its tokens in the cache.
    let n = chat.conversation().messages().len();
    if n != 2 * messages.len() {
        return Err(format!("{n} messages after {} turns", messages.len()).into());
    }
    Ok(())
}
