//! llama.cpp's spellings of flags, where users' fingers already are. llama-cli writes many
//! flags with one dash and several letters (`-ctk`, `-sys`, `-ngl`), which clap's short
//! options cannot be: clap reads `-sys X` as `-s ys`, `-ngl 99` as `-n gl`. So before
//! parsing, the arguments are walked with the subcommand's own flag list (taken from clap,
//! so a flag's value, such as `-p -sys` or `-n -1`, is never touched): a spelling that means
//! the same thing here becomes our name for it, one with no meaning here is refused with
//! the reason, and any other single-dash word that clap would split into flags and a value
//! is refused instead of misparsed.

use std::ffi::OsString;

use clap::{Arg, Command};

/// llama.cpp's spelling -> our long flag (without its dashes). A spelling is rewritten only
/// on a subcommand that has the target and not the spelling itself (`bench -r` stays
/// llama-bench's repetitions).
const RENAMES: &[(&[&str], &str)] = &[
    (&["-ctk"], "cache-type-k"),
    (&["-ctv"], "cache-type-v"),
    (&["-np"], "parallel"),
    (&["-sys", "--system-prompt"], "system"),
    (&["-r", "--reverse-prompt"], "stop"),
    (&["--no-display-prompt"], "no-echo"),
    (&["-md"], "model-draft"),
    (&["-npl"], "npl"),
];

/// llama.cpp flags with no meaning here, and why; `{}` stands for the flag as typed.
const REFUSALS: &[(&[&str], &str)] = &[
    (
        &[
            "-ngl",
            "--n-gpu-layers",
            "--gpu-layers",
            "-ngld",
            "--n-gpu-layers-draft",
        ],
        "bitnet runs on the CPU: there are no GPU layers to offload; drop {}",
    ),
    (
        &[
            "-sm",
            "--split-mode",
            "-mg",
            "--main-gpu",
            "-ts",
            "--tensor-split",
            "-dev",
            "--device",
            "-nkvo",
            "--no-kv-offload",
            "-ot",
            "--override-tensor",
        ],
        "bitnet runs on the CPU: there is no GPU to place tensors on; drop {}",
    ),
    (
        &[
            "-cnv",
            "--conversation",
            "-i",
            "--interactive",
            "-if",
            "--interactive-first",
        ],
        "bitnet has a command per mode: `bitnet chat` is llama-cli's conversation, `bitnet \
         generate` continues a text; drop {}",
    ),
    (
        &["-no-cnv", "--no-conversation"],
        "bitnet has a command per mode: `bitnet generate` continues a text without a chat \
         template; drop {}",
    ),
    (
        &["-st", "--single-turn"],
        "`bitnet chat` answers piped input and quits (echo TEXT | bitnet chat -m FILE), or \
         sends the whole of -f FILE as one message; drop {}",
    ),
    (
        &["-sysf", "--system-prompt-file"],
        "give the file's text as the system prompt: --system \"$(cat FILE)\"",
    ),
    (
        &["-mli", "--multiline-input"],
        "chat always takes multi-line messages (a line \"\"\" opens and closes one, a paste \
         stays one message); drop {}",
    ),
    (
        &["-fa", "--flash-attn"],
        "bitnet has one attention path and no flash-attention switch; drop {}",
    ),
    (
        &["-ub", "--ubatch-size"],
        "bitnet has one batch size: -b (--batch-size)",
    ),
    (
        &["-tb", "--threads-batch"],
        "bitnet uses one thread count, -t, for the prompt and for generation",
    ),
    (
        &["-cb", "--cont-batching", "-nocb", "--no-cont-batching"],
        "`bitnet serve` always batches continuously; drop {}",
    ),
    (
        &[
            "--model-draft",
            "--lookup-ngram",
            "--draft-max",
            "--draft",
            "--draft-n",
            "--draft-min",
            "--draft-p-min",
            "--draft-fixed",
        ],
        "speculative decoding speeds up generation: generate, chat, serve and bench take it; \
         this command evaluates given tokens and proposes none (drop {})",
    ),
    (
        &["-hf", "-hfr", "--hf-repo", "-hff", "--hf-file"],
        "bitnet does not download models: download and convert one (README.md, \"Run a \
         real model\"), then give -m FILE.gguf",
    ),
];

/// `cli` with a line under each subcommand's help naming the llama.cpp spellings it takes
/// (they cannot be clap aliases: a short flag is one letter).
pub fn with_spellings_in_help(cli: Command) -> Command {
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    names.into_iter().fold(cli, |cli, name| {
        cli.mut_subcommand(name, |sub| {
            let taken: Vec<String> = RENAMES
                .iter()
                .filter_map(|(from, to)| {
                    let ours = find_flag(&sub, &format!("--{to}"))?.get_long()?;
                    let from: Vec<&str> = from
                        .iter()
                        .copied()
                        .filter(|f| find_flag(&sub, f).is_none())
                        .collect();
                    (!from.is_empty()).then(|| format!("  {} = --{ours}", from.join(", ")))
                })
                .collect();
            if taken.is_empty() {
                sub
            } else {
                sub.after_help(format!("llama.cpp's spellings:\n{}", taken.join("\n")))
            }
        })
    })
}

/// The arguments as clap should see them, or a sentence saying why one is refused.
/// `cli` is the whole command-line definition; `args` includes the program name.
pub fn rewrite(
    cli: &Command,
    args: impl IntoIterator<Item = OsString>,
) -> Result<Vec<OsString>, String> {
    let mut args: Vec<OsString> = args.into_iter().collect();
    let mut cli = cli.clone();
    cli.build();
    // The subcommand is the first word after the program name (`bitnet` itself has no
    // options but --help and --version).
    let Some((at, sub)) = args.iter().enumerate().skip(1).find_map(|(i, a)| {
        let name = a.to_str()?;
        if name.starts_with('-') {
            return None;
        }
        cli.find_subcommand(name).map(|s| (i, s.clone()))
    }) else {
        return Ok(args);
    };
    if args[1..at]
        .iter()
        .any(|a| a.to_str().is_some_and(|s| s.starts_with('-')))
    {
        // `bitnet --help chat` and the like: clap's own business.
        return Ok(args);
    }
    if sub
        .get_positionals()
        .any(|p| p.is_allow_hyphen_values_set())
    {
        // Its text may start with '-' (`bitnet tokenize -m F -hello`): words clap does not
        // know are that text, not misspelt flags.
        return Ok(args);
    }
    let name = sub.get_name().to_owned();
    let mut i = at + 1;
    while i < args.len() {
        let Some(word) = args[i].to_str().map(str::to_owned) else {
            i += 1;
            continue;
        };
        if word == "--" {
            break;
        }
        if !word.starts_with('-') || word == "-" {
            i += 1;
            continue;
        }
        let word = match respell(&sub, &name, &word)? {
            Some(ours) => {
                args[i] = ours.clone().into();
                ours
            }
            None => word,
        };
        i += 1 + values_after(&sub, &word, &args[i + 1..]);
    }
    Ok(args)
}

/// `word` (an option, not a value) in our spelling: `Some` when it was rewritten, `None`
/// when it stands as it is, an error when it is refused.
fn respell(sub: &Command, sub_name: &str, word: &str) -> Result<Option<String>, String> {
    let (flag, value) = match word.split_once('=') {
        Some((f, v)) => (f, Some(v)),
        None => (word, None),
    };
    if find_flag(sub, flag).is_some() {
        return Ok(None);
    }
    if let Some((_, to)) = RENAMES.iter().find(|(from, _)| from.contains(&flag)) {
        if find_flag(sub, &format!("--{to}")).is_none() {
            return Err(format!(
                "{flag} is llama.cpp's spelling of --{to}, which `bitnet {sub_name}` does not have \
                 (`bitnet {sub_name} --help` lists its flags)"
            ));
        }
        return Ok(Some(match value {
            Some(v) => format!("--{to}={v}"),
            None => format!("--{to}"),
        }));
    }
    if let Some((_, why)) = REFUSALS.iter().find(|(from, _)| from.contains(&flag)) {
        return Err(format!("{flag}: {}", why.replace("{}", flag)));
    }
    if let Some(split) = misread_word(sub, word) {
        let long = format!("-{word}");
        let hint = match find_flag(sub, &long) {
            Some(_) => format!("did you mean {long}?"),
            None => format!(
                "long flags take two dashes (`bitnet {sub_name} --help` lists them); to give a \
                 short flag a value, put a space between them"
            ),
        };
        return Err(format!(
            "{word} is not a flag of `bitnet {sub_name}`: it would be read as {split}; {hint}"
        ));
    }
    Ok(None)
}

/// For a single-dash word of several lowercase letters (`-sys`, `-ngl`) that is not a run of
/// our switches (`-vh`), how clap would read it (`-s ys`).
fn misread_word(sub: &Command, word: &str) -> Option<String> {
    let letters = word.strip_prefix('-')?;
    let mut chars = letters.chars();
    let first = chars.next()?;
    let word_like = first.is_ascii_lowercase()
        && letters.len() >= 2
        && letters.chars().all(|c| c.is_ascii_lowercase() || c == '-');
    if !word_like {
        return None;
    }
    let mut switches = String::new();
    for (at, c) in letters.char_indices() {
        match find_short(sub, c) {
            Some(arg) if takes_values(arg) => {
                let value = &letters[at + c.len_utf8()..];
                // Ending in a flag that takes the next word (`-vs 7`) is ours as typed.
                return (!value.is_empty()).then(|| format!("{switches}-{c} {value}"));
            }
            Some(_) => switches.push_str(&format!("-{c}, ")),
            // clap would stop at an unknown letter; the word is still not ours.
            None => return Some(format!("{switches}an unknown -{c}")),
        }
    }
    None
}

/// The argument a flag as typed names (`--top-k`, `-t`, an alias), if `sub` has it.
fn find_flag<'a>(sub: &'a Command, flag: &str) -> Option<&'a Arg> {
    if let Some(long) = flag.strip_prefix("--") {
        return sub.get_arguments().find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long))
        });
    }
    let short = flag.strip_prefix('-')?;
    let mut chars = short.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) => find_short(sub, c),
        _ => None,
    }
}

fn find_short(sub: &Command, c: char) -> Option<&Arg> {
    sub.get_arguments().find(|a| {
        a.get_short() == Some(c) || a.get_all_short_aliases().is_some_and(|al| al.contains(&c))
    })
}

fn takes_values(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values())
}

/// How many of the words after option `word` are its values: none when the value is
/// attached (`--temp=1`, `-n80`) or the option is a switch.
fn values_after(sub: &Command, word: &str, rest: &[OsString]) -> usize {
    let arg = if word.starts_with("--") {
        if word.contains('=') {
            return 0;
        }
        find_flag(sub, word)
    } else {
        // A run of short switches may end in one that takes the next word (`-vn 5`).
        let letters = &word[1..];
        let mut last = None;
        for (at, c) in letters.char_indices() {
            match find_short(sub, c) {
                Some(arg) if takes_values(arg) => {
                    if at + c.len_utf8() < letters.len() {
                        return 0;
                    }
                    last = Some(arg);
                    break;
                }
                Some(_) => {}
                None => return 0,
            }
        }
        last
    };
    let Some(arg) = arg else { return 0 };
    let Some(range) = arg.get_num_args() else {
        return 0;
    };
    // As clap takes them: a word starting with '-' is a value only where the option allows
    // it (`-p -text`, `-n -1`).
    let is_value = |w: &OsString| {
        w.to_str().is_some_and(|s| {
            !s.starts_with('-')
                || s == "-"
                || arg.is_allow_hyphen_values_set()
                || (arg.is_allow_negative_numbers_set() && s.parse::<f64>().is_ok())
        })
    };
    rest.iter()
        .take(range.max_values())
        .take_while(|w| is_value(w))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> Command {
        Command::new("bitnet").subcommand(
            Command::new("chat")
                .arg(Arg::new("model").short('m').long("model"))
                .arg(Arg::new("system").long("system"))
                .arg(Arg::new("stop").long("stop").allow_hyphen_values(true))
                .arg(
                    Arg::new("seed")
                        .short('s')
                        .long("seed")
                        .allow_negative_numbers(true),
                )
                .arg(
                    Arg::new("n")
                        .short('n')
                        .long("n-predict")
                        .allow_negative_numbers(true),
                )
                .arg(
                    Arg::new("prompt")
                        .short('p')
                        .long("prompt")
                        .allow_hyphen_values(true),
                )
                .arg(
                    Arg::new("verbose")
                        .short('v')
                        .action(clap::ArgAction::SetTrue),
                ),
        )
    }

    fn rewrite_strs(args: &[&str]) -> Result<Vec<String>, String> {
        rewrite(&cli(), args.iter().map(OsString::from))
            .map(|v| v.into_iter().map(|a| a.into_string().unwrap()).collect())
    }

    #[test]
    fn values_are_never_rewritten() {
        let args = [
            "bitnet", "chat", "-p", "-sys", "-s", "-1", "-n", "-1", "--stop", "-r", "-n80", "-vs",
            "7", "-m", "m.gguf", "--", "-ngl",
        ];
        // `-vs 7`: -v is a switch, -s takes the next word as its value.
        assert_eq!(rewrite_strs(&args).unwrap(), args);
    }

    #[test]
    fn spellings_become_ours_or_are_refused() {
        assert_eq!(
            rewrite_strs(&["bitnet", "chat", "-sys", "be brief", "-r=User:"]).unwrap(),
            ["bitnet", "chat", "--system", "be brief", "--stop=User:"]
        );
        let err = rewrite_strs(&["bitnet", "chat", "-ngl", "99"]).unwrap_err();
        assert!(err.contains("CPU"), "{err}");
        let err = rewrite_strs(&["bitnet", "chat", "-ctk", "q8_0"]).unwrap_err();
        assert!(err.contains("does not have"), "{err}");
        let err = rewrite_strs(&["bitnet", "chat", "-mx"]).unwrap_err();
        assert!(err.contains("-m x"), "{err}");
        // A value that may not start with '-' is not taken as one, by clap nor here.
        let err = rewrite_strs(&["bitnet", "chat", "-s", "-ngl"]).unwrap_err();
        assert!(err.contains("CPU"), "{err}");
        let err = rewrite_strs(&["bitnet", "chat", "-vq"]).unwrap_err();
        assert!(err.contains("-v, an unknown -q"), "{err}");
        let err = rewrite_strs(&["bitnet", "chat", "-seed", "1"]).unwrap_err();
        assert!(err.contains("-s eed; did you mean --seed?"), "{err}");
    }
}
