//! Caps on a chat template: the size of a template file, and the sizes its filters may ask
//! for.
//!
//! A template comes from the model file, so it is input like any other. Some of minijinja's
//! filters build what they are asked for with no cap: `indent(n)`, `tojson(indent=n)` and
//! the `format` filter and string method a string of width `n`, `batch(n)` and `slice(n)` a
//! list of `n` entries. `{{ "x"|indent(99999999999) }}` asks the allocator for 100 GB and
//! aborts the process, and in `serve` one chat request would take the server down. These
//! wrappers refuse such sizes with a render error and otherwise call minijinja's own
//! filters. (A template can still grow a string by concatenating it with itself in a loop
//! or a recursive macro: minijinja keeps no memory budget to stop that in this process, only
//! the instruction budget and recursion limit [`super::jinja`] sets; a program renders such
//! templates under a memory limit through a [`super::TemplateRenderer`].)

use minijinja::value::{Kwargs, Rest, StringInput, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// The largest template file read (real ones are a few KiB; the longest known, under 64 KiB).
pub const MAX_TEMPLATE_BYTES: u64 = 4 << 20;

/// The widest indentation or field a template may ask for: chat templates use 2 or 4.
pub const MAX_WIDTH: usize = 1024;

/// Puts the capped filters and string `format` method in `env` (after minijinja-contrib's
/// Python method callback, which they wrap).
pub fn install(env: &mut Environment<'_>) {
    // A sequence times an integer is repeated lazily, and printing it or joining it walks
    // every item in Rust, spending no fuel: `{{ messages * 7777777772 }}` ran for minutes.
    // An empty sequence repeated n times is walked n times over nothing: an empty one is
    // answered here without walking it.
    env.set_formatter(|out, state, value| {
        if check_items(value)? {
            return out
                .write_str("[]")
                .map_err(|_| Error::new(ErrorKind::WriteFailure, "writing []"));
        }
        minijinja::escape_formatter(out, state, value)
    });
    env.add_filter(
        "join",
        |state: &State, value: &Value, joiner: Option<StringInput<'_>>| {
            if check_items(value)? {
                return Ok(Value::from(""));
            }
            minijinja::filters::join(state, value, joiner)
        },
    );
    env.add_filter("list", |state: &State, value: Value| {
        if check_items(&value)? {
            return Ok(Value::from(Vec::<Value>::new()));
        }
        minijinja::filters::list(state, value)
    });
    env.add_filter("indent", indent);
    env.add_filter("tojson", tojson);
    env.add_filter("format", format);
    env.add_filter("batch", batch);
    env.add_filter("slice", slice);
    env.set_unknown_method_callback(|state, value, method, args| {
        if method == "format"
            && let Some(spec) = value.as_str()
        {
            check_format(spec)?;
        }
        minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
    });
}

/// The most items a template may print, join or list at once (a chat has hundreds).
pub const MAX_ITEMS: usize = 1 << 20;

/// Refuses a sequence of more than [`MAX_ITEMS`]; `Ok(true)` for an empty one (which the
/// caller answers without walking it).
fn check_items(value: &Value) -> Result<bool, Error> {
    match value.kind() {
        ValueKind::Seq | ValueKind::Iterable => match value.len() {
            Some(n) if n > MAX_ITEMS => Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "a sequence of {n} items is longer than a template may print (at most \
                     {MAX_ITEMS})"
                ),
            )),
            Some(0) => Ok(true),
            _ => Ok(false),
        },
        _ => Ok(false),
    }
}

fn too_wide(what: &str, n: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{what} {n} is wider than a template may ask for (at most {MAX_WIDTH})"),
    )
}

fn indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let asked = match width {
        Some(w) => Some(w),
        None => kwargs.peek::<Option<usize>>("width")?,
    };
    if let Some(w) = asked.filter(|&w| w > MAX_WIDTH) {
        return Err(too_wide("indent", w));
    }
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let asked = match &indent {
        Some(v) => Some(v.clone()),
        None => kwargs.peek::<Option<Value>>("indent")?,
    };
    // `true`/`false` mean 2 and none; a number is the width.
    let width = match asked {
        Some(v) if v.kind() == ValueKind::Bool => None,
        Some(v) => usize::try_from(v).ok(),
        None => None,
    };
    if let Some(w) = width.filter(|&w| w > MAX_WIDTH) {
        return Err(too_wide("tojson indent", w));
    }
    minijinja::filters::tojson(value, indent, kwargs)
}

fn format(state: &State, spec: &Value, args: Rest<Value>) -> Result<Value, Error> {
    if let Some(s) = spec.as_str() {
        check_format(s)?;
    }
    minijinja::filters::format(state, spec, args)
}

fn batch(state: &State, value: Value, count: usize, fill: Option<Value>) -> Result<Value, Error> {
    if count > MAX_WIDTH {
        return Err(too_wide("batch size", count));
    }
    minijinja::filters::batch(state, value, count, fill)
}

fn slice(state: &State, value: Value, count: usize, fill: Option<Value>) -> Result<Value, Error> {
    if count > MAX_WIDTH {
        return Err(too_wide("slice count", count));
    }
    minijinja::filters::slice(state, value, count, fill)
}

/// Refuses a format string one of whose fields asks for a width or precision above
/// [`MAX_WIDTH`]: the digits of a printf field (`%-08.3f`) or of the spec after the colon
/// of a `{...}` field (`{:>12}`, `{0:.3}`). Literal text, numbers in it included, passes.
fn check_format(spec: &str) -> Result<(), Error> {
    let b = spec.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let field = match b[i] {
            b'%' if b.get(i + 1) == Some(&b'%') => {
                i += 2;
                continue;
            }
            // Flags, width, precision and length up to the conversion letter.
            b'%' => {
                let end = (i + 1..b.len())
                    .find(|&j| b[j].is_ascii_alphabetic() && !b"hlLqjzt".contains(&b[j]))
                    .unwrap_or(b.len());
                let field = &spec[i + 1..end];
                i = end;
                field
            }
            b'{' if b.get(i + 1) == Some(&b'{') => {
                i += 2;
                continue;
            }
            // The format spec after the field name's colon.
            b'{' => {
                let end = spec[i..].find('}').map_or(b.len(), |k| i + k);
                let inner = &spec[i + 1..end];
                i = end;
                inner.split_once(':').map_or("", |(_, spec)| spec)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        for run in field.split(|c: char| !c.is_ascii_digit()) {
            if run.len() > 4 || run.parse::<usize>().is_ok_and(|n| n > MAX_WIDTH) {
                return Err(too_wide("format field width", run));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str) -> Result<String, Error> {
        let mut env = Environment::new();
        install(&mut env);
        env.render_str(src, minijinja::context! { m => vec![1, 2] })
    }

    #[test]
    fn ordinary_widths_render_as_minijinja_renders_them() {
        assert_eq!(render(r#"{{ "a\nb"|indent(2) }}"#).unwrap(), "a\n  b");
        assert_eq!(
            render(r#"{{ "a\nb"|indent(width=3, first=true) }}"#).unwrap(),
            "   a\n   b"
        );
        assert_eq!(render("{{ m|tojson }}").unwrap(), "[1,2]");
        assert_eq!(
            render("{{ m|tojson(indent=2) }}").unwrap(),
            "[\n  1,\n  2\n]"
        );
        assert_eq!(render("{{ m|tojson(true) }}").unwrap(), "[\n  1,\n  2\n]");
        assert_eq!(render(r#"{{ "%5d|"|format(42) }}"#).unwrap(), "   42|");
        assert_eq!(render(r#"{{ "{:>4}|".format("a") }}"#).unwrap(), "   a|");
        assert_eq!(
            render(r#"{{ "x".upper() }}"#).unwrap(),
            "X",
            "other methods pass"
        );
        // Numbers in the literal text are not widths.
        assert_eq!(
            render(r#"{{ "%s of 2048, 100%%"|format(5) }}"#).unwrap(),
            "5 of 2048, 100%"
        );
        assert_eq!(
            render(r#"{{ "{} of 2048 {{x}}".format(5) }}"#).unwrap(),
            "5 of 2048 {x}"
        );
        assert_eq!(render("{{ m|batch(1)|list|length }}").unwrap(), "2");
        assert_eq!(render("{{ m|slice(2)|list|length }}").unwrap(), "2");
    }

    #[test]
    fn huge_widths_are_refused_not_allocated() {
        for src in [
            r#"{{ "x"|indent(99999999999) }}"#,
            r#"{{ "x"|indent(width=1025) }}"#,
            "{{ m|tojson(indent=99999999999) }}",
            "{{ m|tojson(99999999999) }}",
            r#"{{ "%99999999999d"|format(1) }}"#,
            r#"{{ "%.99999999f"|format(1.5) }}"#,
            r#"{{ "{:>99999999999}".format("a") }}"#,
            r#"{{ "{0:.5000}".format(1.5) }}"#,
            r#"{{ "a %-099999d b"|format(1) }}"#,
            "{{ m|batch(99999999999) }}",
            "{{ m|slice(1000000000) }}",
        ] {
            let err = render(src).unwrap_err();
            assert!(
                err.to_string().contains("wider than a template may ask"),
                "{src}: {err}"
            );
        }
    }
}
