//! One generation request from the handlers' side, for both APIs: the core's checks of
//! what it asks of the context, a place in the queue, the job handed to the engine thread, then the answer collected
//! whole or streamed (see `sse.rs`). Dropping the receiving end (client gone, timeout)
//! cancels the request's sequences on the engine thread.

use std::sync::Arc;

use axum::Json;
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use bitnet_core::runtime::{Reply, Request};
use bitnet_core::scheduler::StopReason;

use super::answer_record::Recording;
use super::engine::Replies;
use super::error::{ApiError, ApiResult};
use super::models::Served;
use super::request::{Api, GenRequest};
use super::response::{Choice, Head};
use super::sse;
use super::state::AppState;

/// Runs `req` on `prompt` and answers it; `heal` is the text the first generated token must
/// begin with (token healing; empty for none); `prompt_param` names the field a too-long
/// prompt is blamed on.
pub async fn complete(
    state: Arc<AppState>,
    mut served: Served,
    api: Api,
    prompt: Vec<u32>,
    heal: String,
    mut req: GenRequest,
    prompt_param: &'static str,
) -> ApiResult<Response> {
    let loaded = served.loaded()?;
    let n_ctx = loaded.max_seq_len;
    let bos = loaded.model.tokenizer().is_some_and(|t| t.add_bos());
    req.params.context = state
        .config
        .context
        .policy(bos, prompt.len())
        .map_err(|e| ApiError::invalid(e.to_string(), None))?;
    // Left out, `max_tokens` is the server's default (`-n`, else the reply budget that keeps
    // room for a conversation's next turn), cut to what the context leaves (nothing is cut
    // under a shifting policy).
    if req.max_tokens.is_none() {
        req.params.max_tokens = req
            .params
            .max_tokens
            .min(req.params.room(prompt.len(), n_ctx));
    }
    // The scheduler's own check, run here too so the 400 comes before any stream starts.
    req.params
        .check_context(0, prompt.len(), n_ctx, true)
        .map_err(|e| ApiError::refused(&e, prompt_param))?;
    let guard = served.admit(&state.config)?;
    let loaded = served.loaded()?;
    let slot = loaded.slots.take(req.id_slot, &prompt)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let request = Request {
        prompt: prompt.clone(),
        params: req.params.clone(),
        n: req.n,
        logprobs: req.logprobs,
        heal: heal.clone(),
        strict_context: true,
    };
    served
        .running
        .engine
        .submit(
            request,
            Recording {
                replies: Replies(tx),
                prompt: prompt.clone(),
                slot,
                store: loaded
                    .prefix_store
                    .clone()
                    .map(|s| (s, served.running.engine.clone())),
            },
        )
        .map_err(|_| ApiError::unavailable("the engine has stopped", None))?;
    let head = Head::new(api, &served.entry.name).healed(&heal);
    if req.stream {
        let shared = served.running.shared.clone();
        return Ok(sse::stream(state, shared, guard, head, rx, req, prompt.len()).into_response());
    }
    let timeout = state.config.timeout;
    let choices = tokio::time::timeout(timeout, collect(rx, req.n, req.logprobs.is_some()))
        .await
        .map_err(|_| ApiError::timeout(timeout.as_secs()))?;
    drop(guard);
    if let Some(e) = choices.iter().find_map(|c| c.error.as_ref()) {
        return Err(ApiError::internal(format!("generation failed: {e}")));
    }
    if let Some(s) = choices
        .iter()
        .filter_map(|c| c.stats.as_ref())
        .find(|s| s.stop_reason == StopReason::Cancelled)
    {
        return Err(ApiError::cut_off(s));
    }
    let tok = loaded.tokenizer()?;
    Ok(Json(head.full(prompt.len(), &choices, tok, req.tool_format)).into_response())
}

/// Every answer's text, tokens and figures, until each has ended.
async fn collect(mut rx: mpsc::UnboundedReceiver<Reply>, n: usize, logprobs: bool) -> Vec<Choice> {
    let mut choices: Vec<Choice> = (0..n).map(|_| Choice::default()).collect();
    let mut open = n;
    while open > 0 {
        let Some(out) = rx.recv().await else { break };
        match out {
            Reply::Token {
                index,
                token,
                logprobs: Some(lp),
            } if logprobs => choices[index].logprobs.push((token, lp)),
            // A generation request hears no vectors.
            Reply::Token { .. } | Reply::Embedding { .. } => {}
            Reply::Text { index, text } => choices[index].text.push_str(&text),
            Reply::Done { index, stats } => {
                choices[index].stats = Some(stats);
                open -= 1;
            }
            Reply::Error { index, error } => {
                choices[index].error = Some(error.to_string());
                open -= 1;
            }
        }
    }
    if open > 0 {
        for c in choices.iter_mut().filter(|c| c.stats.is_none()) {
            c.error
                .get_or_insert_with(|| "the engine stopped".to_owned());
        }
    }
    choices
}
