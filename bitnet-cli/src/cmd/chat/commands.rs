//! The chat's slash commands: parsing them, and `/set`'s settings.

use std::path::{Path, PathBuf};

use bitnet_core::sampling::SamplerConfig;

pub const HELP: &str = "\
commands:
  /help                 this list
  /clear                start a new conversation (the system prompt stays; the cache is dropped)
  /regen                generate the last reply again
  /undo                 drop the last exchange (and its tokens from the cache)
  /system TEXT          set the system prompt (/system alone removes it)
  /set NAME VALUE       temp, top-k, top-p, min-p, seed (-1: random), repeat-penalty,
                        max-tokens
  /show                 model, template, settings, context used
  /show info            architecture, parameters, weight types, context, template
  /show template        the chat template's text
  /show parameters      sampling settings, reply budget and stop texts
  /save FILE [--no-kv]  write the conversation as JSON messages (~/ is your home) and
                        its KV cache beside it as FILE.kv (--no-kv: the messages only)
  /load FILE            read a conversation saved with /save (and its KV, when it matches)
  /stats                figures after each reply: on/off
  /bye, /exit, /quit    quit (or Ctrl-D)
input:
  Enter sends; a line that is only \"\"\" starts and ends a multi-line message;
  pasted text may span lines; Up/Down recall earlier messages;
  Ctrl-C stops a reply (what came so far stays); Ctrl-D or /bye quits.";

/// A line the user typed, understood.
#[derive(Debug, PartialEq)]
pub enum Command {
    Help,
    Clear,
    Regen,
    Undo,
    System(Option<String>),
    Set(Setting),
    Show(Show),
    /// The file, and whether the KV rows go beside it.
    Save {
        path: PathBuf,
        kv: bool,
    },
    Load(PathBuf),
    Stats,
    Bye,
}

/// What `/show` shows (ollama's sub-commands).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Show {
    /// A few lines on everything.
    Overview,
    Info,
    Template,
    Parameters,
}

/// `/show`'s words after the command, as offered by Tab.
pub const SHOW_WORDS: &[&str] = &["info", "template", "parameters"];

/// `/set`'s names, as offered by Tab and listed in messages.
pub const SETTING_NAMES: &[&str] = &[
    "temp",
    "top-k",
    "top-p",
    "min-p",
    "seed",
    "repeat-penalty",
    "max-tokens",
];

/// Every command's name (aliases included), as offered by Tab.
pub const COMMAND_NAMES: &[&str] = &[
    "help", "clear", "regen", "undo", "system", "set", "show", "save", "load", "stats", "bye",
    "exit", "quit",
];

/// A `/set` change.
#[derive(Debug, PartialEq)]
pub enum Setting {
    Temp(f32),
    TopK(usize),
    TopP(f32),
    MinP(f32),
    /// `random`: picked for a `/set seed -1`, so the note can say which one to repeat it.
    Seed {
        value: u64,
        random: bool,
    },
    RepeatPenalty(f32),
    /// -1 = until the context is full.
    MaxTokens(Option<usize>),
}

/// `Ok(None)`: not a command (a message). `Err`: a command used wrongly, with the reason.
pub fn parse(line: &str) -> Result<Option<Command>, String> {
    let line = line.trim();
    let Some(rest) = line.strip_prefix('/') else {
        return Ok(None);
    };
    // "//text" sends "/text" as a message.
    if rest.starts_with('/') {
        return Ok(None);
    }
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((n, a)) => (n, a.trim()),
        None => (rest, ""),
    };
    let need = |what: &str| -> Result<(), String> {
        if arg.is_empty() {
            Err(format!("/{name} needs {what}"))
        } else {
            Ok(())
        }
    };
    let cmd = match name {
        "help" | "?" => Command::Help,
        "clear" => Command::Clear,
        "regen" => Command::Regen,
        "undo" => Command::Undo,
        "system" => Command::System((!arg.is_empty()).then(|| arg.to_owned())),
        "show" => Command::Show(match arg {
            "" => Show::Overview,
            "info" => Show::Info,
            "template" => Show::Template,
            "parameters" | "params" => Show::Parameters,
            other => {
                return Err(format!(
                    "/show {other}: say /show, or /show {}",
                    SHOW_WORDS.join(", /show ")
                ));
            }
        }),
        "stats" => Command::Stats,
        "bye" | "quit" | "exit" => Command::Bye,
        "save" => {
            let (arg, kv) = match arg.strip_suffix("--no-kv") {
                Some(rest) if rest.is_empty() || rest.ends_with(char::is_whitespace) => {
                    (rest.trim_end(), false)
                }
                _ => (arg, true),
            };
            if arg.is_empty() {
                return Err("/save needs a file name".into());
            }
            Command::Save {
                path: expand_home(arg, std::env::var_os("HOME"))?,
                kv,
            }
        }
        "load" => {
            need("a file name")?;
            Command::Load(expand_home(arg, std::env::var_os("HOME"))?)
        }
        "set" => Command::Set(parse_setting(arg)?),
        _ => {
            return Err(format!(
                "unknown command /{name} (/help lists them; //text sends \"/text\")"
            ));
        }
    };
    Ok(Some(cmd))
}

fn parse_setting(arg: &str) -> Result<Setting, String> {
    let mut it = arg.split_whitespace();
    let (Some(name), Some(value), None) = (it.next(), it.next(), it.next()) else {
        return Err(format!(
            "usage: /set NAME VALUE ({})",
            SETTING_NAMES.join(", ")
        ));
    };
    // `above`: the lower bound itself is refused (the sampler refuses top-p 0 and a repeat
    // penalty of 0), and the message says so.
    let float_in = |lo: f32, hi: f32, above: bool| -> Result<f32, String> {
        match value.parse::<f32>() {
            Ok(v) if v.is_finite() && (lo..=hi).contains(&v) && !(above && v == lo) => Ok(v),
            _ if above => Err(format!(
                "{name} must be a number above {lo} and at most {hi}, not {value:?}"
            )),
            _ => Err(format!(
                "{name} must be a number from {lo} to {hi}, not {value:?}"
            )),
        }
    };
    let float = |lo: f32, hi: f32| float_in(lo, hi, false);
    let int = || -> Result<u64, String> {
        value
            .parse::<u64>()
            .map_err(|_| format!("{name} must be a whole number >= 0, not {value:?}"))
    };
    Ok(match name.replace('_', "-").as_str() {
        "temp" | "temperature" => Setting::Temp(float(0.0, 100.0)?),
        "top-k" => Setting::TopK(int()? as usize),
        "top-p" => Setting::TopP(float_in(0.0, 1.0, true)?),
        "min-p" => Setting::MinP(float(0.0, 1.0)?),
        "seed" if value == "-1" => Setting::Seed {
            value: random_seed(),
            random: true,
        },
        "seed" => Setting::Seed {
            value: int().map_err(|e| format!("{e} (or -1: a random one)"))?,
            random: false,
        },
        "repeat-penalty" => Setting::RepeatPenalty(float_in(0.0, 100.0, true)?),
        "max-tokens" | "n-predict" | "n" => {
            if value == "-1" {
                Setting::MaxTokens(None)
            } else {
                match int()? {
                    0 => return Err("max-tokens must be at least 1 (or -1: no limit)".into()),
                    n => Setting::MaxTokens(Some(n as usize)),
                }
            }
        }
        _ => {
            return Err(format!("no setting {name:?}: {}", SETTING_NAMES.join(", ")));
        }
    })
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Temp(v) => write!(f, "temp = {v}"),
            Setting::TopK(v) => write!(f, "top-k = {v}"),
            Setting::TopP(v) => write!(f, "top-p = {v}"),
            Setting::MinP(v) => write!(f, "min-p = {v}"),
            Setting::Seed {
                value,
                random: false,
            } => write!(f, "seed = {value}"),
            Setting::Seed {
                value,
                random: true,
            } => write!(
                f,
                "seed = {value}, picked at random: /set seed {value} repeats it"
            ),
            Setting::RepeatPenalty(v) => write!(f, "repeat-penalty = {v}"),
            Setting::MaxTokens(Some(v)) => write!(f, "max-tokens = {v}"),
            Setting::MaxTokens(None) => write!(f, "max-tokens = no limit"),
        }
    }
}

/// A seed that differs between calls and runs: the standard library's random hashing keys
/// (fresh per process, stepped per call) over the clock.
fn random_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

/// `~` or `~/...` at the start of a path typed in a command means the home directory, as a
/// shell would read it (the line never passes through one); `~user` is left as typed.
pub fn expand_home(arg: &str, home: Option<std::ffi::OsString>) -> Result<PathBuf, String> {
    let rest = match arg.strip_prefix('~') {
        Some("") => "",
        Some(r) if r.starts_with('/') => r.trim_start_matches('/'),
        _ => return Ok(PathBuf::from(arg)),
    };
    match home.filter(|h| !h.is_empty()) {
        Some(h) if rest.is_empty() => Ok(PathBuf::from(h)),
        Some(h) => Ok(Path::new(&h).join(rest)),
        None => Err(format!(
            "{arg}: HOME is not set, so ~ means no directory; give the path in full"
        )),
    }
}

/// Applies a `/set` to the sampler settings and reply limit.
pub fn apply(s: &Setting, sampler: &mut SamplerConfig, max_tokens: &mut usize) {
    match *s {
        Setting::Temp(v) => sampler.temperature = v,
        Setting::TopK(v) => sampler.top_k = v,
        Setting::TopP(v) => sampler.top_p = v,
        Setting::MinP(v) => sampler.min_p = v,
        Setting::Seed { value, .. } => sampler.seed = value,
        Setting::RepeatPenalty(v) => sampler.repeat_penalty = v,
        Setting::MaxTokens(v) => *max_tokens = v.unwrap_or(usize::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_and_refuses_bad_ones() {
        assert_eq!(parse("hello"), Ok(None));
        assert_eq!(parse("//etc/passwd"), Ok(None));
        assert_eq!(parse(" /regen "), Ok(Some(Command::Regen)));
        assert_eq!(
            parse("/save a b.json --no-kv"),
            Ok(Some(Command::Save {
                path: "a b.json".into(),
                kv: false
            }))
        );
        assert_eq!(
            parse("/save x--no-kv"),
            Ok(Some(Command::Save {
                path: "x--no-kv".into(),
                kv: true
            }))
        );
        assert!(parse("/save --no-kv").unwrap_err().contains("file name"));
        assert_eq!(parse("/system"), Ok(Some(Command::System(None))));
        assert_eq!(
            parse("/system Be brief.  "),
            Ok(Some(Command::System(Some("Be brief.".into()))))
        );
        assert_eq!(
            parse("/set temp 0.2"),
            Ok(Some(Command::Set(Setting::Temp(0.2))))
        );
        assert_eq!(
            parse("/set max_tokens -1"),
            Ok(Some(Command::Set(Setting::MaxTokens(None))))
        );
        assert!(parse("/set temp hot").unwrap_err().contains("temp"));
        assert!(parse("/set top-p 2").is_err());
        for bad in ["/set top-p 0", "/set repeat-penalty 0"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains("above 0"), "{bad}: {err}");
        }
        assert!(parse("/set top-p 1").is_ok() && parse("/set temp 0").is_ok());
        assert!(parse("/set temp NaN").is_err());
        assert!(parse("/set").is_err());
        assert!(parse("/save").unwrap_err().contains("file"));
        assert!(parse("/frobnicate").unwrap_err().contains("/help"));
    }

    #[test]
    fn a_leading_tilde_is_the_home_directory() {
        let home = Some(std::ffi::OsString::from("/home/ann"));
        let exp = |a: &str| expand_home(a, home.clone());
        assert_eq!(exp("~/c.json"), Ok(PathBuf::from("/home/ann/c.json")));
        assert_eq!(exp("~"), Ok(PathBuf::from("/home/ann")));
        for literal in ["c~.json", "~ann/c.json", "/tmp/~/c.json"] {
            assert_eq!(exp(literal), Ok(PathBuf::from(literal)));
        }
        let err = expand_home("~/c.json", None).unwrap_err();
        assert!(err.contains("HOME is not set"), "{err}");
        assert_eq!(expand_home("c.json", None), Ok(PathBuf::from("c.json")));
    }

    #[test]
    fn a_seed_of_minus_one_is_picked_at_random_and_named() {
        let Ok(Some(Command::Set(s @ Setting::Seed { random: true, .. }))) = parse("/set seed -1")
        else {
            panic!("/set seed -1 is a random seed");
        };
        let Setting::Seed { value, .. } = s else {
            unreachable!()
        };
        assert!(s.to_string().contains(&format!("/set seed {value}")), "{s}");
        assert!(parse("/set seed -2").unwrap_err().contains("-1"));
    }

    #[test]
    fn settings_apply() {
        let mut s = SamplerConfig::default();
        let mut n = 10;
        apply(&Setting::TopK(3), &mut s, &mut n);
        apply(&Setting::MaxTokens(None), &mut s, &mut n);
        assert_eq!((s.top_k, n), (3, usize::MAX));
    }
}
