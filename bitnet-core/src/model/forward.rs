//! The per-layer math of the forward pass (BitNet b1.58, with the variants the config
//! selects), as a sequence of parallel regions over the session's buffers:
//!
//! 1. residual add of the previous layer's `ffn_down` output, `attn_norm`, int8 quantization
//!    (once for q, k and v);
//! 2. q, k, v products; 3. rope on q and k; k and v into the f16 cache;
//! 4. attention; 5. `attn_sub_norm` (if any) and quantization;
//! 6. `attn_output`; 7. residual add, `ffn_norm`, quantization (once for gate and up);
//! 8. gate and up; 9. `act(gate) * up`, `ffn_sub_norm` (if any), quantization;
//! 10. `ffn_down`, added to the residual by the next layer's step 1 (or before the head).
//!
//! Products are `intdot * w_scale / act_scale` per output row (see `linear.rs`).

use std::ops::Range;
use std::time::{Duration, Instant};

use bitnet_kernels::float::{self, Q8_0_BLOCK_BYTES, QK8_0, RowFormat};
use bitnet_kernels::{Isa, quantize_act, quantize_act_binary};

use super::linear::{LinInput, Linear, Needs, bit_words, padded};
use super::par::{self, AttnShape, Bufs, KvView, PrepBufs, Strides};
use super::profile::{OpKind, Profile, SubTimer};
use super::session::{HEAD_BATCH, Session};
use super::{FloatRows, HeadMode, Store};
use crate::config::{ActBits, FfnAct, RopeStyle};
use crate::error::CoreError;
use crate::kv_cache::KvType;
use crate::threadpool::{ChunkQueue, ThreadPool};

/// Row granule of a chunk of the head (keeps chunks cache-line sized).
const HEAD_ALIGN: usize = 16;
/// Head chunks per thread at most (about 4 MiB each for a 2B-4T Q8_0 head on 2 threads).
const HEAD_CHUNKS_PER_THREAD: usize = 48;

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
        p.acts[i] = tm.time(OpKind::ActQuant, || quantize_act(isa, x, xq));
    }
    if needs.bits {
        let bits = &mut p.bits[i * w..(i + 1) * w];
        p.bit_scales[i] = tm.time(OpKind::ActQuant, || quantize_act_binary(isa, x, bits));
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

/// The head's rows for `n` tokens into the blocked `out` (`[n][share]` per thread share).
#[allow(clippy::too_many_arguments)]
pub(crate) fn head_rows(
    pool: &ThreadPool,
    isa: Isa,
    store: &Store,
    head: &FloatRows,
    mode: HeadMode,
    hn: &[f32],
    hq8: &[u8],
    n: usize,
    out: &mut [f32],
) {
    let data = store.bytes(&head.blob);
    let cols = head.cols;
    let job = |r: Range<usize>, dst: &mut [f32]| match mode {
        HeadMode::Q8 => {
            let rb = RowFormat::Q8_0.row_bytes(cols).unwrap_or(0);
            float::matmul_q8_0_q8_0(isa, data, cols, &hq8[..n * rb], n, r, dst)
        }
        HeadMode::Native => {
            float::matmul_f32(isa, head.fmt, data, cols, &hn[..n * cols], n, r, dst)
        }
    };
    let nt = pool.n_threads();
    if nt == 1 {
        job(0..head.rows, &mut out[..n * head.rows]);
        return;
    }
    let chunks = head_chunks(head, mode, nt);
    let q = ChunkQueue::new(&mut out[..], head.rows, n, chunks, HEAD_ALIGN)
        .expect("head output buffer holds n * vocab");
    pool.run(&|_, _| {
        while let Some((r, dst)) = q.claim() {
            job(r, dst);
        }
    });
}

/// Chunks of [`HEAD_ALIGN`]-row groups the head is cut into on `nt` threads (the head is
/// one long product: many small chunks, a few MiB each).
pub(crate) fn head_chunks(head: &FloatRows, mode: HeadMode, nt: usize) -> usize {
    let fmt = match mode {
        HeadMode::Q8 => RowFormat::Q8_0,
        HeadMode::Native => head.fmt,
    };
    let bytes = fmt
        .row_bytes(head.cols)
        .map_or(0, |rb| rb.saturating_mul(head.rows));
    par::n_chunks(head.rows, HEAD_ALIGN, bytes, nt, HEAD_CHUNKS_PER_THREAD)
}

impl Session<'_> {
    /// Runs `tokens` (at most one chunk) through the model at positions `n_past..`, appends
    /// them to the KV cache and writes the logits: of the last token into `self.logits`, and
    /// with `all = Some(offset)` of every token into `all_logits[offset + t]`.
    pub(crate) fn forward_chunk(
        &mut self,
        tokens: &[u32],
        all: Option<usize>,
    ) -> Result<(), CoreError> {
        let Session {
            model,
            isa,
            pool,
            kv,
            rope,
            n_ctx,
            bufs,
            blk,
            scores,
            hn,
            hq8,
            logits,
            all_logits,
            head_blk,
            profile,
            timer,
            ..
        } = self;
        let (m, isa, pool) = (*model, *isa, &*pool);
        let cfg = &m.config;
        let store = &m.store;
        let n = tokens.len();
        let pos0 = kv.len();
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

        // Embedding rows, straight from the file's bytes.
        let t = profile.start();
        let emb = store.bytes(&m.embed.blob);
        let rb = m.embed.row_bytes;
        for (i, &tok) in tokens.iter().enumerate() {
            let row = &emb[tok as usize * rb..(tok as usize + 1) * rb];
            float::dequantize_row(m.embed.fmt, row, &mut bufs.x[i * e..(i + 1) * e]);
        }
        profile.stop(OpKind::Embed, t);

        // The cache is position-major: `[pos][kv head][head_dim]`.
        let (kv_stride, kv_head_step) = match kv.kv_type() {
            KvType::F16 => (kv.kv_dim(), hd),
            KvType::Q8 => (
                kv.kv_dim() / QK8_0 * Q8_0_BLOCK_BYTES,
                hd / QK8_0 * Q8_0_BLOCK_BYTES,
            ),
        };
        let attn = AttnShape {
            n_head,
            group: cfg.gqa_group(),
            head_dim: hd,
            kv_stride,
            kv_head_step,
            scale: 1.0 / (hd as f32).sqrt(),
            max_pos: *n_ctx,
        };
        let tm: &SubTimer = timer;

        for (l, layer) in m.layers.iter().enumerate() {
            // 1. residual add of the previous down projection, attn_norm, quantize.
            let qkv = [&layer.q, &layer.k, &layer.v];
            let needs = group_needs(&qkv, binary);
            {
                let prev = (l > 0).then(|| par::blocked(pool, &m.layers[l - 1].down, &blk[0], n));
                let t = profile.start();
                par::per_token(pool, bufs, &strides(e), n, |r, tb| {
                    for (i, tok) in r.enumerate() {
                        let x = &mut tb.x[i * e..(i + 1) * e];
                        if let Some(b) = &prev {
                            tm.time(OpKind::Elementwise, || b.add_row(isa, tok, x));
                        }
                        prep(
                            isa,
                            tm,
                            eps,
                            Some(&layer.attn_norm),
                            x,
                            needs,
                            &mut tb.p,
                            i,
                            e,
                        );
                    }
                });
                charge(profile, pool, tm, OpKind::Norm, t);
            }

            // 2. q, k, v.
            self::matmuls(pool, isa, store, binary, profile, &qkv, bufs, n, e, blk);

            // 3. rope; k and v into the cache.
            {
                let [b0, b1, b2] = &*blk;
                let (bq, bk, bv) = (
                    par::blocked(pool, &layer.q, b0, n),
                    par::blocked(pool, &layer.k, b1, n),
                    par::blocked(pool, &layer.v, b2, n),
                );
                let t = profile.start();
                let rope = &*rope;
                par::per_token(pool, bufs, &strides(e), n, |r, tb| {
                    for (i, tok) in r.enumerate() {
                        let (q, k, v) = (
                            &mut tb.q[i * qd..(i + 1) * qd],
                            &mut tb.k[i * kvd..(i + 1) * kvd],
                            &mut tb.v[i * kvd..(i + 1) * kvd],
                        );
                        bq.copy_row(tok, q);
                        bk.copy_row(tok, k);
                        bv.copy_row(tok, v);
                        tm.time(OpKind::Rope, || match cfg.rope {
                            RopeStyle::Neox => {
                                rope.apply_neox(isa, q, hd, n_head, pos0 + tok);
                                rope.apply_neox(isa, k, hd, n_kv, pos0 + tok);
                            }
                            RopeStyle::Normal => {
                                rope.apply_normal(isa, q, hd, n_head, pos0 + tok);
                                rope.apply_normal(isa, k, hd, n_kv, pos0 + tok);
                            }
                        });
                    }
                });
                charge(profile, pool, tm, OpKind::Rope, t);
                let t = profile.start();
                kv.write_rows(l, pos0, &bufs.k[..n * kvd], &bufs.v[..n * kvd])?;
                profile.stop(OpKind::KvWrite, t);
            }

            // 4. attention.
            let t = profile.start();
            par::attention(
                pool,
                isa,
                &attn,
                match kv.kv_type() {
                    KvType::F16 => KvView::F16 {
                        k: kv.k_layer(l),
                        v: kv.v_layer(l),
                    },
                    KvType::Q8 => KvView::Q8 {
                        k: kv.k_layer_q8(l)?,
                        v: kv.v_layer_q8(l)?,
                    },
                },
                &bufs.q[..n * qd],
                &mut bufs.att[..n * qd],
                scores,
                n,
                pos0,
            );
            stop_region(profile, pool, OpKind::Attention, t);

            // 5. attn_sub_norm, quantize.
            let o = [&layer.o];
            let needs = group_needs(&o, binary);
            let t = profile.start();
            par::per_token(pool, bufs, &strides(qd), n, |r, tb| {
                for i in 0..r.len() {
                    let a = &tb.att[i * qd..(i + 1) * qd];
                    prep(
                        isa,
                        tm,
                        eps,
                        layer.attn_sub_norm.as_deref(),
                        a,
                        needs,
                        &mut tb.p,
                        i,
                        qd,
                    );
                }
            });
            charge(profile, pool, tm, OpKind::Norm, t);

            // 6. attn_output.
            self::matmuls(pool, isa, store, binary, profile, &o, bufs, n, qd, blk);

            // 7. residual add, ffn_norm, quantize.
            let gu = [&layer.gate, &layer.up];
            let needs = group_needs(&gu, binary);
            {
                let bo = par::blocked(pool, &layer.o, &blk[0], n);
                let t = profile.start();
                par::per_token(pool, bufs, &strides(e), n, |r, tb| {
                    for (i, tok) in r.enumerate() {
                        let x = &mut tb.x[i * e..(i + 1) * e];
                        tm.time(OpKind::Elementwise, || bo.add_row(isa, tok, x));
                        prep(
                            isa,
                            tm,
                            eps,
                            Some(&layer.ffn_norm),
                            x,
                            needs,
                            &mut tb.p,
                            i,
                            e,
                        );
                    }
                });
                charge(profile, pool, tm, OpKind::Norm, t);
            }

            // 8. gate, up.
            self::matmuls(pool, isa, store, binary, profile, &gu, bufs, n, e, blk);

            // 9. act(gate) * up, ffn_sub_norm, quantize.
            let d = [&layer.down];
            let needs = group_needs(&d, binary);
            {
                let (bg, bu) = (
                    par::blocked(pool, &layer.gate, &blk[0], n),
                    par::blocked(pool, &layer.up, &blk[1], n),
                );
                let t = profile.start();
                par::per_token(pool, bufs, &strides(nff), n, |r, tb| {
                    for (i, tok) in r.enumerate() {
                        let f = &mut tb.ff[i * nff..(i + 1) * nff];
                        // `xn` is free until the sub-norm writes it: hold `up` there.
                        let up = &mut tb.p.xn[i * nff..(i + 1) * nff];
                        bg.copy_row(tok, f);
                        bu.copy_row(tok, up);
                        tm.time(OpKind::Elementwise, || match cfg.ffn_act {
                            FfnAct::Silu => float::silu_mul(isa, f, up),
                            FfnAct::Relu2 => float::relu2_mul(isa, f, up),
                        });
                        let norm = layer.ffn_sub_norm.as_deref();
                        prep(isa, tm, eps, norm, f, needs, &mut tb.p, i, nff);
                    }
                });
                charge(profile, pool, tm, OpKind::Elementwise, t);
            }

            // 10. ffn_down (added to the residual by the next step 1).
            self::matmuls(pool, isa, store, binary, profile, &d, bufs, n, nff, blk);
        }
        kv.set_len(pos0 + n)?;

        // Final residual add, output norm, head.
        let t = profile.start();
        if let Some(last) = m.layers.last() {
            let bd = par::blocked(pool, &last.down, &blk[0], n);
            // Only the positions whose logits are wanted need the final residual.
            let first = if all.is_some() { 0 } else { n - 1 };
            for tok in first..n {
                bd.add_row(isa, tok, &mut bufs.x[tok * e..(tok + 1) * e]);
            }
        }
        profile.stop(OpKind::Elementwise, t);
        let q8 = m.head_mode == HeadMode::Q8;
        let q8_rb = RowFormat::Q8_0.row_bytes(e).unwrap_or(0);
        let final_rows = |rows: Range<usize>, hn: &mut [f32], hq8: &mut [u8]| {
            for (j, tok) in rows.enumerate() {
                let h = &mut hn[j * e..(j + 1) * e];
                float::rmsnorm(isa, &bufs.x[tok * e..(tok + 1) * e], &m.output_norm, eps, h);
                if q8 {
                    float::quantize_row_q8_0(h, &mut hq8[j * q8_rb..(j + 1) * q8_rb]);
                }
            }
        };
        let vocab = cfg.n_vocab;
        match all {
            None => {
                let t = profile.start();
                final_rows(n - 1..n, hn, hq8);
                profile.stop(OpKind::Norm, t);
                let t = profile.start();
                head_rows(pool, isa, store, &m.head, m.head_mode, hn, hq8, 1, logits);
                stop_region(profile, pool, OpKind::Head, t);
            }
            Some(offset) => {
                for start in (0..n).step_by(HEAD_BATCH) {
                    let nb = (n - start).min(HEAD_BATCH);
                    let t = profile.start();
                    final_rows(start..start + nb, hn, hq8);
                    profile.stop(OpKind::Norm, t);
                    let t = profile.start();
                    head_rows(
                        pool,
                        isa,
                        store,
                        &m.head,
                        m.head_mode,
                        hn,
                        hq8,
                        nb,
                        head_blk,
                    );
                    let b = par::Blocked {
                        data: &head_blk[..nb * vocab],
                        n_tok: nb,
                        rows: vocab,
                        align: HEAD_ALIGN,
                        parts: head_chunks(&m.head, m.head_mode, pool.n_threads()),
                    };
                    for j in 0..nb {
                        let row = offset + start + j;
                        b.copy_row(j, &mut all_logits[row * vocab..(row + 1) * vocab]);
                    }
                    stop_region(profile, pool, OpKind::Head, t);
                }
                let last = offset + n - 1;
                logits.copy_from_slice(&all_logits[last * vocab..(last + 1) * vocab]);
            }
        }
        Ok(())
    }
}

/// One projection group's products into the blocked buffers `blk[..lins.len()]`.
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
    blk: &mut [Vec<f32>; 3],
) {
    let t = profile.start();
    let inp = lin_input(bufs, n, cols);
    let [b0, b1, b2] = blk;
    let mut outs: [&mut [f32]; 3] = [b0, b1, b2];
    par::matmul_group(
        pool,
        isa,
        store,
        binary,
        lins,
        &inp,
        &mut outs[..lins.len()],
    );
    stop_region(profile, pool, lins[0].op_kind(), t);
}
