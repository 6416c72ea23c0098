//! `GET /v1/models` and `/v1/models/{id}`: the models served, in OpenAI's shape
//! (`{"object": "list", "data": [{"id", "object": "model", ...}]}`), each with what
//! llama-server's router adds: its state (`"status": {"value": "loaded"}`; `loading`,
//! `unloaded`, `failed` with the error), its other names (`aliases`), whether it is the
//! default, and llama.cpp's `meta` once it is loaded.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::models::{ModelEntry, State as ModelState};
use super::state::AppState;

pub async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = state.models.entries().iter().map(|e| object(e)).collect();
    Json(json!({
        "object": "list",
        "data": data,
    }))
}

/// `GET /v1/models/{id}`: the model `id` names (a name or an alias), or 404.
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    match state.models.named(&id) {
        Some(e) => Ok(Json(object(e))),
        None => Err(ApiError::model_not_found(&id)),
    }
}

/// One model, as OpenAI describes a model, with its state beside.
fn object(entry: &ModelEntry) -> Value {
    let state = entry.state();
    let mut status = json!({ "value": state.name() });
    if let ModelState::Failed(why) = &state {
        status["error"] = json!(why);
    }
    let loaded = state.running().and_then(|r| r.shared.model.get());
    json!({
        "id": entry.name,
        "object": "model",
        "created": 0,
        "owned_by": "bitnet-rs",
        "aliases": entry.aliases,
        "default": entry.is_default,
        "status": status,
        "meta": loaded.map(|l| json!({
            "n_ctx": l.max_seq_len,
            "n_embd": l.n_embd,
            "n_vocab": l.model.tokenizer().map_or(0, |t| t.n_vocab()),
            "chat_template": l.template.name(),
        })),
    })
}
