//! The architecture families we run and the choices that tell them apart: the FFN gate's
//! activation, the rope pairing, the sub-norms, and the activations' precision.

/// The architecture families we run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `bitnet-b1.58` / `bitnet-25` (bitnet.cpp): squared-ReLU gate, sub-norms.
    BitnetB158,
    /// Upstream llama.cpp `bitnet`: SiLU gate, sub-norms.
    Bitnet,
    /// Ternary llama-architecture models: SiLU gate, no sub-norms, normal rope.
    Llama,
    /// Qwen3 (BitNet-embedding-0.6B): SiLU gate, per-head q/k norms, NeoX rope, a head
    /// dimension of its own (`attention.key_length`).
    Qwen3,
    /// Gemma3 (BitNet-embedding-270M): GELU-tanh gate, per-head q/k norms, the embedding
    /// scaled by sqrt(n_embd), norms after attention and after the FFN, NeoX rope.
    Gemma3,
}

impl Arch {
    /// The architecture for a `general.architecture` value.
    pub fn from_name(name: &str) -> Option<Arch> {
        match name {
            "bitnet-b1.58" | "bitnet-25" => Some(Arch::BitnetB158),
            "bitnet" => Some(Arch::Bitnet),
            "llama" => Some(Arch::Llama),
            "qwen3" => Some(Arch::Qwen3),
            "gemma3" => Some(Arch::Gemma3),
            _ => None,
        }
    }

    /// The name we write for this architecture.
    pub fn canonical_name(self) -> &'static str {
        match self {
            Arch::BitnetB158 => "bitnet-b1.58",
            Arch::Bitnet => "bitnet",
            Arch::Llama => "llama",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// The gate activation the architecture's reference engine computes.
    pub fn default_ffn_act(self) -> FfnAct {
        match self {
            Arch::BitnetB158 => FfnAct::Relu2,
            Arch::Bitnet | Arch::Llama | Arch::Qwen3 => FfnAct::Silu,
            Arch::Gemma3 => FfnAct::GeluTanh,
        }
    }

    /// The rope style of the architecture (llama.cpp's `llama_model_rope_type`).
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Arch::BitnetB158 | Arch::Bitnet | Arch::Qwen3 | Arch::Gemma3 => RopeStyle::Neox,
            Arch::Llama => RopeStyle::Normal,
        }
    }

    /// Whether the architecture has `attn_sub_norm` / `ffn_sub_norm`.
    pub fn has_sub_norms(self) -> bool {
        matches!(self, Arch::BitnetB158 | Arch::Bitnet)
    }

    /// Whether q and k are RMS-normalized per head (`attn_q_norm`, `attn_k_norm`, one
    /// `head_dim` weight shared by the heads) before rope.
    pub fn has_qk_norms(self) -> bool {
        matches!(self, Arch::Qwen3 | Arch::Gemma3)
    }

    /// Whether the attention and FFN outputs are RMS-normalized before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`), and the embedding is scaled by sqrt(n_embd).
    pub fn is_gemma(self) -> bool {
        self == Arch::Gemma3
    }
}

/// The FFN gate activation: `down(act(gate(x)) * up(x))`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FfnAct {
    /// `x * sigmoid(x)`.
    Silu,
    /// `max(x, 0)^2`.
    Relu2,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (ggml's `gelu`, HF
    /// `gelu_pytorch_tanh`).
    GeluTanh,
}

impl FfnAct {
    /// Parses the value of the `A.feed_forward_activation` key.
    pub fn from_name(s: &str) -> Option<FfnAct> {
        match s.to_ascii_lowercase().as_str() {
            "silu" | "swish" | "swiglu" => Some(FfnAct::Silu),
            "relu2" | "relu_sqr" | "relu_squared" | "squared_relu" => Some(FfnAct::Relu2),
            "gelu" | "gelu_tanh" | "gelu_pytorch_tanh" => Some(FfnAct::GeluTanh),
            _ => None,
        }
    }

    /// The name written to `A.feed_forward_activation`.
    pub fn name(self) -> &'static str {
        match self {
            FfnAct::Silu => "silu",
            FfnAct::Relu2 => "relu2",
            FfnAct::GeluTanh => "gelu",
        }
    }
}

/// How rope pairs the dimensions of a head.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])` (ggml `LLAMA_ROPE_TYPE_NORM`).
    Normal,
    /// Halves `(x[i], x[i + d/2])` (ggml NeoX, HF `rotate_half`).
    Neox,
}

/// Activation precision fed to the ternary / binary matmuls.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ActBits {
    /// Per-token absmax int8 (BitNet b1.58).
    Int8,
    /// Per-token sign with the mean absolute value as scale.
    Binary,
}

impl ActBits {
    /// The value written to `A.activation_bits`.
    pub fn bits(self) -> u32 {
        match self {
            ActBits::Int8 => 8,
            ActBits::Binary => 1,
        }
    }
}
