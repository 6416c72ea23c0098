//! What a request does when its sequence has no room for the next tokens: stop, or remove
//! positions and go on ([`ContextPolicy`]): llama.cpp's context shift, StreamingLLM's
//! window with attention sinks, or H2O's heavy-hitter eviction. [`ContextMode`] is the
//! same choice before a request's prompt is known (what a command line or a chat setting
//! says), turned into a policy per request.
//!
//! H2O's choice of what to evict ("Heavy-Hitter Oracle", Zhang et al. 2023): a bounded
//! cache keeps the first `sinks` positions (attention sinks), the `recent` most recent ones,
//! and, of the rest, the heavy hitters: the positions that received the most attention mass
//! so far (see `KvManager::track_attention_mass`). When the cache is full, the lowest-mass
//! positions of the middle go, a batch at a time ([`heavy_hitter_batch`]), since every
//! eviction moves the later rows and rounds them to the cache's format once.
//!
//! The mass is the plain sum H2O uses, so a position that has been read by more query rows
//! (an older one) tends to have more: the recent positions are protected for that reason.

use crate::engine::Engine;
use crate::error::CoreError;
use crate::kv::SeqId;

use super::validate::RequestError;

/// What a request does when its sequence has no room for the next tokens.
///
/// The shifting policies remove positions from the middle of the sequence with
/// [`Engine::shift`] (the later keys re-rotated to their new positions, the freed blocks back
/// in the pool) and go on, so a request can read and generate far more tokens than the
/// context holds; [`crate::scheduler::GenStats::discarded_tokens`] says how many went. Removal happens in large
/// chunks (each moved row is rounded to the cache's format once per move).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContextPolicy {
    /// End the request with [`crate::scheduler::StopReason::ContextFull`] (a prompt that does not fit is
    /// refused at submit).
    #[default]
    Stop,
    /// llama.cpp's context shift (`--context-shift --keep N`): keep the first `keep`
    /// positions and remove half of the rest.
    Shift { keep: usize },
    /// StreamingLLM's window with attention sinks: the sequence holds the first `sinks`
    /// positions and at most the `window` most recent ones; when full, the oldest quarter of
    /// the window goes. Memory stays constant however long the request runs.
    Window { sinks: usize, window: usize },
    /// H2O's heavy hitters under a fixed budget (see [`heavy_hitter_victims`]): the sequence
    /// holds at most `budget` positions: the first `sinks`, the `recent` most recent, and
    /// of the rest those that received the most attention mass; when full, the lightest
    /// quarter of that rest goes ([`Engine::evict`]). The sequence tracks its attention
    /// mass for this ([`crate::kv::KvManager::track_attention_mass`]).
    HeavyHitters {
        sinks: usize,
        recent: usize,
        budget: usize,
    },
}

impl ContextPolicy {
    /// Positions a sequence holds at most under this policy, given the engine's limit.
    pub fn limit(self, max_len: usize) -> usize {
        match self {
            ContextPolicy::Window { sinks, window } => sinks.saturating_add(window).min(max_len),
            ContextPolicy::HeavyHitters { budget, .. } => budget.min(max_len),
            _ => max_len,
        }
    }

    /// Checks the policy against the engine's per-sequence limit (submit does too).
    pub fn validate(self, max_len: usize) -> Result<(), RequestError> {
        match self {
            ContextPolicy::Stop => Ok(()),
            ContextPolicy::Shift { keep } if keep >= max_len / 2 => {
                Err(RequestError::ShiftKeepsTooMuch { keep, max_len })
            }
            ContextPolicy::Window { window, .. } if window < 4 => {
                Err(RequestError::WindowTooSmall { window })
            }
            ContextPolicy::Window { sinks, window } if sinks.saturating_add(window) > max_len => {
                Err(RequestError::WindowPastContext {
                    sinks,
                    window,
                    max_len,
                })
            }
            ContextPolicy::HeavyHitters { budget, .. } if budget > max_len => {
                Err(RequestError::BudgetPastContext { budget, max_len })
            }
            ContextPolicy::HeavyHitters { recent: 0, .. } => Err(RequestError::NoRecentPositions),
            ContextPolicy::HeavyHitters {
                sinks,
                recent,
                budget,
            } if budget < sinks.saturating_add(recent).saturating_add(MIN_HEAVY) => {
                Err(RequestError::BudgetTooSmall {
                    budget,
                    sinks,
                    recent,
                    min_heavy: MIN_HEAVY,
                })
            }
            _ => Ok(()),
        }
    }

    /// Removes the positions this policy chooses from sequence `seq` of `engine` when it has
    /// no room for `need` more under `limit`: a shift of a contiguous run (`Shift`,
    /// `Window`), or the lightest heavy hitters (`HeavyHitters`). Returns how many positions
    /// went (0 when there was room, or the policy removes nothing). The scheduler runs this
    /// before every step; `bitnet perplexity` runs it over a long text.
    pub fn make_room_in(
        self,
        engine: &mut Engine,
        seq: SeqId,
        need: usize,
        limit: usize,
    ) -> Result<usize, CoreError> {
        let len = engine.sequence_len(seq)?;
        if len + need <= limit {
            return Ok(0);
        }
        if let ContextPolicy::HeavyHitters {
            sinks,
            recent,
            budget,
        } = self
        {
            let count = heavy_hitter_batch(sinks, recent, budget, len + need - limit);
            let mass = engine
                .kv()
                .sequence(seq)?
                .attention_mass()
                .unwrap_or_default();
            let victims = heavy_hitter_victims(mass, len, sinks, recent, count);
            engine.evict(seq, &victims)?;
            return Ok(victims.len());
        }
        match self.make_room(len, need, limit) {
            Some((keep, discard)) => {
                engine.shift(seq, keep, discard)?;
                Ok(discard)
            }
            None => Ok(0),
        }
    }

    /// `(keep, discard)`: the positions to remove so that a sequence of `len` positions can
    /// take `need` more under `limit` (as many as it can, at least one chunk); `None` when
    /// the policy does not shift or nothing past the kept positions is left to remove.
    fn make_room(self, len: usize, need: usize, limit: usize) -> Option<(usize, usize)> {
        let (keep, chunk) = match self {
            ContextPolicy::Stop => return None,
            ContextPolicy::Shift { keep } => {
                let keep = keep.min(len);
                (keep, (len - keep) / 2)
            }
            ContextPolicy::Window { sinks, window } => (sinks.min(len), (window / 4).max(1)),
            // Chooses its positions by mass: see `Scheduler::make_room`.
            ContextPolicy::HeavyHitters { .. } => return None,
        };
        let short = (len + need).saturating_sub(limit);
        // A prompt chunk may get less room than it asked for; it takes the rest next step.
        let discard = chunk.max(short).min(len - keep);
        (discard > 0).then_some((keep, discard))
    }
}

/// The context choice of a command line or a conversation, before a request's prompt is
/// known; [`ContextMode::policy`] makes each request's [`ContextPolicy`] of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContextMode {
    /// Stop when the context is full.
    #[default]
    Stop,
    /// Shift, keeping the first `keep` positions after the BOS token (llama.cpp's
    /// `--context-shift --keep N`).
    Shift { keep: usize },
    /// Shift, keeping the whole prompt (`--keep -1`).
    ShiftKeepingPrompt,
    /// StreamingLLM's window with attention sinks.
    Window { sinks: usize, window: usize },
    /// H2O's heavy hitters under a fixed budget.
    HeavyHitters {
        sinks: usize,
        recent: usize,
        budget: usize,
    },
}

impl ContextMode {
    /// The policy of a request whose tokens start with a BOS token (`bos`: one position
    /// kept beyond `keep`) and whose prompt has `prompt_len` tokens.
    pub fn policy(self, bos: bool, prompt_len: usize) -> ContextPolicy {
        match self {
            ContextMode::Stop => ContextPolicy::Stop,
            ContextMode::Shift { keep } => ContextPolicy::Shift {
                keep: keep.saturating_add(usize::from(bos)),
            },
            ContextMode::ShiftKeepingPrompt => ContextPolicy::Shift { keep: prompt_len },
            ContextMode::Window { sinks, window } => ContextPolicy::Window { sinks, window },
            ContextMode::HeavyHitters {
                sinks,
                recent,
                budget,
            } => ContextPolicy::HeavyHitters {
                sinks,
                recent,
                budget,
            },
        }
    }

    /// Whether a sequence may outgrow the context (the prompt checks then do not apply).
    pub fn shifts(self) -> bool {
        self != ContextMode::Stop
    }
}

/// Positions held at most beyond sinks and recent ones for a heavy-hitter policy to work.
pub const MIN_HEAVY: usize = 4;

/// How many positions one eviction removes: a quarter of the heavy-hitter part of the
/// budget (at least one), or more when `short` positions must go at once.
pub fn heavy_hitter_batch(sinks: usize, recent: usize, budget: usize, short: usize) -> usize {
    (budget.saturating_sub(sinks + recent) / 4)
        .max(1)
        .max(short)
}

/// The positions to evict from a sequence of `len` positions whose received mass is
/// `mass` (missing entries count as zero): up to `count` of the positions between the
/// first `sinks` and the last `recent`, lowest mass first (the older on a tie), returned in
/// increasing order, as `Engine::evict` takes them. Empty when nothing is evictable.
pub fn heavy_hitter_victims(
    mass: &[f32],
    len: usize,
    sinks: usize,
    recent: usize,
    count: usize,
) -> Vec<usize> {
    let end = len.saturating_sub(recent);
    if end <= sinks || count == 0 {
        return Vec::new();
    }
    let m = |p: usize| mass.get(p).copied().unwrap_or(0.0);
    let mut cand: Vec<usize> = (sinks..end).collect();
    cand.sort_by(|&a, &b| m(a).total_cmp(&m(b)).then(a.cmp(&b)));
    cand.truncate(count);
    cand.sort_unstable();
    cand
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_are_the_lightest_of_the_middle_in_order() {
        let mass = [9.0, 9.0, 1.0, 5.0, 0.5, 7.0, 0.1, 0.2, 0.0];
        // Sinks 2, recent 3: candidates are 2..6 (masses 1, 5, 0.5, 7).
        assert_eq!(heavy_hitter_victims(&mass, 9, 2, 3, 2), vec![2, 4]);
        assert_eq!(heavy_hitter_victims(&mass, 9, 2, 3, 10), vec![2, 3, 4, 5]);
        assert!(heavy_hitter_victims(&mass, 5, 2, 3, 1).is_empty());
        // Ties and missing mass: the older first.
        assert_eq!(heavy_hitter_victims(&[], 8, 1, 1, 3), vec![1, 2, 3]);
    }

    #[test]
    fn a_batch_is_a_quarter_of_the_heavy_part() {
        assert_eq!(heavy_hitter_batch(4, 16, 36, 0), 4);
        assert_eq!(heavy_hitter_batch(4, 16, 36, 9), 9);
        assert_eq!(heavy_hitter_batch(4, 30, 36, 0), 1);
    }
}
