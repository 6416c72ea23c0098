//! `bitnet chat -m MODEL.gguf`: an interactive chat that streams its replies.
//!
//! The conversation is one sequence whose KV cache persists across turns, so a new turn
//! evaluates only its own tokens (`--verbose` or `/stats` shows how many). On a terminal it
//! reads with a line editor (history, multi-line input, paste) and Ctrl-C stops a reply
//! while keeping what came so far; with standard input piped it reads one message per line
//! (or the whole of `-f FILE` as one message) and prints replies with no colour or control
//! sequences, so scripts and tests can drive it. Where no one reads the reply at the
//! terminal that typed the message (input or output not a terminal), each turn is marked:
//! the message as `> ` lines before the reply, a blank line after it.

mod commands;
mod complete;
mod figures;
mod input;
mod quiet_tty;
mod reply;
mod saved_kv;
mod screen;
mod show;
mod slash;

use std::io::{self, IsTerminal};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::chat::{ChatSession, ChatTemplate, Conversation, Message, ReplySettings};
use bitnet_core::scheduler::{Scheduler, SchedulerOptions, default_reply_budget};

use crate::args::attn_entropy::AttnEntropyArgs;
use crate::args::context::ContextArgs;
use crate::args::grammar::GrammarArgs;
use crate::args::model::ModelArgs;
use crate::args::sampling::{SamplingArgs, ban_eog};
use crate::args::speculate::SpeculateArgs;
use crate::output::error_chain;
use crate::setup::Setup;
use crate::template_worker;
use commands::Command;
use input::{Input, Read};
use reply::reply;
use screen::Screen;
use slash::run_command;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The model to chat with: a GGUF file with a tokenizer (models/shakespeare.gguf is
    /// shipped).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// System prompt at the start of the conversation.
    #[arg(long)]
    pub system: Option<String>,
    #[arg(long = "chat-template", value_name = "NAME|FILE", help = crate::args::chat_template::help())]
    pub chat_template: Option<String>,
    /// Send the whole of FILE as one message ('-' = standard input), print the reply, quit.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tokens per reply at most. Default: an eighth of the context, at least 32 (32 on the
    /// shipped model's 256), so the conversation keeps room for its earlier turns; -1: until
    /// the model ends its turn or the context is full (older messages then make room for
    /// the next turn).
    #[arg(short = 'n', long = "n-predict", allow_negative_numbers = true)]
    pub n_predict: Option<i64>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Stop a reply when this text appears (repeatable), besides the template's own.
    #[arg(long = "stop", allow_hyphen_values = true)]
    pub stop: Vec<String>,
    /// Never end a reply with an end-of-generation token (replies run to -n or the
    /// context's end).
    #[arg(long)]
    pub ignore_eos: bool,
    /// After each reply, a line of figures (also toggled with /stats).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Keep the input history in memory only (no history file).
    #[arg(long)]
    pub no_history: bool,
    /// Every reply follows this grammar or schema.
    #[command(flatten)]
    pub grammar: GrammarArgs,
    #[command(flatten)]
    pub clean: crate::args::clean_input::CleanInputArgs,
    #[command(flatten)]
    pub context: ContextArgs,
    #[command(flatten)]
    pub attn_entropy: AttnEntropyArgs,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
    #[command(flatten)]
    pub model_args: ModelArgs,
}

pub fn run(args: Args) -> Result<()> {
    // `None`: the default budget, once the context's size is known.
    let max_tokens = match args.n_predict {
        None => None,
        Some(-1) => Some(usize::MAX),
        Some(n) if n >= 1 => Some(n as usize),
        Some(n) => bail!("-n {n}: give a token count >= 1, or -1 for no limit"),
    };
    args.sampling.check()?;
    let setup = Setup::load(&args.model, &args.model_args, Some(&args.attn_entropy))?;
    setup.warn_if_embedding_model();
    let model = setup.model.clone();
    if model.tokenizer().is_none() {
        bail!("the model file has no tokenizer (tokenizer.ggml.* keys): it cannot chat");
    }
    let template = ChatTemplate::for_model(&model, args.chat_template.as_deref())
        .context("choosing the chat template")?;
    let template = template_worker::confine(template)?;
    let mut conv = Conversation::new(template.clone());
    if let Some(s) = &args.system {
        conv.push(Message::system(s.clone()));
    }
    // A template that cannot render a plain exchange is refused now, not at the first turn.
    template
        .render(&[Message::user("hello"), Message::assistant("hi")], true)
        .context("trying the chat template")?;
    setup.check_context()?;
    args.speculate.check(setup.engine_opts.batch)?;
    let draft = args.speculate.load(&args.model_args, &setup.engine_opts)?;
    let context = args.context.mode()?;
    let engine = setup.engine()?;
    let max_tokens = max_tokens.unwrap_or_else(|| default_reply_budget(engine.max_seq_len()));
    let mut sched = Scheduler::new(engine, SchedulerOptions { max_running: 1 });
    if let Some(d) = &draft {
        d.attach(&mut sched)?;
    }
    let seed = args.sampling.seed();
    let mut stop = template.stop_strings().to_vec();
    stop.extend(args.stop.iter().cloned());
    let mut sampler = args.sampling.config(seed);
    if args.ignore_eos {
        ban_eog(&mut sampler, model.tokenizer().expect("checked above"));
    }
    let settings = ReplySettings {
        sampler,
        max_tokens,
        stop,
        context,
        constraint: args.grammar.constraint(&model)?,
        speculate: args.speculate.params(),
    };
    let mut chat = ChatSession::new(sched, conv, settings).context("starting the chat")?;
    let mut saved_kv = saved_kv::SavedKv::new(&args.model);

    let interactive = args.file.is_none() && io::stdin().is_terminal();
    let mut input = match &args.file {
        Some(f) => Input::whole(crate::args::prompt::read_text(f)?),
        None if interactive => {
            let history = if args.no_history {
                None
            } else {
                input::default_history_file()
            };
            Input::terminal(history)?
        }
        None => Input::lines(io::stdin()),
    };
    let at_terminal = interactive && io::stdout().is_terminal();
    let mut screen = Screen {
        styled: at_terminal && std::env::var_os("NO_COLOR").is_none(),
        show_stats: args.verbose,
        marks: !at_terminal,
        quiet_input: interactive,
    };
    if interactive {
        screen.info(&format!(
            "{} | template {} | context {} tokens | /help for commands, Ctrl-D or /bye to quit",
            args.model.display(),
            template.name(),
            chat.context_size(),
        ));
    }
    let prompt = if interactive { "> " } else { "" };
    loop {
        let line = match input.read(prompt)? {
            Read::Line(l) => l,
            Read::Interrupted => {
                screen.info("(Ctrl-D or /bye quits)");
                continue;
            }
            Read::End => break,
        };
        let command = match commands::parse(&line) {
            Ok(c) => c,
            Err(e) if interactive => {
                screen.warn(&e);
                continue;
            }
            Err(e) => bail!("{e}"),
        };
        let outcome = match command {
            None if line.trim().is_empty() => continue,
            None => {
                let text = line
                    .strip_prefix('/')
                    .filter(|t| t.starts_with('/'))
                    .unwrap_or(&line);
                let (text, cleaned) = args.clean.apply(text);
                if let Some(mode) = args.clean.clean_input
                    && cleaned.changed()
                {
                    let tok = chat.tokenizer();
                    let original = line.strip_prefix('/').filter(|t| t.starts_with('/'));
                    let original = original.unwrap_or(&line);
                    let (before, after) =
                        crate::args::clean_input::token_counts(tok, original, &text);
                    screen.info(&crate::args::clean_input::describe(
                        mode, &cleaned, before, after,
                    ));
                }
                screen.mark_turn(&text)?;
                reply(&mut chat, &screen, |c, io| c.send(&text, io))
            }
            Some(Command::Bye) => break,
            Some(c) => {
                if matches!(c, Command::Regen) {
                    screen.mark_turn(line.trim())?;
                }
                run_command(&mut chat, &mut screen, &mut saved_kv, c)
            }
        };
        if let Err(e) = outcome {
            if crate::output::is_broken_pipe(&e) {
                return Ok(());
            }
            if !interactive {
                // A script's chat stops at the first failure, with a failing status; the
                // error is printed once, by `main`.
                return Err(e);
            }
            screen.warn(&format!("error: {}", error_chain(&e)));
        }
    }
    Ok(())
}
