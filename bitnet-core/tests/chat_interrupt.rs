//! A chat message stopped before its reply began leaves the conversation and the context as
//! they were: the partly read turn is not counted (what `/show` reports).

use std::cell::Cell;
use std::sync::Arc;

use bitnet_core::chat::{ChatSession, ChatTemplate, Conversation, ReplyIo, ReplySettings};
use bitnet_core::model::Model;
use bitnet_core::sampling::SamplerConfig;
use bitnet_core::scheduler::{ContextMode, Scheduler};
use bitnet_core::{Engine, EngineOptions, LoadOptions};

fn session() -> ChatSession {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/shakespeare.gguf");
    let m = Arc::new(Model::load(path, &LoadOptions::default()).unwrap());
    let template = ChatTemplate::for_model(&m, None).unwrap();
    let settings = ReplySettings {
        sampler: SamplerConfig {
            temperature: 0.0,
            ..SamplerConfig::default()
        },
        max_tokens: 8,
        stop: Vec::new(),
        context: ContextMode::Stop,
        constraint: None,
        speculate: None,
    };
    let options = EngineOptions {
        threads: 1,
        pin: false,
        // Passes of 4 tokens: a message is read over several steps, and stopped midway.
        batch: 4,
        ..EngineOptions::default()
    };
    let engine = Engine::new(m, &options).unwrap();
    ChatSession::new(
        Scheduler::new(engine, Default::default()),
        Conversation::new(template),
        settings,
    )
    .unwrap()
}

#[test]
fn a_message_stopped_before_its_reply_leaves_the_context_as_it_was() {
    let mut chat = session();
    let answered = chat
        .send(
            "Good morrow, friend.",
            ReplyIo {
                on_text: &mut |_| true,
                interrupted: &|| false,
                on_status: &mut |_| {},
            },
        )
        .unwrap();
    assert!(!answered.unanswered);
    let before = chat.context_used();
    assert!(before > 0);

    // Ctrl-C while the message is read: after two steps of its prompt.
    let polls = Cell::new(0);
    let stopped = chat
        .send(
            "Speak of the king, and of his long and weary road to the sea.",
            ReplyIo {
                on_text: &mut |_| true,
                interrupted: &|| {
                    polls.set(polls.get() + 1);
                    polls.get() > 2
                },
                on_status: &mut |_| {},
            },
        )
        .unwrap();
    assert!(stopped.unanswered, "{stopped:?}");
    assert_eq!(chat.conversation().messages().len(), 2);
    let after = chat.context_used();
    assert!(
        after <= before && after + 2 >= before,
        "the stopped message's tokens are still counted: {after} held, {before} before it"
    );

    // The conversation goes on from there.
    let next = chat
        .send(
            "Farewell.",
            ReplyIo {
                on_text: &mut |_| true,
                interrupted: &|| false,
                on_status: &mut |_| {},
            },
        )
        .unwrap();
    assert!(!next.unanswered);
    assert_eq!(chat.conversation().messages().len(), 4);
}
