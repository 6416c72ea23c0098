//! Streaming answers as server-sent events, OpenAI's way: `data: {chunk}` per piece of
//! text (a chat answer starts with its role), a last chunk per answer with its finish
//! reason, the usage chunk only when `stream_options.include_usage` asked for it, then
//! `data: [DONE]`. The stream owns the request's receiver and queue place: when the client
//! goes away hyper drops the stream, and the engine thread cancels the sequences.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use bitnet_core::chat::{ToolFormat, parse_tool_calls};
use bitnet_core::runtime::Reply;
use bitnet_core::scheduler::{GenStats, StopReason};
use futures_util::Stream;
use futures_util::stream;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::error::ApiError;
use super::loaded::Shared;
use super::models::InFlight;
use super::request::{Api, GenRequest};
use super::response::Head;
use super::state::AppState;
use super::tools::call_deltas;
use bitnet_core::runtime::{TokenEntry, TokenText};

struct Streaming {
    state: Arc<AppState>,
    /// The model's, for its tokenizer.
    shared: Arc<Shared>,
    _guard: InFlight,
    head: Head,
    rx: UnboundedReceiver<Reply>,
    include_usage: bool,
    prompt_tokens: usize,
    /// With tools, each answer's text is held until it ends and is read for calls.
    tools: Option<ToolFormat>,
    held: Vec<String>,
    held_logprobs: Vec<Vec<TokenEntry>>,
    /// Per answer: its tokens matched to its text (see `token_text.rs`), the text offset
    /// reached, and the figures once done.
    texts: Vec<TokenText>,
    offsets: Vec<usize>,
    stats: Vec<Option<GenStats>>,
    open: usize,
    queued: VecDeque<Event>,
    deadline: Instant,
    finished: bool,
}

/// Streams the replies of `req` (its `n` answers, usage chunk, tool calls).
pub fn stream(
    state: Arc<AppState>,
    shared: Arc<Shared>,
    guard: InFlight,
    head: Head,
    rx: UnboundedReceiver<Reply>,
    req: GenRequest,
    prompt_tokens: usize,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let n = req.n;
    let texts = (0..n)
        .map(|_| TokenText::new(&head.heal, req.logprobs.is_some()))
        .collect();
    let mut s = Streaming {
        deadline: Instant::now() + state.config.timeout,
        state,
        shared,
        _guard: guard,
        head,
        rx,
        include_usage: req.include_usage,
        prompt_tokens,
        tools: req.tool_format,
        held: vec![String::new(); n],
        held_logprobs: vec![Vec::new(); n],
        texts,
        offsets: vec![0; n],
        stats: vec![None; n],
        open: n,
        queued: VecDeque::new(),
        finished: false,
    };
    if s.head.api == Api::Chat {
        for i in 0..n {
            let c = s.head.role(i, s.include_usage);
            s.queued.push_back(data(&c));
        }
    }
    let events = stream::unfold(s, |mut s| async move {
        loop {
            if let Some(ev) = s.queued.pop_front() {
                return Some((Ok(ev), s));
            }
            if s.finished {
                return None;
            }
            s.next_events().await;
        }
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

fn data(v: &serde_json::Value) -> Event {
    Event::default().data(v.to_string())
}

impl Streaming {
    /// Waits for the engine and queues the events it leads to.
    async fn next_events(&mut self) {
        if self.open == 0 {
            if self.include_usage {
                let stats: Vec<&GenStats> = self.stats.iter().flatten().collect();
                let c = self.head.usage_chunk(self.prompt_tokens, &stats);
                self.queued.push_back(data(&c));
            }
            self.queued.push_back(Event::default().data("[DONE]"));
            self.finished = true;
            return;
        }
        let out = match tokio::time::timeout_at(self.deadline, self.rx.recv()).await {
            Ok(Some(out)) => out,
            Ok(None) => {
                self.fail(ApiError::internal("the engine stopped"));
                return;
            }
            Err(_) => {
                self.fail(ApiError::timeout(self.state.config.timeout.as_secs()));
                return;
            }
        };
        let shared = self.shared.clone();
        let Some(loaded) = shared.model.get() else {
            return;
        };
        let Some(tok) = loaded.model.tokenizer() else {
            return;
        };
        match out {
            Reply::Token {
                index,
                token,
                logprobs: Some(lp),
            } => self.texts[index].push(tok, token, &lp),
            // A generation request hears no vectors.
            Reply::Token { .. } | Reply::Embedding { .. } => {}
            Reply::Text { index, text } => {
                let (text, lps) = self.texts[index].text(&text);
                self.send_text(index, text, lps);
            }
            Reply::Done { stats, .. } if stats.stop_reason == StopReason::Cancelled => {
                self.fail(ApiError::cut_off(&stats));
            }
            Reply::Done { index, stats } => {
                let (text, lps) = self.texts[index].finish();
                self.send_text(index, text, lps);
                let called = self.flush_tools(index);
                let c = self.head.finish(index, &stats, called, self.include_usage);
                self.queued.push_back(data(&c));
                self.stats[index] = Some(stats);
                self.open -= 1;
            }
            Reply::Error { index, error } => {
                let _ = index;
                self.fail(ApiError::internal(format!("generation failed: {error}")));
            }
        }
    }

    /// Sends a chunk of answer `index` (with tools, holds it to be read for calls).
    fn send_text(&mut self, index: usize, text: String, lps: Vec<TokenEntry>) {
        if self.tools.is_some() {
            self.held[index].push_str(&text);
            self.held_logprobs[index].extend(lps);
            return;
        }
        if text.is_empty() && lps.is_empty() {
            return;
        }
        let c = self
            .head
            .delta(index, &text, &lps, self.offsets[index], self.include_usage);
        self.offsets[index] += text.len();
        self.queued.push_back(data(&c));
    }

    /// With tools: sends answer `index`'s held text as its calls (`delta.tool_calls`
    /// fragments, true) or as content (false).
    fn flush_tools(&mut self, index: usize) -> bool {
        let Some(format) = self.tools else {
            return false;
        };
        let text = std::mem::take(&mut self.held[index]);
        let parsed = parse_tool_calls(format, &text);
        if parsed.tool_calls.is_empty() {
            if !parsed.content.is_empty() {
                let lps = std::mem::take(&mut self.held_logprobs[index]);
                let c = self.head.delta(
                    index,
                    &parsed.content,
                    &lps,
                    self.offsets[index],
                    self.include_usage,
                );
                self.offsets[index] += parsed.content.len();
                self.queued.push_back(data(&c));
            }
            return false;
        }
        for (k, call) in parsed.tool_calls.iter().enumerate() {
            for fragment in call_deltas(k, call) {
                let c = self.head.tool_delta(index, fragment, self.include_usage);
                self.queued.push_back(data(&c));
            }
        }
        true
    }

    /// Ends the stream with an error event (the status line went out long ago).
    fn fail(&mut self, e: ApiError) {
        self.queued.push_back(data(&e.body()));
        self.queued.push_back(Event::default().data("[DONE]"));
        self.finished = true;
        self.rx.close();
    }
}
