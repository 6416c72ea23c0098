//! Fuzz target: hostile chat templates and messages. The input is a Jinja template, a NUL
//! byte, then a JSON list of messages; parsing and rendering must give text or a typed error
//! (the template limits bound loops and output), never a panic.
#![no_main]

use bitnet_core::chat::{ChatTemplate, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (src, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"[{\"role\": \"user\", \"content\": \"hi\"}]"[..]),
    };
    let Ok(src) = std::str::from_utf8(src) else {
        return;
    };
    let Ok(t) = ChatTemplate::from_source("fuzz", src, "<s>", "</s>") else {
        return;
    };
    let messages: Vec<Message> = serde_json::from_slice(rest).unwrap_or_default();
    let _ = t.render(&messages, true);
    let _ = t.render(&messages, false);
});
