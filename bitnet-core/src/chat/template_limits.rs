//! Caps on the sizes a chat template's filters may ask for.
//!
//! A template comes from the model file, so it is input like any other. minijinja's
//! `indent(n)`, `tojson(indent=n)` and the `format` filter and string method build a string
//! of the width they are given, with no cap: `{{ "x"|indent(99999999999) }}` asks the
//! allocator for 100 GB and aborts the process, and in `serve` one chat request would take
//! the server down. These wrappers refuse such widths with a render error and otherwise
//! call minijinja's own filters. (A template can still grow a string by concatenating it
//! with itself in a loop; minijinja keeps no memory budget to stop that, only the
//! instruction budget the template module sets.)

use minijinja::value::{Kwargs, Rest, StringInput, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, State};

/// The widest indentation or field a template may ask for: chat templates use 2 or 4.
pub const MAX_WIDTH: usize = 1024;

/// Puts the capped filters and string `format` method in `env` (after minijinja-contrib's
/// Python method callback, which they wrap).
pub fn install(env: &mut Environment<'_>) {
    env.add_filter("indent", indent);
    env.add_filter("tojson", tojson);
    env.add_filter("format", format);
    env.set_unknown_method_callback(|state, value, method, args| {
        if method == "format"
            && let Some(spec) = value.as_str()
        {
            check_format(spec)?;
        }
        minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
    });
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

/// Refuses a format string with a width or precision above [`MAX_WIDTH`]: any run of
/// digits past that (a literal number that large in a chat template's format string is
/// as unlikely as a field that wide is harmful).
fn check_format(spec: &str) -> Result<(), Error> {
    for run in spec.split(|c: char| !c.is_ascii_digit()) {
        let wide = run.len() > 4 || run.parse::<usize>().is_ok_and(|n| n > MAX_WIDTH);
        if wide {
            return Err(too_wide("format field", run));
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
        ] {
            let err = render(src).unwrap_err();
            assert!(
                err.to_string().contains("wider than a template may ask"),
                "{src}: {err}"
            );
        }
    }
}
