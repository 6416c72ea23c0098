//! Cross-origin requests from browsers (CORS): the origins `--cors-origin` allows, the
//! answer to their preflights, and the headers that let a page read an answer.
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

use anyhow::{Result, bail};
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

/// What a preflight allows: every method the routes take.
const METHODS: &str = "GET, POST, OPTIONS";
/// Headers allowed when a preflight names none.
const HEADERS: &str = "authorization, content-type, x-api-key";
/// Seconds a browser may reuse a preflight's answer: short, so a restart with fewer
/// origins takes hold soon.
const MAX_AGE: &str = "600";

/// The origins allowed.
#[derive(Clone, Debug, Default)]
pub struct CorsPolicy {
    any: bool,
    /// Exact origins, lower case: `https://app.example:8443`.
    origins: Vec<String>,
    /// `scheme://host` of `scheme://host:*`: that host on any port.
    any_port: Vec<String>,
}

impl CorsPolicy {
    /// From the `--cors-origin` values (each may be a comma-separated list).
    pub fn parse(flags: &[String]) -> Result<CorsPolicy> {
        let mut p = CorsPolicy::default();
        for origin in flags.iter().flat_map(|f| f.split(',')) {
            let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
            if origin == "*" {
                p.any = true;
                continue;
            }
            let Some((scheme, host)) = origin.split_once("://") else {
                bail!(
                    "--cors-origin {origin:?} is not an origin: give scheme://host[:port], \
                     scheme://host:* or *"
                );
            };
            if scheme.is_empty() || host.is_empty() || host.contains('/') {
                bail!(
                    "--cors-origin {origin:?} is not an origin (no path): give \
                     scheme://host[:port], scheme://host:* or *"
                );
            }
            match host.strip_suffix(":*") {
                Some(h) => p.any_port.push(format!("{scheme}://{h}")),
                None => p.origins.push(origin),
            }
        }
        Ok(p)
    }

    fn enabled(&self) -> bool {
        self.any || !self.origins.is_empty() || !self.any_port.is_empty()
    }

    fn allows(&self, origin: &str) -> bool {
        let origin = origin.to_ascii_lowercase();
        self.any
            || self.origins.contains(&origin)
            || self.any_port.iter().any(|base| {
                origin.strip_prefix(base.as_str()).is_some_and(|rest| {
                    rest.is_empty()
                        || rest
                            .strip_prefix(':')
                            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                })
            })
    }

    /// The `Access-Control-Allow-Origin` value for `origin`, when it is allowed.
    fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        if self.any {
            return Some(HeaderValue::from_static("*"));
        }
        let o = origin.to_str().ok()?;
        self.allows(o).then(|| origin.clone())
    }
}

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
        if !policy.any {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(flags: &[&str]) -> CorsPolicy {
        CorsPolicy::parse(&flags.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn origins_match_exactly_or_on_any_port() {
        let p = policy(&[
            "https://App.example/",
            "http://localhost:*,http://127.0.0.1:*",
        ]);
        assert!(p.allows("https://app.example"));
        assert!(!p.allows("https://app.example:8443"));
        assert!(!p.allows("http://app.example"));
        assert!(p.allows("http://localhost:5173"));
        assert!(p.allows("http://localhost"));
        assert!(p.allows("http://127.0.0.1:8080"));
        assert!(!p.allows("http://localhost.evil.example"));
        assert!(!p.allows("http://localhost:80.evil.example"));
        assert!(!p.allows("http://localhost:"));
        assert!(!p.allows("https://localhost:5173"));
        assert!(!policy(&[]).enabled());
        assert!(policy(&["*"]).allows("null"));
    }

    #[test]
    fn a_flag_that_is_no_origin_is_refused() {
        for bad in [
            "localhost:3000",
            "http://app.example/path",
            "://x",
            "http://",
        ] {
            assert!(CorsPolicy::parse(&[bad.to_owned()]).is_err(), "{bad}");
        }
    }
}
