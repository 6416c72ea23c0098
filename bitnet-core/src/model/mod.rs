//! What a model is: the [`Model`] loaded from a GGUF file (config, tokenizer, weights
//! repacked for the kernels; immutable after load and shared), how it is loaded
//! ([`LoadOptions`]) and what loading cost ([`LoadStats`]). How sequences run over it is the
//! engine's business (`crate::engine`).
//!
//! Files: `loader.rs` reads a GGUF into a [`Model`]; `load_steps.rs` the load's parallel
//! byte work (head re-quantization, copies out of the map); `linear.rs` is one projection
//! in whichever layout it was loaded as; `ternarize.rs` the absmean rule a BitNet
//! embedding model's float projections are loaded by; `sigbus.rs` the message for a mapped
//! file cut short while in use.

pub(crate) mod linear;
mod load_steps;
mod loader;
mod sigbus;
mod ternarize;

use std::ops::Range;
use std::sync::{Arc, OnceLock};

use bitnet_gguf::FileData;
use bitnet_kernels::float::{
    self, Q4R, Q4R_ROWS, Q6KR, Q6KR_ROWS, Q8R, Q8R_ROWS, QK8_0, RowFormat,
};
use bitnet_kernels::{AlignedVec, Isa};

use crate::config::{ModelConfig, Proj};
use crate::constrain::{ConstraintError, ConstraintVocab};
use crate::tokenizer::Tokenizer;

pub(crate) use linear::Linear;
pub use sigbus::install_sigbus_message;

/// How the file's bytes are brought into memory.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum LoadMode {
    /// Memory-map the file; the embedding (and head) stay zero-copy views of the map.
    #[default]
    Mmap,
    /// Read the whole file into aligned memory (`--no-mmap`); what the model keeps after the
    /// ternary weights are repacked is copied out and the file buffer dropped.
    Read,
}

/// How the output head (vocabulary projection) is computed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum HeadMode {
    /// In the file's own format (F16, Q6_K, ...), straight from the file's bytes.
    #[default]
    Native,
    /// Re-quantized to Q8_0 at load (a Q8_0 head's rows taken as they are), in the kernels'
    /// grouped layout (`bitnet_kernels::float::Q8R`); the final hidden state is quantized to
    /// Q8_0 too.
    Q8,
    /// Re-quantized to Q6_K at load (6.56 bits a weight; a Q6_K head's rows taken as they
    /// are), in the kernels' grouped layout (`bitnet_kernels::float::Q6KR`), as a file's own
    /// Q6_K head runs too; `n_embd` a multiple of 256.
    Q6K,
    /// Re-quantized to Q4_0 at load (4.5 bits a weight), run in the kernels' grouped layout;
    /// `n_embd` a multiple of 32.
    Q4_0,
}

impl HeadMode {
    /// A float head at least this large is re-quantized to Q8_0 when the load leaves the
    /// choice to the loader (`LoadOptions::head: None`): there the head is a large share of
    /// the bytes each decoded token reads (657 MB of F16 against about 0.5 GB of ternary
    /// weights on the 2B-4T shape: 23.3 against 18.7 tok/s at 2 threads, docs/performance.md), while its
    /// accuracy cost is small (mean KL divergence 0.000026 and the same top token at 99.5%
    /// of positions on the shipped model; `perplexity --kl-divergence`). A smaller head
    /// belongs to a model small enough to sit in cache, where it does not bound decode, and
    /// is left as the file has it. A Q8_0 head this large is taken into the grouped layout
    /// (the same bytes, the same weights): in the row layout it would run the float product
    /// (its rows widened to f32), which decoded at 0.65x the grouped integer one on the
    /// 2B-4T shape (bench/2026-12-06-issue50-heads.md).
    pub const AUTO_Q8_MIN_BYTES: usize = 16 << 20;

    /// The mode the loader picks for a head in `fmt` of `bytes` bytes, `n_embd` wide.
    pub fn auto_for(fmt: RowFormat, bytes: usize, n_embd: usize) -> HeadMode {
        let to_q8 = matches!(
            fmt,
            RowFormat::F32 | RowFormat::F16 | RowFormat::BF16 | RowFormat::Q8_0
        );
        if to_q8 && bytes >= Self::AUTO_Q8_MIN_BYTES && n_embd.is_multiple_of(QK8_0) {
            HeadMode::Q8
        } else {
            HeadMode::Native
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            HeadMode::Native => "native",
            HeadMode::Q8 => "q8_0",
            HeadMode::Q6K => "q6_k",
            HeadMode::Q4_0 => "q4_0",
        }
    }

    /// The row format a re-quantizing mode writes the head in (`None`: native, or Q8_0's
    /// grouped layout).
    pub fn row_format(self) -> Option<RowFormat> {
        match self {
            HeadMode::Native | HeadMode::Q8 => None,
            HeadMode::Q6K => Some(RowFormat::Q6K),
            HeadMode::Q4_0 => Some(RowFormat::Q4_0),
        }
    }

    /// The columns a head's rows must be a multiple of in this mode.
    pub fn col_multiple(self) -> usize {
        match self {
            HeadMode::Native => 1,
            HeadMode::Q8 => QK8_0,
            HeadMode::Q6K => RowFormat::Q6K.block_len(),
            HeadMode::Q4_0 => RowFormat::Q4_0.block_len(),
        }
    }
}

/// Options of [`Model::load`].
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub mode: LoadMode,
    /// Lock the model's memory (`mlock`) so it is never paged out.
    pub mlock: bool,
    /// Kernel set; `None` = [`Isa::from_env`] (`BITNET_KERNEL` or the best available).
    /// The weights are repacked for it, so it belongs to the model.
    pub isa: Option<Isa>,
    /// The output head's mode; `None` lets the loader pick ([`HeadMode::auto_for`]).
    pub head: Option<HeadMode>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            mode: LoadMode::Mmap,
            mlock: false,
            isa: None,
            head: None,
        }
    }
}

/// What loading cost and produced.
#[derive(Clone, Debug)]
pub struct LoadStats {
    pub load_secs: f64,
    /// Bytes of weights held in memory by the model (repacked matrices, norms, owned copies).
    pub weight_bytes: u64,
    /// Bytes of the file still mapped and read at run time (embedding, head); 0 without mmap.
    pub mapped_bytes: u64,
    /// Where the weight bytes live, and which of them a run keeps resident.
    pub memory: WeightMemory,
    /// Wall time of each step of the load, in order; those not [`LoadPhase::beside`]
    /// another add up to `load_secs`.
    pub phases: Vec<LoadPhase>,
    pub isa: Isa,
    /// Threads the load (repacking) ran on.
    pub threads: usize,
    pub head_mode: HeadMode,
}

/// One step of [`Model::load`] and its wall time.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadPhase {
    /// `open` (map and parse the header), `tokenizer`, `repack` (ternary and 1-bit
    /// projections), `norms`, `head_q8` (`--head q8`), `copy_out` (`--no-mmap`), `mlock`,
    /// `other` (the rest).
    pub name: &'static str,
    pub secs: f64,
    /// Ran on a thread of its own beside the next step (the tokenizer beside `repack`), so
    /// not part of the sum that makes up the load time.
    pub beside: bool,
}

/// The model's weight bytes by where they live. A run keeps resident what it reads whole
/// every token ([`WeightMemory::in_use`]); an embedding used only for row look-ups (its head
/// being another tensor, or a re-quantized copy) costs only the rows of the tokens seen while
/// it stays mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightMemory {
    /// Ternary and 1-bit projections repacked for the kernels (private memory).
    pub repacked: u64,
    /// Private copies: f32 norms, a re-quantized head, and with `--no-mmap` every float
    /// tensor copied out of the file.
    pub copied: u64,
    /// Mapped bytes read whole every token (a head or float projections used in place).
    pub mapped: u64,
    /// Mapped bytes read a row at a time (the embedding when the head is not it).
    pub mapped_by_row: u64,
}

impl WeightMemory {
    /// Bytes of weights a run reads whole, so keeps resident: repacked + copied + mapped.
    pub fn in_use(&self) -> u64 {
        self.repacked + self.copied + self.mapped
    }
}

/// Bytes the model keeps from the file, either as a view into the open file (mmap) or as an
/// owned aligned copy.
#[derive(Clone, Debug)]
pub(crate) enum Blob {
    File(Range<usize>),
    Owned(usize),
}

/// The storage [`Blob`]s point into.
#[derive(Debug)]
pub(crate) struct Store {
    /// The file's bytes while the model reads them in place (mmap mode).
    pub(crate) file: Option<FileData>,
    pub(crate) owned: Vec<AlignedVec<u8>>,
}

impl Store {
    pub(crate) fn bytes(&self, b: &Blob) -> &[u8] {
        match b {
            Blob::File(r) => match &self.file {
                Some(f) => &f.as_bytes()[r.clone()],
                None => &[],
            },
            Blob::Owned(i) => &self.owned[*i],
        }
    }
}

/// A float matrix (embedding, head) stored row by row in a [`RowFormat`].
#[derive(Clone, Debug)]
pub(crate) struct FloatRows {
    pub(crate) fmt: RowFormat,
    pub(crate) blob: Blob,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_bytes: usize,
}

/// The output head as the engine runs it.
#[derive(Debug)]
pub(crate) enum Head {
    /// The rows in the file's own format ([`HeadMode::Native`]), read in place or copied out.
    Rows(FloatRows),
    /// Q8_0 in the kernels' grouped layout ([`HeadMode::Q8`]), a private copy.
    Q8(Q8R),
    /// Q6_K in the kernels' grouped layout (a file's Q6_K head, or [`HeadMode::Q6K`]), a
    /// private copy.
    Q6(Q6KR),
    /// Q4_0 in the kernels' grouped layout (a file's Q4_0 head, or [`HeadMode::Q4_0`]), a
    /// private copy.
    Q4(Q4R),
}

impl Head {
    pub(crate) fn rows(&self) -> usize {
        match self {
            Head::Rows(f) => f.rows,
            Head::Q8(q) => q.rows(),
            Head::Q6(q) => q.rows(),
            Head::Q4(q) => q.rows(),
        }
    }

    /// The bytes a product over the whole head reads, where they lie.
    pub(crate) fn streamed<'a>(&'a self, store: &'a Store) -> &'a [u8] {
        match self {
            Head::Rows(f) => &store.bytes(&f.blob)[..f.rows * f.row_bytes],
            Head::Q8(q) => q.bytes(),
            Head::Q6(q) => q.bytes(),
            Head::Q4(q) => q.bytes(),
        }
    }

    /// The bytes of rows `rows` of the head (`rows.start` a multiple of 16, `rows.end` too
    /// or the last row), where they lie: float rows one after another, the grouped layouts
    /// 16 rows a group, a group one stretch.
    pub(crate) fn row_bytes<'a>(&'a self, store: &'a Store, rows: Range<usize>) -> &'a [u8] {
        let all = self.streamed(store);
        let (group_rows, group_bytes) = match self {
            Head::Rows(f) => (1, f.row_bytes),
            Head::Q8(q) => (Q8R_ROWS, q.group_bytes()),
            Head::Q6(q) => (Q6KR_ROWS, q.group_bytes()),
            Head::Q4(q) => (Q4R_ROWS, q.group_bytes()),
        };
        let at = |r: usize| {
            if r >= self.rows() {
                all.len()
            } else {
                (r / group_rows * group_bytes).min(all.len())
            }
        };
        &all[at(rows.start)..at(rows.end).max(at(rows.start))]
    }

    /// Bytes a product over the whole head reads.
    pub(crate) fn stream_bytes(&self) -> usize {
        match self {
            Head::Rows(f) => f.rows * f.row_bytes,
            Head::Q8(q) => q.bytes().len(),
            Head::Q6(q) => q.bytes().len(),
            Head::Q4(q) => q.bytes().len(),
        }
    }
}

/// Where the token embedding's rows are read from.
#[derive(Debug)]
pub(crate) enum Embedding {
    /// Its own rows (a view of the file, or a copy).
    Rows(FloatRows),
    /// The head's rows: a tied Q8_0 embedding whose head is [`Head::Q8`], the same bytes, so
    /// the file's copy is neither kept nor read.
    Head,
}

/// One transformer block's weights.
#[derive(Debug)]
pub(crate) struct Layer {
    pub(crate) attn_norm: Vec<f32>,
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) attn_sub_norm: Option<Vec<f32>>,
    pub(crate) o: Linear,
    pub(crate) ffn_norm: Vec<f32>,
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) ffn_sub_norm: Option<Vec<f32>>,
    pub(crate) down: Linear,
    /// Each projection's own input norm, in [`Proj::ALL`] order (`ModelConfig::proj_norms`).
    pub(crate) norm_in: Option<Box<[Vec<f32>; 7]>>,
    /// Per-head q and k norms, `head_dim` wide (`ModelConfig::qk_norms`).
    pub(crate) q_norm: Option<Vec<f32>>,
    pub(crate) k_norm: Option<Vec<f32>>,
    /// Norms of the attention and FFN outputs before their residual adds
    /// (`ModelConfig::post_norms`).
    pub(crate) post_attn_norm: Option<Vec<f32>>,
    pub(crate) post_ffn_norm: Option<Vec<f32>>,
}

impl Layer {
    /// Projection `p`'s own input norm, if the model has them.
    pub(crate) fn norm_in(&self, p: Proj) -> Option<&[f32]> {
        let i = Proj::ALL.iter().position(|&q| q == p)?;
        self.norm_in.as_ref().map(|n| n[i].as_slice())
    }

    /// Every norm weight of the layer (for memory accounting).
    pub(crate) fn norms(&self) -> impl Iterator<Item = &Vec<f32>> {
        [&self.attn_norm, &self.ffn_norm]
            .into_iter()
            .chain(self.attn_sub_norm.iter())
            .chain(self.ffn_sub_norm.iter())
            .chain(self.norm_in.iter().flat_map(|n| n.iter()))
            .chain(self.q_norm.iter())
            .chain(self.k_norm.iter())
            .chain(self.post_attn_norm.iter())
            .chain(self.post_ffn_norm.iter())
    }

    pub(crate) fn linears(&self) -> [&Linear; 7] {
        [
            &self.q, &self.k, &self.v, &self.o, &self.gate, &self.up, &self.down,
        ]
    }

    pub(crate) fn linears_mut(&mut self) -> [&mut Linear; 7] {
        [
            &mut self.q,
            &mut self.k,
            &mut self.v,
            &mut self.o,
            &mut self.gate,
            &mut self.up,
            &mut self.down,
        ]
    }
}

/// A loaded model: immutable after load and shared (`Arc`) by the engine and whoever
/// else reads it; run-time settings live in [`crate::engine::EngineOptions`].
#[derive(Debug)]
pub struct Model {
    pub(crate) config: ModelConfig,
    pub(crate) tokenizer: Option<Tokenizer>,
    /// `tokenizer.chat_template`, kept apart from the file (which `--no-mmap` drops).
    pub(crate) chat_template: Option<String>,
    pub(crate) store: Store,
    pub(crate) embed: Embedding,
    pub(crate) head: Head,
    pub(crate) head_mode: HeadMode,
    pub(crate) output_norm: Vec<f32>,
    pub(crate) layers: Vec<Layer>,
    pub(crate) isa: Isa,
    pub(crate) stats: LoadStats,
    /// The vocabulary as structured output sees it, built at the first constrained request.
    pub(crate) constraint_vocab: OnceLock<Result<Arc<ConstraintVocab>, ConstraintError>>,
}

impl Model {
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The tokenizer built from the file's metadata, if it has one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// Weight bytes one decode step streams from memory: every layer projection in its
    /// loaded layout plus the whole output head (a tied embedding counts once, as the head;
    /// the embedding lookup itself reads one row). Divide the read bandwidth by this for the
    /// decode bound.
    pub fn decode_bytes_per_token(&self) -> u64 {
        let projections: u64 = self
            .layers
            .iter()
            .flat_map(|l| l.linears())
            .map(|lin| lin.memory_bytes() as u64)
            .sum();
        projections + self.head.stream_bytes() as u64
    }

    /// The weight bytes a decoded token streams, in the order a pass reads them: every
    /// layer's projections, then the head (what [`Model::decode_bytes_per_token`] counts,
    /// less the per-block scales).
    pub(crate) fn streamed_weights(&self) -> Vec<&[u8]> {
        self.layers
            .iter()
            .flat_map(|l| l.linears())
            .map(|lin| lin.streamed(&self.store))
            .chain(std::iter::once(self.head.streamed(&self.store)))
            .collect()
    }

    /// Token `tok`'s embedding row as f32 (`out`: `n_embd` long; `tok` below the vocabulary).
    pub(crate) fn embed_row(&self, tok: usize, out: &mut [f32]) {
        let rows = match (&self.embed, &self.head) {
            (Embedding::Rows(f), _) | (Embedding::Head, Head::Rows(f)) => f,
            (Embedding::Head, Head::Q8(q)) => return q.dequantize_row(tok, out),
            (Embedding::Head, Head::Q6(q)) => return q.dequantize_row(tok, out),
            (Embedding::Head, Head::Q4(q)) => return q.dequantize_row(tok, out),
        };
        let rb = rows.row_bytes;
        let row = &self.store.bytes(&rows.blob)[tok * rb..(tok + 1) * rb];
        float::dequantize_row(rows.fmt, row, out);
    }

    /// The file's own chat template (`tokenizer.chat_template`), if it has one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    pub fn load_stats(&self) -> &LoadStats {
        &self.stats
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The default context size of an engine: the training context, at most 4096.
    pub fn default_n_ctx(&self) -> usize {
        self.config.n_ctx_train.clamp(1, 4096)
    }

    pub fn n_vocab(&self) -> usize {
        self.config.n_vocab
    }

    pub fn head_mode(&self) -> HeadMode {
        self.head_mode
    }

    /// The vocabulary for structured output ([`crate::constrain`]), built on first use
    /// (a trie of every token's bytes: tens of milliseconds on a 128k vocabulary).
    pub fn constraint_vocab(&self) -> Result<Arc<ConstraintVocab>, ConstraintError> {
        self.constraint_vocab
            .get_or_init(|| {
                let tok = self.tokenizer.as_ref().ok_or_else(|| {
                    ConstraintError::Vocabulary(
                        "the model's tokenizer, and the file has none".into(),
                    )
                })?;
                ConstraintVocab::new(tok, self.n_vocab()).map(Arc::new)
            })
            .clone()
    }
}
