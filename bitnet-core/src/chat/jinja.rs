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
        tmpl.render(context! {
            messages => Value::from_serialize(&self.messages),
            tools => tools,
            add_generation_prompt => self.add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
        })
        .map_err(render_err)
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

    #[test]
    fn without_tools_the_template_sees_them_undefined() {
        let j = job(
            "{% if tools is defined %}tools{% else %}none{% endif %}",
            serde_json::json!([]),
        );
        assert_eq!(j.render().unwrap(), "none");
    }
}
