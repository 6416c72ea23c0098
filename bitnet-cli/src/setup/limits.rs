//! Limits said out loud, before they cost anything: the memory a context will take (checked
//! against the machine's memory before the KV cache is allocated), a context beyond what the
//! model was trained on, a prompt that does not fit. (More threads than CPUs is said where
//! `-t` is read, `args/model.rs`.)

use anyhow::{Result, bail};
use bitnet_core::engine::EngineOptions;
use bitnet_core::kv::KvStorage;
use bitnet_core::model::Model;

use crate::output::{human_bytes, note};

/// Above this, the context's memory is announced before it is allocated (zeroing a few
/// hundred MiB already takes a noticeable moment).
const ANNOUNCE_BYTES: u64 = 512 << 20;

/// What an engine with `opts` allocates that grows with the context: the K and V pool (in
/// whole blocks), the per-thread attention score rows and the rope table.
pub fn context_bytes(model: &Model, opts: &EngineOptions, n_ctx: usize) -> (u64, u64) {
    let cfg = model.config();
    let kv = KvStorage::bytes_for_layers(
        cfg.n_head_kv,
        cfg.head_dim,
        &opts.layer_kv_types(cfg.n_layer),
        n_ctx,
        opts.block_tokens,
    );
    let kv = u64::try_from(kv).unwrap_or(u64::MAX);
    let threads = opts.thread_count();
    let f32s = (threads as u128 * cfg.gqa_group() as u128 + cfg.rope_dim as u128)
        .saturating_mul(n_ctx as u128);
    let other = u64::try_from(f32s.saturating_mul(4)).unwrap_or(u64::MAX);
    (kv, other)
}

/// Checks the context of an engine with `opts` before it is allocated: refuses one that
/// cannot fit in the machine's memory next to the weights, warns past the trained context,
/// and announces a large allocation. Returns the context size (`-c`, or the model's
/// default).
pub fn check_context(model: &Model, opts: &EngineOptions) -> Result<usize> {
    let n_ctx = if opts.n_ctx == 0 {
        model.default_n_ctx()
    } else {
        opts.n_ctx
    };
    let (kv, other) = context_bytes(model, opts, n_ctx);
    let ctx_bytes = kv.saturating_add(other);
    let load = model.load_stats();
    let weights = load.weight_bytes.saturating_add(load.mapped_bytes);
    let kv_text = format!(
        "{} ({} KV cache, {} attention buffers)",
        human_bytes(ctx_bytes),
        human_bytes(kv),
        human_bytes(other)
    );
    if let Some(total) = mem_total()
        && weights.saturating_add(ctx_bytes) > total
    {
        bail!(
            "a context of {n_ctx} tokens needs {kv_text}, which with the weights ({}) is more \
             than this machine's memory ({}): lower -c",
            human_bytes(weights),
            human_bytes(total)
        );
    }
    let trained = model.config().n_ctx_train;
    if n_ctx > trained {
        note!(
            "warning: a context of {n_ctx} tokens is beyond the {trained} the model was trained \
             on: text past {trained} tokens will likely degrade. It takes {kv_text}."
        );
    } else if ctx_bytes >= ANNOUNCE_BYTES {
        note!("allocating {kv_text} for a context of {n_ctx} tokens");
    }
    Ok(n_ctx)
}

/// The machine's memory (Windows: `GlobalMemoryStatusEx`).
#[cfg(windows)]
pub fn mem_total() -> Option<u64> {
    bitnet_core::windows_memory::total_physical_bytes()
}

/// The machine's memory (`MemTotal` in /proc/meminfo), or `None` where it cannot be read.
#[cfg(not(windows))]
pub fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The error for a prompt of `n_prompt` tokens that leaves no room to generate in a context
/// of `n_ctx`. The context suggested holds the prompt and the `n_predict` tokens `-n` asks
/// for (`None`: `-n -1`, no bound): a context of the prompt and one token would stop after
/// that one token, which is not what a user asking for `-n 10` wants.
pub fn prompt_too_long(n_prompt: usize, n_ctx: usize, n_predict: Option<usize>) -> anyhow::Error {
    let prompt = crate::output::count(n_prompt, "token");
    match n_predict {
        Some(n) if n > 0 => {
            let need = n_prompt + n;
            anyhow::anyhow!(
                "the prompt has {prompt} but the context holds {n_ctx}: the prompt and -n {n} \
                 need a context of at least {need} tokens (-c {need}), or a shorter prompt"
            )
        }
        _ => anyhow::anyhow!(
            "the prompt has {prompt} but the context holds {n_ctx}: generating needs a \
             context of at least {} tokens (-c {}), or a shorter prompt",
            n_prompt + 1,
            n_prompt + 1
        ),
    }
}

/// The note for a generation that the full context stopped after `generated` of the
/// `asked` tokens of `-n` (the figures line says only `stop: context full`, easily read as
/// success); `None` when it was not cut short.
pub fn cut_short_note(
    generated: usize,
    asked: usize,
    n_prompt: usize,
    n_ctx: usize,
) -> Option<String> {
    (generated < asked).then(|| {
        format!(
            "stopped after {generated} of {asked} tokens: the context ({n_ctx}) is full; \
             -c {} would hold the prompt and -n",
            n_prompt + asked
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suggested_context_holds_the_prompt_and_n() {
        let e = prompt_too_long(1248, 256, Some(10)).to_string();
        assert!(e.contains("(-c 1258)"), "{e}");
        let e = prompt_too_long(1248, 256, None).to_string();
        assert!(e.contains("at least 1249 tokens (-c 1249)"), "{e}");
        let e = prompt_too_long(1248, 256, Some(0)).to_string();
        assert!(e.contains("(-c 1249)"), "{e}");
    }

    #[test]
    fn a_cut_is_said_only_when_n_was_not_reached() {
        let note = cut_short_note(1, 10, 1248, 1249).unwrap();
        assert_eq!(
            note,
            "stopped after 1 of 10 tokens: the context (1249) is full; -c 1258 would hold the \
             prompt and -n"
        );
        assert_eq!(cut_short_note(10, 10, 1248, 1258), None);
    }
}
