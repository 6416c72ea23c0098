//! What a generating command does when a sequence fills its context: stop (the default),
//! shift like llama.cpp (`--context-shift --keep N`), or read and generate through a window
//! with attention sinks (`--kv-window W --kv-sinks N`, StreamingLLM). Shared by `generate`,
//! `chat` and `serve`; the work is the scheduler's ([`ContextPolicy`]).

use anyhow::{Result, bail};
use bitnet_core::scheduler::ContextPolicy;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ContextArgs {
    /// When a sequence's context is full, remove half of its positions after --keep (the
    /// later keys re-rotated) and go on, as llama.cpp's --context-shift does.
    #[arg(long, conflicts_with = "kv_window")]
    pub context_shift: bool,
    /// With --context-shift: positions after the BOS token that always stay (-1: the whole
    /// prompt).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_negative_numbers = true,
        requires = "context_shift"
    )]
    pub keep: i64,
    /// Hold at most the first --kv-sinks positions and the W most recent: memory stays
    /// constant however long the text or the generation (StreamingLLM's attention sinks).
    #[arg(long, value_name = "W")]
    pub kv_window: Option<usize>,
    /// With --kv-window: the first N positions always stay (attention sinks).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "kv_window")]
    pub kv_sinks: usize,
}

impl ContextArgs {
    /// The policy for a request whose tokens start with `bos` (one position kept beyond
    /// --keep) and whose prompt has `prompt_len` tokens (what --keep -1 keeps).
    pub fn policy(&self, bos: bool, prompt_len: usize) -> Result<ContextPolicy> {
        if let Some(window) = self.kv_window {
            return Ok(ContextPolicy::Window {
                sinks: self.kv_sinks,
                window,
            });
        }
        if !self.context_shift {
            return Ok(ContextPolicy::Stop);
        }
        let keep = match self.keep {
            -1 => prompt_len,
            k if k < 0 => bail!("--keep takes a number of tokens >= 0, or -1 for the whole prompt"),
            k => usize::try_from(k)
                .unwrap_or(usize::MAX)
                .saturating_add(usize::from(bos)),
        };
        Ok(ContextPolicy::Shift { keep })
    }

    /// Whether a sequence may outgrow the context (the prompt checks then do not apply).
    pub fn shifts(&self) -> bool {
        self.context_shift || self.kv_window.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_policies() {
        let none = ContextArgs::default();
        assert_eq!(none.policy(true, 10).unwrap(), ContextPolicy::Stop);
        let shift = ContextArgs {
            context_shift: true,
            keep: 3,
            ..ContextArgs::default()
        };
        assert_eq!(
            shift.policy(true, 10).unwrap(),
            ContextPolicy::Shift { keep: 4 }
        );
        assert_eq!(
            shift.policy(false, 10).unwrap(),
            ContextPolicy::Shift { keep: 3 }
        );
        let whole = ContextArgs {
            keep: -1,
            ..shift.clone()
        };
        assert_eq!(
            whole.policy(true, 10).unwrap(),
            ContextPolicy::Shift { keep: 10 }
        );
        let bad = ContextArgs { keep: -2, ..shift };
        assert!(bad.policy(true, 10).is_err());
        let window = ContextArgs {
            kv_window: Some(64),
            kv_sinks: 2,
            ..ContextArgs::default()
        };
        assert_eq!(
            window.policy(true, 10).unwrap(),
            ContextPolicy::Window {
                sinks: 2,
                window: 64
            }
        );
        assert!(window.shifts());
    }
}
