//! Tool calls: format detection from template sources written in each family's style,
//! rendering with tools on every built-in and on tools-aware templates, the serde shapes
//! of OpenAI requests, parsing (round trips and malformed replies) and, in [`drive`],
//! every grammar compiled against a vocabulary and followed token by token to a reply
//! that parses into valid calls.

mod drive;

use serde_json::{Value, json};

use super::*;
use crate::chat::{BUILTIN_TEMPLATES, ChatTemplate, Message};

/// Qwen 2.5 / Hermes style: tools in the system turn, calls in `<tool_call>` blocks,
/// results as `<tool_response>` in a user turn.
pub(super) const HERMES_STYLE: &str = r#"{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>
For a call, write <tool_call>
{"name": <name>, "arguments": <object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}
{%- elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{% if m.content %}{{ m.content }}
{% endif %}
{%- for c in m.tool_calls %}<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"#;

/// Llama 3.1 style: `ipython` environment, tools in the first user turn, results in an
/// `ipython` turn.
pub(super) const LLAMA_STYLE: &str = r#"{{- bos_token }}
{%- if not tools is defined %}{% set tools = none %}{% endif %}
<|start_header_id|>system<|end_header_id|>

Environment: ipython
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}<|eot_id|>
{%- if tools is not none %}<|start_header_id|>user<|end_header_id|>

Functions you may call:
{% for t in tools %}{{ t | tojson }}
{% endfor %}Answer a call as {"name": function name, "parameters": object}.<|eot_id|>
{%- endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}
{%- elif m.tool_calls %}<|start_header_id|>assistant<|end_header_id|>

{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "parameters": {{ c.function.arguments | tojson }}}{% endfor %}<|eot_id|>
{%- elif m.role == 'tool' %}<|start_header_id|>ipython<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- else %}<|start_header_id|>{{ m.role }}<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>

{% endif %}"#;

/// Mistral Nemo style: tools before the last user turn, calls after `[TOOL_CALLS]`.
pub(super) const MISTRAL_STYLE: &str = r#"{{- bos_token }}
{%- for m in messages %}
{%- if m.role == 'user' %}
{%- if loop.last and tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]
{%- elif m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}, "id": "{{ c.id }}"}{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{"content": {{ m.content | tojson }}, "call_id": "{{ m.tool_call_id }}"}[/TOOL_RESULTS]
{%- elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}
{%- endif %}
{%- endfor %}"#;

fn template(name: &str, src: &str) -> ChatTemplate {
    ChatTemplate::from_source(name, src, "<s>", "</s>").unwrap()
}

pub(super) fn weather() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: Some("Current weather in a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        }),
        strict: false,
    }
}

pub(super) fn add() -> Tool {
    Tool::new(
        "add",
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": false,
        }),
    )
}

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

/// A conversation with two parallel calls answered by two tool results.
fn history() -> Vec<Message> {
    vec![
        Message::system("Be brief."),
        Message::user("Weather in Paris, and 2 + 3?"),
        Message::assistant_tool_calls(
            "",
            vec![
                call(
                    "call_a1",
                    "get_weather",
                    json!({"city": "Paris", "unit": "celsius"}),
                ),
                call("call_b2", "add", json!({"a": 2, "b": 3})),
            ],
        ),
        Message::tool_result("call_a1", Some("get_weather".into()), "18 C, sunny"),
        Message::tool_result("call_b2", Some("add".into()), "5"),
    ]
}

#[test]
fn formats_are_detected_from_template_sources() {
    let cases = [
        (HERMES_STYLE, ToolFormat::Hermes),
        (LLAMA_STYLE, ToolFormat::Llama31),
        (MISTRAL_STYLE, ToolFormat::Mistral),
        ("{{ '<|python_tag|>' }}", ToolFormat::Llama31),
        (
            "{% for m in messages %}{{ m.content }}{% endfor %}",
            ToolFormat::Generic,
        ),
    ];
    for (src, want) in cases {
        assert_eq!(ToolFormat::detect(&template("t", src)), want, "{src}");
    }
    // Our built-ins know nothing of tools, Llama 3's header tokens included.
    for b in BUILTIN_TEMPLATES {
        let t = ChatTemplate::from_builtin(b, None);
        assert_eq!(ToolFormat::detect(&t), ToolFormat::Generic, "{}", b.name);
        assert_eq!(t.tool_caps(), render::ToolCaps::default(), "{}", b.name);
    }
    let names: Vec<&str> = [
        ToolFormat::Llama31,
        ToolFormat::Hermes,
        ToolFormat::Mistral,
        ToolFormat::Generic,
    ]
    .iter()
    .map(ToolFormat::name)
    .collect();
    assert_eq!(names, ["llama3.1", "hermes", "mistral", "generic"]);
}

#[test]
fn every_builtin_renders_a_tool_history_as_text() {
    let tools = [weather(), add()];
    for b in BUILTIN_TEMPLATES {
        let t = ChatTemplate::from_builtin(b, None);
        let out = t
            .render_with_tools(&history(), &tools, true)
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
        let ctx = format!("{}:\n{out}", b.name);
        // The tools, with their schemas, and how to answer.
        assert!(out.contains("\"name\": \"get_weather\""), "{ctx}");
        assert!(out.contains("\"maxLength\": 12"), "{ctx}");
        assert!(out.contains("{\"tool_calls\": [{\"name\":"), "{ctx}");
        assert!(out.contains("{\"response\":"), "{ctx}");
        // The system prompt is kept, before the tools.
        let sys = out.find("Be brief.").expect(&ctx);
        assert!(sys < out.find("You can call").expect(&ctx), "{ctx}");
        // Past calls as the JSON the model is asked to write.
        assert!(
            out.contains(
                r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, {"name": "add", "arguments": {"a": 2, "b": 3}}]}"#
            ),
            "{ctx}"
        );
        // Results as text naming their calls, never as a `tool` role.
        assert!(out.contains("call_a1 (get_weather):\n18 C, sunny"), "{ctx}");
        assert!(out.contains("call_b2 (add):\n5"), "{ctx}");
        for role in ["Tool:", "<|tool|>", ">tool"] {
            assert!(!out.contains(role), "{ctx}");
        }
        // The two results are one user turn, after the call and before the prompt.
        let first = out.find("18 C").unwrap();
        let second = out.find("call_b2 (add)").unwrap();
        assert!(
            out.find("\"a\": 2").unwrap() < first && first < second,
            "{ctx}"
        );
    }
    // Without a system message one is added for the tools.
    let t = ChatTemplate::from_builtin(crate::chat::builtin("chatml").unwrap(), None);
    let out = t
        .render_with_tools(&[Message::user("Hi")], &[add()], true)
        .unwrap();
    assert!(out.starts_with("<|im_start|>system\nYou can call"), "{out}");
}

#[test]
fn plain_messages_render_as_before_and_serialize_as_before() {
    let msgs = vec![
        Message::system("S"),
        Message::user("Hi"),
        Message::assistant(" Hello "),
    ];
    for b in BUILTIN_TEMPLATES {
        let t = ChatTemplate::from_builtin(b, None);
        let Ok(plain) = t.render(&msgs, true) else {
            continue;
        };
        // Offering no tools is the plain render; offering tools changes only the system part.
        assert_eq!(t.render_with_tools(&msgs, &[], true).unwrap(), plain);
        let with = t.render_with_tools(&msgs, &[add()], true).unwrap();
        assert_ne!(with, plain, "{}", b.name);
        assert!(
            with.ends_with(plain.rsplit("Hi").next().unwrap()),
            "{}",
            b.name
        );
    }
    let v = serde_json::to_value(&msgs[1]).unwrap();
    assert_eq!(v, json!({"role": "user", "content": "Hi"}));
    let old: Vec<Message> = serde_json::from_str(
        r#"[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]"#,
    )
    .unwrap();
    assert_eq!(old, vec![Message::user("a"), Message::assistant("b")]);
}

#[test]
fn tools_aware_templates_get_tools_calls_and_results_in_openai_shape() {
    let tools = [weather(), add()];
    for (src, format) in [
        (HERMES_STYLE, ToolFormat::Hermes),
        (LLAMA_STYLE, ToolFormat::Llama31),
        (MISTRAL_STYLE, ToolFormat::Mistral),
    ] {
        let t = template(format.name(), src);
        let caps = t.tool_caps();
        assert!(
            caps.tools && caps.tool_calls && caps.tool_responses,
            "{caps:?}"
        );
        let mut msgs = history();
        if format == ToolFormat::Mistral {
            // Mistral's own ids are nine letters and digits.
            msgs[2].tool_calls[0].id = "abcde1234".into();
            msgs[3].tool_call_id = Some("abcde1234".into());
        }
        msgs.push(Message::user("Thanks. And 4 + 4?"));
        let out = t.render_with_tools(&msgs, &tools, true).unwrap();
        let ctx = format!("{}:\n{out}", format.name());
        // The template's own tool listing (tojson of OpenAI's shape), no fallback prompt.
        assert!(out.contains(r#""type":"function""#), "{ctx}");
        assert!(out.contains(r#""name":"get_weather""#), "{ctx}");
        assert!(!out.contains("You can call"), "{ctx}");
        // The calls in the template's syntax, arguments as objects.
        let args = r#"{"city":"Paris","unit":"celsius"}"#;
        assert!(out.contains(args), "{ctx}");
        // The results in the template's own way.
        assert!(out.contains("18 C, sunny"), "{ctx}");
        assert!(!out.contains("Result of the tool call"), "{ctx}");
        assert_eq!(ToolFormat::detect(&t), format);
    }
    let hermes = template("h", HERMES_STYLE)
        .render_with_tools(&history(), &[weather()], false)
        .unwrap();
    assert!(
        hermes.contains("<tool_response>\n18 C, sunny\n</tool_response>"),
        "{hermes}"
    );
    assert!(
        hermes.contains(
            "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\":2,\"b\":3}}\n</tool_call>"
        ),
        "{hermes}"
    );
    let llama = template("l", LLAMA_STYLE)
        .render_with_tools(&history(), &[weather()], false)
        .unwrap();
    assert!(
        llama.contains("<|start_header_id|>ipython<|end_header_id|>\n\n5<|eot_id|>"),
        "{llama}"
    );
}

#[test]
fn a_template_that_fails_on_tool_messages_gets_them_as_text() {
    // Renders tools but raises on any role it does not know.
    let src = "{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}\
               {% for m in messages %}\
               {% if m.role not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif %}\
               {{ m.role }}: {{ m.content }}\n{% endfor %}";
    let t = template("strict", src);
    let caps = t.tool_caps();
    assert!(
        caps.tools && !caps.tool_calls && !caps.tool_responses,
        "{caps:?}"
    );
    let out = t.render_with_tools(&history(), &[add()], true).unwrap();
    assert!(out.starts_with("TOOLS [{\"type\":\"function\""), "{out}");
    assert!(
        out.contains("user: Result of the tool call call_a1 (get_weather):\n18 C, sunny"),
        "{out}"
    );
    // Generic format: the JSON instructions are added even though the template lists tools.
    assert!(out.contains("{\"response\":"), "{out}");
}

#[test]
fn openai_shapes_deserialize() {
    let m: Message = serde_json::from_value(json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}},
            {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": {"a": 3, "b": 4}}},
        ],
    }))
    .unwrap();
    assert_eq!(m.content, "");
    assert_eq!(
        m.tool_calls[0].arguments_json(),
        Some(json!({"a": 1, "b": 2}))
    );
    assert_eq!(m.tool_calls[1].arguments, r#"{"a":3,"b":4}"#);
    let back = serde_json::to_value(&m).unwrap();
    assert_eq!(
        back["tool_calls"][1]["function"]["arguments"],
        json!(r#"{"a":3,"b":4}"#)
    );
    assert_eq!(back["tool_calls"][0]["type"], json!("function"));
    assert_eq!(serde_json::from_value::<Message>(back).unwrap(), m);

    let t: Message = serde_json::from_value(json!({
        "role": "tool", "tool_call_id": "call_1", "name": "add",
        "content": [{"type": "text", "text": "3"}],
    }))
    .unwrap();
    assert_eq!(t, Message::tool_result("call_1", Some("add".into()), "3"));
    let nulls: Message =
        serde_json::from_value(json!({"role": "assistant", "content": "x", "tool_calls": null}))
            .unwrap();
    assert_eq!(nulls, Message::assistant("x"));
    assert!(serde_json::from_value::<Message>(json!({"role": "user", "content": 5})).is_err());

    let wrapped: Tool = serde_json::from_value(json!({
        "type": "function",
        "function": {"name": "add", "description": "sum", "parameters": add().parameters, "strict": true},
    }))
    .unwrap();
    assert_eq!((wrapped.name.as_str(), wrapped.strict), ("add", true));
    assert_eq!(serde_json::to_value(&wrapped).unwrap(), wrapped.to_openai());
    let bare: Tool = serde_json::from_value(json!({"name": "now"})).unwrap();
    assert_eq!(bare.parameters, Tool::default_parameters());
    for bad in [
        json!({"type": "retrieval", "function": {"name": "x"}}),
        json!({"name": ""}),
        json!({"name": "x", "parameters": 3}),
    ] {
        assert!(
            serde_json::from_value::<Tool>(bad.clone()).is_err(),
            "{bad}"
        );
    }

    let choice = |v: Value| ToolChoice::from_openai(&v);
    assert_eq!(choice(json!("auto")), Ok(ToolChoice::Auto));
    assert_eq!(choice(Value::Null), Ok(ToolChoice::Auto));
    assert_eq!(choice(json!("none")), Ok(ToolChoice::None));
    assert_eq!(choice(json!("required")), Ok(ToolChoice::Required));
    assert_eq!(
        choice(json!({"type": "function", "function": {"name": "add"}})),
        Ok(ToolChoice::Named("add".into()))
    );
    assert!(choice(json!("always")).is_err());
    assert!(choice(json!({"type": "function"})).is_err());
    assert!(choice(json!(1)).is_err());
    assert_eq!(ToolChoice::Required.check(&[]), Err(ToolError::NoTools));
    let e = ToolChoice::Named("mul".into()).check(&[add()]).unwrap_err();
    assert!(
        e.to_string().contains("\"mul\"") && e.to_string().contains("add"),
        "{e}"
    );
}

#[test]
fn rendered_calls_parse_back_in_every_format() {
    let calls = vec![
        call(
            "x",
            "get_weather",
            json!({"city": "Oslo", "unit": "celsius"}),
        ),
        call("y", "add", json!({"a": -1, "b": 2.5})),
        call("z", "now", json!({})),
    ];
    for format in [
        ToolFormat::Hermes,
        ToolFormat::Llama31,
        ToolFormat::Mistral,
        ToolFormat::Generic,
    ] {
        let text = format.render_calls(&calls);
        for wrapped in [text.clone(), format!("\n  {text}\n\n")] {
            let p = parse_tool_calls(format, &wrapped);
            assert_eq!(p.content, "", "{}: {wrapped}", format.name());
            let got: Vec<(&str, Value)> = p
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments_json().unwrap()))
                .collect();
            let want: Vec<(&str, Value)> = calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments_json().unwrap()))
                .collect();
            assert_eq!(got, want, "{}: {wrapped}", format.name());
            // Compact JSON text, fresh unique ids.
            assert!(p.tool_calls.iter().all(|c| !c.arguments.contains(": ")));
            let mut ids: Vec<&str> = p.tool_calls.iter().map(|c| c.id.as_str()).collect();
            for id in &ids {
                let body = if format == ToolFormat::Mistral {
                    assert_eq!(id.len(), 9, "{id}");
                    *id
                } else {
                    id.strip_prefix("call_").expect(id)
                };
                assert!(body.len() == 9 || body.len() == 24, "{id}");
                assert!(body.chars().all(|c| c.is_ascii_alphanumeric()), "{id}");
            }
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 3);
        }
    }
}

#[test]
fn text_around_calls_and_text_alone_stay_content() {
    let p = parse_tool_calls(
        ToolFormat::Hermes,
        "Let me check.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
    );
    assert_eq!(p.content, "Let me check.");
    assert_eq!(p.tool_calls.len(), 1);
    // A closing tag the model never wrote.
    let p = parse_tool_calls(
        ToolFormat::Hermes,
        "<tool_call>{\"name\": \"add\", \"arguments\": {}}",
    );
    assert_eq!((p.tool_calls.len(), p.content.as_str()), (1, ""));
    let p = parse_tool_calls(
        ToolFormat::Mistral,
        "Sure.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}, \"id\": \"abc123xyz\"}]",
    );
    assert_eq!(
        (p.content.as_str(), p.tool_calls[0].arguments.as_str()),
        ("Sure.", r#"{"a":1}"#)
    );
    let p = parse_tool_calls(
        ToolFormat::Llama31,
        "<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1}}; {\"type\": \"function\", \"name\": \"add\", \"parameters\": \"{\\\"a\\\": 2}\"}",
    );
    assert_eq!(p.tool_calls.len(), 2, "{p:?}");
    assert_eq!(p.tool_calls[1].arguments, r#"{"a":2}"#);
    let p = parse_tool_calls(
        ToolFormat::Generic,
        "```json\n{\"response\": \"Hello!\"}\n```",
    );
    assert_eq!((p.content.as_str(), p.tool_calls.len()), ("Hello!", 0));
    let p = parse_tool_calls(
        ToolFormat::Generic,
        r#"{"tool_call": {"name": "add", "arguments": {"a": 1}}}"#,
    );
    assert_eq!(p.tool_calls[0].name, "add");
    // A decoder that dropped the control tokens leaves the bare object.
    let p = parse_tool_calls(
        ToolFormat::Hermes,
        " {\"name\": \"add\", \"arguments\": {\"a\": 1}} ",
    );
    assert_eq!(p.tool_calls.len(), 1);
    let p = parse_tool_calls(
        ToolFormat::Mistral,
        "[{\"name\": \"add\", \"arguments\": {}}]",
    );
    assert_eq!(p.tool_calls.len(), 1);

    for (format, text) in [
        (
            ToolFormat::Llama31,
            "The answer is {\"name\": \"add\", \"parameters\": {}}",
        ),
        (ToolFormat::Llama31, "{\"name\": \"Ada\", \"age\": 36}"),
        (
            ToolFormat::Hermes,
            "I use <tool_call> tags like <tool_call>this</tool_call>.",
        ),
        (ToolFormat::Hermes, "{\"name\": \"Ada\"}"),
        (ToolFormat::Mistral, "[TOOL_CALLS] not json"),
        (ToolFormat::Mistral, "[TOOL_CALLS][]"),
        (ToolFormat::Generic, "plain words"),
        (ToolFormat::Generic, "{\"tool_calls\": []}"),
        (
            ToolFormat::Generic,
            "{\"tool_calls\": [{\"arguments\": {}}]}",
        ),
        (ToolFormat::Generic, "{\"response\": \"a\"} trailing"),
    ] {
        let p = parse_tool_calls(format, text);
        assert!(p.tool_calls.is_empty(), "{}: {text}: {p:?}", format.name());
        assert_eq!(p.content, text.trim(), "{}", format.name());
    }
}

#[test]
fn malformed_replies_never_panic() {
    let pieces = [
        "<tool_call>",
        "</tool_call>",
        "[TOOL_CALLS]",
        "<|python_tag|>",
        "{",
        "}",
        "[",
        "]",
        "\"name\"",
        ": ",
        ", ",
        "\"arguments\"",
        "\"parameters\"",
        "\"add\"",
        "1",
        "\"",
        "\\",
        ";",
        "\n",
        " ",
        "é",
        "```",
        "{\"tool_calls\": [",
        "{\"response\": ",
        "null",
        "\u{1F600}",
    ];
    let mut state = 7u64;
    for _ in 0..3000 {
        let n = (crate::synth::splitmix64(&mut state) % 24) as usize;
        let text: String = (0..n)
            .map(|_| pieces[(crate::synth::splitmix64(&mut state) % pieces.len() as u64) as usize])
            .collect();
        for format in [
            ToolFormat::Hermes,
            ToolFormat::Llama31,
            ToolFormat::Mistral,
            ToolFormat::Generic,
        ] {
            let p = parse_tool_calls(format, &text);
            for c in &p.tool_calls {
                assert!(!c.name.is_empty());
                assert!(c.arguments_json().is_some(), "{text:?} -> {c:?}");
            }
        }
    }
    let deep = "[".repeat(100_000);
    for format in [ToolFormat::Hermes, ToolFormat::Mistral, ToolFormat::Generic] {
        let text = format!("<tool_call>{deep}");
        assert!(parse_tool_calls(format, &text).tool_calls.is_empty());
    }
}
