//! Errors as OpenAI's API shapes them: `{"error": {"message", "type", "param", "code"}}`
//! with the matching HTTP status, so clients written for OpenAI report them sensibly. A
//! full queue also says when to come back (`Retry-After`). The answers axum and hyper make
//! themselves (a wrong method, a body they refuse) are given the same shape on the way out.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bitnet_core::scheduler::{GenStats, RequestError};
use serde_json::{Map, Value, json};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for `Retry-After` (503s).
    pub retry_after: Option<u64>,
    /// More fields of the error object, as llama-server adds them (`n_prompt_tokens` and
    /// `n_ctx` to an input past the context); boxed, so every `Result` that carries an
    /// error stays small.
    pub extra: Option<Box<Map<String, Value>>>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A request the client got wrong (400).
    pub fn invalid(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
            retry_after: None,
            extra: None,
        }
    }

    /// A request field of the wrong type or value.
    pub fn bad_field(param: &str, expected: &str) -> ApiError {
        let mut e = ApiError::invalid(format!("'{param}' must be {expected}"), Some(param));
        e.code = Some("invalid_value");
        e
    }

    pub fn context_exceeded(message: String, param: &str) -> ApiError {
        let mut e = ApiError::invalid(message, Some(param));
        e.code = Some("context_length_exceeded");
        e
    }

    /// A request the core refuses before it runs: what it asks of the context is blamed on
    /// `max_tokens` or on the prompt's field (`prompt_param`), anything else on the request.
    pub fn refused(e: &RequestError, prompt_param: &str) -> ApiError {
        match e {
            RequestError::MaxTokensPastContext { .. } => {
                ApiError::context_exceeded(e.to_string(), "max_tokens")
            }
            e if e.is_context() => ApiError::context_exceeded(e.to_string(), prompt_param),
            e => ApiError::invalid(e.to_string(), None),
        }
    }

    /// An answer the server cancelled before it was complete (shutdown): 503, so a client
    /// never takes a truncated answer for a finished one, and may retry elsewhere.
    pub fn cut_off(stats: &GenStats) -> ApiError {
        ApiError {
            code: Some("cancelled"),
            ..ApiError::unavailable(
                format!(
                    "the answer was cut off after {}: the server is shutting down (or \
                     cancelled it); retry the request",
                    crate::output::count(stats.gen_tokens, "token")
                ),
                Some(1),
            )
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "invalid or missing API key (send `Authorization: Bearer KEY` or \
                      `X-Api-Key: KEY`)"
                .into(),
            kind: "authentication_error",
            param: None,
            code: Some("invalid_api_key"),
            retry_after: None,
            extra: None,
        }
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is over the limit of {limit} bytes"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
            retry_after: None,
            extra: None,
        }
    }

    /// 503: the model is loading, the queue is full, or the server is shutting down.
    pub fn unavailable(message: impl Into<String>, retry_after: Option<u64>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "unavailable_error",
            param: None,
            code: Some("unavailable"),
            retry_after,
            extra: None,
        }
    }

    pub fn timeout(secs: u64) -> ApiError {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            message: format!("the request took longer than the server's --timeout of {secs}s"),
            kind: "timeout_error",
            param: None,
            code: Some("timeout"),
            retry_after: None,
            extra: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
            extra: None,
        }
    }

    pub fn not_found(path: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no route {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("not_found"),
            retry_after: None,
            extra: None,
        }
    }

    /// 403: a request refused whoever sends it (a cross-origin preflight from an origin
    /// not allowed).
    pub fn forbidden(message: impl Into<String>, code: &'static str) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
            kind: "permission_error",
            param: None,
            code: Some(code),
            retry_after: None,
            extra: None,
        }
    }

    /// 404 for a model id this server does not serve (`GET /v1/models/{id}`).
    pub fn model_not_found(id: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "the model '{id}' does not exist (GET /v1/models lists this server's)"
            ),
            kind: "invalid_request_error",
            param: Some("model".to_owned()),
            code: Some("model_not_found"),
            retry_after: None,
            extra: None,
        }
    }

    /// 404 for a request naming a model this server does not serve: the names it does.
    pub fn model_not_served(name: &str, served: &[String]) -> ApiError {
        ApiError {
            message: format!(
                "the model '{name}' is not served here; the models: {}",
                served.join(", ")
            ),
            ..ApiError::model_not_found(name)
        }
    }

    /// 501: what this server, as started, does not do (llama-server's answer to an
    /// embedding request without `--embeddings`, and to a completion with it).
    pub fn not_supported(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: message.into(),
            kind: "not_supported_error",
            param: None,
            code: Some("not_supported"),
            retry_after: None,
            extra: None,
        }
    }

    /// 400 for an input of `n_prompt_tokens` tokens that a sequence of `n_ctx` positions
    /// cannot hold (llama-server's `exceed_context_size_error`, with both counts).
    pub fn exceeds_context(
        message: String,
        param: &str,
        n_prompt_tokens: usize,
        n_ctx: usize,
    ) -> ApiError {
        ApiError {
            kind: "exceed_context_size_error",
            extra: Some(Box::new(Map::from_iter([
                ("n_prompt_tokens".to_owned(), json!(n_prompt_tokens)),
                ("n_ctx".to_owned(), json!(n_ctx)),
            ]))),
            ..ApiError::context_exceeded(message, param)
        }
    }

    /// The JSON body (also sent as an SSE event when a stream fails midway).
    pub fn body(&self) -> Value {
        let mut error = json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        });
        for (name, value) in self.extra.iter().flat_map(|m| m.iter()) {
            error[name] = value.clone();
        }
        json!({ "error": error })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// Gives every error answer that is not already ours (axum's 405 with its empty body, a
/// rejection in plain text) OpenAI's shape, its headers (`Allow`) kept.
pub async fn openai_shape(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let resp = next.run(req).await;
    let status = resp.status();
    let ours = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || ours {
        return resp;
    }
    let (mut parts, _) = resp.into_parts();
    let (message, code) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allow = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            (
                format!("{method} is not allowed on {path} (allowed: {allow})"),
                Some("method_not_allowed"),
            )
        }
        s => (
            format!(
                "{} ({method} {path})",
                s.canonical_reason().unwrap_or("request failed")
            ),
            None,
        ),
    };
    let kind = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let body = ApiError {
        status,
        message,
        kind,
        param: None,
        code,
        retry_after: None,
        extra: None,
    }
    .body();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body.to_string()))
}
