//! Fuzz target: the server's request bodies, read by the server's own code. bitnet-cli is a
//! binary crate, so its request readers (`cmd/serve/request.rs` with `request/api.rs`, the
//! fields it refuses in `unsupported.rs`, the errors of `error.rs`, and the chat's
//! `structured.rs` and `tools.rs` readers) are compiled into this target from their files.
//! Any bytes as a body must give a request or a typed `ApiError` (with its JSON body) on
//! both routes, never a panic.
#![no_main]

use bitnet_core::chat::ToolFormat;
use bitnet_core::scheduler::SpecParams;
use bitnet_core::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

mod shipped;

// The server's files, unchanged. A `#[path]` on an inline module names the directory of
// its children, and they are found there as in the server's own tree: `mod request;`
// loads `serve/request.rs` as a file of its own (not a `mod.rs`), so its `mod api;` is
// `serve/request/api.rs`, and `super::error` is the sibling below. (A `#[path]` on
// `mod request;` itself would make request.rs a `mod.rs`, and `mod api;` would be looked
// for beside it, at `serve/api.rs`.) The paths are relative to this file's directory.
#[allow(dead_code, unused_imports)]
#[path = "../../bitnet-cli/src/cmd/serve"]
mod serve {
    pub mod error;
    pub mod request;
    pub mod structured;
    pub mod tools;
    pub mod unsupported;
}

// `error.rs` counts tokens with the CLI's `crate::output::count`.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../../bitnet-cli/src/output.rs"]
mod output;

use serve::error::{ApiError, ApiResult};
use serve::request::{Api, chat_messages, completion_prompt, gen_request, model_name, parse_body};
use serve::structured::output_spec;
use serve::tools::{tool_constraint, tool_request};

fn tokenizer() -> &'static Tokenizer {
    shipped::model()
        .tokenizer()
        .expect("the shipped model has a tokenizer")
}

/// A typed error must also make its JSON body (what the client is sent).
fn answer<T>(r: ApiResult<T>) -> Option<T> {
    r.map_err(|e: ApiError| e.body()).ok()
}

/// What a route reads before the engine sees the request, on a server that speculates
/// and on one that does not.
fn route(obj: &Map<String, Value>, api: Api, tok: &Tokenizer, spec: &SpecParams) {
    for speculate in [None, Some(spec)] {
        let _ = answer(gen_request(obj, api, tok.n_vocab(), 128, 7, speculate));
    }
    let _ = answer(output_spec(obj));
    match api {
        Api::Completion => {
            let _ = answer(completion_prompt(obj, tok));
        }
        Api::Chat => {
            let _ = answer(chat_messages(obj));
            if let Some(tools) = answer(tool_request(obj)) {
                for format in [ToolFormat::Llama31, ToolFormat::Hermes, ToolFormat::Generic] {
                    let _ = answer(tool_constraint(&tools, format, tok));
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let tok = tokenizer();
    let Some(obj) = answer(parse_body(data)) else {
        return;
    };
    let _ = answer(model_name(&obj, true));
    let spec = SpecParams::lookup(4);
    for api in [Api::Chat, Api::Completion] {
        route(&obj, api, tok, &spec);
    }
});
