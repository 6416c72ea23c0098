//! The plain f32 reference forward pass: the specification the optimized engine is tested
//! against. No SIMD, no caches, no shortcuts: every weight is decoded to f32 by
//! [`super::decode`], every projection quantizes its input activations exactly as BitNet
//! b1.58 defines it, and sums are accumulated in f64.
//!
//! Per layer (h = residual stream, one row per token):
//!   x = RMSNorm(h) * attn_norm;  q, k, v = BitLinear(x);  rope(q, k) at each position
//!   o = causal GQA softmax(q k^T / sqrt(d)) v;  [o = RMSNorm(o) * attn_sub_norm]
//!   h += BitLinear(o, Wo);  x = RMSNorm(h) * ffn_norm
//!   f = act(BitLinear(x, Wgate)) * BitLinear(x, Wup);  [f = RMSNorm(f) * ffn_sub_norm]
//!   h += BitLinear(f, Wdown)
//! logits = (RMSNorm(h) * output_norm) @ Head^T  (Head = output.weight or the embedding)
//! BitLinear(x, W) with int8 activations: s = 127 / max(max|x|, 1e-5),
//!   q = clamp(round_half_even(x s), -128, 127), y = (q . w) / s  [* the `.scale` tensor].
//! With binary activations: y = mean|x| * (sign(x) . w), sign(0) = -1.
//! A projection stored in a float type (a converter's fallback) takes f32 activations, as
//! llama.cpp computes it.
//!
//! The BitNet embedding architectures (qwen3, gemma3; bitnet.cpp's embedding guide and its
//! fork's graphs) add, each read from the file's tensor names alone:
//! - a per-projection input norm: BitLinear(x) = BitLinear(RMSNorm(x) * `<proj>_norm_in`), and
//!   float projections of such a model ternarized by absmean (alpha = max(mean|W|, 1e-5),
//!   trit = clamp(round_half_even(W / alpha), -1, 1)) as the converter does;
//! - per-head RMSNorm of q and k (`attn_q_norm`, `attn_k_norm`) before rope;
//! - Gemma3: the embedding times sqrt(n_embd), `h += RMSNorm(o) * post_attention_norm` and
//!   `h += RMSNorm(ffn) * post_ffw_norm`, and the gate `gelu_tanh(g) = 0.5 g (1 + tanh(
//!   sqrt(2/pi) (g + 0.044715 g^3)))`.

use bitnet_core::config::{
    ActBits, Arch, FfnAct, ModelConfig, OUTPUT, OUTPUT_NORM, Proj, RopeStyle, TOKEN_EMBD,
    norm_name, proj_name, proj_scale_name,
};
use bitnet_gguf::{GgufFile, TensorType};

use super::decode::{Mat, decode_named};

/// Switches that reproduce another engine's rounding, to explain (and test within tight
/// bounds) the differences between engines. `Emulation::default()` is the exact reference.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Emulation {
    /// Activation quantization before each projection.
    pub act: ActQuant,
    /// Round q to f16 before the scores (ggml converts f32 operands of f16 matmuls).
    pub f16_q: bool,
    /// Round k and v to f16 (an f16 KV cache).
    pub f16_kv: bool,
    /// Round the softmax probabilities to f16 before the weighted sum of v.
    pub f16_p: bool,
    /// Round the final normed hidden state to f16 before an F16 head.
    pub f16_head: bool,
    /// Rope angles as ggml computes them: `theta_i = pos * base^(-2/d)^i`, iterated in f32.
    pub rope_ggml: bool,
}

impl Emulation {
    /// Exact math except for an f16 KV cache (what this project's engine computes).
    pub fn f16_kv_cache() -> Emulation {
        Emulation {
            f16_kv: true,
            ..Emulation::default()
        }
    }

    /// What upstream llama.cpp computes for TQ1_0/TQ2_0 with the default f16 KV cache.
    pub fn llama_cpp() -> Emulation {
        Emulation {
            act: ActQuant::Block256,
            f16_q: true,
            f16_kv: true,
            f16_p: true,
            f16_head: true,
            rope_ggml: true,
        }
    }

    /// What bitnet.cpp computes for I2_S with the default f16 KV cache.
    pub fn bitnet_cpp() -> Emulation {
        Emulation {
            act: ActQuant::Model,
            f16_q: true,
            f16_kv: true,
            f16_p: false,
            f16_head: true,
            rope_ggml: true,
        }
    }
}

fn r16(x: f32) -> f32 {
    bitnet_kernels::float::f16_to_f32(bitnet_kernels::float::f32_to_f16(x))
}

fn r16_all(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = r16(*v));
}

/// How activations are quantized before each projection.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum ActQuant {
    /// What the model's config says (per-token int8, or binary).
    #[default]
    Model,
    /// llama.cpp's Q8_K for TQ1_0/TQ2_0: int8 per block of 256 with a signed-max scale.
    Block256,
    /// No quantization (f32 activations).
    None,
}

/// A decoded projection, its optional `.scale` (1.0 if absent), and whether its input
/// activations are quantized (ternary / binary storage) or stay f32 (a float type).
struct Proj3 {
    w: Mat,
    scale: f32,
    quantized: bool,
}

struct Layer {
    attn_norm: Vec<f32>,
    ffn_norm: Vec<f32>,
    attn_sub_norm: Option<Vec<f32>>,
    ffn_sub_norm: Option<Vec<f32>>,
    proj: Vec<Proj3>, // in Proj::ALL order
    /// Each projection's input norm, in Proj::ALL order (BitNet embedding models).
    norm_in: Option<Vec<Vec<f32>>>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    post_attn_norm: Option<Vec<f32>>,
    post_ffw_norm: Option<Vec<f32>>,
}

/// The trits of `w` times its absmean scale (see the module docs).
fn absmean_ternary(w: &mut Mat) {
    let mean = w.w.iter().map(|&x| f64::from(x.abs())).sum::<f64>() / w.w.len() as f64;
    let alpha = (mean as f32).max(1e-5);
    for x in &mut w.w {
        *x = (*x / alpha).round_ties_even().clamp(-1.0, 1.0) * alpha;
    }
}

/// A model decoded to f32, ready to run any number of prompts.
pub struct RefModel {
    pub cfg: ModelConfig,
    embd: Mat,
    head: Option<Mat>,
    out_norm: Vec<f32>,
    layers: Vec<Layer>,
    pub emu: Emulation,
}

impl RefModel {
    pub fn new(file: &GgufFile, cfg: &ModelConfig) -> RefModel {
        let vec = |name: &str| decode_named(file, name).w;
        let opt = |name: String| file.tensor(&name).map(|_| vec(&name));
        let layers = (0..cfg.n_layer)
            .map(|l| Layer {
                norm_in: file
                    .tensor(&format!("blk.{l}.attn_q_norm_in.weight"))
                    .map(|_| {
                        Proj::ALL
                            .iter()
                            .map(|p| vec(&format!("blk.{l}.{}_norm_in.weight", p.stem())))
                            .collect()
                    }),
                q_norm: opt(norm_name(l, "attn_q_norm")),
                k_norm: opt(norm_name(l, "attn_k_norm")),
                post_attn_norm: opt(norm_name(l, "post_attention_norm")),
                post_ffw_norm: opt(norm_name(l, "post_ffw_norm")),
                attn_norm: vec(&norm_name(l, "attn_norm")),
                ffn_norm: vec(&norm_name(l, "ffn_norm")),
                attn_sub_norm: cfg.sub_norms.then(|| vec(&norm_name(l, "attn_sub_norm"))),
                ffn_sub_norm: cfg.sub_norms.then(|| vec(&norm_name(l, "ffn_sub_norm"))),
                proj: Proj::ALL
                    .iter()
                    .map(|&p| {
                        let name = proj_name(l, p);
                        let mut w = decode_named(file, &name);
                        let ty = file.tensor(&name).map(|t| t.ty);
                        let mut quantized =
                            ty.is_some_and(|t| t.is_ternary() || t == TensorType::Q1_0);
                        let bitlinear = file
                            .tensor(&format!("blk.{l}.{}_norm_in.weight", p.stem()))
                            .is_some();
                        if bitlinear && !quantized {
                            absmean_ternary(&mut w);
                            quantized = true;
                        }
                        let scale = file
                            .tensor(&proj_scale_name(l, p))
                            .map(|t| super::decode::decode(file, t).w[0])
                            .unwrap_or(1.0);
                        Proj3 {
                            w,
                            scale,
                            quantized,
                        }
                    })
                    .collect(),
            })
            .collect();
        RefModel {
            cfg: cfg.clone(),
            embd: decode_named(file, TOKEN_EMBD),
            head: (!cfg.tied_head).then(|| decode_named(file, OUTPUT)),
            out_norm: vec(OUTPUT_NORM),
            layers,
            emu: Emulation::default(),
        }
    }

    /// The final normed hidden states `[tokens.len()][n_embd]` (the output of
    /// `output_norm`, what an embedding pools and the head reads).
    pub fn hidden(&self, tokens: &[u32]) -> Vec<f32> {
        let c = &self.cfg;
        let (t_n, e) = (tokens.len(), c.n_embd);
        let mut h: Vec<f32> = Vec::with_capacity(t_n * e);
        for &tok in tokens {
            assert!((tok as usize) < c.n_vocab, "token {tok} out of range");
            h.extend_from_slice(self.embd.row(tok as usize));
        }
        if c.arch == Arch::Gemma3 {
            let s = (e as f32).sqrt();
            h.iter_mut().for_each(|v| *v *= s);
        }
        let (hd, qd, kvd) = (c.head_dim, c.q_dim(), c.kv_dim());
        for layer in &self.layers {
            // The input of projection `i`: `x`, normalized again by its own norm if any.
            let input = |x: &[f32], cols: usize, i: usize| -> Vec<f32> {
                match &layer.norm_in {
                    Some(n) => rmsnorm_rows(x, cols, &n[i], c.rms_eps),
                    None => x.to_vec(),
                }
            };
            let x = rmsnorm_rows(&h, e, &layer.attn_norm, c.rms_eps);
            let mut q = self.bitlinear(&input(&x, e, 0), e, &layer.proj[0]);
            let mut k = self.bitlinear(&input(&x, e, 1), e, &layer.proj[1]);
            let mut v = self.bitlinear(&input(&x, e, 2), e, &layer.proj[2]);
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                q = rmsnorm_rows(&q, hd, qn, c.rms_eps);
                k = rmsnorm_rows(&k, hd, kn, c.rms_eps);
            }
            for t in 0..t_n {
                rope(&mut q[t * qd..(t + 1) * qd], hd, t, c, self.emu.rope_ggml);
                rope(&mut k[t * kvd..(t + 1) * kvd], hd, t, c, self.emu.rope_ggml);
            }
            if self.emu.f16_q {
                r16_all(&mut q);
            }
            if self.emu.f16_kv {
                r16_all(&mut k);
                r16_all(&mut v);
            }
            let mut o = attention(&q, &k, &v, t_n, c, self.emu.f16_p);
            if let Some(w) = &layer.attn_sub_norm {
                o = rmsnorm_rows(&o, qd, w, c.rms_eps);
            }
            let mut y = self.bitlinear(&input(&o, qd, 3), qd, &layer.proj[3]);
            if let Some(w) = &layer.post_attn_norm {
                y = rmsnorm_rows(&y, e, w, c.rms_eps);
            }
            add(&mut h, &y);
            let x = rmsnorm_rows(&h, e, &layer.ffn_norm, c.rms_eps);
            let g = self.bitlinear(&input(&x, e, 4), e, &layer.proj[4]);
            let u = self.bitlinear(&input(&x, e, 5), e, &layer.proj[5]);
            let mut f: Vec<f32> = g
                .iter()
                .zip(&u)
                .map(|(&g, &u)| {
                    let a = match c.ffn_act {
                        FfnAct::Silu => g / (1.0 + (-g).exp()),
                        FfnAct::Relu2 => g.max(0.0) * g.max(0.0),
                        FfnAct::GeluTanh => {
                            let g = f64::from(g);
                            let z =
                                (2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g);
                            (g / (1.0 + (-2.0 * z).exp())) as f32
                        }
                    };
                    a * u
                })
                .collect();
            if let Some(w) = &layer.ffn_sub_norm {
                f = rmsnorm_rows(&f, c.n_ff, w, c.rms_eps);
            }
            let mut y = self.bitlinear(&input(&f, c.n_ff, 6), c.n_ff, &layer.proj[6]);
            if let Some(w) = &layer.post_ffw_norm {
                y = rmsnorm_rows(&y, e, w, c.rms_eps);
            }
            add(&mut h, &y);
        }
        rmsnorm_rows(&h, e, &self.out_norm, c.rms_eps)
    }

    /// Logits `[tokens.len()][n_vocab]` for the whole prompt.
    pub fn logits(&self, tokens: &[u32]) -> Vec<f32> {
        let c = &self.cfg;
        let (t_n, e) = (tokens.len(), c.n_embd);
        let mut hn = self.hidden(tokens);
        if self.emu.f16_head {
            r16_all(&mut hn);
        }
        let head = self.head.as_ref().unwrap_or(&self.embd);
        let mut out = vec![0f32; t_n * c.n_vocab];
        for t in 0..t_n {
            let x = &hn[t * e..(t + 1) * e];
            for r in 0..c.n_vocab {
                out[t * c.n_vocab + r] = dot64(x, head.row(r)) as f32;
            }
        }
        out
    }

    /// `x` is `[n][cols]`; returns `[n][rows of W]`.
    fn bitlinear(&self, x: &[f32], cols: usize, p: &Proj3) -> Vec<f32> {
        let (w, scale) = (&p.w, &p.scale);
        let act = if p.quantized {
            self.emu.act
        } else {
            ActQuant::None
        };
        assert_eq!(w.cols, cols);
        let n = x.len() / cols;
        let mut y = vec![0f32; n * w.rows];
        for t in 0..n {
            let row = &x[t * cols..(t + 1) * cols];
            let out = &mut y[t * w.rows..(t + 1) * w.rows];
            match (act, self.cfg.act_bits) {
                (ActQuant::None, _) => {
                    for (r, o) in out.iter_mut().enumerate() {
                        *o = dot64(row, w.row(r)) as f32;
                    }
                }
                (ActQuant::Model, ActBits::Int8) => {
                    let (qx, s) = quant_token(row);
                    for (r, o) in out.iter_mut().enumerate() {
                        *o = (dot64(&qx, w.row(r)) / f64::from(s)) as f32;
                    }
                }
                (ActQuant::Model, ActBits::Binary) => {
                    let m = row.iter().map(|&v| f64::from(v.abs())).sum::<f64>() / cols as f64;
                    let m = m as f32;
                    let sx: Vec<f32> = row
                        .iter()
                        .map(|&v| if v > 0.0 { 1.0 } else { -1.0 })
                        .collect();
                    for (r, o) in out.iter_mut().enumerate() {
                        *o = (dot64(&sx, w.row(r)) * f64::from(m)) as f32;
                    }
                }
                (ActQuant::Block256, _) => {
                    let blocks = quant_block256(row);
                    for (r, o) in out.iter_mut().enumerate() {
                        let wr = w.row(r);
                        let mut acc = 0f64;
                        for (b, (q, d)) in blocks.iter().enumerate() {
                            acc += dot64(q, &wr[b * 256..(b + 1) * 256]) * f64::from(*d);
                        }
                        *o = acc as f32;
                    }
                }
            }
            if *scale != 1.0 {
                out.iter_mut().for_each(|v| *v *= *scale);
            }
        }
        y
    }
}

/// Reference logits `[tokens.len()][n_vocab]` of the model in `file`.
pub fn reference_logits(file: &GgufFile, cfg: &ModelConfig, tokens: &[u32]) -> Vec<f32> {
    RefModel::new(file, cfg).logits(tokens)
}

pub fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

fn add(h: &mut [f32], y: &[f32]) {
    h.iter_mut().zip(y).for_each(|(h, y)| *h += y);
}

/// Per-token int8: returns the int8 values (as f32) and the scale s (x ≈ q / s).
pub fn quant_token(x: &[f32]) -> (Vec<f32>, f32) {
    let absmax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let s = 127.0 / absmax.max(1e-5);
    let q = x
        .iter()
        .map(|&v| (v * s).round_ties_even().clamp(-128.0, 127.0))
        .collect();
    (q, s)
}

/// ggml's `quantize_row_q8_K`: per 256, `iscale = -127 / max` (max = the signed value of
/// largest magnitude), `q = min(127, round(iscale x))`, `d = 1 / iscale`.
fn quant_block256(x: &[f32]) -> Vec<(Vec<f32>, f32)> {
    assert!(
        x.len().is_multiple_of(256),
        "block-256 activations need a multiple of 256"
    );
    x.chunks_exact(256)
        .map(|b| {
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in b {
                if v.abs() > amax {
                    amax = v.abs();
                    max = v;
                }
            }
            if amax == 0.0 {
                return (vec![0.0; 256], 0.0);
            }
            let iscale = -127.0 / max;
            let q = b
                .iter()
                .map(|&v| (iscale * v).round_ties_even().min(127.0))
                .collect();
            (q, 1.0 / iscale)
        })
        .collect()
}

pub fn rmsnorm_rows(x: &[f32], n: usize, w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(n) {
        let ms = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            / n as f64;
        let inv = (1.0 / (ms + f64::from(eps)).sqrt()) as f32;
        out.extend(row.iter().zip(w).map(|(&v, &g)| v * inv * g));
    }
    out
}

/// Rotates every head of `x` (one token's heads, `hd` each) for position `pos`.
fn rope(x: &mut [f32], hd: usize, pos: usize, c: &ModelConfig, ggml: bool) {
    let rd = c.rope_dim;
    let p = pos as f64 * f64::from(c.rope_freq_scale);
    let angles: Vec<f64> = if ggml {
        let ts = c.rope_theta.powf(-2.0 / rd as f32);
        let mut th = pos as f32 * c.rope_freq_scale;
        (0..rd / 2)
            .map(|_| {
                let a = f64::from(th);
                th *= ts;
                a
            })
            .collect()
    } else {
        (0..rd / 2)
            .map(|i| p * f64::from(c.rope_theta).powf(-2.0 * i as f64 / rd as f64))
            .collect()
    };
    for head in x.chunks_exact_mut(hd) {
        for (i, &ang) in angles.iter().enumerate() {
            let (sin, cos) = (ang.sin() as f32, ang.cos() as f32);
            let (a, b) = match c.rope {
                RopeStyle::Neox => (i, i + rd / 2),
                RopeStyle::Normal => (2 * i, 2 * i + 1),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos - x1 * sin;
            head[b] = x0 * sin + x1 * cos;
        }
    }
}

/// Causal GQA attention; `q` is `[n][n_head * hd]`, `k`, `v` `[n][n_head_kv * hd]`.
fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, c: &ModelConfig, f16_p: bool) -> Vec<f32> {
    let (hd, qd, kvd, g) = (c.head_dim, c.q_dim(), c.kv_dim(), c.gqa_group());
    let scale = 1.0 / (hd as f64).sqrt();
    let mut out = vec![0f32; n * qd];
    for t in 0..n {
        for h in 0..c.n_head {
            let kh = h / g;
            let qv = &q[t * qd + h * hd..t * qd + (h + 1) * hd];
            let scores: Vec<f64> = (0..=t)
                .map(|s| dot64(qv, &k[s * kvd + kh * hd..s * kvd + (kh + 1) * hd]) * scale)
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let ex: Vec<f64> = scores.iter().map(|&x| (x - m).exp()).collect();
            let z: f64 = ex.iter().sum();
            let p: Vec<f64> = ex
                .iter()
                .map(|&e| {
                    let p = (e / z) as f32;
                    f64::from(if f16_p { r16(p) } else { p })
                })
                .collect();
            let o = &mut out[t * qd + h * hd..t * qd + (h + 1) * hd];
            for d in 0..hd {
                let acc: f64 = (0..=t)
                    .map(|s| p[s] * f64::from(v[s * kvd + kh * hd + d]))
                    .sum();
                o[d] = acc as f32;
            }
        }
    }
    out
}
