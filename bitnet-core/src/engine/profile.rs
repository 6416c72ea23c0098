//! Per-op timing for `--profile`: the session charges wall time to a fixed set of op kinds
//! (matmul per weight type, attention, norms, activation quantization, head, ...). Off by
//! default; when off, a timed section costs one branch and no clock read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The kinds of work the forward pass is split into for profiling.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Embedding row lookup and dequantization.
    Embed,
    /// RMSNorm (input, sub-norms, output norm).
    Norm,
    /// Per-token int8 activation quantization.
    ActQuant,
    /// Ternary matrix products (I2_S, TQ1_0, TQ2_0 repacked).
    MatmulTernary,
    /// Sign-only (1-bit) matrix products.
    MatmulBinary,
    /// Float matrix products (F16/F32/BF16/Q-type weights outside the head).
    MatmulFloat,
    /// RoPE on q and k.
    Rope,
    /// Writing k and v into the f16 KV cache.
    KvWrite,
    /// Attention scores, softmax and the weighted sum of values.
    Attention,
    /// Gate activation, residual adds and other element-wise work.
    Elementwise,
    /// The output head (vocabulary projection).
    Head,
    /// Sampling the next token.
    Sampling,
    /// Time the calling thread spent waiting for the other pool threads to finish their part.
    PoolWait,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 13] = [
        OpKind::Embed,
        OpKind::Norm,
        OpKind::ActQuant,
        OpKind::MatmulTernary,
        OpKind::MatmulBinary,
        OpKind::MatmulFloat,
        OpKind::Rope,
        OpKind::KvWrite,
        OpKind::Attention,
        OpKind::Elementwise,
        OpKind::Head,
        OpKind::Sampling,
        OpKind::PoolWait,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Embed => "embed",
            OpKind::Norm => "rmsnorm",
            OpKind::ActQuant => "act_quant",
            OpKind::MatmulTernary => "matmul_ternary",
            OpKind::MatmulBinary => "matmul_binary",
            OpKind::MatmulFloat => "matmul_float",
            OpKind::Rope => "rope",
            OpKind::KvWrite => "kv_write",
            OpKind::Attention => "attention",
            OpKind::Elementwise => "elementwise",
            OpKind::Head => "head",
            OpKind::Sampling => "sampling",
            OpKind::PoolWait => "pool_wait",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One row of a profile report.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ProfileRow {
    pub name: &'static str,
    pub seconds: f64,
    pub calls: u64,
}

/// Accumulated time per op kind. Times are wall time on the calling thread, so a parallel
/// matmul is charged once for its whole span (including waiting for the slowest thread).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    enabled: bool,
    seconds: [f64; OpKind::ALL.len()],
    calls: [u64; OpKind::ALL.len()],
}

impl Profile {
    pub fn new(enabled: bool) -> Self {
        Profile {
            enabled,
            ..Profile::default()
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Zeroes every counter (keeps the enabled flag).
    pub fn clear(&mut self) {
        self.seconds = Default::default();
        self.calls = Default::default();
    }

    /// A clock reading if profiling is on.
    #[inline]
    pub fn start(&self) -> Option<Instant> {
        if self.enabled {
            Some(Instant::now())
        } else {
            None
        }
    }

    /// Charges the time since `start` (from [`Profile::start`]) to `kind`.
    #[inline]
    pub fn stop(&mut self, kind: OpKind, start: Option<Instant>) {
        if let Some(t) = start {
            self.add(kind, t.elapsed().as_secs_f64(), 1);
        }
    }

    /// Adds `seconds` over `calls` calls to `kind`.
    pub fn add(&mut self, kind: OpKind, seconds: f64, calls: u64) {
        self.seconds[kind.index()] += seconds;
        self.calls[kind.index()] += calls;
    }

    /// `(name, seconds, calls)` for every kind that was called, in [`OpKind::ALL`] order.
    pub fn rows(&self) -> Vec<ProfileRow> {
        OpKind::ALL
            .iter()
            .filter(|k| self.calls[k.index()] > 0)
            .map(|&k| ProfileRow {
                name: k.name(),
                seconds: self.seconds[k.index()],
                calls: self.calls[k.index()],
            })
            .collect()
    }

    /// Total seconds over all kinds.
    pub fn total_seconds(&self) -> f64 {
        self.seconds.iter().sum()
    }
}

/// Sub-step timing inside a per-token stage that runs on the calling thread alone (decode):
/// shared by reference with the stage closure, so it counts in atomics.
#[derive(Debug, Default)]
pub(super) struct SubTimer {
    on: bool,
    ns: [AtomicU64; OpKind::ALL.len()],
    calls: [AtomicU64; OpKind::ALL.len()],
}

impl SubTimer {
    pub(super) fn set_on(&mut self, on: bool) {
        self.on = on;
    }

    pub(super) fn is_on(&self) -> bool {
        self.on
    }

    /// Runs `f`, charging its time to `kind` when on.
    #[inline]
    pub(super) fn time<R>(&self, kind: OpKind, f: impl FnOnce() -> R) -> R {
        if !self.on {
            return f();
        }
        let t = Instant::now();
        let r = f();
        let i = kind.index();
        self.ns[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.calls[i].fetch_add(1, Ordering::Relaxed);
        r
    }

    /// Moves the counts into `p`.
    pub(super) fn drain_into(&self, p: &mut Profile) {
        for k in OpKind::ALL {
            let i = k.index();
            let ns = self.ns[i].swap(0, Ordering::Relaxed);
            let calls = self.calls[i].swap(0, Ordering::Relaxed);
            if calls > 0 {
                p.add(k, ns as f64 * 1e-9, calls);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_and_on_accumulates() {
        let mut p = Profile::new(false);
        let t = p.start();
        p.stop(OpKind::Head, t);
        assert!(p.rows().is_empty());
        p.set_enabled(true);
        let t = p.start();
        p.stop(OpKind::Head, t);
        p.add(OpKind::Norm, 0.5, 2);
        let rows = p.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].name, "rmsnorm");
        assert_eq!((rows[0].seconds, rows[0].calls), (0.5, 2));
        assert_eq!(rows[1].name, "head");
        assert!(p.total_seconds() >= 0.5);
        p.clear();
        assert!(p.rows().is_empty() && p.is_enabled());
    }
}
