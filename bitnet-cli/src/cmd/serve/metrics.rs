//! The server's figures, in Prometheus text format for `GET /metrics`: llama.cpp's
//! counters (prompt and predicted tokens, requests processing and deferred, KV use, inputs
//! embedded), latency histograms (time to first token, inter-token, whole request), and the
//! health signals of a 1-bit model's output (3-gram repetition of recent answers). The
//! engine thread writes them, handlers read them; plain atomics and one short mutex, nothing
//! on the hot path waits for a scrape.

use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bitnet_core::health::RepetitionWindow;
use bitnet_core::kv::KvStats;

/// Outputs the repetition gauge looks back over.
const REPETITION_WINDOW: usize = 64;

/// Latency buckets in seconds: a tiny model answers in milliseconds, a 2B one on a busy CPU
/// in seconds.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

#[derive(Debug)]
pub struct Histogram {
    buckets: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in microseconds (atomics hold integers).
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(buckets: &'static [f64]) -> Histogram {
        Histogram {
            buckets,
            counts: buckets.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, secs: f64) {
        if let Some(i) = self.buckets.iter().position(|&b| secs <= b) {
            self.counts[i].fetch_add(1, Relaxed);
        }
        self.count.fetch_add(1, Relaxed);
        self.sum_us.fetch_add((secs * 1e6) as u64, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.buckets.iter().zip(&self.counts) {
            cum += c.load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let n = self.count.load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

/// The engine's state as of its last step.
#[derive(Clone, Copy, Debug, Default)]
struct Gauges {
    processing: usize,
    deferred: usize,
    kv_used_blocks: usize,
    kv_cached_blocks: usize,
    kv_blocks: usize,
    kv_tokens: usize,
    sequences: usize,
}

/// The connection layer's figures (`conn/`).
#[derive(Debug, Default)]
pub struct ConnectionFigures {
    pub open: AtomicU64,
    pub refused: AtomicU64,
    pub evicted: AtomicU64,
    pub header_timeouts: AtomicU64,
    pub idle_timeouts: AtomicU64,
}

#[derive(Debug)]
pub struct Metrics {
    pub prompt_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub predicted_tokens: AtomicU64,
    pub requests: AtomicU64,
    pub rejected: AtomicU64,
    pub cancelled: AtomicU64,
    /// Inputs of embedding requests embedded (each its own sequence).
    pub embeddings: AtomicU64,
    /// Speculative decoding: draft tokens proposed, and those accepted.
    pub draft_tokens: AtomicU64,
    pub draft_accepted: AtomicU64,
    pub ttft: Histogram,
    pub inter_token: Histogram,
    pub request: Histogram,
    pub connections: ConnectionFigures,
    gauges: Mutex<Gauges>,
    repetition: Mutex<RepetitionWindow>,
    /// Per-layer attention entropy (`--attn-entropy`): `None` while off, so the gauge is
    /// not exported at all; empty until the first sampled step.
    attn_entropy: Mutex<Option<Vec<f32>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            predicted_tokens: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            embeddings: AtomicU64::new(0),
            draft_tokens: AtomicU64::new(0),
            draft_accepted: AtomicU64::new(0),
            ttft: Histogram::new(LATENCY_BUCKETS),
            inter_token: Histogram::new(LATENCY_BUCKETS),
            request: Histogram::new(LATENCY_BUCKETS),
            connections: ConnectionFigures::default(),
            gauges: Mutex::new(Gauges::default()),
            repetition: Mutex::new(RepetitionWindow::new(REPETITION_WINDOW)),
            attn_entropy: Mutex::new(None),
        }
    }
}

impl Metrics {
    /// Called by the engine thread after each step.
    pub fn set_engine_state(&self, processing: usize, deferred: usize, kv: &KvStats) {
        let mut g = self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        *g = Gauges {
            processing,
            deferred,
            kv_used_blocks: kv.pool.used,
            kv_cached_blocks: kv.pool.cached,
            kv_blocks: kv.pool.n_blocks,
            kv_tokens: kv.tokens,
            sequences: kv.sequences,
        };
    }

    /// The engine's per-layer attention entropy (turns the gauge on; `None` = not sampled
    /// yet). Reuses the vector, so the engine thread does not allocate per step.
    pub fn set_attention_entropy(&self, h: Option<&[f32]>) {
        let mut g = self.attn_entropy.lock().unwrap_or_else(|p| p.into_inner());
        let v = g.get_or_insert_with(Vec::new);
        v.clear();
        v.extend_from_slice(h.unwrap_or_default());
    }

    /// A finished answer's tokens, for the repetition gauge.
    pub fn add_output(&self, tokens: &[u32]) {
        self.repetition
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tokens);
    }

    pub fn render(&self) -> String {
        let g = *self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        let rep = self
            .repetition
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rate();
        let mut out = String::with_capacity(4096);
        let mut put = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        let c = |a: &AtomicU64| a.load(Relaxed) as f64;
        put(
            "bitnet_prompt_tokens_total",
            "counter",
            "Prompt tokens evaluated (prefix-cache hits not included).",
            c(&self.prompt_tokens),
        );
        put(
            "bitnet_prompt_tokens_cached_total",
            "counter",
            "Prompt tokens taken from the prefix cache.",
            c(&self.cached_tokens),
        );
        put(
            "bitnet_tokens_predicted_total",
            "counter",
            "Tokens generated.",
            c(&self.predicted_tokens),
        );
        put(
            "bitnet_draft_tokens_total",
            "counter",
            "Draft tokens proposed by speculative decoding.",
            c(&self.draft_tokens),
        );
        put(
            "bitnet_draft_tokens_accepted_total",
            "counter",
            "Draft tokens the model accepted.",
            c(&self.draft_accepted),
        );
        put(
            "bitnet_requests_total",
            "counter",
            "Requests accepted (generation and embedding).",
            c(&self.requests),
        );
        put(
            "bitnet_embeddings_total",
            "counter",
            "Inputs of embedding requests embedded (their prompt tokens count in bitnet_prompt_tokens_total).",
            c(&self.embeddings),
        );
        put(
            "bitnet_requests_rejected_total",
            "counter",
            "Requests refused with 503 because the queue was full.",
            c(&self.rejected),
        );
        put(
            "bitnet_requests_cancelled_total",
            "counter",
            "Sequences cancelled (client gone, timeout, shutdown).",
            c(&self.cancelled),
        );
        let k = &self.connections;
        put(
            "bitnet_connections_open",
            "gauge",
            "Client connections open.",
            c(&k.open),
        );
        put(
            "bitnet_connections_refused_total",
            "counter",
            "Connections refused with 503 at --max-connections (every open one was serving).",
            c(&k.refused),
        );
        put(
            "bitnet_connections_evicted_total",
            "counter",
            "Connections closed at --max-connections to make room (idle or slow to send).",
            c(&k.evicted),
        );
        put(
            "bitnet_connections_header_timeouts_total",
            "counter",
            "Connections closed because no complete request header came in --read-timeout.",
            c(&k.header_timeouts),
        );
        put(
            "bitnet_connections_idle_timeouts_total",
            "counter",
            "Keep-alive connections closed after --idle-timeout without a request.",
            c(&k.idle_timeouts),
        );
        put(
            "bitnet_requests_processing",
            "gauge",
            "Sequences being prefilled or decoded.",
            g.processing as f64,
        );
        put(
            "bitnet_requests_deferred",
            "gauge",
            "Sequences waiting for a slot or KV room.",
            g.deferred as f64,
        );
        let ratio = if g.kv_blocks > 0 {
            g.kv_used_blocks as f64 / g.kv_blocks as f64
        } else {
            0.0
        };
        put(
            "bitnet_kv_cache_usage_ratio",
            "gauge",
            "KV blocks held by live sequences over all blocks.",
            ratio,
        );
        put(
            "bitnet_kv_cache_tokens",
            "gauge",
            "Positions held by live sequences.",
            g.kv_tokens as f64,
        );
        put(
            "bitnet_kv_cache_cached_blocks",
            "gauge",
            "Unheld KV blocks kept for prefix reuse.",
            g.kv_cached_blocks as f64,
        );
        put(
            "bitnet_kv_sequences",
            "gauge",
            "Live sequences holding KV.",
            g.sequences as f64,
        );
        put(
            "bitnet_repetition_rate_3gram",
            "gauge",
            "Share of repeated token 3-grams in the last 64 answers (a looping model shows here).",
            rep.unwrap_or(0.0),
        );
        if let Some(h) = &*self.attn_entropy.lock().unwrap_or_else(|p| p.into_inner()) {
            let name = "bitnet_attention_entropy_nats";
            let _ = writeln!(
                out,
                "# HELP {name} Mean Shannon entropy of each layer's attention on sampled decode steps (moving average, --attn-entropy).\n# TYPE {name} gauge"
            );
            for (l, v) in h.iter().enumerate() {
                let _ = writeln!(out, "{name}{{layer=\"{l}\"}} {v}");
            }
        }
        self.ttft.render(
            &mut out,
            "bitnet_time_to_first_token_seconds",
            "From submission to the first generated token.",
        );
        self.inter_token.render(
            &mut out,
            "bitnet_inter_token_latency_seconds",
            "Between consecutive generated tokens of a sequence.",
        );
        self.request.render(
            &mut out,
            "bitnet_request_duration_seconds",
            "From submission to the end of a sequence.",
        );
        out
    }
}
