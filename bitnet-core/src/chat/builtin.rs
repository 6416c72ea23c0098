//! Built-in chat templates for the families we run, for files that carry none or when the
//! user picks one (`--chat-template NAME`). Each is our own Jinja, written to give exactly
//! the text the family's published template gives (the tests hold the expected strings,
//! rendered from the published sources with Hugging Face's settings). Each also names the
//! text that ends an assistant turn, a stop string for files whose vocabulary does not
//! mark it as end-of-generation.

/// A built-in template.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinTemplate {
    pub name: &'static str,
    /// Which models use it.
    pub about: &'static str,
    pub source: &'static str,
    /// Text that ends an assistant turn (a stop string besides the end-of-generation tokens).
    pub stop: &'static [&'static str],
}

/// Every built-in template; the first that a file's own template looks like is not
/// guessed: a file without a template gets `plain` unless the user names one.
pub const BUILTIN_TEMPLATES: &[BuiltinTemplate] = &[
    BuiltinTemplate {
        name: "bitnet",
        about: "BitNet b1.58 2B-4T (microsoft/bitnet-b1.58-2B-4T): \"User: ...<|eot_id|>Assistant: \"",
        source: "{%- for m in messages -%}\
                 {{- m.role | capitalize ~ ': ' ~ m.content | trim ~ '<|eot_id|>' -}}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}",
        stop: &["<|eot_id|>"],
    },
    BuiltinTemplate {
        name: "llama3",
        about: "Llama 3 / 3.x Instruct (and Llama3-8B-1.58)",
        source: "{%- for m in messages -%}\
                 {%- if loop.first -%}{{- bos_token -}}{%- endif -%}\
                 {{- '<|start_header_id|>' ~ m.role ~ '<|end_header_id|>\\n\\n' ~ m.content | trim ~ '<|eot_id|>' -}}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}\
                 {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\
                 {%- endif -%}",
        stop: &["<|eot_id|>"],
    },
    BuiltinTemplate {
        name: "llama2",
        about: "Llama 2 Chat: \"<s>[INST] <<SYS>>...<</SYS>> ... [/INST]\"",
        source: "{%- if messages and messages[0].role == 'system' -%}\
                 {%- set system = messages[0].content -%}{%- set turns = messages[1:] -%}\
                 {%- else -%}\
                 {%- set system = none -%}{%- set turns = messages -%}\
                 {%- endif -%}\
                 {%- for m in turns -%}\
                 {%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}\
                 {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}\
                 {%- endif -%}\
                 {%- if loop.first and system is not none -%}\
                 {%- set text = '<<SYS>>\\n' ~ system ~ '\\n<</SYS>>\\n\\n' ~ m.content -%}\
                 {%- else -%}{%- set text = m.content -%}{%- endif -%}\
                 {%- if m.role == 'user' -%}{{- bos_token ~ '[INST] ' ~ text | trim ~ ' [/INST]' -}}\
                 {%- elif m.role == 'assistant' -%}{{- ' ' ~ text | trim ~ ' ' ~ eos_token -}}\
                 {%- endif -%}\
                 {%- endfor -%}",
        stop: &["[INST]"],
    },
    BuiltinTemplate {
        name: "chatml",
        about: "ChatML: \"<|im_start|>user\\n...<|im_end|>\" (Qwen, OpenHermes, many fine-tunes)",
        source: "{%- for m in messages -%}\
                 {{- '<|im_start|>' ~ m.role ~ '\\n' ~ m.content ~ '<|im_end|>\\n' -}}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
        stop: &["<|im_end|>"],
    },
    BuiltinTemplate {
        name: "falcon3",
        about: "Falcon3 Instruct (and Falcon3-1.58bit): \"<|user|>\\n...\\n<|assistant|>\\n\"",
        source: "{%- for m in messages -%}\
                 {%- if m.role == 'assistant' -%}\
                 {{- '<|assistant|>\\n' ~ m.content ~ eos_token ~ ('' if loop.last else '\\n') -}}\
                 {%- else -%}\
                 {{- '<|' ~ m.role ~ '|>\\n' ~ m.content ~ '\\n' -}}\
                 {%- endif -%}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}",
        stop: &["<|user|>"],
    },
    BuiltinTemplate {
        name: "zephyr",
        about: "Zephyr: \"<|user|>\\n...</s>\\n<|assistant|>\\n\"",
        source: "{%- for m in messages -%}\
                 {{- '<|' ~ m.role ~ '|>\\n' ~ m.content ~ eos_token ~ '\\n' -}}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}",
        stop: &["<|user|>"],
    },
    BuiltinTemplate {
        name: "plain",
        about: "base models without a chat format: \"User: ...\\nAssistant:\"",
        source: "{%- for m in messages -%}\
                 {%- if m.role == 'system' -%}{{- m.content | trim ~ '\\n\\n' -}}\
                 {%- else -%}{{- m.role | capitalize ~ ': ' ~ m.content | trim ~ '\\n' -}}\
                 {%- endif -%}\
                 {%- endfor -%}\
                 {%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}",
        stop: &["\nUser:", "\nSystem:"],
    },
];

impl BuiltinTemplate {
    /// The built-in family a model file's own Jinja template belongs to, told by the marker
    /// texts each family's published template writes (a file's template is never our Jinja,
    /// so the sources themselves never match). Used to name a file's template for the user,
    /// never to replace it: `None` for a template no family's markers fit.
    pub fn family_of(source: &str) -> Option<&'static BuiltinTemplate> {
        let has = |marker: &str| source.contains(marker);
        let name = if has("<|start_header_id|>") && has("<|eot_id|>") {
            "llama3"
        } else if has("<|im_start|>") && has("<|im_end|>") {
            "chatml"
        } else if has("[INST]") && has("<<SYS>>") {
            "llama2"
        } else if has("<|user|>") && has("<|assistant|>") && !has("<|end|>") {
            // Both families write these; Falcon3's published template also handles tools.
            if has("tools") { "falcon3" } else { "zephyr" }
        } else if has("Assistant: ") && has("<|eot_id|>") {
            "bitnet"
        } else {
            return None;
        };
        builtin(name)
    }
}

/// The built-in template called `name` (case-insensitive; `llama-3`, `llama-2` and
/// `bitnet-b1.58` are accepted too).
pub fn builtin(name: &str) -> Option<&'static BuiltinTemplate> {
    let n = name.trim().to_ascii_lowercase();
    let n = match n.as_str() {
        "llama-3" | "llama3.1" | "llama-3.1" => "llama3",
        "llama-2" => "llama2",
        "bitnet-b1.58" | "bitnet-25" | "bitnet2b" => "bitnet",
        "falcon-3" => "falcon3",
        other => other,
    };
    BUILTIN_TEMPLATES.iter().find(|t| t.name == n)
}

/// The built-in template names, comma-separated (for messages and `--help`).
pub fn builtin_names() -> String {
    BUILTIN_TEMPLATES
        .iter()
        .map(|t| t.name)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_template_is_named_by_its_familys_markers() {
        // Abridged from each family's published chat_template (the parts with the markers).
        let published = [
            (
                "llama3",
                "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}",
            ),
            (
                "chatml",
                "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}",
            ),
            (
                "llama2",
                "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}",
            ),
            (
                "zephyr",
                "{% if message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}",
            ),
            (
                "falcon3",
                "{% if tools %}{{ '<|system|>\n' + message['content'] }}{% endif %}{{ '<|user|>\n' + message['content'] + '\n' }}{{ '<|assistant|>\n' }}",
            ),
            (
                "bitnet",
                "{% for message in messages %}{{ message['role'] | capitalize + ': ' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant: ' }}{% endif %}",
            ),
        ];
        for (family, source) in published {
            let got = BuiltinTemplate::family_of(source).map(|f| f.name);
            assert_eq!(got, Some(family), "{source}");
        }
        assert!(BuiltinTemplate::family_of("{{ messages[0].content }}").is_none());
        // Phi-3 writes <|user|> and <|assistant|> too, but ends turns with <|end|>.
        let phi3 = "{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}";
        assert!(BuiltinTemplate::family_of(phi3).is_none());
    }
}
