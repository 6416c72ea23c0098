//! Reading an OpenAI request body: bytes to UTF-8 to JSON, then each known field with its
//! type and range checked, so every fault is a 400 that names the field. Known fields the
//! server cannot honour are refused (`unsupported.rs`); unknown fields are ignored, as
//! OpenAI's and llama.cpp's servers do. Sampling defaults are llama.cpp's, ranges OpenAI's.

use bitnet_core::chat::{Message, ToolCall, ToolFormat};
use bitnet_core::sampling::{SamplerConfig, SamplingError};
use bitnet_core::scheduler::{ContextPolicy, GenParams, SpecParams};
use bitnet_core::tokenizer::Tokenizer;
use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};
use super::unsupported::refuse_unsupported;

mod api;
pub use api::Api;

/// The most answers one request may ask for (each is a sequence).
const MAX_N: u64 = 16;
/// Stop strings per request at most.
const MAX_STOP: usize = 16;
/// OpenAI's range of temperatures.
const MAX_TEMPERATURE: f32 = 2.0;
/// Roles a chat message may have: OpenAI's, and its older `function` (a tool's result).
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];
/// OpenAI's limits on alternatives per token.
const MAX_TOP_LOGPROBS_CHAT: u64 = 20;
const MAX_LOGPROBS_COMPLETION: u64 = 5;

/// The generation settings of a request (the prompt is read separately).
#[derive(Debug)]
pub struct GenRequest {
    pub params: GenParams,
    /// `max_tokens` as asked (None: the server's default, cut to the context).
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    /// Log probabilities with this many alternatives.
    pub logprobs: Option<usize>,
    /// The answer is read for tool calls in this syntax (a chat request with tools).
    pub tool_format: Option<ToolFormat>,
    /// llama-server's `id_slot`: the slot whose record the request takes (-1 or none: any;
    /// see `slots.rs`).
    pub id_slot: Option<i64>,
}

/// The model a request names (`model`), when the server routes by name (`routed`): `None`
/// for the default. A server of one model reads no `model`, as it never has.
pub fn model_name(obj: &Map<String, Value>, routed: bool) -> ApiResult<Option<&str>> {
    if !routed {
        return Ok(None);
    }
    match obj.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ApiError::bad_field("model", "a string")),
    }
}

/// The body as a JSON object: 400 for bytes that are not UTF-8, text that is not JSON, or
/// JSON that is not an object.
pub fn parse_body(body: &[u8]) -> ApiResult<Map<String, Value>> {
    let text = std::str::from_utf8(body).map_err(|e| {
        ApiError::invalid(
            format!(
                "the request body is not valid UTF-8 (byte {})",
                e.valid_up_to()
            ),
            None,
        )
    })?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::invalid(
            "the request body must be a JSON object",
            None,
        )),
        Err(e) => Err(ApiError::invalid(
            format!("the request body is not valid JSON: {e}"),
            None,
        )),
    }
}

/// A field, with `null` the same as absent.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn get_f32(obj: &Map<String, Value>, name: &str) -> ApiResult<Option<f32>> {
    field(obj, name)
        .map(|v| {
            v.as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| ApiError::bad_field(name, "a number"))
        })
        .transpose()
}

fn get_u64(obj: &Map<String, Value>, name: &str) -> ApiResult<Option<u64>> {
    field(obj, name)
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| ApiError::bad_field(name, "a non-negative integer"))
        })
        .transpose()
}

fn get_bool(obj: &Map<String, Value>, name: &str) -> ApiResult<Option<bool>> {
    field(obj, name)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| ApiError::bad_field(name, "true or false"))
        })
        .transpose()
}

/// Reads the generation fields common to both APIs. `n_predict` is the server's default
/// for `max_tokens`; `seed` is used when the request names none; `speculate` is the
/// server's speculative decoding (`--model-draft`, `--lookup-ngram`), which a request
/// tunes or turns off (see [`speculation`]).
pub fn gen_request(
    obj: &Map<String, Value>,
    api: Api,
    n_vocab: usize,
    n_predict: usize,
    seed: u64,
    speculate: Option<&SpecParams>,
) -> ApiResult<GenRequest> {
    refuse_unsupported(obj, api)?;
    let max_tokens = match get_u64(obj, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => get_u64(obj, "max_tokens")?,
    };
    // llama.cpp's name for the same limit (-1: none given). With both, the smaller holds:
    // each is a limit the client asked for.
    let predict = match field(obj, "n_predict") {
        None => None,
        Some(v) if v.as_i64() == Some(-1) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::bad_field("n_predict", "a non-negative integer, or -1 for no limit")
        })?),
    };
    let max_tokens = match (max_tokens, predict) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let max_tokens = max_tokens.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let n = get_u64(obj, "n")?.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::bad_field("n", &format!("between 1 and {MAX_N}")));
    }
    let seed = match field(obj, "seed") {
        None => seed,
        // -1 asks for a random seed, as in llama.cpp.
        Some(v) if v.as_i64() == Some(-1) => seed,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| ApiError::bad_field("seed", "an integer"))?,
    };
    let sampler = SamplerConfig {
        temperature: get_f32(obj, "temperature")?.unwrap_or(0.8),
        top_k: get_u64(obj, "top_k")?.map_or(40, |k| k as usize),
        top_p: get_f32(obj, "top_p")?.unwrap_or(0.95),
        min_p: get_f32(obj, "min_p")?.unwrap_or(0.05),
        repeat_penalty: get_f32(obj, "repeat_penalty")?.unwrap_or(1.0),
        repeat_last_n: get_u64(obj, "repeat_last_n")?.map_or(64, |k| k as usize),
        frequency_penalty: get_f32(obj, "frequency_penalty")?.unwrap_or(0.0),
        presence_penalty: get_f32(obj, "presence_penalty")?.unwrap_or(0.0),
        seed,
        logit_bias: logit_bias(obj, n_vocab)?,
    };
    if !(-2.0..=2.0).contains(&sampler.frequency_penalty) {
        return Err(ApiError::bad_field("frequency_penalty", "between -2 and 2"));
    }
    if !(-2.0..=2.0).contains(&sampler.presence_penalty) {
        return Err(ApiError::bad_field("presence_penalty", "between -2 and 2"));
    }
    // OpenAI's range: llama.cpp reads a negative temperature as greedy, which a client
    // written for OpenAI would not expect (it asks for 0).
    if !(0.0..=MAX_TEMPERATURE).contains(&sampler.temperature) {
        return Err(ApiError::bad_field(
            "temperature",
            &format!("between 0 and {MAX_TEMPERATURE}"),
        ));
    }
    sampler.validate(n_vocab).map_err(|e| {
        let param = match &e {
            SamplingError::InvalidParam { name, .. } => Some(*name),
            SamplingError::BiasTokenOutOfRange { .. } => Some("logit_bias"),
            _ => None,
        };
        let mut err = ApiError::invalid(e.to_string(), param);
        err.code = Some("invalid_value");
        err
    })?;
    let ignore_eos = get_bool(obj, "ignore_eos")?.unwrap_or(false);
    let stream = get_bool(obj, "stream")?.unwrap_or(false);
    let include_usage = match field(obj, "stream_options") {
        None => false,
        Some(Value::Object(o)) => get_bool(o, "include_usage")
            .map_err(|_| ApiError::bad_field("stream_options.include_usage", "true or false"))?
            .unwrap_or(false),
        Some(_) => return Err(ApiError::bad_field("stream_options", "an object")),
    };
    if let Some(u) = field(obj, "user")
        && !u.is_string()
    {
        return Err(ApiError::bad_field("user", "a string"));
    }
    let top_logprobs = get_u64(obj, "top_logprobs")?;
    let logprobs = match api {
        Api::Chat => match get_bool(obj, "logprobs")? {
            Some(true) => {
                let k = top_logprobs.unwrap_or(0);
                if k > MAX_TOP_LOGPROBS_CHAT {
                    return Err(ApiError::bad_field(
                        "top_logprobs",
                        &format!("between 0 and {MAX_TOP_LOGPROBS_CHAT}"),
                    ));
                }
                Some(k as usize)
            }
            // Alternatives without the log probabilities they belong to: OpenAI refuses it
            // rather than answer without them.
            _ if top_logprobs.is_some_and(|k| k > 0) => {
                return Err(ApiError::invalid(
                    "'top_logprobs' needs 'logprobs': true",
                    Some("top_logprobs"),
                ));
            }
            _ => None,
        },
        Api::Completion => match get_u64(obj, "logprobs")? {
            Some(k) if k > MAX_LOGPROBS_COMPLETION => {
                return Err(ApiError::bad_field(
                    "logprobs",
                    &format!("between 0 and {MAX_LOGPROBS_COMPLETION}"),
                ));
            }
            Some(k) => Some(k as usize),
            None => None,
        },
    };
    let id_slot = match field(obj, "id_slot") {
        None => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|&i| i >= -1)
                .ok_or_else(|| ApiError::bad_field("id_slot", "a slot number, or -1 for any"))?,
        ),
    };
    Ok(GenRequest {
        id_slot,
        params: GenParams {
            max_tokens: max_tokens.unwrap_or(n_predict),
            sampler,
            stop: stop_strings(obj)?,
            ignore_eos,
            keep: false,
            // The server's --context-shift / --kv-window, set once the prompt is known.
            context: ContextPolicy::Stop,
            constraint: None,
            speculate: speculation(obj, speculate)?,
        },
        max_tokens,
        n: n as usize,
        stream,
        include_usage: stream && include_usage,
        logprobs,
        tool_format: None,
    })
}

/// A request's speculation: the server's, tuned by llama.cpp server's fields
/// `speculative.n_max` (0 turns it off for the request), `speculative.n_min` and
/// `speculative.p_min`. On a server that does not speculate they change nothing (as in
/// llama.cpp's); values out of range are a 400.
fn speculation(
    obj: &Map<String, Value>,
    server: Option<&SpecParams>,
) -> ApiResult<Option<SpecParams>> {
    let n_max = get_u64(obj, "speculative.n_max")?;
    let n_min = get_u64(obj, "speculative.n_min")?;
    let p_min = get_f32(obj, "speculative.p_min")?;
    if let Some(p) = p_min
        && !(0.0..=1.0).contains(&p)
    {
        return Err(ApiError::bad_field("speculative.p_min", "between 0 and 1"));
    }
    let Some(server) = server else {
        return Ok(None);
    };
    if n_max == Some(0) {
        return Ok(None);
    }
    let mut spec = server.clone();
    // Never more than the server was started with: its passes are sized for that.
    if let Some(n) = n_max {
        spec.draft_max = (n as usize).min(server.draft_max);
    }
    if let Some(n) = n_min {
        spec.draft_min = n as usize;
    }
    if let Some(p) = p_min {
        spec.p_min = p;
    }
    if spec.draft_min > spec.draft_max {
        return Err(ApiError::bad_field(
            "speculative.n_min",
            &format!("at most speculative.n_max ({})", spec.draft_max),
        ));
    }
    Ok(Some(spec))
}

/// `stop`: a string or a list of strings.
fn stop_strings(obj: &Map<String, Value>) -> ApiResult<Vec<String>> {
    let bad = || ApiError::bad_field("stop", "a string or a list of strings");
    let stops = match field(obj, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
            .collect::<ApiResult<_>>()?,
        Some(_) => return Err(bad()),
    };
    if stops.len() > MAX_STOP {
        return Err(ApiError::bad_field(
            "stop",
            &format!("at most {MAX_STOP} strings"),
        ));
    }
    Ok(stops.into_iter().filter(|s| !s.is_empty()).collect())
}

/// `logit_bias`: `{"token id": bias}` as OpenAI sends it.
fn logit_bias(obj: &Map<String, Value>, n_vocab: usize) -> ApiResult<Vec<(u32, f32)>> {
    let bad = || ApiError::bad_field("logit_bias", "an object of token ids to numbers");
    let Some(v) = field(obj, "logit_bias") else {
        return Ok(Vec::new());
    };
    let Value::Object(m) = v else {
        return Err(bad());
    };
    m.iter()
        .map(|(k, v)| {
            let id: u32 = k.trim().parse().map_err(|_| bad())?;
            if id as usize >= n_vocab {
                return Err(ApiError::bad_field(
                    "logit_bias",
                    &format!("keyed by token ids below {n_vocab}"),
                ));
            }
            let b = v.as_f64().ok_or_else(bad)? as f32;
            Ok((id, b))
        })
        .collect()
}

/// The prompt of a completion: a string, a list of one string, or a list of token ids.
pub fn completion_prompt(obj: &Map<String, Value>, tok: &Tokenizer) -> ApiResult<Vec<u32>> {
    let bad = || ApiError::bad_field("prompt", "a string, or a list of token ids");
    let tokens = match obj.get("prompt") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("'prompt' is required", Some("prompt")));
        }
        Some(Value::String(s)) => encode(tok, s)?,
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => encode(tok, s)?,
            [_, ..] if a.iter().all(Value::is_string) => {
                return Err(ApiError::invalid(
                    "one prompt per request: send the prompts as separate requests",
                    Some("prompt"),
                ));
            }
            _ => {
                let ids = a
                    .iter()
                    .map(|v| {
                        v.as_u64()
                            .and_then(|x| u32::try_from(x).ok())
                            .ok_or_else(bad)
                    })
                    .collect::<ApiResult<Vec<u32>>>()?;
                if let Some(&t) = ids.iter().find(|&&t| t as usize >= tok.n_vocab()) {
                    return Err(ApiError::bad_field(
                        "prompt",
                        &format!("token ids below {} (got {t})", tok.n_vocab()),
                    ));
                }
                ids
            }
        },
        Some(_) => return Err(bad()),
    };
    if tokens.is_empty() {
        return Err(ApiError::invalid("the prompt is empty", Some("prompt")));
    }
    Ok(tokens)
}

fn encode(tok: &Tokenizer, text: &str) -> ApiResult<Vec<u32>> {
    if text.is_empty() {
        return Err(ApiError::invalid("the prompt is empty", Some("prompt")));
    }
    Ok(tok.encode(text, true, false))
}

/// The messages of a chat request: `role` and `content` (a string, or a list of text
/// parts), and the tool fields: an assistant's `tool_calls`, a tool result's
/// `tool_call_id` and `name`.
pub fn chat_messages(obj: &Map<String, Value>) -> ApiResult<Vec<Message>> {
    let list = match obj.get("messages") {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid(
                "'messages' is required",
                Some("messages"),
            ));
        }
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::bad_field("messages", "a list of messages")),
    };
    if list.is_empty() {
        return Err(ApiError::invalid(
            "'messages' must hold at least one message",
            Some("messages"),
        ));
    }
    list.iter()
        .map(|m| {
            let bad = || {
                ApiError::bad_field(
                    "messages",
                    "a list of {\"role\": string, \"content\": string or text parts}",
                )
            };
            let m = m.as_object().ok_or_else(bad)?;
            let role = m.get("role").and_then(Value::as_str).ok_or_else(bad)?;
            if !ROLES.contains(&role) {
                return Err(ApiError::bad_field(
                    "messages",
                    &format!(
                        "a list of messages whose 'role' is one of {} (got {role:?})",
                        ROLES.join(", ")
                    ),
                ));
            }
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|p| {
                        p.get("text")
                            .and_then(Value::as_str)
                            .ok_or_else(bad)
                            .map(str::to_owned)
                    })
                    .collect::<ApiResult<Vec<_>>>()?
                    .concat(),
                Some(_) => return Err(bad()),
            };
            let mut msg = Message::new(role, content);
            if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
                msg.tool_calls = serde_json::from_value::<Vec<ToolCall>>(calls.clone()).map_err(
                    |e| {
                        ApiError::bad_field(
                            "messages",
                            &format!(
                                "a list of messages whose 'tool_calls' are [{{\"id\", \"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}] ({e})"
                            ),
                        )
                    },
                )?;
            }
            let text_field = |name: &str| -> ApiResult<Option<String>> {
                match m.get(name) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(ApiError::bad_field(
                        "messages",
                        &format!("a list of messages whose '{name}' is a string"),
                    )),
                }
            };
            msg.tool_call_id = text_field("tool_call_id")?;
            msg.name = text_field("name")?;
            Ok(msg)
        })
        .collect()
}
