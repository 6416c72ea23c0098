//! One render of a chat template, as data ([`RenderJob`]), and where it runs
//! ([`TemplateRenderer`]).
//!
//! A render is set up as Hugging Face's `apply_chat_template` does (`trim_blocks`,
//! `lstrip_blocks`, Python string methods, `raise_exception`, `strftime_now`, `tojson`), with
//! an instruction budget (fuel), a recursion limit and capped filter widths
//! ([`super::template_limits`]). What it cannot bound in this process is memory: minijinja
//! keeps no memory budget, and its string concatenation (`~`, `+`), block captures and macro
//! calls have no hook to count bytes through, so a template that doubles a string in a loop
//! grows until the allocator fails, and an allocation failure aborts the process. A job is
//! plain data (it serializes) so that a program which renders templates it does not trust
//! can run [`RenderJob::render`] in a process of its own under a memory limit, by setting a
//! [`TemplateRenderer`] on the template; `bitnet` does so for templates read from files.

use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value, context};
use serde::{Deserialize, Serialize};

use super::error::ChatError;
use super::time;

/// Instructions one render may execute: a real template needs a few dozen per message.
const FUEL: u64 = 20_000_000;

/// The longest text one render may write: a prompt past this is no prompt a model takes.
pub const MAX_RENDER_BYTES: usize = 16 << 20;

/// The render's output, refusing to grow past [`MAX_RENDER_BYTES`].
struct Bounded {
    out: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > MAX_RENDER_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("render output cap"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Everything one render needs: the template, its special-token texts and its inputs, the
/// messages and tools in the shape the template is given them (JSON, in order).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RenderJob {
    /// The template's name in messages.
    pub name: String,
    pub source: String,
    pub bos_token: String,
    pub eos_token: String,
    pub messages: serde_json::Value,
    /// `None` leaves `tools` undefined, as Hugging Face does without tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<serde_json::Value>,
    pub add_generation_prompt: bool,
}

impl RenderJob {
    /// Renders the job in this process.
    pub fn render(&self) -> Result<String, ChatError> {
        let env = environment();
        let render_err = |e: minijinja::Error| ChatError::Render {
            name: self.name.clone(),
            detail: describe(&e),
        };
        let tmpl = env.template_from_str(&self.source).map_err(render_err)?;
        let tools = self
            .tools
            .as_ref()
            .map_or(Value::UNDEFINED, Value::from_serialize);
        let mut out = Bounded {
            out: Vec::new(),
            overflowed: false,
        };
        let written = tmpl.render_captured_to(
            context! {
                messages => Value::from_serialize(&self.messages),
                tools => tools,
                add_generation_prompt => self.add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            },
            &mut out,
        );
        if out.overflowed {
            return Err(ChatError::Render {
                name: self.name.clone(),
                detail: format!(
                    "its output passed {} MiB (a sequence or string repeated without end?)",
                    MAX_RENDER_BYTES >> 20
                ),
            });
        }
        written.map_err(render_err)?;
        // minijinja writes whole `str`s: the bytes are UTF-8.
        String::from_utf8(out.out).map_err(|_| ChatError::Render {
            name: self.name.clone(),
            detail: "its output is not UTF-8".into(),
        })
    }
}

/// Where a template's renders run when not in this process: set on a template with
/// [`super::ChatTemplate::set_renderer`]. The errors it returns are the template's: a
/// renderer that runs the job elsewhere reports a render that failed there as
/// [`ChatError::Render`], and its own limits as [`ChatError::OutOfMemory`] and
/// [`ChatError::TimedOut`].
pub trait TemplateRenderer: Send + Sync + std::fmt::Debug {
    fn render(&self, job: &RenderJob) -> Result<String, ChatError>;
}

/// The environment every render (and every parse) runs in.
pub(super) fn environment<'source>() -> Environment<'source> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(64);
    super::template_limits::install(&mut env);
    env.add_function("raise_exception", |msg: String| -> Result<Value, _> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", |fmt: String| time::strftime_now(&fmt));
    env
}

/// The error and where it happened, on one line.
pub(super) fn describe(e: &minijinja::Error) -> String {
    let mut s = match e.kind() {
        ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid operation").to_owned(),
        ErrorKind::OutOfFuel => "it ran too long (a loop that does not end?)".to_owned(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        s.push_str(&format!(" (line {line})"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(source: &str, messages: serde_json::Value) -> RenderJob {
        RenderJob {
            name: "t".into(),
            source: source.into(),
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            messages,
            tools: None,
            add_generation_prompt: true,
        }
    }

    #[test]
    fn a_job_survives_the_trip_through_json_and_renders_the_same() {
        let mut j = job(
            "{{ bos_token }}{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}{% endfor %}\
             {{ tools|tojson }}{% if add_generation_prompt %}>{% endif %}",
            serde_json::json!([{"role": "user", "content": "Hi", "zeta": 1, "alpha": null}]),
        );
        j.tools = Some(serde_json::json!([{"type": "function", "function": {"name": "f"}}]));
        let back: RenderJob = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        assert_eq!(back, j);
        // Keys keep their order (templates that print a dict print it as Python would).
        let want = r#"<s>role=user;content=Hi;zeta=1;alpha=None;[{"type":"function","function":{"name":"f"}}]>"#;
        assert_eq!(j.render().unwrap(), want);
        assert_eq!(back.render().unwrap(), want);
    }

    /// Fuzz finding (chat_template, 2026-12-07): `{{7777777772*m[::]}}` printed the messages
    /// repeated 7.8 billion times (a lazy sequence: no fuel is spent per item) and ran past
    /// the fuzzer's 10 s. Printing, joining or listing more than `MAX_ITEMS` is refused, and
    /// the output is capped.
    #[test]
    fn printing_a_sequence_repeated_billions_of_times_is_refused_quickly() {
        let t0 = std::time::Instant::now();
        let j = job(
            "{% set m = messages %}{{7777777772*m[::]}}",
            serde_json::json!([{"role": "user", "content": "Hi"}]),
        );
        let e = j.render().unwrap_err().to_string();
        assert!(e.contains("sequence of 7777777772 items"), "{e}");
        for joined in [
            "{{ (messages * 7777777772)|join(',') }}",
            "{{ (messages * 7777777772)|list }}",
        ] {
            let e = job(joined, serde_json::json!([{"content": "x"}]))
                .render()
                .unwrap_err();
            assert!(e.to_string().contains("items is longer"), "{joined}: {e}");
        }
        // The fuzzer's own input: `m` is undefined, so `m[::]` is empty, and the empty
        // sequence repeated 7.8 billion times prints as one: `[]`, at once.
        let empty = job("{{7777777772*m[::]}}en", serde_json::json!([]));
        assert_eq!(empty.render().unwrap(), "[]en");
        let both = "{{ (7777777772*m[::])|join(',') }}|{{ (7777777772*m[::])|list }}";
        assert_eq!(job(both, serde_json::json!([])).render().unwrap(), "|[]");
        // A long string printed many times in a loop meets the output cap.
        let big = job(
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
            serde_json::json!([]),
        );
        let e = big.render().unwrap_err().to_string();
        assert!(e.contains("output passed 16 MiB"), "{e}");
        assert!(t0.elapsed().as_secs() < 5, "{:?}", t0.elapsed());
        // Ordinary output is unchanged.
        let ok = job(
            "{{ messages[0].content * 3 }}",
            serde_json::json!([{"content": "ab"}]),
        );
        assert_eq!(ok.render().unwrap(), "ababab");
    }

    #[test]
    fn without_tools_the_template_sees_them_undefined() {
        let j = job(
            "{% if tools is defined %}tools{% else %}none{% endif %}",
            serde_json::json!([]),
        );
        assert_eq!(j.render().unwrap(), "none");
    }
}
