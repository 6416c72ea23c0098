//! The chat page served at `/` (off with `--no-webui`): hand-written HTML, CSS and
//! JavaScript from `bitnet-cli/webui/`, embedded in the binary so the page works on a
//! machine with no network, and the headers that make a browser treat it strictly.
//!
//! The page and its assets hold no data, so they load without the API key; everything the
//! page then asks for (`/props`, `/v1/...`) goes through the key check as any client's
//! requests do. Model text reaches the page as data, never as markup: the page builds DOM
//! nodes from it (`markdown.js`), and the Content-Security-Policy below is the second line:
//! only our own scripts run (no inline script, no `eval`), Trusted Types refuse any string
//! written into `innerHTML`, and the page may talk to this server only.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::error::ApiError;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file of the page; `index.html` is served at `/`, the others at `/webui/NAME`.
const ASSETS: [Asset; 4] = [
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../../../webui/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../webui/app.js"),
    },
    Asset {
        name: "markdown.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../../../webui/markdown.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../../../webui/app.css"),
    },
];

/// No inline script or style, nothing from elsewhere, no plugins, no framing, and Trusted
/// Types so that a string written into `innerHTML` (or any other HTML sink) throws.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; font-src 'self'; \
                   object-src 'none'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'; require-trusted-types-for 'script'; \
                   trusted-types 'none'";

/// The page's routes, to sit outside the API key check.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/",
            get(|h: HeaderMap| async move { serve(&ASSETS[0], &h) }),
        )
        .route("/webui/{name}", get(asset))
}

async fn asset(Path(name): Path<String>, h: HeaderMap) -> Response {
    match ASSETS[1..].iter().find(|a| a.name == name) {
        Some(a) => serve(a, &h),
        None => ApiError::not_found(&format!("/webui/{name}")).into_response(),
    }
}

/// The file with its headers, or 304 when the browser's copy is current: the page is
/// revalidated on each load (`no-cache`), so a new binary's page is picked up at once.
fn serve(a: &Asset, req: &HeaderMap) -> Response {
    let etag = etag(a);
    let fresh = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        a.body.into_response()
    };
    let h = resp.headers_mut();
    if !fresh {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(a.content_type),
        );
    }
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

/// The asset's entity tag: a hash of its bytes (FNV-1a), computed once.
fn etag(a: &Asset) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                let h = a.body.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
                });
                format!("\"{h:016x}\"")
            })
            .collect()
    });
    let i = ASSETS.iter().position(|x| x.name == a.name).unwrap_or(0);
    &tags[i]
}
