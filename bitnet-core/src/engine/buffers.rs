//! The per-token activation buffers of a forward pass (`[chunk][stride]` each, allocated
//! once with the engine) and the split of per-token work (norms, quantization, rope,
//! residual adds) across the pool's threads ([`per_token`]): each thread gets a contiguous
//! range of the batch's tokens and the rows of every buffer that belong to them.

use std::ops::Range;

use bitnet_kernels::{ActScale, AlignedVec};

use crate::threadpool::{DisjointSlice, ThreadPool, split_range};

/// Per-token activation buffers, each `[chunk][stride]`, each starting on a 64-byte line.
/// The int8 rows (`padded(cols)` bytes, a multiple of 256) then all start on lines, so none of
/// the ternary tiles' 32- or 64-byte activation loads straddles two. A plain `Vec` starts
/// wherever the allocator's history puts it (16 bytes into a line for glibc's mapped
/// allocations), and then half the AVX2 tile's activation loads straddle lines: pp512 ran
/// 1.28x faster aligned on Zen 5 (`bench/2026-11-27-aligned-acts.md`). The float buffers are
/// aligned alike (their rows too wherever the width is a multiple of 16 floats).
#[derive(Debug)]
pub(super) struct Bufs {
    /// Residual stream, stride `n_embd`.
    pub(super) x: AlignedVec<f32>,
    /// The layer norm's output, kept while each projection normalizes it again with its
    /// own input norm (`ModelConfig::proj_norms`), stride `n_embd`.
    pub(super) h: AlignedVec<f32>,
    /// Normed input of the next projection group (f32), stride = that group's `cols`.
    pub(super) xn: AlignedVec<f32>,
    /// The same quantized to int8, stride `padded(cols)`.
    pub(super) xq: AlignedVec<i8>,
    pub(super) acts: Vec<ActScale>,
    /// The same as sign bits, stride `bit_words(cols)`.
    pub(super) bits: AlignedVec<u64>,
    pub(super) bit_scales: Vec<f32>,
    /// Roped queries / keys and values, strides `q_dim`, `kv_dim`, `kv_dim`.
    pub(super) q: AlignedVec<f32>,
    pub(super) k: AlignedVec<f32>,
    pub(super) v: AlignedVec<f32>,
    /// Attention output, stride `q_dim`.
    pub(super) att: AlignedVec<f32>,
    /// FFN inner activations, stride `n_ff`.
    pub(super) ff: AlignedVec<f32>,
}

/// Strides of [`Bufs`] for one per-token stage.
#[derive(Copy, Clone, Debug)]
pub(super) struct Strides {
    pub(super) embd: usize,
    /// `cols` of the projection group the stage prepares input for.
    pub(super) inp: usize,
    pub(super) pc: usize,
    pub(super) words: usize,
    pub(super) q: usize,
    pub(super) kv: usize,
    pub(super) ff: usize,
}

/// A token range's rows of the buffers that hold a projection group's prepared input.
#[derive(Debug)]
pub(super) struct PrepBufs<'a> {
    pub(super) xn: &'a mut [f32],
    pub(super) xq: &'a mut [i8],
    pub(super) acts: &'a mut [ActScale],
    pub(super) bits: &'a mut [u64],
    pub(super) bit_scales: &'a mut [f32],
}

/// A token range's rows of every [`Bufs`] buffer.
#[derive(Debug)]
pub(super) struct TokBufs<'a> {
    pub(super) x: &'a mut [f32],
    pub(super) h: &'a mut [f32],
    pub(super) p: PrepBufs<'a>,
    pub(super) q: &'a mut [f32],
    pub(super) k: &'a mut [f32],
    pub(super) v: &'a mut [f32],
    pub(super) att: &'a mut [f32],
    pub(super) ff: &'a mut [f32],
}

impl Bufs {
    fn range(&mut self, s: &Strides, r: Range<usize>) -> TokBufs<'_> {
        let (a, b) = (r.start, r.end);
        TokBufs {
            x: &mut self.x[a * s.embd..b * s.embd],
            h: &mut self.h[a * s.embd..b * s.embd],
            p: PrepBufs {
                xn: &mut self.xn[a * s.inp..b * s.inp],
                xq: &mut self.xq[a * s.pc..b * s.pc],
                acts: &mut self.acts[a..b],
                bits: &mut self.bits[a * s.words..b * s.words],
                bit_scales: &mut self.bit_scales[a..b],
            },
            q: &mut self.q[a * s.q..b * s.q],
            k: &mut self.k[a * s.kv..b * s.kv],
            v: &mut self.v[a * s.kv..b * s.kv],
            att: &mut self.att[a * s.q..b * s.q],
            ff: &mut self.ff[a * s.ff..b * s.ff],
        }
    }
}

/// Runs `f(tokens, rows of those tokens)` over `0..n_tok`: on the calling thread for a single
/// token, else split across the pool.
pub(super) fn per_token<F>(pool: &ThreadPool, bufs: &mut Bufs, s: &Strides, n_tok: usize, f: F)
where
    F: Fn(Range<usize>, &mut TokBufs<'_>) + Sync,
{
    if n_tok <= 1 || pool.n_threads() == 1 {
        let mut tb = bufs.range(s, 0..n_tok);
        f(0..n_tok, &mut tb);
        return;
    }
    let d_x = DisjointSlice::new(&mut bufs.x[..]);
    let d_h = DisjointSlice::new(&mut bufs.h[..]);
    let d_xn = DisjointSlice::new(&mut bufs.xn[..]);
    let d_xq = DisjointSlice::new(&mut bufs.xq[..]);
    let d_acts = DisjointSlice::new(&mut bufs.acts[..]);
    let d_bits = DisjointSlice::new(&mut bufs.bits[..]);
    let d_bs = DisjointSlice::new(&mut bufs.bit_scales[..]);
    let d_q = DisjointSlice::new(&mut bufs.q[..]);
    let d_k = DisjointSlice::new(&mut bufs.k[..]);
    let d_v = DisjointSlice::new(&mut bufs.v[..]);
    let d_att = DisjointSlice::new(&mut bufs.att[..]);
    let d_ff = DisjointSlice::new(&mut bufs.ff[..]);
    pool.run(&|tid, nt| {
        let r = split_range(n_tok, nt, tid, 1);
        if r.is_empty() {
            return;
        }
        let (a, b) = (r.start, r.end);
        let mut tb = TokBufs {
            x: d_x.slice_mut(a * s.embd..b * s.embd),
            h: d_h.slice_mut(a * s.embd..b * s.embd),
            p: PrepBufs {
                xn: d_xn.slice_mut(a * s.inp..b * s.inp),
                xq: d_xq.slice_mut(a * s.pc..b * s.pc),
                acts: d_acts.slice_mut(a..b),
                bits: d_bits.slice_mut(a * s.words..b * s.words),
                bit_scales: d_bs.slice_mut(a..b),
            },
            q: d_q.slice_mut(a * s.q..b * s.q),
            k: d_k.slice_mut(a * s.kv..b * s.kv),
            v: d_v.slice_mut(a * s.kv..b * s.kv),
            att: d_att.slice_mut(a * s.q..b * s.q),
            ff: d_ff.slice_mut(a * s.ff..b * s.ff),
        };
        f(r, &mut tb);
    });
}
