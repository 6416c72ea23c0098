//! The server's figures, in Prometheus text format for `GET /metrics`: llama.cpp's
//! counters (prompt and predicted tokens, requests processing and deferred, KV use, inputs
//! embedded), latency histograms (time to first token, inter-token, whole request), and the
//! health signals of a 1-bit model's output (3-gram repetition of recent answers). The
//! engine thread writes them, handlers read them; plain atomics and one short mutex, nothing
//! on the hot path waits for a scrape.
//!
//! Each model served has its own [`Metrics`]; with several models each of their series
//! carries a `model="NAME"` label (one model's series carry none, as they always have), and
//! the connection figures and the model loads are the server's own.

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

    /// The histogram's samples, each labelled `model` (when given) and `le`.
    fn render(&self, out: &mut String, name: &str, model: Option<&str>) {
        let mut cum = 0;
        for (b, c) in self.buckets.iter().zip(&self.counts) {
            cum += c.load(Relaxed);
            let l = labels(model, Some(("le", &b.to_string())));
            let _ = writeln!(out, "{name}_bucket{l} {cum}");
        }
        let n = self.count.load(Relaxed);
        let l = labels(model, Some(("le", "+Inf")));
        let _ = writeln!(out, "{name}_bucket{l} {n}");
        let sum = self.sum_us.load(Relaxed) as f64 / 1e6;
        let l = labels(model, None);
        let _ = writeln!(out, "{name}_sum{l} {sum}\n{name}_count{l} {n}");
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
    /// Set by the connection registry, under its lock.
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

    /// The engine is gone (the model was unloaded): nothing runs, no KV is held.
    pub fn clear_engine_state(&self) {
        *self.gauges.lock().unwrap_or_else(|p| p.into_inner()) = Gauges::default();
    }

    /// Every counter and gauge of one model, in the order they are exported.
    fn scalars(&self) -> Vec<Scalar> {
        let g = *self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        let rep = self
            .repetition
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rate();
        let c = |a: &AtomicU64| a.load(Relaxed) as f64;
        let ratio = if g.kv_blocks > 0 {
            g.kv_used_blocks as f64 / g.kv_blocks as f64
        } else {
            0.0
        };
        vec![
            Scalar {
                name: "bitnet_prompt_tokens_total",
                kind: "counter",
                help: "Prompt tokens evaluated (prefix-cache hits not included).",
                value: c(&self.prompt_tokens),
            },
            Scalar {
                name: "bitnet_prompt_tokens_cached_total",
                kind: "counter",
                help: "Prompt tokens taken from the prefix cache.",
                value: c(&self.cached_tokens),
            },
            Scalar {
                name: "bitnet_tokens_predicted_total",
                kind: "counter",
                help: "Tokens generated.",
                value: c(&self.predicted_tokens),
            },
            Scalar {
                name: "bitnet_draft_tokens_total",
                kind: "counter",
                help: "Draft tokens proposed by speculative decoding.",
                value: c(&self.draft_tokens),
            },
            Scalar {
                name: "bitnet_draft_tokens_accepted_total",
                kind: "counter",
                help: "Draft tokens the model accepted.",
                value: c(&self.draft_accepted),
            },
            Scalar {
                name: "bitnet_requests_total",
                kind: "counter",
                help: "Requests accepted (generation and embedding).",
                value: c(&self.requests),
            },
            Scalar {
                name: "bitnet_embeddings_total",
                kind: "counter",
                help: "Inputs of embedding requests embedded (their prompt tokens count in bitnet_prompt_tokens_total).",
                value: c(&self.embeddings),
            },
            Scalar {
                name: "bitnet_requests_rejected_total",
                kind: "counter",
                help: "Requests refused with 503 because the queue was full.",
                value: c(&self.rejected),
            },
            Scalar {
                name: "bitnet_requests_cancelled_total",
                kind: "counter",
                help: "Sequences cancelled (client gone, timeout, shutdown).",
                value: c(&self.cancelled),
            },
            Scalar {
                name: "bitnet_requests_processing",
                kind: "gauge",
                help: "Sequences being prefilled or decoded.",
                value: g.processing as f64,
            },
            Scalar {
                name: "bitnet_requests_deferred",
                kind: "gauge",
                help: "Sequences waiting for a slot or KV room.",
                value: g.deferred as f64,
            },
            Scalar {
                name: "bitnet_kv_cache_usage_ratio",
                kind: "gauge",
                help: "KV blocks held by live sequences over all blocks.",
                value: ratio,
            },
            Scalar {
                name: "bitnet_kv_cache_tokens",
                kind: "gauge",
                help: "Positions held by live sequences.",
                value: g.kv_tokens as f64,
            },
            Scalar {
                name: "bitnet_kv_cache_cached_blocks",
                kind: "gauge",
                help: "Unheld KV blocks kept for prefix reuse.",
                value: g.kv_cached_blocks as f64,
            },
            Scalar {
                name: "bitnet_kv_sequences",
                kind: "gauge",
                help: "Live sequences holding KV.",
                value: g.sequences as f64,
            },
            Scalar {
                name: "bitnet_repetition_rate_3gram",
                kind: "gauge",
                help: "Share of repeated token 3-grams in the last 64 answers (a looping model shows here).",
                value: rep.unwrap_or(0.0),
            },
        ]
    }

    fn histograms(&self) -> [(&'static str, &'static str, &Histogram); 3] {
        [
            (
                "bitnet_time_to_first_token_seconds",
                "From submission to the first generated token.",
                &self.ttft,
            ),
            (
                "bitnet_inter_token_latency_seconds",
                "Between consecutive generated tokens of a sequence.",
                &self.inter_token,
            ),
            (
                "bitnet_request_duration_seconds",
                "From submission to the end of a sequence.",
                &self.request,
            ),
        ]
    }

    fn attention_entropy(&self) -> Option<Vec<f32>> {
        self.attn_entropy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One sample of a counter or gauge.
struct Scalar {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: f64,
}

/// One model's figures and its label (`None`: the server serves that model alone).
pub struct Labelled<'a> {
    pub model: Option<&'a str>,
    pub metrics: &'a Metrics,
}

/// The server's own figures: connections, and the models loaded.
pub struct ServerFigures<'a> {
    pub connections: &'a ConnectionFigures,
    pub models_loaded: usize,
    pub loads: u64,
    pub unloads: u64,
    pub load_failures: u64,
}

/// `{model="NAME",KEY="VALUE"}`, or as much of it as there is (nothing for neither).
fn labels(model: Option<&str>, extra: Option<(&str, &str)>) -> String {
    let mut parts = Vec::new();
    if let Some(m) = model {
        parts.push(format!("model=\"{}\"", escape(m)));
    }
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{}\"", escape(v)));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A label value as Prometheus' text format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The text of `GET /metrics`: each family once, with a sample per model.
pub fn render(models: &[Labelled<'_>], server: &ServerFigures<'_>) -> String {
    let mut out = String::with_capacity(4096 * models.len().max(1));
    let scalars: Vec<Vec<Scalar>> = models.iter().map(|m| m.metrics.scalars()).collect();
    if let Some(first) = scalars.first() {
        for (i, family) in first.iter().enumerate() {
            header(&mut out, family.name, family.kind, family.help);
            for (m, s) in models.iter().zip(&scalars) {
                let l = labels(m.model, None);
                let _ = writeln!(out, "{}{l} {}", family.name, s[i].value);
            }
        }
    }
    let entropies: Vec<Option<Vec<f32>>> = models
        .iter()
        .map(|m| m.metrics.attention_entropy())
        .collect();
    if entropies.iter().any(Option::is_some) {
        let name = "bitnet_attention_entropy_nats";
        header(
            &mut out,
            name,
            "gauge",
            "Mean Shannon entropy of each layer's attention on sampled decode steps (moving average, --attn-entropy).",
        );
        for (m, h) in models.iter().zip(&entropies) {
            for (layer, v) in h.iter().flatten().enumerate() {
                let l = labels(m.model, Some(("layer", &layer.to_string())));
                let _ = writeln!(out, "{name}{l} {v}");
            }
        }
    }
    for i in 0..3 {
        let mut headed = false;
        for m in models {
            let (name, help, h) = m.metrics.histograms()[i];
            if !headed {
                header(&mut out, name, "histogram", help);
                headed = true;
            }
            h.render(&mut out, name, m.model);
        }
    }
    let k = server.connections;
    let c = |a: &AtomicU64| a.load(Relaxed) as f64;
    let server_scalars = [
        (
            "bitnet_connections_open",
            "gauge",
            "Client connections open (at most --max-connections; one evicted at the cap stops counting when evicted, before its socket closes).",
            c(&k.open),
        ),
        (
            "bitnet_connections_refused_total",
            "counter",
            "Connections refused with 503 at --max-connections (every open one was serving).",
            c(&k.refused),
        ),
        (
            "bitnet_connections_evicted_total",
            "counter",
            "Connections closed at --max-connections to make room (idle or slow to send).",
            c(&k.evicted),
        ),
        (
            "bitnet_connections_header_timeouts_total",
            "counter",
            "Connections closed because no complete request header came in --read-timeout.",
            c(&k.header_timeouts),
        ),
        (
            "bitnet_connections_idle_timeouts_total",
            "counter",
            "Keep-alive connections closed after --idle-timeout without a request.",
            c(&k.idle_timeouts),
        ),
        (
            "bitnet_models_loaded",
            "gauge",
            "Models loaded or loading now.",
            server.models_loaded as f64,
        ),
        (
            "bitnet_model_loads_total",
            "counter",
            "Model loads that completed (the default model's at start included).",
            server.loads as f64,
        ),
        (
            "bitnet_model_unloads_total",
            "counter",
            "Models unloaded to make room for another (--models-max, --models-memory-max).",
            server.unloads as f64,
        ),
        (
            "bitnet_model_load_failures_total",
            "counter",
            "Model loads that failed.",
            server.load_failures as f64,
        ),
    ];
    for (name, kind, help, v) in server_scalars {
        header(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
    out
}
