//! Cross-origin requests from browsers (CORS): the answer to preflights and the headers
//! that let a page read an answer, for the origins `--cors-origin` allows (`cors/policy.rs`).
//!
//! Off by default: a page is only let read our answers when its origin was named. The
//! server's own pages are same-origin and need none of this; any other page (a web UI on
//! another port, a hosted tool) is an operator's choice, because a server that answered
//! every origin would let any site the user visits drive the model on their machine and
//! read what it says. `*` allows every origin; `scheme://host:*` any port of one host.
//!
//! A preflight carries no credentials, so it is answered before the API key is asked for;
//! the request that follows still needs the key. Any other `OPTIONS` is answered 204 with
//! the route's `Allow` header.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

mod policy;
pub use policy::CorsPolicy;

/// What a preflight allows: every method the routes take.
const METHODS: &str = "GET, POST, OPTIONS";
/// Headers allowed when a preflight names none.
const HEADERS: &str = "authorization, content-type, x-api-key";
/// Seconds a browser may reuse a preflight's answer: short, so a restart with fewer
/// origins takes hold soon.
const MAX_AGE: &str = "600";

/// Answers preflights and plain `OPTIONS`; marks the answers of allowed origins.
pub async fn cors(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let policy = &state.config.cors;
    let origin = req.headers().get(ORIGIN).cloned();
    if req.method() == Method::OPTIONS {
        if let Some(origin) = &origin
            && req.headers().contains_key(ACCESS_CONTROL_REQUEST_METHOD)
        {
            return preflight(policy, origin, req.headers());
        }
        // An OPTIONS that is no preflight asks what the route allows: the router's 405
        // knows (its Allow header).
        let resp = next.run(req).await;
        if resp.status() != StatusCode::METHOD_NOT_ALLOWED {
            return resp;
        }
        let mut ok = StatusCode::NO_CONTENT.into_response();
        if let Some(allow) = resp.headers().get(axum::http::header::ALLOW) {
            ok.headers_mut()
                .insert(axum::http::header::ALLOW, allow.clone());
        }
        return ok;
    }
    let mut resp = next.run(req).await;
    if policy.enabled() {
        let h = resp.headers_mut();
        if let Some(allow) = origin.as_ref().and_then(|o| policy.allow_origin(o)) {
            h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
            h.insert(
                ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("retry-after"),
            );
        }
        if !policy.allows_every_origin() {
            // Caches must not hand one origin's answer to another.
            h.append(VARY, HeaderValue::from_static("Origin"));
        }
    }
    resp
}

fn preflight(policy: &CorsPolicy, origin: &HeaderValue, asked: &HeaderMap) -> Response {
    let Some(allow) = policy.allow_origin(origin) else {
        let o = origin.to_str().unwrap_or("?");
        let message = if policy.enabled() {
            format!("the origin {o} is not allowed: the server's --cors-origin does not name it")
        } else {
            format!(
                "cross-origin requests are off: start the server with --cors-origin {o} to \
                 allow this origin"
            )
        };
        return ApiError::forbidden(message, "cors_origin_not_allowed").into_response();
    };
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, allow);
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(METHODS),
    );
    // The headers the page asked for (the OpenAI SDK sends its own x-stainless-*): the
    // origin is trusted, and the key is still checked on the request itself.
    let headers = asked
        .get(ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static(HEADERS));
    h.insert(ACCESS_CONTROL_ALLOW_HEADERS, headers);
    h.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(MAX_AGE));
    h.insert(
        VARY,
        HeaderValue::from_static(
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        ),
    );
    resp
}
