//! Request fields of OpenAI's and llama.cpp's APIs that this server does not honour. Each
//! is refused with a 400 naming it when its value would change the answer, and passes at
//! the value that changes nothing (what clients send when they fill in every field: the
//! llama.cpp web UI sends `typical_p: 1`, `mirostat: 0` ...). Fields that cannot change the
//! answer (`model`, `user`, `store`, `metadata`, `cache_prompt`, `samplers` ...) are not
//! listed: they are accepted and ignored, as docs/serve.md says.

use serde_json::{Map, Value};

use super::error::{ApiError, ApiResult};
use super::request::Api;

/// A field, the test of a value that changes nothing, and what to say instead.
struct Unsupported {
    name: &'static str,
    /// Chat requests only (the other fields are refused on both routes).
    chat_only: bool,
    noop: fn(&Value) -> bool,
    hint: &'static str,
}

const UNSUPPORTED: &[Unsupported] = &[
    Unsupported {
        name: "echo",
        chat_only: false,
        noop: is_false,
        hint: "the answer never repeats the prompt",
    },
    Unsupported {
        name: "suffix",
        chat_only: false,
        noop: is_empty_text,
        hint: "text after the completion (infilling) is not supported",
    },
    Unsupported {
        name: "best_of",
        chat_only: false,
        noop: is_one,
        hint: "ask for several answers with 'n' and pick one yourself",
    },
    Unsupported {
        name: "n_cmpl",
        chat_only: false,
        noop: is_one,
        hint: "ask for several answers with 'n'",
    },
    Unsupported {
        name: "n_probs",
        chat_only: false,
        noop: is_zero,
        hint: "ask for 'logprobs' (and 'top_logprobs' in a chat)",
    },
    Unsupported {
        name: "post_sampling_probs",
        chat_only: false,
        noop: is_false,
        hint: "log probabilities are those of the model, before sampling",
    },
    Unsupported {
        name: "typical_p",
        chat_only: false,
        noop: at_least_one,
        hint: "the samplers are top_k, top_p, min_p and temperature",
    },
    Unsupported {
        name: "mirostat",
        chat_only: false,
        noop: is_zero,
        hint: "the samplers are top_k, top_p, min_p and temperature",
    },
    Unsupported {
        name: "dry_multiplier",
        chat_only: false,
        noop: at_most_zero,
        hint: "use repeat_penalty, presence_penalty or frequency_penalty",
    },
    Unsupported {
        name: "xtc_probability",
        chat_only: false,
        noop: at_most_zero,
        hint: "the samplers are top_k, top_p, min_p and temperature",
    },
    Unsupported {
        name: "top_n_sigma",
        chat_only: false,
        noop: at_most_zero,
        hint: "the samplers are top_k, top_p, min_p and temperature",
    },
    Unsupported {
        name: "dynatemp_range",
        chat_only: false,
        noop: at_most_zero,
        hint: "the temperature is fixed for a request",
    },
    Unsupported {
        name: "min_keep",
        chat_only: false,
        noop: is_zero,
        hint: "the samplers keep at least one token",
    },
    Unsupported {
        name: "n_keep",
        chat_only: false,
        noop: is_zero,
        hint: "what a full context keeps is the server's --keep",
    },
    Unsupported {
        name: "n_indent",
        chat_only: false,
        noop: is_zero,
        hint: "the answer's indentation is not enforced",
    },
    Unsupported {
        name: "t_max_predict_ms",
        chat_only: false,
        noop: is_zero,
        hint: "limit the answer with max_tokens",
    },
    Unsupported {
        name: "lora",
        chat_only: false,
        noop: is_empty_list,
        hint: "there are no LoRA adapters",
    },
    Unsupported {
        name: "functions",
        chat_only: true,
        noop: is_empty_list,
        hint: "use 'tools'",
    },
    Unsupported {
        name: "function_call",
        chat_only: true,
        noop: is_none_or_auto,
        hint: "use 'tool_choice'",
    },
    Unsupported {
        name: "audio",
        chat_only: true,
        noop: Value::is_null,
        hint: "the answer is text",
    },
    Unsupported {
        name: "modalities",
        chat_only: true,
        noop: is_text_only,
        hint: "the answer is text",
    },
    Unsupported {
        name: "web_search_options",
        chat_only: true,
        noop: Value::is_null,
        hint: "there is no web search",
    },
    Unsupported {
        name: "chat_template_kwargs",
        chat_only: true,
        noop: is_empty_object,
        hint: "templates take no extra arguments",
    },
];

/// 400 for the first field of `obj` that asks for something this server does not do.
pub fn refuse_unsupported(obj: &Map<String, Value>, api: Api) -> ApiResult<()> {
    for u in UNSUPPORTED {
        if u.chat_only && api != Api::Chat {
            continue;
        }
        if let Some(v) = obj.get(u.name)
            && !v.is_null()
            && !(u.noop)(v)
        {
            let mut e = ApiError::invalid(
                format!("'{}' is not supported by this server: {}", u.name, u.hint),
                Some(u.name),
            );
            e.code = Some("unsupported_parameter");
            return Err(e);
        }
    }
    Ok(())
}

fn is_false(v: &Value) -> bool {
    v.as_bool() == Some(false)
}

fn is_empty_text(v: &Value) -> bool {
    v.as_str() == Some("")
}

fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}

fn is_zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}

fn at_least_one(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x >= 1.0)
}

fn at_most_zero(v: &Value) -> bool {
    v.as_f64().is_some_and(|x| x <= 0.0)
}

fn is_empty_list(v: &Value) -> bool {
    v.as_array().is_some_and(Vec::is_empty)
}

fn is_empty_object(v: &Value) -> bool {
    v.as_object().is_some_and(Map::is_empty)
}

fn is_none_or_auto(v: &Value) -> bool {
    matches!(v.as_str(), Some("none" | "auto"))
}

fn is_text_only(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().all(|m| m.as_str() == Some("text")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(body: Value, api: Api) -> Result<(), Option<String>> {
        refuse_unsupported(body.as_object().unwrap(), api).map_err(|e| e.param)
    }

    #[test]
    fn values_that_change_nothing_pass() {
        let body = json!({
            "echo": false, "suffix": "", "best_of": 1, "n_probs": 0, "typical_p": 1.0,
            "mirostat": 0, "dry_multiplier": 0.0, "xtc_probability": 0, "top_n_sigma": -1.0,
            "dynatemp_range": 0.0, "lora": [], "modalities": ["text"], "functions": [],
            "function_call": "none", "audio": null, "chat_template_kwargs": {},
            "model": "x", "samplers": "edkypmxt",
        });
        assert_eq!(check(body, Api::Chat), Ok(()));
    }

    #[test]
    fn a_value_that_would_change_the_answer_is_refused_by_name() {
        assert_eq!(
            check(json!({"best_of": 3}), Api::Completion),
            Err(Some("best_of".into()))
        );
        assert_eq!(
            check(json!({"typical_p": 0.9}), Api::Chat),
            Err(Some("typical_p".into()))
        );
        // The wrong type is no way out.
        assert_eq!(
            check(json!({"echo": "yes"}), Api::Completion),
            Err(Some("echo".into()))
        );
        // The chat's own fields mean nothing to a completion (an unknown field there).
        assert_eq!(check(json!({"functions": [{}]}), Api::Completion), Ok(()));
        assert_eq!(
            check(json!({"functions": [{}]}), Api::Chat),
            Err(Some("functions".into()))
        );
    }
}
