//! The HTTP routes and what wraps them: CORS (`cors.rs`), every error in OpenAI's shape,
//! the API key (every route but the health checks and the chat page, `auth.rs`), the body
//! size limit, and a 404 for anything else. The chat page's own files are in `webui.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bitnet_core::Model;
use bitnet_core::chat::{HealedPrompt, ToolFormat, healed_prompt_tokens, tokenize_prompt};
use bitnet_core::constrain::Constraint;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::SpecParams;
use serde_json::{Value, json};

use super::auth::require_key;
use super::clean_input;
use super::completion::complete;
use super::conn::stall;
use super::cors::cors;
use super::embeddings::{
    Route, embed, refuse_completions, refuse_embedding_model, refuse_unless_embedding,
};
use super::error::{ApiError, ApiResult, openai_shape};
use super::metrics::{Labelled, ServerFigures, render as render_metrics};
use super::model_list;
use super::models::Served;
use super::request::{Api, chat_messages, completion_prompt, gen_request, parse_body};
use super::state::AppState;
use super::structured::{OutputSpec, compile, constraint_error, output_spec};
use super::tools::{tool_constraint, tool_request};

/// The server's routes; `webui`: the chat page at `/` (`--no-webui` leaves `/` a 404).
pub fn router(state: Arc<AppState>, webui: bool) -> Router {
    let limit = state.config.max_body;
    let routes = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/v1/embeddings", post(embeddings_openai))
        .route("/embeddings", post(embeddings_llama))
        .route("/embedding", post(embeddings_llama))
        .route("/v1/models", get(model_list::models))
        .route("/models", get(model_list::models))
        // A catch-all: an alias may hold a slash ("org/model").
        .route("/v1/models/{*id}", get(model_list::model))
        .route("/models/{*id}", get(model_list::model))
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .route("/props", get(props))
        .route("/slots", get(slots_list))
        .route("/slots/{id}", post(slot_action))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .fallback(|uri: Uri| async move { ApiError::not_found(uri.path()) })
        .layer(middleware::from_fn_with_state(state.clone(), require_key))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state.clone());
    // The page holds no data: it loads without a key, and asks for one when the API does.
    let page = if webui {
        super::webui::router()
    } else {
        Router::new()
    };
    // These wrap the whole router rather than each route: a route's 405 gets its Allow
    // header outside the route's own layers.
    Router::new()
        .fallback_service(page.fallback_service(routes))
        .layer(middleware::from_fn(openai_shape))
        // Outermost: a preflight is answered before the key is asked for.
        .layer(middleware::from_fn_with_state(state, cors))
}

/// The body, or the 413 / 400 of a body too large or unreadable.
fn body(state: &AppState, b: Result<Bytes, BytesRejection>) -> ApiResult<Bytes> {
    b.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.config.max_body)
        } else if let Some(stall) = stall::stalled(&e) {
            stall::error(stall)
        } else {
            ApiError::invalid(format!("cannot read the request body: {e}"), None)
        }
    })
}

/// A seed per request when the client gives none.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

async fn completions(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    refuse_completions(&state)?;
    let b = body(&state, b)?;
    let mut obj = parse_body(&b)?;
    let served = state.route_body(&obj).await?;
    let loaded = served.loaded()?;
    refuse_embedding_model(loaded)?;
    let tok = loaded.tokenizer()?;
    let cleaned = clean_input::apply(&mut obj, Api::Completion, state.config.clean_input, tok)?;
    let mut req = gen_request(
        &obj,
        Api::Completion,
        tok.n_vocab(),
        state.config.reply_budget(loaded.max_seq_len),
        fresh_seed(),
        speculate(&state, &served),
    )?;
    let prompt = completion_prompt(&obj, tok)?;
    req.params.constraint = constraint(&obj, &loaded.model)?;
    let resp = complete(
        state.clone(),
        served,
        Api::Completion,
        prompt,
        String::new(),
        req,
        "prompt",
    )
    .await?;
    Ok(match &cleaned {
        Some(c) => c.tag(resp),
        None => resp,
    })
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    refuse_completions(&state)?;
    let b = body(&state, b)?;
    let mut obj = parse_body(&b)?;
    let served = state.route_body(&obj).await?;
    let loaded = served.loaded()?;
    refuse_embedding_model(loaded)?;
    let tok = loaded.tokenizer()?;
    let cleaned = clean_input::apply(&mut obj, Api::Chat, state.config.clean_input, tok)?;
    let mut req = gen_request(
        &obj,
        Api::Chat,
        tok.n_vocab(),
        state.config.reply_budget(loaded.max_seq_len),
        fresh_seed(),
        speculate(&state, &served),
    )?;
    req.params.constraint = constraint(&obj, &loaded.model)?;
    let messages = chat_messages(&obj)?;
    let tools = tool_request(&obj)?;
    if tools.active() {
        let format = ToolFormat::detect(&loaded.template);
        if let Some(spec) = tool_constraint(&tools, format, tok)? {
            if req.params.constraint.is_some() {
                return Err(ApiError::invalid(
                    "a tool call and a response format cannot both constrain the answer: \
                     give one, or tool_choice \"none\"",
                    Some("response_format"),
                ));
            }
            let out = OutputSpec {
                spec,
                param: "tools",
            };
            let vocab = loaded
                .model
                .constraint_vocab()
                .map_err(|e| constraint_error(&e, "tools"))?;
            req.params.constraint = Some(compile(&out, &vocab)?);
        }
        req.tool_format = Some(format);
    }
    // A template from the model file renders in a worker process and may take seconds (a
    // hostile one, until its limits end it): off the async worker, which serves others.
    let text = tokio::task::block_in_place(|| {
        loaded
            .template
            .render_with_tools(&messages, &tools.tools, true)
    })
    .map_err(|e| ApiError::invalid(e.to_string(), Some("messages")))?;
    // Tokenized as the chat does: no second BOS when the template writes one, and a
    // generation prompt ending in a space the reply's first word would carry (BitNet's
    // "Assistant: ") healed.
    let HealedPrompt {
        tokens: prompt,
        heal,
    } = if req.params.constraint.is_some() {
        // A constrained reply starts where its grammar says: the prompt stays whole.
        HealedPrompt {
            tokens: tokenize_prompt(tok, &text, loaded.template.bos_text()),
            heal: String::new(),
        }
    } else {
        healed_prompt_tokens(tok, &text, loaded.template.bos_text())
    };
    if prompt.is_empty() {
        return Err(ApiError::invalid(
            "the conversation renders to nothing",
            Some("messages"),
        ));
    }
    for s in loaded.template.stop_strings() {
        if !req.params.stop.contains(s) {
            req.params.stop.push(s.clone());
        }
    }
    let resp = complete(
        state.clone(),
        served,
        Api::Chat,
        prompt,
        heal,
        req,
        "messages",
    )
    .await?;
    Ok(match &cleaned {
        Some(c) => c.tag(resp),
        None => resp,
    })
}

/// `POST /v1/embeddings`: OpenAI's embeddings (see `embeddings/`).
async fn embeddings_openai(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    refuse_unless_embedding(&state)?;
    let b = body(&state, b)?;
    embed(state, b, Route::OpenAi).await
}

/// `POST /embeddings`, `/embedding`: llama-server's embeddings (a bare array).
async fn embeddings_llama(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    refuse_unless_embedding(&state)?;
    let b = body(&state, b)?;
    embed(state, b, Route::Llama).await
}

/// The request's structured-output constraint, compiled for the model.
fn constraint(
    obj: &serde_json::Map<String, Value>,
    model: &Model,
) -> ApiResult<Option<Constraint>> {
    let Some(out) = output_spec(obj)? else {
        return Ok(None);
    };
    let vocab = model
        .constraint_vocab()
        .map_err(|e| constraint_error(&e, out.param))?;
    compile(&out, &vocab).map(Some)
}

/// The speculative decoding a model's requests get: `--model-draft` drafts for the default
/// model only (a draft must share its target's vocabulary); `--lookup-ngram` needs no
/// second model and applies to every one.
fn speculate<'a>(state: &'a AppState, served: &Served) -> Option<&'a SpecParams> {
    if state.config.draft_model && !served.entry.is_default {
        return None;
    }
    state.config.speculate.as_ref()
}

/// The model a GET route names (`?model=NAME`; none: the default).
#[derive(Debug, serde::Deserialize)]
struct ModelQuery {
    model: Option<String>,
}

impl ModelQuery {
    fn name(&self, state: &AppState) -> Option<&str> {
        self.model.as_deref().filter(|_| state.models.routed())
    }
}

/// `GET /props` (llama-server's route): what a client needs to know before it asks, the
/// model's name, its context, the slots, and the generation settings a request that names
/// none gets.
async fn props(
    State(state): State<Arc<AppState>>,
    Query(query): Query<ModelQuery>,
) -> ApiResult<Json<Value>> {
    let served = state.route(query.name(&state)).await?;
    let loaded = served.loaded()?;
    let d = SamplerConfig::default();
    // As typed (0.8), not as the f32 holds it (0.800000011920929).
    let f = |x: f32| (f64::from(x) * 1e6).round() / 1e6;
    let n_ctx = loaded.max_seq_len;
    Ok(Json(json!({
        "model": served.entry.name,
        "n_ctx": n_ctx,
        "total_slots": state.config.parallel,
        "chat_template": loaded.template.name(),
        "build_info": concat!("bitnet-rs ", env!("CARGO_PKG_VERSION")),
        "default_generation_settings": {
            "n_ctx": n_ctx,
            "params": {
                // The server's -n or the default reply budget, cut to the room the prompt
                // leaves (-1: until the context is full, as llama-server says it).
                "n_predict": match state.config.reply_budget(n_ctx) {
                    usize::MAX => -1,
                    n => n as i64,
                },
                "temperature": f(d.temperature),
                "top_k": d.top_k,
                "top_p": f(d.top_p),
                "min_p": f(d.min_p),
                "repeat_penalty": f(d.repeat_penalty),
                "repeat_last_n": d.repeat_last_n,
                "frequency_penalty": f(d.frequency_penalty),
                "presence_penalty": f(d.presence_penalty),
                // A fresh seed per request unless the request names one.
                "seed": -1,
            },
        },
    })))
}

/// `GET /slots` (llama-server's): each slot of the model (`?model=`), see `slots.rs`.
async fn slots_list(
    State(state): State<Arc<AppState>>,
    Query(query): Query<ModelQuery>,
) -> ApiResult<Json<Value>> {
    let served = state.route(query.name(&state)).await?;
    let loaded = served.loaded()?;
    Ok(Json(loaded.slots.list(loaded.max_seq_len)))
}

#[derive(serde::Deserialize)]
struct SlotQuery {
    action: Option<String>,
    model: Option<String>,
}

/// `POST /slots/{id}?action=save|restore|erase` (llama-server's), body `{"filename"}`.
async fn slot_action(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    Query(query): Query<SlotQuery>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let b = body(&state, b)?;
    let obj = if b.iter().all(u8::is_ascii_whitespace) {
        serde_json::Map::new()
    } else {
        parse_body(&b)?
    };
    let served = match query.model.as_deref().filter(|_| state.models.routed()) {
        Some(name) => state.route(Some(name)).await?,
        None => state.route_body(&obj).await?,
    };
    let loaded = served.loaded()?;
    let action = query
        .action
        .as_deref()
        .ok_or_else(|| ApiError::invalid("say ?action=save, restore or erase", Some("action")))?;
    let answer = loaded
        .slots
        .act(&served.running.engine, &id, action, &Value::Object(obj))
        .await?;
    Ok(Json(answer))
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.check_serving() {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let models = &state.models;
    let routed = models.routed();
    let labelled: Vec<Labelled<'_>> = models
        .entries()
        .iter()
        .map(|e| Labelled {
            model: routed.then_some(e.name.as_str()),
            metrics: &e.metrics,
        })
        .collect();
    let f = &models.figures;
    let server = ServerFigures {
        connections: &state.connections,
        models_loaded: models.n_resident(),
        loads: f.loads.load(SeqCst),
        unloads: f.unloads.load(SeqCst),
        load_failures: f.failures.load(SeqCst),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render_metrics(&labelled, &server),
    )
        .into_response()
}

/// `{"content": "text", "add_special": false, "with_pieces": false}` -> `{"tokens": [...]}`
/// (llama.cpp's shape). With pieces, a piece is a string when it is UTF-8 on its own, else
/// the list of its bytes (a byte token, part of a character), as llama.cpp gives it;
/// control tokens show their text.
async fn tokenize(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let b = body(&state, b)?;
    let obj = parse_body(&b)?;
    let served = state.route_body(&obj).await?;
    let loaded = served.loaded()?;
    let tok = loaded.tokenizer()?;
    let content = match obj.get("content") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("'content' is required", Some("content")));
        }
        Some(_) => return Err(ApiError::bad_field("content", "a string")),
    };
    let flag = |name: &str| match obj.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad_field(name, "true or false")),
    };
    let ids = tok.encode(content, flag("add_special")?, flag("parse_special")?);
    if flag("with_pieces")? {
        let pieces: Vec<Value> = ids
            .iter()
            .map(|&id| {
                let bytes = tok.token_to_piece_special(id, true);
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": id, "piece": piece})
            })
            .collect();
        return Ok(Json(json!({ "tokens": pieces })));
    }
    Ok(Json(json!({ "tokens": ids })))
}

/// `{"tokens": [...]}` -> `{"content": "text"}`.
async fn detokenize(
    State(state): State<Arc<AppState>>,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let b = body(&state, b)?;
    let obj = parse_body(&b)?;
    let served = state.route_body(&obj).await?;
    let loaded = served.loaded()?;
    let tok = loaded.tokenizer()?;
    let bad = || ApiError::bad_field("tokens", "a list of token ids");
    let n_vocab = tok.n_vocab();
    let ids: Vec<u32> = match obj.get("tokens") {
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                let id = v.as_u64().ok_or_else(bad)?;
                match u32::try_from(id) {
                    Ok(id) if (id as usize) < n_vocab => Ok(id),
                    _ => {
                        let mut e = ApiError::invalid(
                            format!("token id {id} is outside the vocabulary (0..{n_vocab})"),
                            Some("tokens"),
                        );
                        e.code = Some("invalid_value");
                        Err(e)
                    }
                }
            })
            .collect::<ApiResult<_>>()?,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("'tokens' is required", Some("tokens")));
        }
        Some(_) => return Err(bad()),
    };
    Ok(Json(json!({ "content": tok.decode(&ids) })))
}
