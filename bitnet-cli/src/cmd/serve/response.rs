//! The JSON of answers, whole or in streamed chunks, as OpenAI shapes them (`choices`,
//! `usage` with `prompt_tokens_details.cached_tokens`, `logprobs` in the chat or the legacy
//! completions layout) plus llama.cpp's `timings` object.

use bitnet_core::chat::{ToolFormat, parse_tool_calls};
use bitnet_core::scheduler::TokenLogprobs;
use bitnet_core::scheduler::{GenStats, StopReason};
use bitnet_core::tokenizer::Tokenizer;
use serde_json::{Value, json};

use super::request::Api;
use super::tools::calls_json;
use bitnet_core::runtime::{TokenEntry, TokenText};

/// What is known about one answer at its end.
#[derive(Debug, Default)]
pub struct Choice {
    pub text: String,
    /// Sampled tokens with their log probabilities, when asked for.
    pub logprobs: Vec<(u32, TokenLogprobs)>,
    pub stats: Option<GenStats>,
    pub error: Option<String>,
}

/// Names and time shared by every chunk of one response.
#[derive(Clone, Debug)]
pub struct Head {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    /// The text taken off the front of each reply (token healing): its tokens' texts are
    /// trimmed to match.
    pub heal: String,
}

impl Head {
    pub fn new(api: Api, model: &str) -> Head {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completion => "cmpl",
        };
        Head {
            api,
            id: format!("{prefix}-{:x}{:08x}", now.as_secs(), now.subsec_nanos()),
            created: now.as_secs(),
            model: model.to_owned(),
            heal: String::new(),
        }
    }

    /// The same, for replies healed of `heal` (see [`Head::heal`]).
    pub fn healed(mut self, heal: &str) -> Head {
        self.heal = heal.to_owned();
        self
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
            (Api::Completion, _) => "text_completion",
        }
    }

    /// The whole answer (`stream: false`); with `tools`, each answer is read for tool calls
    /// in that syntax.
    pub fn full(
        &self,
        prompt_tokens: usize,
        choices: &[Choice],
        tok: &Tokenizer,
        tools: Option<ToolFormat>,
    ) -> Value {
        let list: Vec<Value> = choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut reason = c.stats.as_ref().map(|s| finish_reason(s.stop_reason));
                let lp = (!c.logprobs.is_empty()).then(|| {
                    let mut texts = TokenText::new(&self.heal, true);
                    for (t, lp) in &c.logprobs {
                        texts.push(tok, *t, lp);
                    }
                    let (_, mut entries) = texts.text(&c.text);
                    entries.extend(texts.finish().1);
                    self.logprobs(&entries, 0)
                });
                let mut message = json!({"role": "assistant", "content": c.text});
                if let Some(format) = tools {
                    let parsed = parse_tool_calls(format, &c.text);
                    if parsed.tool_calls.is_empty() {
                        message["content"] = json!(parsed.content);
                    } else {
                        let content = parsed.content.trim();
                        message["content"] = if content.is_empty() {
                            Value::Null
                        } else {
                            json!(content)
                        };
                        message["tool_calls"] = json!(calls_json(&parsed.tool_calls));
                        if reason == Some("stop") {
                            reason = Some("tool_calls");
                        }
                    }
                }
                match self.api {
                    Api::Chat => json!({
                        "index": i,
                        "message": message,
                        "logprobs": lp,
                        "finish_reason": reason,
                    }),
                    Api::Completion => json!({
                        "index": i,
                        "text": c.text,
                        "logprobs": lp,
                        "finish_reason": reason,
                    }),
                }
            })
            .collect();
        let stats: Vec<&GenStats> = choices.iter().filter_map(|c| c.stats.as_ref()).collect();
        json!({
            "id": self.id,
            "object": self.object(false),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": system_fingerprint(),
            "choices": list,
            "usage": usage(prompt_tokens, &stats),
            "timings": stats.first().map(|s| timings(s)),
        })
    }

    /// A chunk of text (and its tokens' log probabilities) of answer `index`.
    pub fn delta(
        &self,
        index: usize,
        text: &str,
        logprobs: &[TokenEntry],
        offset: usize,
        with_usage_field: bool,
    ) -> Value {
        let lp = (!logprobs.is_empty()).then(|| self.logprobs(logprobs, offset));
        let choice = match self.api {
            Api::Chat => json!({
                "index": index,
                "delta": {"content": text},
                "logprobs": lp,
                "finish_reason": null,
            }),
            Api::Completion => json!({
                "index": index,
                "text": text,
                "logprobs": lp,
                "finish_reason": null,
            }),
        };
        self.chunk(vec![choice], with_usage_field)
    }

    /// A chunk of a streamed answer's tool calls (`delta.tool_calls`, see
    /// [`super::tools::call_deltas`]).
    pub fn tool_delta(&self, index: usize, calls: Value, with_usage_field: bool) -> Value {
        let choice = json!({
            "index": index,
            "delta": {"tool_calls": calls},
            "logprobs": null,
            "finish_reason": null,
        });
        self.chunk(vec![choice], with_usage_field)
    }

    /// The first chunk of a chat answer: the role, as OpenAI sends it.
    pub fn role(&self, index: usize, with_usage_field: bool) -> Value {
        let choice = json!({
            "index": index,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": null,
            "finish_reason": null,
        });
        self.chunk(vec![choice], with_usage_field)
    }

    /// The last chunk of answer `index`: empty text and the finish reason (`tool_calls`
    /// when the answer was calls).
    pub fn finish(
        &self,
        index: usize,
        stats: &GenStats,
        called: bool,
        with_usage_field: bool,
    ) -> Value {
        let reason = match finish_reason(stats.stop_reason) {
            "stop" if called => "tool_calls",
            r => r,
        };
        let choice = match self.api {
            Api::Chat => json!({
                "index": index, "delta": {}, "logprobs": null, "finish_reason": reason,
            }),
            Api::Completion => json!({
                "index": index, "text": "", "logprobs": null, "finish_reason": reason,
            }),
        };
        let mut c = self.chunk(vec![choice], with_usage_field);
        c["timings"] = timings(stats);
        c
    }

    /// The usage chunk (`stream_options.include_usage`): no choices.
    pub fn usage_chunk(&self, prompt_tokens: usize, stats: &[&GenStats]) -> Value {
        let mut c = self.chunk(Vec::new(), true);
        c["usage"] = usage(prompt_tokens, stats);
        c
    }

    fn chunk(&self, choices: Vec<Value>, with_usage_field: bool) -> Value {
        let mut c = json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "system_fingerprint": system_fingerprint(),
            "choices": choices,
        });
        if with_usage_field {
            // OpenAI: with include_usage, every chunk but the last carries `usage: null`.
            c["usage"] = Value::Null;
        }
        c
    }

    /// `logprobs` of a choice; `offset` is the text offset of the first token (legacy
    /// completions layout).
    fn logprobs(&self, entries: &[TokenEntry], offset: usize) -> Value {
        match self.api {
            Api::Chat => {
                let content: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let top: Vec<Value> = e
                            .top
                            .iter()
                            .map(|(text, bytes, l)| {
                                json!({"token": text, "logprob": l, "bytes": bytes})
                            })
                            .collect();
                        json!({
                            "token": e.text,
                            "logprob": e.logprob,
                            "bytes": e.bytes,
                            "top_logprobs": top,
                        })
                    })
                    .collect();
                json!({ "content": content })
            }
            Api::Completion => {
                let mut at = offset;
                let mut offsets = Vec::with_capacity(entries.len());
                for e in entries {
                    offsets.push(at);
                    at += e.text.len();
                }
                let top: Vec<Value> = entries
                    .iter()
                    .map(|e| {
                        let m: serde_json::Map<String, Value> = e
                            .top
                            .iter()
                            .map(|(text, _, l)| (text.clone(), json!(l)))
                            .collect();
                        Value::Object(m)
                    })
                    .collect();
                json!({
                    "tokens": entries.iter().map(|e| e.text.as_str()).collect::<Vec<_>>(),
                    "token_logprobs": entries.iter().map(|e| e.logprob).collect::<Vec<_>>(),
                    "top_logprobs": top,
                    "text_offset": offsets,
                })
            }
        }
    }
}

fn system_fingerprint() -> String {
    format!("bitnet-rs-{}", env!("CARGO_PKG_VERSION"))
}

/// OpenAI's finish reasons: `stop` for an end-of-generation token or a stop string,
/// `length` for the token limit or a full context. (A cancelled answer never gets here: it
/// is answered with an error, see `ApiError::cut_off`.)
pub fn finish_reason(r: StopReason) -> &'static str {
    match r {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        _ => "stop",
    }
}

/// `usage`: the prompt counted once (the answers share it), every answer's tokens.
pub fn usage(prompt_tokens: usize, stats: &[&GenStats]) -> Value {
    let completion: usize = stats.iter().map(|s| s.gen_tokens).sum();
    let cached = stats.first().map_or(0, |s| s.cached_tokens);
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}

/// llama.cpp's `timings` object of one answer.
pub fn timings(s: &GenStats) -> Value {
    // The tokens read: fewer than asked for when the request stopped while reading.
    let prompt_n = s.prompt_read;
    let prompt_ms = s.prompt_secs * 1e3;
    let predicted_ms = s.gen_secs * 1e3;
    let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
    let rate = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let mut t = json!({
        "cache_n": s.cached_tokens,
        "prompt_n": prompt_n,
        "prompt_ms": prompt_ms,
        "prompt_per_token_ms": per(prompt_ms, prompt_n),
        "prompt_per_second": rate(prompt_ms, prompt_n),
        "predicted_n": s.gen_tokens,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": per(predicted_ms, s.gen_tokens),
        "predicted_per_second": rate(predicted_ms, s.gen_tokens),
    });
    // Speculative decoding, under llama.cpp's names: draft tokens proposed and accepted.
    if s.draft_verifies > 0 {
        t["draft_n"] = json!(s.draft_tokens);
        t["draft_n_accepted"] = json!(s.draft_accepted);
    }
    t
}
