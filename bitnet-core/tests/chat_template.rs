//! Chat templates: every built-in renders the reference conversation to exactly the text
//! the family's published template gives; a file's own template runs with the Python
//! methods and globals Hugging Face templates use; bad templates are clear errors, never a
//! panic or a hang; and a conversation continued turn by turn holds the same tokens as the
//! whole conversation rendered at once, on every built-in template, at every turn (BitNet's
//! template, whose generation prompt ends with a space, through token healing).

use bitnet_core::chat::{
    BUILTIN_TEMPLATES, ChatError, ChatTemplate, Conversation, Message, builtin,
};
use bitnet_core::tokenizer::{Tokenizer, VocabSpec};
use bitnet_gguf::{GgufFile, LoadMode};

/// llama.cpp's test-chat-template conversation.
fn reference_conversation() -> Vec<Message> {
    vec![
        Message::system("You are a helpful assistant"),
        Message::user("Hello"),
        Message::assistant("Hi there"),
        Message::user("Who are you"),
        Message::assistant("   I am an assistant   "),
        Message::user("Another question"),
    ]
}

struct Expected {
    name: &'static str,
    bos: &'static str,
    eos: &'static str,
    /// All six messages, `add_generation_prompt = true`.
    with_prompt: &'static str,
    /// The first five (ending with the assistant), `add_generation_prompt = false`.
    nogen: &'static str,
}

/// Rendered with Python's jinja2 3.1 in Hugging Face's environment (`trim_blocks`,
/// `lstrip_blocks`) from each family's published `chat_template`:
/// microsoft/bitnet-b1.58-2B-4T, meta-llama/Meta-Llama-3-8B-Instruct,
/// meta-llama/Llama-2-7b-chat-hf, teknium/OpenHermes-2.5-Mistral-7B (ChatML),
/// tiiuae/Falcon3-7B-Instruct (its branch without tools), HuggingFaceH4/zephyr-7b-beta.
const EXPECTED: &[Expected] = &[
    Expected {
        name: "bitnet",
        bos: "<|begin_of_text|>",
        eos: "<|eot_id|>",
        with_prompt: "System: You are a helpful assistant<|eot_id|>User: Hello<|eot_id|>Assistant: Hi there<|eot_id|>User: Who are you<|eot_id|>Assistant: I am an assistant<|eot_id|>User: Another question<|eot_id|>Assistant: ",
        nogen: "System: You are a helpful assistant<|eot_id|>User: Hello<|eot_id|>Assistant: Hi there<|eot_id|>User: Who are you<|eot_id|>Assistant: I am an assistant<|eot_id|>",
    },
    Expected {
        name: "llama3",
        bos: "<|begin_of_text|>",
        eos: "<|eot_id|>",
        with_prompt: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        nogen: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>",
    },
    Expected {
        name: "llama2",
        bos: "<s>",
        eos: "</s>",
        with_prompt: "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question [/INST]",
        nogen: "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant </s>",
    },
    Expected {
        name: "chatml",
        bos: "<s>",
        eos: "</s>",
        with_prompt: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
        nogen: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n",
    },
    Expected {
        name: "falcon3",
        bos: "",
        eos: "<|endoftext|>",
        with_prompt: "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question\n<|assistant|>\n",
        nogen: "<|system|>\nYou are a helpful assistant\n<|user|>\nHello\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you\n<|assistant|>\n   I am an assistant   <|endoftext|>",
    },
    Expected {
        name: "zephyr",
        bos: "<s>",
        eos: "</s>",
        with_prompt: "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n<|assistant|>\n",
        nogen: "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   </s>\n",
    },
];

fn builtin_with(name: &str, bos: &str, eos: &str) -> ChatTemplate {
    let b = builtin(name).unwrap_or_else(|| panic!("{name} is built in"));
    ChatTemplate::from_source(b.name, b.source, bos, eos).expect("built-in parses")
}

#[test]
fn builtin_templates_render_as_the_published_ones() {
    let conv = reference_conversation();
    for e in EXPECTED {
        let t = builtin_with(e.name, e.bos, e.eos);
        assert_eq!(
            t.render(&conv, true).unwrap(),
            e.with_prompt,
            "{} with the generation prompt",
            e.name
        );
        assert_eq!(
            t.render(&conv[..5], false).unwrap(),
            e.nogen,
            "{} without",
            e.name
        );
    }
}

#[test]
fn every_builtin_parses_and_the_plain_fallback_reads_naturally() {
    for b in BUILTIN_TEMPLATES {
        let t = ChatTemplate::from_builtin(b, None);
        assert!(
            !t.render(&reference_conversation(), true)
                .unwrap()
                .is_empty(),
            "{}",
            b.name
        );
        assert!(
            !t.stop_strings().is_empty(),
            "{} names a stop string",
            b.name
        );
    }
    let plain = ChatTemplate::from_builtin(builtin("plain").unwrap(), None);
    assert_eq!(
        plain.render(&reference_conversation()[..3], true).unwrap(),
        "You are a helpful assistant\n\nUser: Hello\nAssistant: Hi there\nAssistant:"
    );
    assert!(builtin("LLAMA-3").is_some() && builtin("no-such-family").is_none());
}

#[test]
fn file_templates_get_python_methods_and_hugging_face_globals() {
    let src = "{{ bos_token }}{% for m in messages %}{{ m['role'].title() }}: \
               {{ m.content.strip().replace('a', 'A') }}{% if not loop.last %}|{% endif %}\
               {% endfor %}{% if add_generation_prompt %} -> {{ strftime_now('%Y') | length }}{% endif %}\
               {{ messages | length | string }}";
    let t = ChatTemplate::from_source("test", src, "<BOS>", "</EOS>").unwrap();
    let out = t.render(&reference_conversation()[..2], true).unwrap();
    assert_eq!(
        out,
        "<BOS>System: You Are A helpful AssistAnt|User: Hello -> 42"
    );
}

#[test]
fn raise_exception_is_a_render_error_naming_the_template() {
    let t = builtin_with("llama2", "<s>", "</s>");
    let bad = [Message::user("a"), Message::user("b")];
    match t.render(&bad, true) {
        Err(e @ ChatError::Render { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("llama2") && msg.contains("must alternate"),
                "{msg}"
            );
        }
        other => panic!("expected a render error, got {other:?}"),
    }
}

#[test]
fn broken_and_hostile_templates_are_errors_not_panics_or_hangs() {
    match ChatTemplate::from_source(
        "broken.jinja",
        "{% for m in messages %}{{ m.content }",
        "",
        "",
    ) {
        Err(e @ ChatError::Parse { .. }) => assert!(e.to_string().contains("broken.jinja"), "{e}"),
        other => panic!("expected a parse error, got {other:?}"),
    }
    // Nested loops far beyond any real template: stopped by the instruction budget.
    let spin =
        "{% for a in range(100000) %}{% for b in range(100000) %}{{ '' }}{% endfor %}{% endfor %}";
    let t = ChatTemplate::from_source("spin", spin, "", "").unwrap();
    let started = std::time::Instant::now();
    let err = t.render(&[], true).unwrap_err();
    assert!(err.to_string().contains("spin"), "{err}");
    assert!(
        started.elapsed().as_secs() < 60,
        "the budget bounds the work"
    );
    // Recursion through a macro that calls itself.
    let deep = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let t = ChatTemplate::from_source("deep", deep, "", "").unwrap();
    assert!(t.render(&[], true).is_err());
    // Messages that are not what the template indexes: undefined is lenient, as in HF.
    let t = ChatTemplate::from_source(
        "odd",
        "{{ nothing }}|{% if messages[5] is defined %}x{% endif %}",
        "",
        "",
    )
    .unwrap();
    assert_eq!(t.render(&[], true).unwrap(), "|");
}

#[test]
fn unknown_template_choice_lists_the_builtins() {
    let e = ChatTemplate::resolve(None, None, Some("no-such-template")).unwrap_err();
    let msg = e.to_string();
    for name in [
        "llama3", "llama2", "chatml", "falcon3", "zephyr", "bitnet", "plain",
    ] {
        assert!(msg.contains(name), "{msg}");
    }
    // No choice and no template in the file: plain.
    assert_eq!(
        ChatTemplate::resolve(None, None, None).unwrap().name(),
        "plain"
    );
    assert_eq!(
        ChatTemplate::resolve(Some("  "), None, None)
            .unwrap()
            .name(),
        "plain"
    );
    // The file's own template wins over the fallback; a named choice over the file's.
    let own = ChatTemplate::resolve(Some("{{ 'own' }}"), None, None).unwrap();
    assert_eq!(own.render(&[], true).unwrap(), "own");
    let named = ChatTemplate::resolve(Some("{{ 'own' }}"), None, Some("chatml")).unwrap();
    assert_eq!(named.name(), "chatml");
}

fn vocab_file(name: &str) -> GgufFile {
    let path = bitnet_testdata::path(&format!("vocab/ggml-vocab-{name}.gguf"));
    GgufFile::open(&path, LoadMode::Read).expect("open vocab")
}

fn vocab(name: &str) -> Tokenizer {
    Tokenizer::from_metadata(vocab_file(name).metadata()).expect("tokenizer")
}

/// The reply text a model produces for `content` after the template's generation prompt.
fn as_generated(template: &str, content: &str) -> String {
    match template {
        // "[/INST]" ends the prompt; the reply's first token carries the space.
        "llama2" => format!(" {content}"),
        // "Assistant:" ends the prompt; the reply begins with a space-led word.
        "plain" => format!(" {content}"),
        _ => content.to_owned(),
    }
}

fn spell(tok: &Tokenizer, ids: &[u32]) -> Vec<u8> {
    ids.iter()
        .flat_map(|&t| tok.token_to_piece_special(t, true).iter().copied())
        .collect()
}

/// Tokens that spell exactly `text`, as a model generating it would emit them: BPE
/// tokenizes it as is; SPM adds a leading space to what it encodes, so `text` must begin
/// with one (the reply after "[/INST]").
fn generated_tokens(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let ids = if tok.add_space_prefix() {
        tok.encode(
            text.strip_prefix(' ')
                .expect("SPM replies start with a space"),
            false,
            false,
        )
    } else {
        tok.encode(text, false, false)
    };
    assert_eq!(
        spell(tok, &ids),
        text.as_bytes(),
        "generated tokens spell the reply"
    );
    ids
}

/// Plays the conversation turn by turn as the chat does (prompt, reply as generated,
/// next prompt) and checks every turn against rendering the conversation whole: the texts
/// always; with a tokenizer, that nothing held is recomputed and that the sequence (the
/// tokens kept plus the new turn's) is exactly the whole conversation's tokens, or with
/// `exact_tokens` false, spells exactly their text. `heal` is the text each generation
/// prompt must be healed of (the reply's first token then begins with it).
fn check_turn_by_turn(tname: &str, tok: Option<&Tokenizer>, exact_tokens: bool, heal: &str) {
    let template = ChatTemplate::resolve(None, tok, Some(tname)).unwrap();
    let replies = ["Hi there, friend.", "I am an assistant!", "Fine."];
    let users = ["Hello", "Who are you", "How are you?", "Bye"];
    let mut conv = Conversation::new(template.clone());
    conv.push(Message::system("You are a helpful assistant"));
    let mut held: Vec<u32> = Vec::new();
    for (turn, user) in users.iter().enumerate() {
        conv.push(Message::user(*user));
        let mut healed = "";
        if let Some(tok) = tok {
            let whole = conv.reply_prompt(tok).unwrap();
            assert_eq!(whole.heal, heal, "{tname} turn {turn}: the healed text");
            let unhealed = conv.prompt_tokens(tok).unwrap();
            assert_eq!(
                whole.tokens[..],
                unhealed[..unhealed.len() - usize::from(!heal.is_empty())],
                "{tname} turn {turn}: healing takes off the last token only"
            );
            let next = conv.next_turn(tok, &held).unwrap();
            assert_eq!(next.heal, whole.heal);
            healed = heal;
            assert_eq!(
                next.keep,
                held.len(),
                "{tname} turn {turn}: nothing held is recomputed"
            );
            held.extend_from_slice(&next.tokens);
            if exact_tokens {
                assert_eq!(
                    held, whole.tokens,
                    "{tname} turn {turn}: the sequence is the whole conversation's tokens"
                );
            } else {
                assert_eq!(
                    spell(tok, &held),
                    spell(tok, &whole.tokens),
                    "{tname} turn {turn}: the sequence spells the whole conversation"
                );
            }
            if turn == 0 {
                assert_eq!(
                    held, whole.tokens,
                    "{tname}: the first prompt is the whole tokenization"
                );
            }
        }
        let Some(reply) = replies.get(turn) else {
            break;
        };
        let prompt_text = conv.prompt_text().unwrap();
        let generated = as_generated(tname, reply);
        if let Some(tok) = tok {
            // The model generates the healed text and the reply; the reply alone is kept.
            let ids = evaluated_reply(tok, tname, &template, &format!("{healed}{generated}"));
            assert!(
                tok.token_to_piece(ids[0]).starts_with(healed.as_bytes()),
                "{tname} turn {turn}: the reply's first token begins with the healed text"
            );
            held.extend(ids);
        }
        conv.push(Message::assistant(generated.clone()));
        conv.push(Message::user("next"));
        let later = conv.prompt_text().unwrap();
        assert!(
            later.starts_with(&format!("{prompt_text}{generated}")),
            "{tname} turn {turn}: rendering turn by turn is a prefix of rendering whole:\n\
             {prompt_text:?} + {generated:?}\nvs {later:?}"
        );
        conv.messages_mut().pop();
    }
}

/// The tokens a reply leaves in the sequence: every token the model sampled but the last,
/// which ends the reply and is never evaluated. A chat model ends its turn with its
/// end-of-turn token, so the reply's own tokens stay; a base model (`plain`) has none and
/// runs into the template's stop string ("\nUser:"), whose tokens but the last stay too.
fn evaluated_reply(tok: &Tokenizer, tname: &str, template: &ChatTemplate, reply: &str) -> Vec<u32> {
    if tname != "plain" {
        return generated_tokens(tok, reply);
    }
    let stop = &template.stop_strings()[0];
    let mut ids = generated_tokens(tok, &format!("{reply}{stop}"));
    ids.pop();
    ids
}

#[test]
fn turn_by_turn_equals_whole_on_every_builtin() {
    for b in BUILTIN_TEMPLATES {
        check_turn_by_turn(b.name, None, false, "");
    }
    // Token level, with the vocabularies these formats are used with: Llama 3's for
    // llama3, BitNet 2B-4T (which uses it) and plain; Llama 2's SentencePiece for llama2;
    // for ChatML, Falcon3 and Zephyr, Llama 3's with their markers as special tokens.
    let bpe = vocab("llama-bpe");
    check_turn_by_turn("llama3", Some(&bpe), true, "");
    check_turn_by_turn("plain", Some(&bpe), true, "");
    // BitNet's generation prompt ends with a space ("Assistant: "), a token of its own
    // there, which the whole conversation joins to the reply's first word (" Hi"): the
    // prompt is healed of it and the reply's first token carries it.
    check_turn_by_turn("bitnet", Some(&bpe), true, " ");
    check_turn_by_turn("llama2", Some(&vocab("llama-spm")), true, "");
    let marked = llama3_with_markers();
    for name in ["chatml", "falcon3", "zephyr"] {
        check_turn_by_turn(name, Some(&marked), true, "");
    }
}

/// Llama 3's vocabulary with some of its reserved special tokens named as the markers of
/// ChatML, Falcon3 and Zephyr (as fine-tunes adopting those formats do): each marker is one
/// special token, as in those families' own vocabularies, never merged with the text beside
/// it. Without that the markers are text, and a reply's last "." joins a marker's "<|".
fn llama3_with_markers() -> Tokenizer {
    let file = vocab_file("llama-bpe");
    let mut spec = VocabSpec::from_metadata(file.metadata()).expect("vocab spec");
    let markers = [
        "<|im_start|>",
        "<|im_end|>",
        "<|system|>",
        "<|user|>",
        "<|assistant|>",
        "</s>",
        "<|endoftext|>",
    ];
    let reserved: Vec<usize> = spec
        .tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| t.starts_with("<|reserved_special_token_"))
        .map(|(i, _)| i)
        .take(markers.len())
        .collect();
    assert_eq!(reserved.len(), markers.len(), "reserved tokens to rename");
    for (&i, m) in reserved.iter().zip(markers) {
        spec.tokens[i] = m.to_owned();
    }
    let tok = Tokenizer::from_spec(spec).expect("tokenizer");
    for m in markers {
        let ids = tok.encode(m, false, true);
        assert!(
            ids.len() == 1 && tok.is_control(ids[0]),
            "{m} is one special token"
        );
    }
    tok
}

#[test]
fn continuation_cuts_back_to_the_common_prefix_when_history_changed() {
    let tok = vocab("llama-bpe");
    let mut conv =
        Conversation::new(ChatTemplate::resolve(None, Some(&tok), Some("llama3")).unwrap());
    conv.push(Message::user("Hello there"));
    let first = conv.prompt_tokens(&tok).unwrap();
    let mut held = first.clone();
    held.extend(tok.encode("General Kenobi", false, false));
    // /undo and a different question: the held reply must go.
    conv.messages_mut().clear();
    conv.push(Message::user("Something else entirely"));
    let whole = conv.prompt_tokens(&tok).unwrap();
    let next = conv.next_turn(&tok, &held).unwrap();
    assert!(next.keep < first.len(), "the old question is not kept");
    let mut rebuilt = held[..next.keep].to_vec();
    rebuilt.extend_from_slice(&next.tokens);
    assert_eq!(rebuilt, whole);
    // Same conversation as held, nothing new: nothing to evaluate, all kept.
    let next = conv.next_turn(&tok, &whole).unwrap();
    assert_eq!((next.keep, next.tokens.len()), (whole.len(), 0));
}

#[test]
fn a_reply_the_template_trims_is_kept_up_to_where_the_text_changed() {
    let tok = vocab("llama-bpe");
    let mut conv =
        Conversation::new(ChatTemplate::resolve(None, Some(&tok), Some("bitnet")).unwrap());
    conv.push(Message::user("Hello"));
    let healed = conv.reply_prompt(&tok).unwrap();
    let prompt = healed.tokens;
    let reply = "Well met, good friend. \n\n";
    let mut held = prompt.clone();
    held.extend(generated_tokens(&tok, &format!("{}{reply}", healed.heal)));
    conv.push(Message::assistant(reply));
    conv.push(Message::user("And you?"));
    let whole = conv.reply_prompt(&tok).unwrap().tokens;
    let next = conv.next_turn(&tok, &held).unwrap();
    assert!(
        next.keep > prompt.len() + 3,
        "the reply's words stay ({} of {})",
        next.keep,
        held.len()
    );
    assert!(next.keep < held.len(), "the trimmed whitespace goes");
    let mut rebuilt = held[..next.keep].to_vec();
    rebuilt.extend_from_slice(&next.tokens);
    assert_eq!(spell(&tok, &rebuilt), spell(&tok, &whole));
}

#[test]
fn bos_is_not_doubled_when_the_template_writes_it() {
    let tok = vocab("llama-bpe");
    let bos = tok.bos_id().expect("llama-bpe has BOS");
    for name in ["llama3", "chatml"] {
        let mut conv =
            Conversation::new(ChatTemplate::resolve(None, Some(&tok), Some(name)).unwrap());
        conv.push(Message::user("Hi"));
        let ids = conv.prompt_tokens(&tok).unwrap();
        assert_eq!(ids[0], bos, "{name}");
        assert_ne!(ids[1], bos, "{name}: one BOS");
        if name == "llama3" {
            let eot = tok.token_id("<|eot_id|>").unwrap();
            assert!(ids.contains(&eot), "special tokens are parsed");
        }
    }
}
