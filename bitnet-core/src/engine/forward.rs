//! One forward pass: the per-layer math of BitNet b1.58 (with the variants the config
//! selects) as a sequence of parallel regions over a laid-out [`Batch`], which the pass
//! takes as an argument, computed in the engine's [`Workspace`]:
//!
//! 1. residual add of the previous layer's `ffn_down` output (through its `post_ffw_norm`,
//!    Gemma3), `attn_norm`, int8 quantization (once for q, k and v);
//! 2. q, k, v products; 3. per-head q/k norms (Qwen3, Gemma3), rope on q and k; k and v into
//!    the KV cache;
//! 4. attention; 5. `attn_sub_norm` (if any) and quantization;
//! 6. `attn_output`; 7. residual add (through `post_attention_norm`, Gemma3), `ffn_norm`,
//!    quantization (once for gate and up);
//! 8. gate and up; 9. `act(gate) * up`, `ffn_sub_norm` (if any), quantization;
//! 10. `ffn_down`, added to the residual by the next layer's step 1 (or before the head).
//!
//! Where every projection has its own input norm (the BitNet embedding models' BitLinear,
//! `blk.N.<proj>_norm_in`), steps 1 and 7 keep the layer-normed rows (`Bufs::h`) and each
//! projection of the group normalizes and quantizes them again on its own ([`OwnNorm`]);
//! `attn_output` and `ffn_down` take their input norm in the sub-norm's place.
//!
//! Products are `intdot * w_scale / act_scale` per output row (see `model/linear.rs`).
//! The KV rows are written through `KvStorage::write_rows` (see `kv/storage.rs`).

use std::time::{Duration, Instant};

use bitnet_kernels::float;
use bitnet_kernels::{AlignedVec, Isa, quantize_act, quantize_act_binary, quantize_act_int4};

use super::attention::{self, AttnShape, KvView};
use super::batch::Batch;
use super::buffers::{self, Bufs, PrepBufs, Strides};
use super::matmul::{self, Blocked, HEAD_ALIGN};
use super::profile::{OpKind, Profile, SubTimer};
use super::workspace::{HEAD_BATCH, Workspace};
use crate::config::{ActBits, FfnAct, Proj, RopeStyle};
use crate::error::CoreError;
use crate::kv::KvStorage;
use crate::model::linear::{LinInput, Linear, LinearKind, Needs, bit_words, padded};
use crate::model::{Layer, Model, Store};
use crate::threadpool::ThreadPool;

/// The profile row a projection's products are charged to.
fn matmul_kind(lin: &Linear) -> OpKind {
    match lin.kind {
        LinearKind::Ternary(_) => OpKind::MatmulTernary,
        LinearKind::Binary(_) => OpKind::MatmulBinary,
        LinearKind::Float { .. } => OpKind::MatmulFloat,
    }
}

/// Normalizes (or copies) `src` into local token `i`'s row of `p` (rows of `cols`) and
/// quantizes it in the representations `needs` asks for.
#[allow(clippy::too_many_arguments)]
fn prep(
    isa: Isa,
    tm: &SubTimer,
    eps: f32,
    norm: Option<&[f32]>,
    src: &[f32],
    needs: Needs,
    p: &mut PrepBufs<'_>,
    i: usize,
    cols: usize,
) {
    let (pc, w) = (padded(cols), bit_words(cols));
    let xn = &mut p.xn[i * cols..(i + 1) * cols];
    let x: &[f32] = match norm {
        Some(weight) => {
            tm.time(OpKind::Norm, || float::rmsnorm(isa, src, weight, eps, xn));
            xn
        }
        None => {
            if needs.f32 {
                xn.copy_from_slice(src);
            }
            src
        }
    };
    if needs.int8 {
        let xq = &mut p.xq[i * pc..(i + 1) * pc];
        p.acts[i] = tm.time(OpKind::ActQuant, || {
            if needs.int4 {
                quantize_act_int4(isa, x, xq)
            } else {
                quantize_act(isa, x, xq)
            }
        });
    }
    if needs.bits {
        let bits = &mut p.bits[i * w..(i + 1) * w];
        p.bit_scales[i] = tm.time(OpKind::ActQuant, || quantize_act_binary(isa, x, bits));
    }
}

/// `x` RMS-normalized in place (`tmp`: the thread's scratch).
fn rmsnorm_in_place(isa: Isa, x: &mut [f32], weight: &[f32], eps: f32, tmp: &mut Vec<f32>) {
    tmp.clear();
    tmp.extend_from_slice(x);
    float::rmsnorm(isa, tmp, weight, eps, x);
}

/// Adds token `tok`'s row of a projection's output to the residual `x`, normalized first by
/// `post_norm` where the model has one (Gemma3's post-attention and post-FFN norms).
#[allow(clippy::too_many_arguments)]
fn add_output(
    isa: Isa,
    b: &Blocked<'_>,
    tok: usize,
    x: &mut [f32],
    post_norm: Option<&[f32]>,
    eps: f32,
    tmp: &mut Vec<f32>,
) {
    match post_norm {
        None => b.add_row(isa, tok, x),
        Some(w) => {
            tmp.resize(2 * x.len(), 0.0);
            let (row, normed) = tmp.split_at_mut(x.len());
            b.copy_row(tok, row);
            float::rmsnorm(isa, row, w, eps, normed);
            float::add_inplace(isa, x, normed);
        }
    }
}

fn group_needs(lins: &[&Linear], binary: bool) -> Needs {
    lins.iter()
        .fold(Needs::default(), |n, l| n.union(l.needs(binary)))
}

/// The prepared input of a group whose rows have `cols` columns, for `n` tokens.
fn lin_input(bufs: &Bufs, n: usize, cols: usize) -> LinInput<'_> {
    LinInput {
        n_tok: n,
        x: &bufs.xn[..n * cols],
        q: &bufs.xq[..n * padded(cols)],
        acts: &bufs.acts[..n],
        bits: &bufs.bits[..n * bit_words(cols)],
        bit_scales: &bufs.bit_scales[..n],
    }
}

/// Charges a parallel region's wall time to `kind`, less the time the calling thread waited
/// for the other threads, which goes to [`OpKind::PoolWait`] (so the rows add up).
fn stop_region(profile: &mut Profile, pool: &ThreadPool, kind: OpKind, t: Option<Instant>) {
    let Some(t) = t else { return };
    let total = t.elapsed();
    let w = pool.take_wait_stats();
    let wait = w
        .threads
        .first()
        .map_or(Duration::ZERO, |s| s.wait)
        .min(total);
    profile.add(kind, (total - wait).as_secs_f64(), 1);
    if w.regions > 0 {
        profile.add(OpKind::PoolWait, wait.as_secs_f64(), w.regions);
    }
}

/// Charges a per-token stage: its sub-steps if they were timed (it ran on the calling
/// thread alone), else it was a parallel region.
fn charge(
    profile: &mut Profile,
    pool: &ThreadPool,
    tm: &SubTimer,
    kind: OpKind,
    t: Option<Instant>,
) {
    if tm.is_on() {
        tm.drain_into(profile);
    } else {
        stop_region(profile, pool, kind, t);
    }
}

impl Workspace {
    /// Runs `batch` through `m`: writes every token's K/V rows into its KV slot of `kv`,
    /// attends over each token's own sequence, and hands the logits rows the batch asks
    /// for to `on_logits(item, token in item, row)` (final normed hidden states for the
    /// items that ask for them, [`super::Logits::HiddenLast`]; those rows come first).
    pub(super) fn run(
        &mut self,
        m: &Model,
        kv: &mut KvStorage,
        batch: &Batch,
        on_logits: &mut dyn FnMut(usize, usize, &[f32]),
    ) -> Result<(), CoreError> {
        let Workspace {
            isa,
            pool,
            rope,
            bufs,
            blk,
            scores,
            hn,
            hacts,
            logits,
            head_blk,
            profile,
            timer,
            attn_stats,
            kv_xnor,
            int4_layers,
            ..
        } = self;
        let (isa, pool) = (*isa, &*pool);
        let cfg = &m.config;
        let store = &m.store;
        let tokens = &batch.tokens[..];
        let n = tokens.len();
        let positions = &batch.pos[..];
        let binary = cfg.act_bits == ActBits::Binary;
        let eps = cfg.rms_eps;
        let (e, qd, kvd, nff, hd) = (
            cfg.n_embd,
            cfg.q_dim(),
            cfg.kv_dim(),
            cfg.n_ff,
            cfg.head_dim,
        );
        let (n_head, n_kv) = (cfg.n_head, cfg.n_head_kv);
        // Sub-steps are timed where one thread runs a per-token stage alone.
        timer.set_on(profile.is_enabled() && (n == 1 || pool.n_threads() == 1));
        let strides = |inp: usize| Strides {
            embd: e,
            inp,
            pc: padded(inp),
            words: bit_words(inp),
            q: qd,
            kv: kvd,
            ff: nff,
        };

        // Embedding rows, straight from the file's bytes (or the tied Q8_0 head's).
        let t = profile.start();
        for (i, &tok) in tokens.iter().enumerate() {
            let x = &mut bufs.x[i * e..(i + 1) * e];
            m.embed_row(tok as usize, x);
            if let Some(s) = cfg.embd_scale {
                float::scale_inplace(isa, x, s);
            }
        }
        profile.stop(OpKind::Embed, t);

        let (max_pos, block_tokens) = (kv.capacity_tokens(), kv.block_tokens());
        let tm: &SubTimer = timer;

        for (l, layer) in m.layers.iter().enumerate() {
            // Each layer's K and V have their own formats and rotation. One KV head's rows
            // of a block are next to each other: `[pos][head_dim]` in the format's bytes
            // (see `KvStorage`).
            let attn = {
                let rows = kv.layer(l);
                AttnShape {
                    n_head,
                    group: cfg.gqa_group(),
                    head_dim: hd,
                    k_stride: rows.k_head_bytes(),
                    v_stride: rows.v_head_bytes(),
                    scale: 1.0 / (hd as f32).sqrt(),
                    max_pos,
                    block_tokens,
                    v_rotated: rows.v_rotated(),
                    // Only B1 keys have an XNOR kernel: other layers score as usual.
                    xnor: *kv_xnor,
                }
            };
            // Keys stored rotated are scored by queries rotated the same way (H is
            // orthonormal: the scores do not change in exact arithmetic).
            let q_rotated = kv.k_rotated(l);

            // 1. residual add of the previous down projection, attn_norm, quantize (or,
            // where each projection has its own input norm, the normed rows kept in `h`).
            let qkv = [&layer.q, &layer.k, &layer.v];
            // A plan's int4 layers quantize the inputs of q/k/v and of gate/up to 4 bits.
            let int4 = int4_layers[l];
            let needs = group_needs(&qkv, binary).with_int4(int4);
            let own_norms = layer.norm_in.is_some();
            {
                let prev =
                    (l > 0).then(|| matmul::blocked(pool, &m.layers[l - 1].down, &blk[0], n));
                let post = if l > 0 {
                    m.layers[l - 1].post_ffn_norm.as_deref()
                } else {
                    None
                };
                let step = ResidualNorm {
                    out: prev.as_ref(),
                    post,
                    norm: &layer.attn_norm,
                    own_norms,
                    needs,
                };
                step.run(pool, isa, tm, profile, bufs, &strides(e), n, eps);
            }

            // 2. q, k, v.
            let group = [
                (Proj::AttnQ, &layer.q),
                (Proj::AttnK, &layer.k),
                (Proj::AttnV, &layer.v),
            ];
            group_products(
                pool,
                isa,
                store,
                binary,
                tm,
                profile,
                bufs,
                &strides(e),
                n,
                eps,
                blk,
                layer,
                &group,
                int4,
            );

            // 3. rope; k and v into the cache.
            {
                let [b0, b1, b2] = &*blk;
                let (bq, bk, bv) = (
                    matmul::blocked(pool, &layer.q, b0, n),
                    matmul::blocked(pool, &layer.k, b1, n),
                    matmul::blocked(pool, &layer.v, b2, n),
                );
                let t = profile.start();
                let rope = &*rope;
                let qk_norms = layer.q_norm.as_deref().zip(layer.k_norm.as_deref());
                buffers::per_token(pool, bufs, &strides(e), n, |r, tb| {
                    let mut tmp = Vec::new();
                    for (i, tok) in r.enumerate() {
                        let (q, k, v) = (
                            &mut tb.q[i * qd..(i + 1) * qd],
                            &mut tb.k[i * kvd..(i + 1) * kvd],
                            &mut tb.v[i * kvd..(i + 1) * kvd],
                        );
                        bq.copy_row(tok, q);
                        bk.copy_row(tok, k);
                        bv.copy_row(tok, v);
                        if let Some((qn, kn)) = qk_norms {
                            tm.time(OpKind::Norm, || {
                                for head in q.chunks_exact_mut(hd) {
                                    rmsnorm_in_place(isa, head, qn, eps, &mut tmp);
                                }
                                for head in k.chunks_exact_mut(hd) {
                                    rmsnorm_in_place(isa, head, kn, eps, &mut tmp);
                                }
                            });
                        }
                        let pos = positions[tok];
                        tm.time(OpKind::Rope, || match cfg.rope {
                            RopeStyle::Neox => {
                                rope.apply_neox(isa, q, hd, n_head, pos);
                                rope.apply_neox(isa, k, hd, n_kv, pos);
                            }
                            RopeStyle::Normal => {
                                rope.apply_normal(isa, q, hd, n_head, pos);
                                rope.apply_normal(isa, k, hd, n_kv, pos);
                            }
                        });
                        if q_rotated {
                            float::hadamard_rows(isa, hd, q);
                        }
                    }
                });
                charge(profile, pool, tm, OpKind::Rope, t);
                let t = profile.start();
                // Runs of consecutive slots of one block are encoded in one call.
                let mut i = 0;
                while i < n {
                    let (b, s0) = (batch.block[i], batch.slot[i]);
                    let mut j = i + 1;
                    while j < n && batch.block[j] == b && batch.slot[j] == s0 + (j - i) as u32 {
                        j += 1;
                    }
                    let (k, v) = (&bufs.k[i * kvd..j * kvd], &bufs.v[i * kvd..j * kvd]);
                    kv.write_rows(l, b, s0 as usize, k, v);
                    i = j;
                }
                profile.stop(OpKind::KvWrite, t);
            }

            // 4. attention.
            let t = profile.start();
            attention::attention(
                pool,
                isa,
                &attn,
                &KvView { rows: kv.layer(l) },
                batch,
                &bufs.q[..n * qd],
                &mut bufs.att[..n * qd],
                scores,
                &mut attn_stats.probe(),
            );
            attn_stats.end_layer(l, batch, n_head / cfg.gqa_group());
            stop_region(profile, pool, OpKind::Attention, t);

            // 5. attn_sub_norm (or the projection's own input norm), quantize.
            let o = [&layer.o];
            let o_norm = layer
                .attn_sub_norm
                .as_deref()
                .or(layer.norm_in(Proj::AttnOut));
            let needs = group_needs(&o, binary);
            let t = profile.start();
            buffers::per_token(pool, bufs, &strides(qd), n, |r, tb| {
                for i in 0..r.len() {
                    let a = &tb.att[i * qd..(i + 1) * qd];
                    prep(isa, tm, eps, o_norm, a, needs, &mut tb.p, i, qd);
                }
            });
            charge(profile, pool, tm, OpKind::Norm, t);

            // 6. attn_output.
            self::matmuls(pool, isa, store, binary, profile, &o, bufs, n, qd, blk, 0);

            // 7. residual add (through the post-attention norm, if any), ffn_norm, quantize
            // (or keep the normed rows in `h`, as in step 1).
            let gu = [&layer.gate, &layer.up];
            let needs = group_needs(&gu, binary).with_int4(int4);
            {
                let bo = matmul::blocked(pool, &layer.o, &blk[0], n);
                let step = ResidualNorm {
                    out: Some(&bo),
                    post: layer.post_attn_norm.as_deref(),
                    norm: &layer.ffn_norm,
                    own_norms,
                    needs,
                };
                step.run(pool, isa, tm, profile, bufs, &strides(e), n, eps);
            }

            // 8. gate, up.
            let group = [(Proj::FfnGate, &layer.gate), (Proj::FfnUp, &layer.up)];
            group_products(
                pool,
                isa,
                store,
                binary,
                tm,
                profile,
                bufs,
                &strides(e),
                n,
                eps,
                blk,
                layer,
                &group,
                int4,
            );

            // 9. act(gate) * up, ffn_sub_norm, quantize.
            let d = [&layer.down];
            let needs = group_needs(&d, binary);
            {
                let (bg, bu) = (
                    matmul::blocked(pool, &layer.gate, &blk[0], n),
                    matmul::blocked(pool, &layer.up, &blk[1], n),
                );
                let t = profile.start();
                buffers::per_token(pool, bufs, &strides(nff), n, |r, tb| {
                    for (i, tok) in r.enumerate() {
                        let f = &mut tb.ff[i * nff..(i + 1) * nff];
                        // `xn` is free until the sub-norm writes it: hold `up` there.
                        let up = &mut tb.p.xn[i * nff..(i + 1) * nff];
                        bg.copy_row(tok, f);
                        bu.copy_row(tok, up);
                        tm.time(OpKind::Elementwise, || match cfg.ffn_act {
                            FfnAct::Silu => float::silu_mul(isa, f, up),
                            FfnAct::Relu2 => float::relu2_mul(isa, f, up),
                            FfnAct::GeluTanh => float::gelu_tanh_mul(isa, f, up),
                        });
                        let norm = layer
                            .ffn_sub_norm
                            .as_deref()
                            .or(layer.norm_in(Proj::FfnDown));
                        prep(isa, tm, eps, norm, f, needs, &mut tb.p, i, nff);
                    }
                });
                charge(profile, pool, tm, OpKind::Elementwise, t);
            }

            // 10. ffn_down (added to the residual by the next step 1).
            self::matmuls(pool, isa, store, binary, profile, &d, bufs, n, nff, blk, 0);
        }

        // Final residual add, output norm, head: only for the rows that want output.
        let rows = &batch.rows[..];
        let t = profile.start();
        if let Some(last) = m.layers.last() {
            let bd = matmul::blocked(pool, &last.down, &blk[0], n);
            let post = last.post_ffn_norm.as_deref();
            let mut tmp = Vec::new();
            for &(_, _, tok) in rows.iter().chain(&batch.hidden_rows) {
                let tok = tok as usize;
                let x = &mut bufs.x[tok * e..(tok + 1) * e];
                add_output(isa, &bd, tok, x, post, eps, &mut tmp);
            }
        }
        profile.stop(OpKind::Elementwise, t);
        if !batch.hidden_rows.is_empty() {
            // Embeddings: each row's final normed hidden state, no head.
            let t = profile.start();
            let h = &mut hn[..e];
            for &(item, idx, tok) in &batch.hidden_rows {
                let tok = tok as usize;
                float::rmsnorm(isa, &bufs.x[tok * e..(tok + 1) * e], &m.output_norm, eps, h);
                on_logits(item as usize, idx as usize, h);
            }
            profile.stop(OpKind::Norm, t);
        }
        let vocab = cfg.n_vocab;
        for group in rows.chunks(HEAD_BATCH) {
            let nb = group.len();
            let t = profile.start();
            for (j, &(_, _, tok)) in group.iter().enumerate() {
                let tok = tok as usize;
                let h = &mut hn[j * e..(j + 1) * e];
                float::rmsnorm(isa, &bufs.x[tok * e..(tok + 1) * e], &m.output_norm, eps, h);
                hacts.set_row(j, h);
            }
            profile.stop(OpKind::Norm, t);
            let t = profile.start();
            let acts = &*hacts;
            if nb == 1 {
                // One row: the blocked layout is the plain one.
                matmul::head_rows(pool, isa, store, &m.head, hn, acts, 1, logits);
                stop_region(profile, pool, OpKind::Head, t);
                on_logits(group[0].0 as usize, group[0].1 as usize, logits);
                continue;
            }
            matmul::head_rows(pool, isa, store, &m.head, hn, acts, nb, head_blk);
            stop_region(profile, pool, OpKind::Head, t);
            let b = Blocked {
                data: &head_blk[..nb * vocab],
                n_tok: nb,
                rows: vocab,
                align: HEAD_ALIGN,
                parts: matmul::head_chunks(&m.head, pool.n_threads()),
            };
            for (j, &(item, idx, _)) in group.iter().enumerate() {
                b.copy_row(j, logits);
                on_logits(item as usize, idx as usize, logits);
            }
        }
        Ok(())
    }
}

/// Steps 1 and 7: each token's residual row gets a projection's output row added (through
/// `post`, Gemma3's post-norm, if any), then is normed by `norm` and prepared for the next
/// projection group, or, where each projection has its own input norm, kept normed in `h`
/// for [`OwnNorm`].
struct ResidualNorm<'a> {
    /// The projection output to add (none before the first layer).
    out: Option<&'a Blocked<'a>>,
    post: Option<&'a [f32]>,
    norm: &'a [f32],
    own_norms: bool,
    needs: Needs,
}

impl ResidualNorm<'_> {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        pool: &ThreadPool,
        isa: Isa,
        tm: &SubTimer,
        profile: &mut Profile,
        bufs: &mut Bufs,
        strides: &Strides,
        n: usize,
        eps: f32,
    ) {
        let e = strides.embd;
        let t = profile.start();
        buffers::per_token(pool, bufs, strides, n, |r, tb| {
            let mut tmp = Vec::new();
            for (i, tok) in r.enumerate() {
                let x = &mut tb.x[i * e..(i + 1) * e];
                if let Some(b) = self.out {
                    tm.time(OpKind::Elementwise, || {
                        add_output(isa, b, tok, x, self.post, eps, &mut tmp)
                    });
                }
                if self.own_norms {
                    let h = &mut tb.h[i * e..(i + 1) * e];
                    tm.time(OpKind::Norm, || float::rmsnorm(isa, x, self.norm, eps, h));
                    continue;
                }
                prep(
                    isa,
                    tm,
                    eps,
                    Some(self.norm),
                    x,
                    self.needs,
                    &mut tb.p,
                    i,
                    e,
                );
            }
        });
        charge(profile, pool, tm, OpKind::Norm, t);
    }
}

/// A projection group's products (q, k, v, or gate and up) into `blk[..group.len()]`: of
/// the one prepared input, or, where each projection has its own input norm, each of its
/// own ([`OwnNorm`]).
#[allow(clippy::too_many_arguments)]
fn group_products(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    binary: bool,
    tm: &SubTimer,
    profile: &mut Profile,
    bufs: &mut Bufs,
    strides: &Strides,
    n: usize,
    eps: f32,
    blk: &mut [AlignedVec<f32>; 3],
    layer: &Layer,
    group: &[(Proj, &Linear)],
    int4: bool,
) {
    if layer.norm_in.is_none() {
        // A group has three projections at most: no allocation in the decode step.
        let mut lins = [group[0].1; 3];
        for (l, &(_, lin)) in lins.iter_mut().zip(group) {
            *l = lin;
        }
        let lins = &lins[..group.len()];
        let cols = strides.embd;
        self::matmuls(
            pool, isa, store, binary, profile, lins, bufs, n, cols, blk, 0,
        );
        return;
    }
    for (slot, &(p, lin)) in group.iter().enumerate() {
        let step = OwnNorm {
            lin,
            norm: layer.norm_in(p).unwrap_or(&[]),
            slot,
            int4,
        };
        step.run(
            pool, isa, store, binary, tm, profile, bufs, strides, n, eps, blk,
        );
    }
}

/// One projection with its own input norm (the BitNet embedding models' BitLinear): each
/// token's layer-normed row in `h` normalized again by `norm` and quantized, then the
/// product into `blk[slot]`.
struct OwnNorm<'a> {
    lin: &'a Linear,
    norm: &'a [f32],
    slot: usize,
    /// Quantize to 4 bits (a plan's int4 layer).
    int4: bool,
}

impl OwnNorm<'_> {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        pool: &ThreadPool,
        isa: Isa,
        store: &Store,
        binary: bool,
        tm: &SubTimer,
        profile: &mut Profile,
        bufs: &mut Bufs,
        strides: &Strides,
        n: usize,
        eps: f32,
        blk: &mut [AlignedVec<f32>; 3],
    ) {
        let (e, needs) = (strides.embd, self.lin.needs(binary).with_int4(self.int4));
        let t = profile.start();
        buffers::per_token(pool, bufs, strides, n, |r, tb| {
            for i in 0..r.len() {
                let h = &tb.h[i * e..(i + 1) * e];
                prep(isa, tm, eps, Some(self.norm), h, needs, &mut tb.p, i, e);
            }
        });
        charge(profile, pool, tm, OpKind::Norm, t);
        let lins = [self.lin];
        self::matmuls(
            pool, isa, store, binary, profile, &lins, bufs, n, e, blk, self.slot,
        );
    }
}

/// One projection group's products into the blocked buffers `blk[first..][..lins.len()]`.
#[allow(clippy::too_many_arguments)]
fn matmuls(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    binary: bool,
    profile: &mut Profile,
    lins: &[&Linear],
    bufs: &Bufs,
    n: usize,
    cols: usize,
    blk: &mut [AlignedVec<f32>; 3],
    first: usize,
) {
    let t = profile.start();
    let inp = lin_input(bufs, n, cols);
    let [b0, b1, b2] = blk;
    let mut outs: [&mut [f32]; 3] = [b0, b1, b2];
    matmul::matmul_group(
        pool,
        isa,
        store,
        binary,
        lins,
        &inp,
        &mut outs[first..first + lins.len()],
    );
    stop_region(profile, pool, matmul_kind(lins[0]), t);
}
