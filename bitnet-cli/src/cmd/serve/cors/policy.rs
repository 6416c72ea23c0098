//! The origins `--cors-origin` allows, read from the flags, and the origin an answer may
//! name for a request's `Origin`.

use anyhow::{Result, bail};
use axum::http::HeaderValue;

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

    /// Whether any origin is allowed at all.
    pub(super) fn enabled(&self) -> bool {
        self.any || !self.origins.is_empty() || !self.any_port.is_empty()
    }

    /// Whether `*` was given: the answer then names no origin, and so need not vary by it.
    pub(super) fn allows_every_origin(&self) -> bool {
        self.any
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
    pub(super) fn allow_origin(&self, origin: &HeaderValue) -> Option<HeaderValue> {
        if self.any {
            return Some(HeaderValue::from_static("*"));
        }
        let o = origin.to_str().ok()?;
        self.allows(o).then(|| origin.clone())
    }
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
