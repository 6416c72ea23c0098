//! Reading an embedding request: its inputs as llama-server reads them
//! (`tokenize_input_prompts`: a string, token ids, or a list of those), and its fields
//! (`encoding_format`, `dimensions`, `embd_normalize`, `model`), each fault a 400 that names
//! the field. The limits on inputs and tokens are here too.

use bitnet_core::embed::{Normalize, Pooling};
use bitnet_core::tokenizer::Tokenizer;
use serde_json::{Map, Value};

use crate::cmd::serve::error::{ApiError, ApiResult};

/// Inputs one request may carry at most (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;
/// Tokens of all of a request's inputs together at most (OpenAI's limit).
pub const MAX_REQUEST_TOKENS: usize = 300_000;
/// Values an answer without pooling may hold at most (one row of `n_embd` a token): 2^24
/// floats are already about 200 MB of JSON.
pub const MAX_TOKEN_VALUES: usize = 1 << 24;

/// An embedding request, read and checked (but for what the context allows: see
/// [`EmbedRequest::check_context`]).
#[derive(Debug)]
pub struct EmbedRequest {
    /// Each input's tokens: a text's as the tokenizer makes them (BOS and EOS where the
    /// file asks), token ids as given.
    pub inputs: Vec<Vec<u32>>,
    /// Where the inputs came from (`input` or `content`): the field a fault is blamed on.
    pub param: &'static str,
    /// OpenAI's shape (`/v1/embeddings` with `input`), else llama-server's array.
    pub openai: bool,
    pub base64: bool,
    /// Keep the first this many values of each vector, then normalize.
    pub dimensions: Option<usize>,
    pub normalize: Normalize,
    /// The model named in the answer: the request's, else the server's.
    pub model: Option<String>,
}

impl EmbedRequest {
    /// Reads the body `obj` of a request that came through OpenAI's route (`openai`) or
    /// llama-server's, on a server that pools with `pooling` over `n_embd`-wide states.
    pub fn read(
        obj: &Map<String, Value>,
        openai: bool,
        pooling: Pooling,
        n_embd: usize,
        tok: &Tokenizer,
    ) -> ApiResult<EmbedRequest> {
        if openai && pooling == Pooling::None {
            return Err(ApiError::invalid(
                "Pooling type 'none' is not OAI compatible. Please use a different pooling \
                 type (start the server with --pooling mean|cls|last, or use /embeddings)",
                None,
            ));
        }
        // llama-server's `content` asks for its own shape, on any route.
        let (param, value) = match (field(obj, "input"), field(obj, "content")) {
            (Some(v), _) => ("input", v),
            (None, Some(v)) => ("content", v),
            (None, None) => {
                return Err(ApiError::invalid(
                    "\"input\" or \"content\" must be provided",
                    Some("input"),
                ));
            }
        };
        let base64 = match field(obj, "encoding_format") {
            None => false,
            Some(Value::String(s)) if s == "float" => false,
            Some(Value::String(s)) if s == "base64" => true,
            Some(_) => {
                return Err(ApiError::bad_field(
                    "encoding_format",
                    "\"float\" or \"base64\"",
                ));
            }
        };
        let normalize = match field(obj, "embd_normalize") {
            None => Normalize::default(),
            Some(v) => Normalize(v.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(
                || {
                    ApiError::bad_field(
                        "embd_normalize",
                        "an integer: -1 none, 0 max-abs, 1 taxicab, 2 Euclidean, p > 2 p-norm",
                    )
                },
            )?),
        };
        let dimensions = match field(obj, "dimensions") {
            None => None,
            Some(v) => match v.as_u64().and_then(|d| usize::try_from(d).ok()) {
                Some(d) if (1..=n_embd).contains(&d) => Some(d),
                _ => {
                    return Err(ApiError::bad_field(
                        "dimensions",
                        &format!("an integer from 1 to {n_embd}, the model's width"),
                    ));
                }
            },
        };
        if dimensions.is_some() && pooling == Pooling::None {
            return Err(ApiError::invalid(
                "'dimensions' shortens a pooled embedding; this server pools none \
                 (--pooling none)",
                Some("dimensions"),
            ));
        }
        let model = match field(obj, "model") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(ApiError::bad_field("model", "a string")),
        };
        let inputs = read_inputs(value, param, tok)?;
        let total: usize = inputs.iter().map(Vec::len).sum();
        if total > MAX_REQUEST_TOKENS {
            return Err(ApiError::invalid(
                format!(
                    "the inputs are {total} tokens together, over the limit of \
                     {MAX_REQUEST_TOKENS} a request: send them in several requests"
                ),
                Some(param),
            ));
        }
        if pooling == Pooling::None && total.saturating_mul(n_embd) > MAX_TOKEN_VALUES {
            return Err(ApiError::invalid(
                format!(
                    "without pooling the answer holds a vector of {n_embd} a token: {total} \
                     tokens are over the limit of {} a request",
                    MAX_TOKEN_VALUES / n_embd.max(1)
                ),
                Some(param),
            ));
        }
        Ok(EmbedRequest {
            inputs,
            param,
            openai: openai && param == "input",
            base64,
            dimensions,
            normalize,
            model,
        })
    }

    /// Tokens of every input together (OpenAI's `usage`).
    pub fn n_tokens(&self) -> usize {
        self.inputs.iter().map(Vec::len).sum()
    }

    /// The 400 of the first input longer than a sequence holds (`n_ctx` positions): an
    /// embedding is never cut short.
    pub fn check_context(&self, n_ctx: usize) -> ApiResult<()> {
        match self.inputs.iter().position(|t| t.len() > n_ctx) {
            None => Ok(()),
            Some(i) => {
                let n = self.inputs[i].len();
                Err(ApiError::exceeds_context(
                    format!(
                        "input {i} is {n} tokens, more than the context of {n_ctx} a sequence \
                         holds (the server's -c): it is not cut short, shorten it"
                    ),
                    self.param,
                    n,
                    n_ctx,
                ))
            }
        }
    }
}

/// A field, with `null` the same as absent.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

/// The inputs of `value` (the `input` or `content` field, named `param`), as llama-server
/// splits them: a list with no number in it holds one input an element; anything else (a
/// string, token ids, a list mixing both) is one input.
fn read_inputs(value: &Value, param: &str, tok: &Tokenizer) -> ApiResult<Vec<Vec<u32>>> {
    let inputs = match value {
        Value::Array(list) if list.is_empty() => {
            return Err(ApiError::invalid(
                format!("'{param}' must not be empty"),
                Some(param),
            ));
        }
        Value::Array(list) if !list.iter().any(Value::is_number) => {
            if list.len() > MAX_INPUTS {
                return Err(ApiError::invalid(
                    format!(
                        "'{param}' holds {} inputs, over the limit of {MAX_INPUTS} a request",
                        list.len()
                    ),
                    Some(param),
                ));
            }
            list.iter()
                .map(|v| one_input(v, param, tok))
                .collect::<ApiResult<Vec<_>>>()?
        }
        v => vec![one_input(v, param, tok)?],
    };
    if let Some(i) = inputs.iter().position(Vec::is_empty) {
        return Err(ApiError::invalid(
            format!("Input content cannot be empty (input {i} has no tokens)"),
            Some(param),
        ));
    }
    Ok(inputs)
}

/// One input: a text, or a list of token ids and texts (llama-server's mixed prompt: only a
/// text that comes first gets the tokenizer's BOS and EOS).
fn one_input(value: &Value, param: &str, tok: &Tokenizer) -> ApiResult<Vec<u32>> {
    let bad = || {
        ApiError::bad_field(
            param,
            "a string, a list of token ids, or a list of strings or of token-id lists",
        )
    };
    match value {
        Value::String(s) => Ok(tok.encode(s, true, false)),
        Value::Array(parts) => {
            let mut tokens = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                match part {
                    Value::String(s) => tokens.extend(tok.encode(s, i == 0, false)),
                    Value::Number(n) => tokens.push(token_id(n, tok.n_vocab(), param)?),
                    _ => return Err(bad()),
                }
            }
            Ok(tokens)
        }
        _ => Err(bad()),
    }
}

/// A token id of the vocabulary (`n_vocab` ids), else a 400 naming `param`.
fn token_id(n: &serde_json::Number, n_vocab: usize, param: &str) -> ApiResult<u32> {
    match n.as_u64().and_then(|id| u32::try_from(id).ok()) {
        Some(id) if (id as usize) < n_vocab => Ok(id),
        _ => {
            let mut e = ApiError::invalid(
                format!("{n} is not a token id of the vocabulary (0..{n_vocab})"),
                Some(param),
            );
            e.code = Some("invalid_value");
            Err(e)
        }
    }
}
