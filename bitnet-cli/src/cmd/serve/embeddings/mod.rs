//! Embeddings, as llama-server serves them with `--embeddings`: `POST /v1/embeddings`
//! (OpenAI's request and answer) and `POST /embeddings`, `/embedding` (llama-server's bare
//! array). Each input is a sequence of its own on the engine thread, evaluated in the same
//! passes as the other requests' prompts and tokens (continuous batching), pooled and
//! normalized there, its KV freed; an embedding request takes a place in the queue as any
//! request does, and is cancelled when its client leaves or its time runs out.
//!
//! What the server computes is the model's final hidden states, not a head's logits, so a
//! server started with `--embeddings` refuses completions (501, as llama-server), one
//! started without it refuses embeddings (501), and a server over an embedding model (a
//! file that names a pooling type, or a BitNet embedding model) refuses completions unless
//! it embeds: such a model was not made to generate text. A server of several models
//! embeds with each embedding model without the flag (each file says what it is), and
//! refuses embeddings only from a model that is not one (unless `--embeddings`).
//!
//! Files: `request.rs` reads a request (inputs, fields, limits); `response.rs` writes the
//! answer in either shape.

mod request;
mod response;

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bitnet_core::embed::{Normalize, Pooling};
use bitnet_core::runtime::{EmbedRequest as Job, Reply};
use bitnet_core::scheduler::{EmbedParams, StopReason};
use tokio::sync::mpsc;

use super::engine::Replies;
use super::error::{ApiError, ApiResult};
use super::loaded::Loaded;
use super::request::parse_body;
use super::state::AppState;
use request::EmbedRequest;

/// The shape a route answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/v1/embeddings`: OpenAI's (llama-server's own when the request sends `content`).
    OpenAi,
    /// `/embeddings`, `/embedding`: llama-server's.
    Llama,
}

/// The 501 of an embedding route on a server started without `--embeddings`. With several
/// models, an embedding model embeds all the same: the model's own check
/// ([`refuse_unless_embeds`]) answers once it is known.
pub fn refuse_unless_embedding(state: &AppState) -> ApiResult<()> {
    if state.config.embeddings || state.models.routed() {
        return Ok(());
    }
    Err(not_embedding())
}

/// The 501 of an embedding request for a model that does not embed.
fn refuse_unless_embeds(loaded: &Loaded) -> ApiResult<()> {
    match loaded.pooling {
        Some(_) => Ok(()),
        None => Err(not_embedding()),
    }
}

fn not_embedding() -> ApiError {
    ApiError::not_supported("This server does not support embeddings. Start it with `--embeddings`")
}

/// The 501 of a completion route on a server started with `--embeddings` (checked before
/// anything else, as llama-server does).
pub fn refuse_completions(state: &AppState) -> ApiResult<()> {
    if !state.config.embeddings {
        return Ok(());
    }
    Err(ApiError::not_supported(
        "This server does not support completions. Start it without `--embeddings`",
    ))
}

/// The 501 of a completion request to a server over an embedding model (it was started
/// without `--embeddings`, or [`refuse_completions`] would have answered).
pub fn refuse_embedding_model(loaded: &Loaded) -> ApiResult<()> {
    match (&loaded.embedding_model, loaded.pooling) {
        (None, _) => Ok(()),
        // Several models: an embedding model embeds without the flag.
        (Some(why), Some(_)) => Err(ApiError::not_supported(format!(
            "this model is an embedding model ({why}): it is not made to generate text. \
             Use /v1/embeddings"
        ))),
        (Some(why), None) => Err(ApiError::not_supported(format!(
            "this model is an embedding model ({why}): it is not made to generate text. \
             Start the server with --embeddings and use /v1/embeddings"
        ))),
    }
}

/// Answers an embedding request whose body is `body`, on `route`.
pub async fn embed(state: Arc<AppState>, body: Bytes, route: Route) -> ApiResult<Response> {
    let obj = parse_body(&body)?;
    let mut served = state.route_body(&obj).await?;
    let loaded = served.loaded()?;
    refuse_unless_embeds(loaded)?;
    let pooling = loaded
        .pooling
        .ok_or_else(|| ApiError::internal("the server embeds with no pooling set"))?;
    let tok = loaded.tokenizer()?;
    let req = EmbedRequest::read(&obj, route == Route::OpenAi, pooling, loaded.n_embd, tok)?;
    req.check_context(loaded.max_seq_len)?;
    let n_tokens = req.n_tokens();
    let n_inputs = req.inputs.len();
    // llama-server leaves rows unnormalized without pooling; a shortened vector is
    // normalized here, after the cut.
    let normalize = if pooling == Pooling::None || req.dimensions.is_some() {
        Normalize(-1)
    } else {
        req.normalize
    };
    let guard = served.admit(&state.config)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        inputs: req.inputs,
        params: EmbedParams { pooling, normalize },
    };
    served
        .running
        .engine
        .submit_embedding(job, Replies(tx))
        .map_err(|_| ApiError::unavailable("the engine has stopped", None))?;
    let timeout = state.config.timeout;
    let mut sets = tokio::time::timeout(timeout, collect(rx, n_inputs))
        .await
        .map_err(|_| ApiError::timeout(timeout.as_secs()))??;
    drop(guard);
    if let Some(d) = req.dimensions {
        for v in sets.iter_mut().flatten() {
            v.truncate(d);
            req.normalize.apply(v);
        }
    }
    let bytes = if req.openai {
        // Several models: the one that answered; one: the name asked for, as before.
        let model = match &req.model {
            Some(m) if !state.models.routed() => m,
            _ => &served.entry.name,
        };
        response::openai_body(&sets, req.base64, model, n_tokens)?
    } else {
        response::llama_body(&sets)?
    };
    Ok(([(header::CONTENT_TYPE, "application/json")], bytes).into_response())
}

/// Every input's vectors, in input order, once each has ended; the first failure (an
/// engine error, an input cancelled by a shutdown) is the answer instead.
async fn collect(
    mut rx: mpsc::UnboundedReceiver<Reply>,
    n: usize,
) -> ApiResult<Vec<Vec<Vec<f32>>>> {
    let mut sets: Vec<Option<Vec<Vec<f32>>>> = vec![None; n];
    let mut open = n;
    while open > 0 {
        let Some(reply) = rx.recv().await else {
            return Err(ApiError::internal("the engine stopped"));
        };
        match reply {
            Reply::Embedding { index, embedding } => {
                if let Some(set) = sets.get_mut(index) {
                    *set = Some(embedding);
                }
            }
            Reply::Done { stats, .. } if stats.stop_reason == StopReason::Cancelled => {
                return Err(cancelled());
            }
            Reply::Done { .. } => open -= 1,
            Reply::Error { error, .. } => {
                return Err(ApiError::internal(format!("embedding failed: {error}")));
            }
            Reply::Token { .. } | Reply::Text { .. } => {}
        }
    }
    sets.into_iter()
        .map(|s| s.ok_or_else(|| ApiError::internal("an input ended without its vectors")))
        .collect()
}

/// An embedding the server cancelled before it was complete (shutdown): 503, so a client
/// retries rather than taking nothing for an answer.
fn cancelled() -> ApiError {
    ApiError {
        code: Some("cancelled"),
        ..ApiError::unavailable(
            "the embedding was cancelled before it was complete: the server is shutting \
             down (or cancelled it); retry the request",
            Some(1),
        )
    }
}
