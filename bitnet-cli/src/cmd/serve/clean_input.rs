//! `clean_input` on a request (an extension field; the server's `--clean-input` is the
//! default of a request that names none): the prompt of a completion, or the text of every
//! message of a chat, cleaned before tokenization (`bitnet_core::tokenizer::clean`). What it
//! changed comes back in the `X-Clean-Input` response header: the mode, the characters
//! removed or replaced, and the tokens it saved (a completion's whole prompt; a chat's
//! message texts, each counted alone).

use axum::http::HeaderValue;
use axum::response::Response;
use bitnet_core::tokenizer::Tokenizer;
use bitnet_core::tokenizer::clean::{CleanMode, CleanReport, clean_input};
use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};
use super::request::Api;

/// What a request's clean-up changed.
#[derive(Debug)]
pub struct Cleaned {
    mode: CleanMode,
    report: CleanReport,
    tokens_saved: i64,
}

/// The mode a request asks for: its `clean_input` (`true` or `"all"`, `"prose"`, `false`),
/// else the server's default.
pub fn requested_mode(
    obj: &Map<String, Value>,
    default: Option<CleanMode>,
) -> ApiResult<Option<CleanMode>> {
    match obj.get("clean_input") {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(true)) => Ok(Some(CleanMode::All)),
        Some(Value::Bool(false)) => Ok(None),
        Some(Value::String(s)) => CleanMode::parse(s).map(Some).ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

fn bad() -> ApiError {
    ApiError::bad_field("clean_input", "true, false, \"all\" or \"prose\"")
}

/// Cleans the request's text in place (`prompt` of a completion; each message's `content`,
/// a string or text parts, of a chat) and says what changed; `None` when no mode applies.
pub fn apply(
    obj: &mut Map<String, Value>,
    api: Api,
    default: Option<CleanMode>,
    tok: &Tokenizer,
) -> ApiResult<Option<Cleaned>> {
    let Some(mode) = requested_mode(obj, default)? else {
        return Ok(None);
    };
    let mut done = Cleaned {
        mode,
        report: CleanReport::default(),
        tokens_saved: 0,
    };
    let mut clean = |text: &mut String, bos: bool| {
        let (out, r) = clean_input(text, mode);
        if r.changed() {
            let before = tok.encode(text, bos, false).len() as i64;
            let after = tok.encode(&out, bos, false).len() as i64;
            done.tokens_saved += before - after;
            done.report.removed += r.removed;
            done.report.whitespace += r.whitespace;
            *text = out;
        }
    };
    let mut clean_value = |v: &mut Value, bos: bool| {
        if let Value::String(s) = v {
            clean(s, bos);
        }
    };
    match api {
        Api::Completion => match obj.get_mut("prompt") {
            Some(v @ Value::String(_)) => clean_value(v, true),
            Some(Value::Array(a)) if a.len() == 1 => clean_value(&mut a[0], true),
            _ => {}
        },
        Api::Chat => {
            if let Some(Value::Array(messages)) = obj.get_mut("messages") {
                for m in messages.iter_mut().filter_map(Value::as_object_mut) {
                    match m.get_mut("content") {
                        Some(v @ Value::String(_)) => clean_value(v, false),
                        Some(Value::Array(parts)) => {
                            for p in parts.iter_mut().filter_map(Value::as_object_mut) {
                                if let Some(t) = p.get_mut("text") {
                                    clean_value(t, false);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(Some(done))
}

impl Cleaned {
    /// The `X-Clean-Input` header's value.
    pub fn header(&self) -> String {
        format!(
            "mode={}; removed={}; whitespace={}; tokens_saved={}",
            self.mode.name(),
            self.report.removed,
            self.report.whitespace,
            self.tokens_saved
        )
    }

    /// `resp` with the header added.
    pub fn tag(&self, mut resp: Response) -> Response {
        if let Ok(v) = HeaderValue::from_str(&self.header()) {
            resp.headers_mut().insert("x-clean-input", v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_field_names_a_mode_or_leaves_the_servers() {
        let obj = |v: Value| json!({ "clean_input": v }).as_object().unwrap().clone();
        let none = Map::new();
        assert_eq!(requested_mode(&none, None).unwrap(), None);
        assert_eq!(
            requested_mode(&none, Some(CleanMode::Prose)).unwrap(),
            Some(CleanMode::Prose)
        );
        assert_eq!(
            requested_mode(&obj(json!(true)), None).unwrap(),
            Some(CleanMode::All)
        );
        assert_eq!(
            requested_mode(&obj(json!(false)), Some(CleanMode::All)).unwrap(),
            None
        );
        assert_eq!(
            requested_mode(&obj(json!("prose")), None).unwrap(),
            Some(CleanMode::Prose)
        );
        for bad in [json!("some"), json!(1), json!([true])] {
            let e = requested_mode(&obj(bad.clone()), None).unwrap_err();
            assert!(e.message.contains("clean_input"), "{bad}: {}", e.message);
        }
    }
}
