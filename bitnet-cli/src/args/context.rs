//! What a generating command does when a sequence fills its context: stop (the default),
//! shift like llama.cpp (`--context-shift --keep N`), or read and generate through a window
//! with attention sinks (`--kv-window W --kv-sinks N`, StreamingLLM), or hold a fixed budget
//! of sinks, recent positions and heavy hitters (`--kv-evict h2o --kv-budget N [--kv-recent
//! R]`, H2O). Shared by `generate`, `chat`, `serve` and `perplexity`; the flags become a
//! [`ContextMode`], and the work is the scheduler's ([`ContextPolicy`]).

use anyhow::{Result, bail};
use bitnet_core::scheduler::{ContextMode, ContextPolicy};

/// Score-based eviction policies (`--kv-evict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EvictArg {
    /// H2O: keep the sinks, the most recent positions and the positions that received the
    /// most attention so far.
    H2o,
}

#[derive(Debug, Clone, Default, clap::Args)]
#[command(group(clap::ArgGroup::new("kv_bounded").args(["kv_window", "kv_evict"])))]
pub struct ContextArgs {
    /// When a sequence's context is full, remove half of its positions after --keep (the
    /// later keys re-rotated) and go on, as llama.cpp's --context-shift does.
    #[arg(long, conflicts_with = "kv_bounded")]
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
    /// With --kv-window or --kv-evict: the first N positions always stay (attention sinks).
    #[arg(long, value_name = "N", default_value_t = 4, requires = "kv_bounded")]
    pub kv_sinks: usize,
    /// Hold at most --kv-budget positions, evicting by attention received: the sinks, the
    /// --kv-recent most recent positions, and the heavy hitters; when full, the lightest
    /// quarter of the heavy-hitter part goes (later keys re-rotated).
    #[arg(long, value_name = "POLICY", requires = "kv_budget")]
    pub kv_evict: Option<EvictArg>,
    /// With --kv-evict: positions a sequence holds at most (sinks and recent included).
    #[arg(long, value_name = "N", requires = "kv_evict")]
    pub kv_budget: Option<usize>,
    /// With --kv-evict: the most recent positions that always stay (default: half of what
    /// the budget leaves after the sinks, H2O's even split).
    #[arg(long, value_name = "R", requires = "kv_evict")]
    pub kv_recent: Option<usize>,
}

impl ContextArgs {
    /// The context mode the flags ask for (`--keep` below -1 is refused).
    pub fn mode(&self) -> Result<ContextMode> {
        if let (Some(EvictArg::H2o), Some(budget)) = (self.kv_evict, self.kv_budget) {
            let sinks = self.kv_sinks;
            return Ok(ContextMode::HeavyHitters {
                sinks,
                recent: self.kv_recent.unwrap_or(budget.saturating_sub(sinks) / 2),
                budget,
            });
        }
        if let Some(window) = self.kv_window {
            return Ok(ContextMode::Window {
                sinks: self.kv_sinks,
                window,
            });
        }
        if !self.context_shift {
            return Ok(ContextMode::Stop);
        }
        Ok(match self.keep {
            -1 => ContextMode::ShiftKeepingPrompt,
            k if k < 0 => bail!("--keep takes a number of tokens >= 0, or -1 for the whole prompt"),
            k => ContextMode::Shift {
                keep: usize::try_from(k).unwrap_or(usize::MAX),
            },
        })
    }

    /// The policy for a request whose tokens start with `bos` (one position kept beyond
    /// --keep) and whose prompt has `prompt_len` tokens (what --keep -1 keeps).
    pub fn policy(&self, bos: bool, prompt_len: usize) -> Result<ContextPolicy> {
        Ok(self.mode()?.policy(bos, prompt_len))
    }

    /// Whether a sequence may outgrow the context (the prompt checks then do not apply).
    pub fn shifts(&self) -> bool {
        self.context_shift || self.kv_window.is_some() || self.kv_evict.is_some()
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
        let h2o = ContextArgs {
            kv_evict: Some(EvictArg::H2o),
            kv_budget: Some(68),
            ..ContextArgs::default()
        };
        assert_eq!(
            h2o.policy(true, 10).unwrap(),
            ContextPolicy::HeavyHitters {
                sinks: 0,
                recent: 34,
                budget: 68
            }
        );
        assert!(h2o.shifts());
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        c: ContextArgs,
    }

    #[test]
    fn the_flags_parse_and_conflict() {
        use clap::Parser;
        let p = |a: &[&str]| Cli::try_parse_from(std::iter::once("x").chain(a.iter().copied()));
        let c = p(&["--kv-evict", "h2o", "--kv-budget", "68"]).unwrap().c;
        assert_eq!(
            c.policy(true, 1).unwrap(),
            ContextPolicy::HeavyHitters {
                sinks: 4,
                recent: 32,
                budget: 68
            }
        );
        let c = p(&[
            "--kv-evict",
            "h2o",
            "--kv-budget",
            "36",
            "--kv-recent",
            "8",
            "--kv-sinks",
            "2",
        ])
        .unwrap()
        .c;
        assert_eq!(
            c.policy(true, 1).unwrap(),
            ContextPolicy::HeavyHitters {
                sinks: 2,
                recent: 8,
                budget: 36
            }
        );
        assert!(p(&["--kv-evict", "h2o"]).is_err(), "a budget is needed");
        assert!(
            p(&["--kv-budget", "36"]).is_err(),
            "the budget needs --kv-evict"
        );
        assert!(
            p(&[
                "--kv-evict",
                "h2o",
                "--kv-budget",
                "36",
                "--kv-window",
                "32"
            ])
            .is_err()
        );
        assert!(p(&["--kv-evict", "h2o", "--kv-budget", "36", "--context-shift"]).is_err());
        assert!(
            p(&["--kv-sinks", "2"]).is_err(),
            "sinks need a bounded policy"
        );
    }
}
