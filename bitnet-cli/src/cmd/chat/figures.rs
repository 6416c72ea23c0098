//! The line of figures after a reply (`-v`, `/stats`), broken between its fields to fit the
//! terminal it is shown on (a wrapped line splits a number from its name).

use bitnet_core::chat::TurnStats;

/// The figures of one turn, as fields to join with " | ".
pub(super) fn fields(s: &TurnStats, attn_entropy: Option<String>) -> Vec<String> {
    let asked = s.reply.prompt_tokens - s.reply.cached_tokens;
    let read = if s.evaluated < asked {
        // Stopped while reading: how far it got.
        format!("{} of {asked} new tokens read", s.evaluated)
    } else {
        crate::output::count(s.evaluated, "new token")
    };
    let mut fields = vec![
        format!(
            "prompt: {read} ({} kept from the cache), {:.1} tok/s",
            s.kept,
            s.prompt_tps()
        ),
        format!(
            "reply: {} tokens, {:.1} tok/s, stop: {}",
            s.reply.gen_tokens,
            s.reply.gen_tps(),
            s.reply.stop_reason.name()
        ),
        format!(
            "3-gram repetition {}",
            bitnet_core::health::repetition_rate_3gram(&s.reply.tokens)
                .map_or_else(|| "-".to_string(), |r| format!("{:.1}%", 100.0 * r))
        ),
        format!("context {}/{}", s.context_used, s.context_size),
    ];
    if s.reply.draft_verifies > 0 {
        fields.push(format!(
            "draft: {}/{} accepted, {:.2} tokens a verification",
            s.reply.draft_accepted,
            s.reply.draft_tokens,
            s.reply.mean_accepted_length()
        ));
    }
    fields.extend(attn_entropy);
    fields
}

/// `fields` joined with " | ", with a line break instead where the next field would pass
/// `width` columns (`None`: one line). A field wider than the terminal gets a line of its
/// own.
pub(super) fn fit(fields: &[String], width: Option<usize>) -> String {
    let width = width.unwrap_or(usize::MAX);
    let mut out = String::new();
    let mut col = 0;
    for f in fields {
        let w = f.chars().count();
        if col > 0 && col + 3 + w <= width {
            out.push_str(" | ");
            col += 3;
        } else if col > 0 {
            out.push('\n');
            col = 0;
        }
        out.push_str(f);
        col += w;
    }
    out
}

/// Columns of the terminal standard error is (where the figures go); `None` when it is not
/// one or does not say.
pub(super) fn stderr_width() -> Option<usize> {
    #[cfg(unix)]
    let cols = rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| w.ws_col);
    // The console's width (crossterm reads the screen buffer Windows keeps for it).
    #[cfg(not(unix))]
    let cols = crossterm::terminal::size().ok().map(|(c, _)| c);
    cols.filter(|&c| c > 0).map(usize::from)
}

#[cfg(test)]
mod tests {
    use super::fit;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fields_break_between_not_inside() {
        let f = strings(&["aaaa", "bbbb", "cccc"]);
        assert_eq!(fit(&f, None), "aaaa | bbbb | cccc");
        assert_eq!(fit(&f, Some(11)), "aaaa | bbbb\ncccc");
        assert_eq!(fit(&f, Some(3)), "aaaa\nbbbb\ncccc");
        for line in fit(&f, Some(12)).lines() {
            assert!(line.chars().count() <= 12, "{line}");
        }
    }
}
