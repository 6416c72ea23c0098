//! One chat as a program embeds it (`bitnet chat` does): the conversation, the scheduler
//! whose kept sequence holds it in the KV cache across turns, and the turn operations a chat
//! needs (send, regenerate, undo, clear, set the system prompt, load).
//!
//! A reply evaluates only what the sequence does not hold yet (see
//! [`Conversation::next_turn`]). When the prompt would leave too little
//! room for a reply, the oldest whole exchanges after the system prompt are dropped and the
//! rest is read again; the caller is told how many messages went.
//!
//! With a shifting [`ContextMode`] (`--context-shift`, `--kv-window` or `--kv-evict`) the
//! scheduler instead removes positions from the middle of the sequence as it fills (the system prompt, or the sinks, stay) and the chat
//! goes on without reading anything again. The sequence then holds the conversation's
//! tokens with a gap, so the session keeps the whole token list as well (`logical`): turns
//! are matched against it, and a cut (an `/undo`, a trimmed reply) that reaches into the
//! part already removed starts the sequence afresh.

use std::sync::Arc;

use thiserror::Error;

use super::conversation::{continuation, tokenize_prompt};
use super::{ChatError, Conversation, Message};
use crate::engine::Engine;
use crate::error::CoreError;
use crate::kv::{KvError, KvSnapshot, SeqId};
use crate::model::Model;
use crate::sampling::SamplerConfig;
use crate::scheduler::{
    ContextMode, ContextPolicy, Event, GenParams, GenStats, RequestError, Scheduler, StopReason,
    SubmitOptions,
};
use crate::tokenizer::Tokenizer;

/// What a chat turn or command refuses.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The template failed.
    #[error(transparent)]
    Template(#[from] ChatError),
    /// The engine or the scheduler failed.
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The scheduler refused the reply's request (its settings, or what it asks of the
    /// context) before anything was evaluated; the conversation is unchanged.
    #[error(transparent)]
    Refused(RequestError),
    #[error("nothing to regenerate yet")]
    NothingToRegenerate,
    #[error("nothing to undo")]
    NothingToUndo,
    /// The message, even with every older exchange dropped, leaves no room for a reply.
    /// The conversation and the cache are left as they were.
    #[error(
        "the message does not fit the context: even with every earlier exchange left out, the \
         prompt needs {need} tokens and a reply {reply} more, {} of {n_ctx} in the context; \
         the conversation is unchanged (shorten the message or the system prompt, or raise -c)",
        need + reply
    )]
    DoesNotFit {
        need: usize,
        reply: usize,
        n_ctx: usize,
    },
    /// A loaded conversation the template cannot render (the conversation is unchanged).
    #[error("the loaded conversation: {0}")]
    LoadedConversation(ChatError),
    /// Generating the reply failed (the message leaves the conversation again).
    #[error("generating the reply: {0}")]
    Reply(CoreError),
}

/// A submit's error: a refusal apart (nothing ran), anything else as the core's.
fn submit_error(e: CoreError) -> SessionError {
    match e {
        CoreError::Request(r) => SessionError::Refused(r),
        e => SessionError::Core(e),
    }
}

impl From<KvError> for SessionError {
    fn from(e: KvError) -> Self {
        SessionError::Core(e.into())
    }
}

type Result<T> = std::result::Result<T, SessionError>;

/// How replies are generated; `/set` changes these.
#[derive(Clone, Debug)]
pub struct ReplySettings {
    pub sampler: SamplerConfig,
    /// Tokens per reply at most (`usize::MAX`: until the context is full). Where the user
    /// names no limit, [`crate::scheduler::default_reply_budget`] keeps room for the
    /// conversation.
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// A shifting mode (context shift, window, eviction) removes positions as the sequence
    /// fills instead of dropping old messages.
    pub context: ContextMode,
    /// Structured output: every reply follows this constraint (`--grammar`, `--json-schema`).
    pub constraint: Option<crate::constrain::Constraint>,
    /// Speculative decoding of every reply (see [`crate::scheduler::speculate`]).
    pub speculate: Option<crate::scheduler::SpecParams>,
}

/// What one reply did.
#[derive(Clone, Debug)]
pub struct TurnStats {
    /// Tokens of the prompt evaluated for this turn.
    pub evaluated: usize,
    /// Tokens the sequence already held and kept.
    pub kept: usize,
    pub prompt_secs: f64,
    pub reply: GenStats,
    /// Messages dropped to make room (oldest first, after the system prompt).
    pub dropped: usize,
    /// Positions a context shift or window removed during this turn.
    pub shifted: usize,
    /// Positions the sequence holds after the reply, and at most.
    pub context_used: usize,
    pub context_size: usize,
    /// The reply was stopped before any of it came (a Ctrl-C while the prompt was read):
    /// the turn is dropped, and the conversation is as it was before it (see
    /// [`ChatSession::send`]).
    pub unanswered: bool,
}

impl TurnStats {
    pub fn prompt_tps(&self) -> f64 {
        if self.prompt_secs > 0.0 {
            self.evaluated as f64 / self.prompt_secs
        } else {
            0.0
        }
    }

    /// Whether the reply was cut short (an interrupt, or the text callback asked to stop).
    pub fn was_interrupted(&self) -> bool {
        self.reply.stop_reason == StopReason::Cancelled
    }
}

/// What the caller's text callback and interrupt check see.
#[allow(missing_debug_implementations)] // closures only
pub struct ReplyIo<'a> {
    /// A piece of the reply (whole UTF-8); false stops the reply (a closed pipe).
    pub on_text: &'a mut dyn FnMut(&str) -> bool,
    /// Polled between steps: true stops the reply and keeps what came so far.
    pub interrupted: &'a dyn Fn() -> bool,
    /// Where the turn stands, before any of the reply comes (see [`TurnStatus`]).
    pub on_status: &'a mut dyn FnMut(TurnStatus),
}

/// Where a turn stands, as [`ReplyIo::on_status`] hears it, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnStatus {
    /// Before anything is read: this many of the oldest messages were dropped to make
    /// room (only when some were).
    Dropped(usize),
    /// The prompt is being read: this many tokens.
    Reading(usize),
    /// The reading is over: the first piece of the reply follows (or the reply ended
    /// without one).
    Read,
}

/// The chat; see the module docs.
#[derive(Debug)]
pub struct ChatSession {
    model: Arc<Model>,
    sched: Scheduler,
    conv: Conversation,
    seq: Option<SeqId>,
    /// Replies generated so far: each one samples with `seed + replies`, so a run is
    /// reproducible from its seed and `/regen` gives a different reply.
    replies: u64,
    pub settings: ReplySettings,
    /// When shifting: the conversation's tokens the sequence would hold had nothing been
    /// removed; its first `front` are in the sequence, then a gap of `removed`, then the
    /// sequence's rest.
    logical: Vec<u32>,
    removed: usize,
    front: usize,
    /// Under `--kv-evict h2o` the removed positions are scattered, so only the last
    /// `recent` held positions are known to be the conversation's last tokens (every
    /// eviction spares them).
    exact_tail: Option<usize>,
}

impl ChatSession {
    /// A chat of `conv` (its system prompt, if any, and earlier messages) on `sched`, whose
    /// model must have a tokenizer.
    pub fn new(
        sched: Scheduler,
        conv: Conversation,
        settings: ReplySettings,
    ) -> Result<ChatSession> {
        let model = sched.engine().model().clone();
        if model.tokenizer().is_none() {
            return Err(CoreError::NoTokenizer.into());
        }
        Ok(ChatSession {
            model,
            sched,
            conv,
            seq: None,
            replies: 0,
            settings,
            logical: Vec::new(),
            removed: 0,
            front: 0,
            exact_tail: None,
        })
    }

    fn shifting(&self) -> bool {
        self.settings.context.shifts()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        self.model
            .tokenizer()
            .expect("ChatSession::new refuses a model without a tokenizer")
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The engine the conversation runs on (its KV cache, attention statistics).
    pub fn engine(&self) -> &Engine {
        self.sched.engine()
    }

    pub fn conversation(&self) -> &Conversation {
        &self.conv
    }

    /// Positions the conversation's sequence holds.
    pub fn context_used(&self) -> usize {
        self.held().len()
    }

    pub fn context_size(&self) -> usize {
        self.sched.max_seq_len()
    }

    fn held(&self) -> &[u32] {
        self.seq.map_or(&[], |s| self.sched.held(s))
    }

    /// What a new turn is matched against: the conversation's tokens so far.
    fn conversation_tokens(&self) -> &[u32] {
        if self.shifting() {
            &self.logical
        } else {
            self.held()
        }
    }

    /// Cuts the conversation's tokens to their first `keep`: the sequence loses its tail,
    /// or, when the cut reaches into what a shift removed, is dropped (the next reply reads
    /// the conversation afresh).
    fn truncate_to(&mut self, keep: usize) -> Result<()> {
        let Some(seq) = self.seq else { return Ok(()) };
        if !self.shifting() {
            self.sched.truncate(seq, keep)?;
            return Ok(());
        }
        let held = self.held().len();
        let cut = self.logical.len().saturating_sub(keep);
        let tail = self
            .exact_tail
            .map_or(held.saturating_sub(self.front), |r| r.min(held));
        if self.removed == 0 || cut <= tail {
            self.sched.truncate(seq, held.saturating_sub(cut))?;
            self.logical.truncate(keep);
        } else {
            self.drop_sequence()?;
        }
        Ok(())
    }

    /// The policy for a turn: a shift keeps at least the system prompt's tokens.
    fn context_policy(&self, full: &[u32]) -> Result<ContextPolicy> {
        let bos = self.tokenizer().add_bos();
        let policy = self.settings.context.policy(bos, full.len());
        Ok(match policy {
            ContextPolicy::Shift { keep } => ContextPolicy::Shift {
                keep: keep.max(self.system_prefix(full)),
            },
            p => p,
        })
    }

    /// Tokens of `full` that render the system prompt (0 without one).
    fn system_prefix(&self, full: &[u32]) -> usize {
        let Some(system) = self.conv.system() else {
            return 0;
        };
        let Ok(text) = self
            .conv
            .template()
            .render(&[Message::system(system.to_owned())], false)
        else {
            return 0;
        };
        let tok = self.tokenizer();
        let alone = tokenize_prompt(tok, &text, self.conv.template().bos_text());
        // Stays below half the context, which a shift needs free.
        let limit = (self.context_size() / 2).saturating_sub(1);
        alone
            .iter()
            .zip(full)
            .take_while(|(a, b)| a == b)
            .count()
            .min(limit)
    }

    /// Adds a user message and generates the reply. A message that gets no answer (refused,
    /// failed, or stopped before the reply's first token) leaves the conversation again, so
    /// the next one never follows two user messages; the caller may send it again.
    pub fn send(&mut self, text: &str, io: ReplyIo<'_>) -> Result<TurnStats> {
        self.conv.push(Message::user(text));
        let result = self.reply(io);
        if !matches!(&result, Ok(s) if !s.unanswered)
            && self
                .conv
                .messages()
                .last()
                .is_some_and(|m| m.role == "user")
        {
            self.conv.messages_mut().pop();
        }
        result
    }

    /// Drops the last reply and generates it again; one refused, failed or stopped before
    /// its first token leaves the last reply in place.
    pub fn regenerate(&mut self, io: ReplyIo<'_>) -> Result<TurnStats> {
        let last = match self.conv.messages().last() {
            Some(m) if m.role == "assistant" => self.conv.messages_mut().pop(),
            Some(m) if m.role == "user" => None,
            _ => return Err(SessionError::NothingToRegenerate),
        };
        let result = self.reply(io);
        if !matches!(&result, Ok(s) if !s.unanswered)
            && let Some(m) = last
        {
            self.conv.push(m);
        }
        result
    }

    /// Drops the last exchange (the reply and the message it answered) from the
    /// conversation and its tokens from the cache. Returns how many messages went.
    pub fn undo(&mut self) -> Result<usize> {
        let msgs = self.conv.messages_mut();
        let mut removed = 0;
        if msgs.last().is_some_and(|m| m.role == "assistant") {
            msgs.pop();
            removed += 1;
        }
        if msgs.last().is_some_and(|m| m.role == "user") {
            msgs.pop();
            removed += 1;
        }
        if removed == 0 {
            return Err(SessionError::NothingToUndo);
        }
        self.cut_cache_to_conversation()?;
        Ok(removed)
    }

    /// A new conversation (the system prompt stays); the cache is dropped.
    pub fn clear(&mut self) -> Result<()> {
        let system = self.conv.system().map(str::to_owned);
        self.conv.messages_mut().clear();
        self.conv.set_system(system);
        self.drop_sequence()
    }

    /// Sets or removes the system prompt; the cache keeps what still matches.
    pub fn set_system(&mut self, text: Option<String>) -> Result<()> {
        self.conv.set_system(text);
        self.cut_cache_to_conversation()
    }

    /// Replaces the conversation (`/load`).
    pub fn load_messages(&mut self, messages: Vec<Message>) -> Result<()> {
        // Rendered first: a conversation the template refuses is not taken.
        let mut trial = self.conv.clone();
        *trial.messages_mut() = messages;
        trial
            .template()
            .render(trial.messages(), true)
            .map_err(SessionError::LoadedConversation)?;
        self.conv = trial;
        self.cut_cache_to_conversation()
    }

    /// The conversation's KV rows, to save beside it (`None`: nothing was read yet).
    /// Refused once a context shift or eviction removed positions: the rows then no longer
    /// follow the conversation's text.
    pub fn export_kv(&self) -> Result<Option<KvSnapshot>> {
        let Some(seq) = self.seq else { return Ok(None) };
        Ok(Some(self.sched.engine().kv().export(seq, usize::MAX)?))
    }

    /// Replaces the conversation (`/load`) and starts from rows saved with it: the
    /// positions of `kv` the conversation still starts with are kept, so the next reply
    /// reads only what follows them. Returns the positions kept. Refused rows (another
    /// layout, too long for the context, no room) leave the conversation loaded and
    /// nothing cached; the error says why.
    pub fn load_messages_with_kv(
        &mut self,
        messages: Vec<Message>,
        kv: &KvSnapshot,
    ) -> Result<usize> {
        self.load_messages(messages)?;
        self.drop_sequence()?;
        let seq = self.sched.engine_mut().kv_mut().import(kv)?;
        self.seq = Some(seq);
        if self.shifting() {
            self.logical = kv.tokens().to_vec();
            self.front = 0;
            self.exact_tail = None;
        }
        self.cut_cache_to_conversation()?;
        Ok(self.held().len())
    }

    fn drop_sequence(&mut self) -> Result<()> {
        if let Some(seq) = self.seq.take() {
            self.sched.free(seq)?;
        }
        self.logical.clear();
        self.removed = 0;
        self.sched.clear_prefix_cache();
        Ok(())
    }

    /// Truncates the sequence to the tokens the current conversation still starts with.
    fn cut_cache_to_conversation(&mut self) -> Result<()> {
        if self.seq.is_none() {
            return Ok(());
        }
        let text = self.conv.template().render(self.conv.messages(), false)?;
        let tok = self.tokenizer();
        let full = tokenize_prompt(tok, &text, self.conv.template().bos_text());
        let keep = continuation(tok, self.conversation_tokens(), &full).keep;
        self.truncate_to(keep)
    }

    /// Tokens a reply needs room for beyond the prompt.
    fn reply_room(&self) -> usize {
        let quarter = (self.context_size() / 4).max(1);
        self.settings.max_tokens.min(quarter)
    }

    /// Generates the assistant's reply to the conversation as it stands. On an error the
    /// conversation is as it was before (older exchanges dropped to make room come back;
    /// a refusal happens before the cache is touched).
    fn reply(&mut self, io: ReplyIo<'_>) -> Result<TurnStats> {
        let before = self.conv.messages().to_vec();
        let result = self.reply_inner(io);
        if !matches!(&result, Ok(s) if !s.unanswered) {
            *self.conv.messages_mut() = before;
        }
        result
    }

    fn reply_inner(&mut self, io: ReplyIo<'_>) -> Result<TurnStats> {
        let n_ctx = self.context_size();
        let mut dropped = 0;
        let turn = loop {
            let turn = self
                .conv
                .next_turn(self.tokenizer(), self.conversation_tokens())?;
            // A shifting context makes room as it goes.
            if self.shifting() || turn.keep + turn.tokens.len() + self.reply_room() <= n_ctx {
                break turn;
            }
            let n = self.drop_oldest_exchange();
            if n == 0 {
                return Err(SessionError::DoesNotFit {
                    need: turn.keep + turn.tokens.len(),
                    reply: self.reply_room(),
                    n_ctx,
                });
            }
            dropped += n;
        };
        if dropped > 0 {
            (io.on_status)(TurnStatus::Dropped(dropped));
        }
        let mut sampler = self.settings.sampler.clone();
        sampler.seed = sampler.seed.wrapping_add(self.replies);
        self.replies += 1;
        let context = if self.shifting() {
            let full = self.conv.prompt_tokens(self.tokenizer())?;
            self.context_policy(&full)?
        } else {
            ContextPolicy::Stop
        };
        self.exact_tail = None;
        match context {
            ContextPolicy::Shift { keep } => self.front = keep,
            ContextPolicy::Window { sinks, .. } => self.front = sinks,
            ContextPolicy::HeavyHitters { recent, .. } => self.exact_tail = Some(recent),
            ContextPolicy::Stop => {}
        }
        let params = GenParams {
            max_tokens: self.settings.max_tokens,
            sampler,
            stop: self.settings.stop.clone(),
            ignore_eos: false,
            keep: true,
            context,
            constraint: self.settings.constraint.clone(),
            speculate: self.settings.speculate.clone(),
        };
        // Where the new tokens start in the sequence and in the conversation's tokens.
        let mut turn = turn;
        if self.shifting() {
            self.truncate_to(turn.keep)?;
            if self.seq.is_some() && turn.tokens.is_empty() {
                // Nothing new: the last token is read again for its logits.
                let last = *self.logical.last().expect("a sequence holds tokens");
                self.truncate_to(turn.keep - 1)?;
                turn.keep -= 1;
                turn.tokens = vec![last];
            }
            if self.seq.is_none() {
                // Read afresh: the whole conversation.
                turn.keep = 0;
                turn.tokens = self.conv.reply_prompt(self.tokenizer())?.tokens;
            }
        }
        let start_held = self.held().len();
        // The reply's first token completes a prompt healed of its trailing space.
        let extra = SubmitOptions {
            heal: turn.heal.clone(),
            ..SubmitOptions::default()
        };
        let seq = match self.seq {
            Some(seq) => {
                if !self.shifting() {
                    self.sched.truncate(seq, turn.keep)?;
                }
                self.sched
                    .submit_on_with(seq, &turn.tokens, params, extra)
                    .map_err(submit_error)?;
                seq
            }
            None => {
                let seq = self
                    .sched
                    .submit_with(&turn.tokens, params, extra)
                    .map_err(submit_error)?;
                self.seq = Some(seq);
                seq
            }
        };
        // An empty continuation re-evaluates the held last token (its logits were not kept).
        (io.on_status)(TurnStatus::Reading(turn.tokens.len().max(1)));
        let mut reply = String::new();
        let mut done: Option<GenStats> = None;
        let mut failure: Option<CoreError> = None;
        let mut first = true;
        let mut stop_asked = false;
        while done.is_none() && failure.is_none() {
            if !stop_asked && (io.interrupted)() {
                self.sched.cancel(seq);
                stop_asked = true;
            }
            let on_text = &mut *io.on_text;
            let on_status = &mut *io.on_status;
            self.sched.step(&mut |ev| match ev {
                Event::Text { seq: s, text } if s == seq => {
                    if first {
                        on_status(TurnStatus::Read);
                        first = false;
                    }
                    reply.push_str(text);
                    if !on_text(text) {
                        stop_asked = true;
                    }
                }
                Event::Done { seq: s, stats } if s == seq => done = Some(stats),
                Event::Error { seq: s, error } if s == seq => failure = Some(error),
                _ => {}
            })?;
            if stop_asked && done.is_none() {
                self.sched.cancel(seq);
            }
        }
        if first {
            (io.on_status)(TurnStatus::Read);
        }
        if let Some(f) = failure {
            return Err(SessionError::Reply(f));
        }
        let reply_stats = done.expect("loop ends with a result");
        if self.shifting() {
            // The conversation's tokens: what was kept, then every token this turn put in
            // the sequence (the last sampled one is never evaluated).
            let evaluated =
                (self.held().len() + reply_stats.discarded_tokens).saturating_sub(start_held);
            self.logical.truncate(turn.keep);
            self.logical.extend(
                turn.tokens
                    .iter()
                    .chain(&reply_stats.tokens)
                    .take(evaluated),
            );
            self.removed += reply_stats.discarded_tokens;
        }
        // Stopped before anything came: no empty reply is kept (the caller restores the
        // conversation), and the cache lets go of the partly read turn now, so what the
        // context holds is the conversation's again (`/show` counts it).
        let unanswered = reply_stats.stop_reason == StopReason::Cancelled && reply.is_empty();
        if unanswered {
            self.truncate_to(turn.keep)?;
        } else {
            self.conv.push(Message::assistant(reply));
        }
        Ok(TurnStats {
            evaluated: reply_stats.prompt_read,
            // Positions of the sequence (with a shift, fewer than the conversation's tokens).
            kept: if self.shifting() {
                start_held + reply_stats.cached_tokens
            } else {
                turn.keep + reply_stats.cached_tokens - usize::from(turn.tokens.is_empty())
            },
            prompt_secs: reply_stats.prompt_secs,
            dropped,
            shifted: reply_stats.discarded_tokens,
            context_used: self.context_used(),
            context_size: n_ctx,
            reply: reply_stats,
            unanswered,
        })
    }

    /// Removes the oldest exchange after the system prompt (messages up to the next user
    /// message, so the conversation still starts with one); the message being answered
    /// always stays. Returns how many messages went (0: nothing left to drop).
    fn drop_oldest_exchange(&mut self) -> usize {
        let start = usize::from(self.conv.system().is_some());
        let msgs = self.conv.messages_mut();
        let mut n = 0;
        while msgs.len() > start + 1 && (n == 0 || msgs[start].role != "user") {
            msgs.remove(start);
            n += 1;
        }
        n
    }
}
