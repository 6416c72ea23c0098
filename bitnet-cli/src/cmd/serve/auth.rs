//! API keys: read from the command line (`--api-key`, repeatable, each a comma-separated
//! list, as llama-server takes them) and from `--api-key-file` (one a line, blank lines and
//! `#` comments skipped), and the middleware that asks every request but the health checks
//! for one, as `Authorization: Bearer KEY` (the scheme in any case) or `X-Api-Key: KEY`
//! (llama-server accepts both).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::state::AppState;

/// Routes a load balancer probes without a key.
const OPEN_PATHS: [&str; 2] = ["/health", "/v1/health"];

/// Every key given; empty: no key is asked for.
pub fn load_keys(flags: &[String], file: Option<&Path>) -> Result<Vec<String>> {
    let mut keys = Vec::new();
    for flag in flags {
        for key in flag.split(',') {
            let key = key.trim();
            if key.is_empty() {
                bail!("--api-key {flag:?} holds an empty key");
            }
            keys.push(key.to_owned());
        }
    }
    if let Some(f) = file {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("reading the API key file {}", f.display()))?;
        let before = keys.len();
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned),
        );
        if keys.len() == before {
            bail!(
                "the API key file {} holds no API key (one a line; '#' starts a comment)",
                f.display()
            );
        }
    }
    Ok(keys)
}

/// Asks for a key on every route but the health checks, when the server has keys.
pub async fn require_key(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let keys = &state.config.api_keys;
    // An OPTIONS runs no handler: it only learns the methods a route takes (`cors.rs`).
    let open = OPEN_PATHS.contains(&req.uri().path()) || req.method() == Method::OPTIONS;
    if !keys.is_empty() && !open {
        let given = presented_key(req.headers());
        // Every key is compared, so the time taken says nothing of which one was close.
        let ok = given.is_some_and(|g| {
            keys.iter().fold(false, |ok, k| {
                constant_time_eq(g.as_bytes(), k.as_bytes()) | ok
            })
        });
        if !ok {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The key of `Authorization: Bearer KEY` (any case of "Bearer"), else of `X-Api-Key`.
fn presented_key(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, key) = v.trim_start().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        });
    bearer.or_else(|| {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    })
}

/// Compares keys without stopping at the first difference (no timing hint).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn keys_come_from_lists_and_a_file() {
        let dir = std::env::temp_dir().join(format!("bitnet-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("keys");
        std::fs::write(&f, "# ops\n\n a1 \n#b\na2\n").unwrap();
        let keys = load_keys(&["k1, k2".into(), "k3".into()], Some(&f)).unwrap();
        assert_eq!(keys, ["k1", "k2", "k3", "a1", "a2"]);
        assert!(load_keys(&["k1,,k2".into()], None).is_err());
        std::fs::write(&f, "# none yet\n").unwrap();
        let err = load_keys(&[], Some(&f)).unwrap_err().to_string();
        assert!(err.contains("no API key"), "{err}");
        assert!(load_keys(&[], None).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn either_header_carries_the_key() {
        let key = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            presented_key(&h).map(str::to_owned)
        };
        assert_eq!(key("authorization", "bearer k"), Some("k".into()));
        assert_eq!(key("authorization", "BEARER   k "), Some("k".into()));
        assert_eq!(key("authorization", "Basic k"), None);
        assert_eq!(key("authorization", "Bearerk"), None);
        assert_eq!(key("x-api-key", "k"), Some("k".into()));
    }
}
