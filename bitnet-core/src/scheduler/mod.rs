//! The scheduler: many generation requests on one [`Engine`], decoded together.
//!
//! [`Scheduler::submit`] queues a prompt with its own sampler, seed, stop strings and
//! limits and returns the sequence's id; [`Scheduler::step`] admits waiting requests while
//! the KV pool has room for them (each reserves the blocks its prompt and `max_tokens`
//! can fill, so a running request never runs out of cache), builds one batch with a decode
//! token of every running request plus prefill chunks of new ones under the engine's
//! per-pass token budget (a long prompt is spread over several steps and never stalls the
//! others), runs the forward pass, samples, and reports events: text that is whole UTF-8
//! and free of stop strings, then `Done` with the stop reason and figures.
//! [`Scheduler::cancel`] takes effect at the next step, also during a long prefill.
//!
//! A request may keep its sequence when done (`keep`): a chat continues it with
//! [`Scheduler::submit_on`], evaluating only the new turn's tokens. Otherwise the
//! sequence is freed and its blocks stay in the prefix cache for the next request that
//! starts with the same tokens.
//!
//! A server asks for more with [`Scheduler::submit_with`]: each sampled token's log
//! probability and the most likely alternatives ([`Event::Token`]), and requests that
//! follow a leader with the same prompt (OpenAI's `n`): a follower waits until the leader's
//! prompt is evaluated, then forks the leader's sequence, so the prompt's KV is computed
//! once and shared.
//!
//! A request may speculate ([`GenParams::speculate`], [`speculate`]): its decode item then
//! carries the pending token and a draft (from prompt lookup or the draft model set with
//! [`Scheduler::set_draft`]) with every row's logits, in the same batch as the other
//! requests' tokens; the rows are sampled in order while they agree with the draft, and the
//! positions past the first disagreement are cut from the sequence.
//!
//! An embedding request ([`Scheduler::submit_embedding`]) is a prompt evaluated for its
//! final normed hidden states: its chunks share the passes of the others, and once its last
//! token is in, its pooled vectors are reported ([`Event::Embedding`]) and its sequence is
//! freed; nothing is sampled.
//!
//! A request is checked once, at submit: what it asks of the context, its prompt and its
//! parameters; a refusal is a [`RequestError`] (wrapped in [`CoreError::Request`]), heard
//! before any token.
//!
//! Files: `sched.rs` the scheduler and its step (plan, run, apply); `request.rs` a request
//! (building, sampling, taking tokens); `validate.rs` the refusals; `admission.rs` who runs;
//! `plan.rs` the batch of a step and the drafts in it; `apply.rs` a pass's results;
//! `output.rs` what requests report; `embed.rs` an embedding request's own part;
//! `policy.rs` context policies; `reply_budget.rs` the default reply length when a caller
//! names none; `speculate.rs` and `draft.rs` speculative decoding; `generate.rs` driving one
//! request to its end. This file only re-exports: the others import one another in one
//! direction (`sched.rs` uses the parts, the parts never the scheduler), so none of them
//! depends on a file that depends on it.
//!
//! [`CoreError::Request`]: crate::error::CoreError::Request
//! [`Engine`]: crate::engine::Engine

mod admission;
mod apply;
mod draft;
mod embed;
mod generate;
mod output;
mod plan;
mod policy;
mod reply_budget;
mod request;
mod sched;
pub mod speculate;
mod validate;

pub use embed::EmbedParams;
pub use generate::{generate, generate_until, warm_up, warm_up_embeddings};
pub use output::{Event, GenStats, StopReason, TokenLogprobs};
pub use policy::{ContextMode, ContextPolicy, MIN_HEAVY, heavy_hitter_batch, heavy_hitter_victims};
pub use reply_budget::{
    DEFAULT_REPLY_CONTEXT_DIVISOR, MIN_DEFAULT_REPLY_TOKENS, default_reply_budget,
};
pub use request::{GenParams, SubmitOptions};
pub use sched::{Scheduler, SchedulerOptions};
pub use speculate::{DraftSource, SpecParams};
pub use validate::RequestError;
