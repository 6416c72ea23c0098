//! `/show` and its sub-commands as ollama has them: `info` (what the model is), `template`
//! (the chat template's text), `parameters` (how replies are made); plain `/show` gives a
//! few lines on each and the conversation.

use std::io::{self, Write};

use bitnet_core::chat::ChatSession;
use bitnet_core::config::ModelConfig;
use bitnet_core::scheduler::default_reply_budget;

use super::commands::{SHOW_WORDS, Show};
use crate::output::{count, human_count};

pub(super) fn show(out: &mut impl Write, chat: &ChatSession, what: Show) -> io::Result<()> {
    match what {
        Show::Overview => overview(out, chat),
        Show::Info => info(out, chat),
        Show::Template => template(out, chat),
        Show::Parameters => parameters(out, chat),
    }
}

fn overview(out: &mut impl Write, chat: &ChatSession) -> io::Result<()> {
    let m = chat.model();
    let c = m.config();
    let s = &chat.settings;
    let conv = chat.conversation();
    writeln!(
        out,
        "model: {} ({} parameters, {}, {} weights), {} kernels, head {}",
        c.arch_name,
        human_count(n_params(c)),
        count(c.n_layer, "layer"),
        c.weight_type.name(),
        m.isa().name(),
        m.head_mode().name()
    )?;
    writeln!(out, "template: {}", conv.template().name())?;
    writeln!(
        out,
        "system: {}",
        conv.system()
            .map_or("(none)".to_owned(), |t| format!("{t:?}"))
    )?;
    writeln!(
        out,
        "sampling: temp {} top-k {} top-p {} min-p {} repeat-penalty {} seed {} | max tokens {}",
        s.sampler.temperature,
        s.sampler.top_k,
        s.sampler.top_p,
        s.sampler.min_p,
        s.sampler.repeat_penalty,
        s.sampler.seed,
        reply_budget(chat)
    )?;
    writeln!(
        out,
        "conversation: {} | context {}/{} tokens",
        count(conv.messages().len(), "message"),
        chat.context_used(),
        chat.context_size()
    )?;
    writeln!(out, "(more: /show {})", SHOW_WORDS.join(", /show "))
}

fn info(out: &mut impl Write, chat: &ChatSession) -> io::Result<()> {
    let m = chat.model();
    let c = m.config();
    let n = n_params(c);
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<16}{v}");
    writeln!(out, "model")?;
    row(out, "architecture", c.arch_name.clone())?;
    row(out, "parameters", format!("{} ({n})", human_count(n)))?;
    row(out, "weights", weight_types(c))?;
    row(
        out,
        "shape",
        format!(
            "{}, {} dims, {} ({} for keys and values), {} FFN dims, vocab {}",
            count(c.n_layer, "layer"),
            c.n_embd,
            count(c.n_head, "head"),
            c.n_head_kv,
            c.n_ff,
            c.n_vocab
        ),
    )?;
    row(
        out,
        "context",
        format!(
            "{} tokens here ({} trained)",
            chat.context_size(),
            c.n_ctx_train
        ),
    )?;
    row(
        out,
        "template",
        chat.conversation().template().name().to_owned(),
    )?;
    row(out, "kernels", m.isa().name().to_owned())?;
    row(out, "head", m.head_mode().name().to_owned())
}

fn template(out: &mut impl Write, chat: &ChatSession) -> io::Result<()> {
    let t = chat.conversation().template();
    writeln!(out, "template: {}", t.name())?;
    writeln!(out, "{}", t.source().trim_end())
}

fn parameters(out: &mut impl Write, chat: &ChatSession) -> io::Result<()> {
    let s = &chat.settings;
    let p = &s.sampler;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "  {k:<16}{v}");
    writeln!(out, "parameters (/set NAME VALUE changes them)")?;
    row(out, "temp", p.temperature.to_string())?;
    row(out, "top-k", p.top_k.to_string())?;
    row(out, "top-p", p.top_p.to_string())?;
    row(out, "min-p", p.min_p.to_string())?;
    row(out, "repeat-penalty", p.repeat_penalty.to_string())?;
    row(out, "seed", p.seed.to_string())?;
    row(out, "max-tokens", reply_budget(chat))?;
    let stops: Vec<String> = s.stop.iter().map(|t| format!("{t:?}")).collect();
    row(
        out,
        "stop",
        if stops.is_empty() {
            "(the end-of-generation tokens only)".to_owned()
        } else {
            stops.join(" ")
        },
    )
}

fn reply_budget(chat: &ChatSession) -> String {
    let max_tokens = chat.settings.max_tokens;
    if max_tokens == usize::MAX {
        "until the turn ends or the context is full".to_owned()
    } else if max_tokens == default_reply_budget(chat.context_size()) {
        format!("{max_tokens} (the default for this context)")
    } else {
        max_tokens.to_string()
    }
}

/// The storage types of the weights: projections, embedding, head.
fn weight_types(c: &ModelConfig) -> String {
    let head = if c.tied_head {
        "head tied to the embedding".to_owned()
    } else {
        match c.head_type {
            Some(t) => format!("{} head", t.name()),
            None => "head".to_owned(),
        }
    };
    format!(
        "{} projections, {} embedding, {head}",
        c.weight_type.name(),
        c.embd_type.name()
    )
}

/// The parameter count, from the shape: the loaded model keeps no tensor table, and every
/// tensor of a supported file is one of these (`inspect` counts the same from the file).
fn n_params(c: &ModelConfig) -> u64 {
    let [vocab, embd, ff] = [c.n_vocab, c.n_embd, c.n_ff].map(|v| v as u64);
    let q = (c.n_head * c.head_dim) as u64;
    let kv = (c.n_head_kv * c.head_dim) as u64;
    let norms = 2 * embd + if c.sub_norms { q + ff } else { 0 };
    let scales = if c.has_proj_scales { 7 } else { 0 };
    let layer = embd * q + 2 * embd * kv + q * embd + 3 * embd * ff + norms + scales;
    let head = if c.tied_head { 0 } else { vocab * embd };
    vocab * embd + c.n_layer as u64 * layer + embd + head
}
