//! What the slash commands do to the chat (`/show`, `/save`, `/load`, `/set`, ...); their
//! parsing is in `commands`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use bitnet_core::chat::{ChatSession, Message};

use super::commands::{self, Command, HELP};
use super::reply::reply;
use super::saved_kv::SavedKv;
use super::screen::Screen;
use super::show;
use crate::output::count;
use crate::output_file::OutputFile;

pub(super) fn run_command(
    chat: &mut ChatSession,
    screen: &mut Screen,
    saved: &mut SavedKv,
    cmd: Command,
) -> Result<()> {
    match cmd {
        Command::Help => println!("{HELP}"),
        Command::Clear => {
            chat.clear()?;
            screen.info("(new conversation)");
        }
        Command::Regen => return reply(chat, screen, |c, io| c.regenerate(io)),
        Command::Undo => {
            let n = chat.undo()?;
            screen.info(&format!("(removed {})", count(n, "message")));
        }
        Command::System(None) if chat.conversation().system().is_none() => {
            screen.info("(there is no system prompt to remove; /system TEXT sets one)");
        }
        Command::System(text) => {
            let set = text.is_some();
            chat.set_system(text)?;
            screen.info(if set {
                "(system prompt set)"
            } else {
                "(system prompt removed)"
            });
        }
        Command::Set(s) => {
            let n_vocab = chat.model().config().n_vocab;
            let settings = &mut chat.settings;
            let mut sampler = settings.sampler.clone();
            commands::apply(&s, &mut sampler, &mut settings.max_tokens);
            // The sampler's own rules decide, behind /set's own ranges: a refused value
            // leaves the settings as they were.
            sampler.validate(n_vocab)?;
            settings.sampler = sampler;
            screen.info(&format!("({s})"));
        }
        Command::Show(what) => show::show(&mut std::io::stdout().lock(), chat, what)?,
        Command::Save { path, kv } => {
            let json = serde_json::to_string_pretty(chat.conversation().messages())?;
            let f = OutputFile::create(&path)?;
            f.file().write_all(json.as_bytes())?;
            f.file().write_all(b"\n")?;
            f.commit()?;
            let rows = saved.save(chat, &path, kv)?;
            screen.info(&format!(
                "(saved {} to {}{rows})",
                count(chat.conversation().messages().len(), "message"),
                path.display()
            ));
        }
        Command::Load(path) => {
            let messages = load_messages(&path)?;
            let n = messages.len();
            let rows = match saved.load(chat, &path) {
                Ok(Some(snap)) => match chat.load_messages_with_kv(messages.clone(), &snap) {
                    Ok(kept) => format!("; KV of {} kept", count(kept, "token")),
                    Err(e) => {
                        chat.load_messages(messages)?;
                        format!("; its KV was not used: {e}")
                    }
                },
                Ok(None) => {
                    chat.load_messages(messages)?;
                    String::new()
                }
                Err(why) => {
                    chat.load_messages(messages)?;
                    format!("; its KV was not used: {why}")
                }
            };
            screen.info(&format!(
                "(loaded {} from {}{rows})",
                count(n, "message"),
                path.display()
            ));
        }
        Command::Stats => {
            screen.show_stats = !screen.show_stats;
            screen.info(if screen.show_stats {
                "(figures on)"
            } else {
                "(figures off)"
            });
        }
        Command::Bye => {}
    }
    Ok(())
}

/// A conversation saved with /save: a JSON list of `{"role", "content"}` objects.
fn load_messages(path: &std::path::Path) -> Result<Vec<Message>> {
    use std::io::Read;
    const MAX_BYTES: u64 = 64 << 20;
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    // Only a regular file: a FIFO would block the open and a device may never end.
    if !meta.is_file() {
        bail!(
            "{}: not a file, so not a saved conversation",
            path.display()
        );
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_string(&mut text))
        .with_context(|| format!("reading {}", path.display()))?;
    if text.len() as u64 > MAX_BYTES {
        bail!(
            "{}: over {} MiB is not a saved conversation",
            path.display(),
            MAX_BYTES >> 20
        );
    }
    let messages: Vec<Message> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a saved conversation (a JSON list of {{\"role\", \"content\"}} objects)",
            path.display()
        )
    })?;
    if let Some(m) = messages
        .iter()
        .find(|m| !matches!(m.role.as_str(), "system" | "user" | "assistant"))
    {
        bail!("{}: unknown role {:?}", path.display(), m.role);
    }
    Ok(messages)
}
