"""BitNet b1.58 (2B-4T architecture family) in PyTorch, for quantization-aware training on CPU.

The forward pass is the math of bitnet-core's engine (bitnet-core/tests/common/reference.rs,
testdata/golden/tools/reference.py), so a GGUF converted from the saved checkpoint gives
the same logits:

  per layer, h = residual stream [T, H]:
    x = RMSNorm(h) * input_layernorm                     (eps = rms_norm_eps)
    q, k, v = BitLinear(x);  RoPE (NeoX / rotate-half) on q, k
    o = causal GQA softmax(q k^T / sqrt(hd)) v
    o = RMSNorm(o) * attn_sub_norm;  h += BitLinear(o, o_proj)
    x = RMSNorm(h) * post_attention_layernorm
    f = relu(BitLinear(x, gate))^2 * BitLinear(x, up);  f = RMSNorm(f) * ffn_sub_norm
    h += BitLinear(f, down)
  logits = (RMSNorm(h) * norm) @ E^T                      (E = tied embedding, full precision)

  BitLinear(x, W):
    weights: e = mean|W| (one scale per matrix), W_t = clamp(round(W / e), -1, 1) * e
    activations, per token (row): s = 127 / max(max|x|, 1e-5),
                                  x_q = clamp(round(x * s), -128, 127) / s
    y = x_q @ W_t^T;  straight-through estimator: the backward pass sees the identity for
    both roundings (gradients reach the latent f32 weights and the unquantized x).

round() is round-half-to-even, as in the engine.
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def ternarize(w):
    """Absmean ternarization of one matrix: (ternary values in {-1, 0, 1}, scale e)."""
    e = w.abs().mean(dtype=torch.float64).to(torch.float32).clamp(min=1e-5)
    return torch.clamp(torch.round(w / e), -1, 1), e


def act_quant(x):
    """Per-token absmax int8: (int8 values as float, scale s) with x ~= q / s."""
    m = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
    s = 127.0 / m
    return torch.clamp(torch.round(x * s), -128, 127), s


class BitLinear(nn.Module):
    def __init__(self, cols, rows):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols))
        # Frozen ternary weights for evaluation (set by Model.freeze); None while training.
        self.frozen = None

    def forward(self, x):
        q, s = act_quant(x)
        if self.frozen is not None:
            # Evaluation: the engine's order of operations, (int8 . ternary) * e / s.
            t, e = self.frozen
            return F.linear(q, t) * (e / s)
        w = self.weight
        t, e = ternarize(w)
        wq = w + (t * e - w).detach()
        xq = x + (q / s - x).detach()
        return F.linear(xq, wq)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        ms = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nh, self.nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c["head_dim"]
        self.q_proj = BitLinear(H, self.nh * self.hd)
        self.k_proj = BitLinear(H, self.nkv * self.hd)
        self.v_proj = BitLinear(H, self.nkv * self.hd)
        self.o_proj = BitLinear(self.nh * self.hd, H)
        self.attn_sub_norm = RMSNorm(self.nh * self.hd, c["rms_norm_eps"])

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o = o.transpose(1, 2).reshape(B, T, self.nh * self.hd)
        return self.o_proj(self.attn_sub_norm(o))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, FF = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = BitLinear(H, FF)
        self.up_proj = BitLinear(H, FF)
        self.down_proj = BitLinear(FF, H)
        self.ffn_sub_norm = RMSNorm(FF, c["rms_norm_eps"])

    def forward(self, x):
        g = F.relu(self.gate_proj(x))
        return self.down_proj(self.ffn_sub_norm(g * g * self.up_proj(x)))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        eps = c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(c["hidden_size"], eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], eps)
        self.mlp = Mlp(c)

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


def rope_tables(n, hd, theta):
    """cos, sin [n, hd] for NeoX (rotate-half) rope; angles in float64 as the reference."""
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def rope(x, cos, sin):
    T, half = x.shape[-2], x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos[:T] + rot * sin[:T]


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        cos, sin = rope_tables(c["max_position_embeddings"], c["head_dim"], c["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self, gen, std):
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    with torch.no_grad():
                        p.mul_(1.0 / math.sqrt(2 * self.c["num_hidden_layers"]))

    def forward(self, tokens):
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin)
        return F.linear(self.norm(h), self.embed_tokens.weight)

    def bitlinears(self):
        return [m for m in self.modules() if isinstance(m, BitLinear)]

    @torch.no_grad()
    def freeze(self):
        """Ternarize every projection once (from the current weights) for evaluation."""
        for m in self.bitlinears():
            m.frozen = ternarize(m.weight.float())

    def unfreeze(self):
        for m in self.bitlinears():
            m.frozen = None

    def hf_state_dict(self):
        """Weights under the Hugging Face BitNet names."""
        return {"model." + k: v for k, v in self.state_dict().items()}

    def load_hf_state_dict(self, sd):
        self.load_state_dict({k[len("model."):]: v.float() for k, v in sd.items()})


def load_hf(hf_dir):
    """The model of a saved checkpoint directory, latent weights as stored (bf16 -> f32)."""
    from safetensors.torch import load_file

    c = json.load(open(f"{hf_dir}/config.json"))
    m = Model(c)
    m.load_hf_state_dict(load_file(f"{hf_dir}/model.safetensors"))
    m.eval()
    m.freeze()
    return m
