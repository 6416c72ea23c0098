//! `bitnet-convert`: Hugging Face safetensors checkpoints of BitNet b1.58 and other ternary
//! models to the GGUF files bitnet-core (and bitnet.cpp / llama.cpp) load.
//!
//! Two families of routes: the language models (BitNet b1.58 2B-4T, 1bitLLM, ternary Llama:
//! ternary projections as I2_S / TQ2_0 / TQ1_0), and the BitNet embedding models (`qwen3`,
//! `gemma3_text`), written in bitnet.cpp's embedding layout exactly as its
//! `utils/convert-bitnet-embedding-to-gguf.py` writes them (I2_S, F16 or F32 projections,
//! per-projection input norms, Gemma's `1 + w` norms, no head, `pooling_type` from
//! sentence-transformers' files); the README says where this converter departs from it.
//!
//! The work is split in two: [`plan`] reads `config.json`, the safetensors headers and the
//! tokenizer, maps every tensor and builds the metadata, and checks the result against the
//! runtime's own rules (`ModelConfig::from_parts`, `Tokenizer::from_spec`) before a byte is
//! written; [`write_gguf`] then streams the tensors one at a time into a GGUF writer.
//! [`convert`] does both into a file, through a temporary file renamed at the end.

#![deny(unsafe_code)]
// A `PathBuf` is 32 bytes on Windows (a WTF-8 buffer), 24 elsewhere: that takes the largest
// `ConvertError` variants (a path and two strings) past clippy's 128 bytes there only. Errors
// end a conversion, so their size costs nothing that matters.
#![cfg_attr(windows, allow(clippy::result_large_err))]

pub mod encode;
pub mod error;
mod files;
pub mod hf;
pub mod mapping;
pub mod metadata;
mod mmap;
pub mod output;
pub mod report;
pub mod source;
pub mod tokenizer;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bitnet_core::config::ModelConfig;
use bitnet_core::tokenizer::Tokenizer;
use bitnet_gguf::{GgufWriter, Metadata, TensorInfo, TensorType};

pub use error::ConvertError;
pub use hf::HfConfig;
pub use mapping::{Job, OutputTypes, TypeOptions};
pub use source::Sources;
pub use tokenizer::ConvertedVocab;

/// What the user chose.
#[derive(Clone, Debug)]
pub struct Options {
    /// Output types.
    pub types: TypeOptions,
    /// Pre-tokenizer name to write instead of the detected one.
    pub pre: Option<String>,
    /// `general.name`; default: the checkpoint directory's name.
    pub name: Option<String>,
    /// A precision plan (`bitnet calibrate -o PLAN`) to keep in the file's metadata, where
    /// `--plan MODEL.gguf` finds it. It must be for the checkpoint's number of layers.
    pub calibration: Option<bitnet_core::plan::PrecisionPlan>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            types: TypeOptions {
                weights: TensorType::I2_S,
                embd: None,
                head: None,
            },
            pre: None,
            name: None,
            calibration: None,
        }
    }
}

/// Everything decided before writing.
#[derive(Debug)]
pub struct Plan {
    /// The checkpoint directory.
    pub dir: PathBuf,
    /// Its `config.json`.
    pub cfg: HfConfig,
    /// Its open safetensors files.
    pub sources: Sources,
    /// The output types, resolved for the checkpoint's route.
    pub types: OutputTypes,
    /// The GGUF tensors, in file order, with their sources.
    pub jobs: Vec<Job>,
    /// The GGUF metadata.
    pub meta: Metadata,
    /// The converted tokenizer.
    pub vocab: ConvertedVocab,
    /// The config the runtime will read from the file.
    pub config: ModelConfig,
    /// Every file of the checkpoint the output must not replace: those read (config,
    /// index, shards, tokenizer files) and the other checkpoint files present.
    pub inputs: Vec<PathBuf>,
    /// What the user should know beyond the tokenizer's warnings: where the file differs
    /// from the checkpoint's own forward pass, defaults filled in, tensors skipped.
    pub notes: Vec<String>,
}

impl Plan {
    /// The GGUF tensor infos.
    pub fn infos(&self) -> Vec<TensorInfo> {
        self.jobs.iter().map(|j| j.info.clone()).collect()
    }

    /// Bytes of tensor data the GGUF will hold.
    pub fn data_bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.info.n_bytes).sum()
    }
}

/// Progress of [`write_gguf`].
#[derive(Clone, Debug)]
pub enum Progress<'a> {
    /// Writing starts: `total` bytes of tensor data in `tensors` tensors.
    Start {
        /// Bytes of tensor data.
        total: u64,
        /// Tensors.
        tensors: usize,
    },
    /// Tensor `index` starts.
    Tensor {
        /// Position in the file.
        index: usize,
        /// The job.
        job: &'a Job,
    },
    /// `n` more bytes of the current tensor are written.
    Bytes(u64),
    /// All tensors are written.
    Done,
}

/// Projection types any route writes; the route decides among them after `config.json`.
const OUTTYPES: [TensorType; 5] = [
    TensorType::I2_S,
    TensorType::TQ2_0,
    TensorType::TQ1_0,
    TensorType::F16,
    TensorType::F32,
];

/// Reads and checks the checkpoint in `dir`; nothing is written.
pub fn plan(dir: &Path, opts: &Options) -> Result<Plan, ConvertError> {
    if !OUTTYPES.contains(&opts.types.weights) {
        return Err(ConvertError::Output {
            path: dir.to_owned(),
            reason: format!(
                "output type {} is not supported here",
                opts.types.weights.name()
            ),
        });
    }
    let not_checkpoint = |reason| ConvertError::NotACheckpoint {
        path: dir.to_owned(),
        reason,
    };
    if !dir.is_dir() {
        return Err(not_checkpoint(if dir.exists() {
            "not a directory"
        } else {
            "no such directory"
        }));
    }
    if !dir.join("config.json").exists() {
        return Err(not_checkpoint("no config.json in it"));
    }
    let cfg = HfConfig::read(dir)?;
    let types = OutputTypes::resolve(dir, &cfg, &opts.types)?;
    let sources = Sources::open(dir)?;
    let jobs = mapping::plan(dir, &cfg, &types, &sources)?;
    let embedding = cfg.is_embedding_model();
    let vocab = if embedding {
        tokenizer::embedding::convert(dir, &cfg, opts.pre.as_deref())?
    } else {
        tokenizer::convert(dir, &cfg, opts.pre.as_deref())?
    };
    // The runtime's tokenizer must load what we write (pre-tokenizer name, merges, ids).
    Tokenizer::from_spec(vocab.spec.clone())?;
    let mut notes = cfg.notes.clone();
    let pooling = if embedding {
        let p = hf::pooling::read(dir)?;
        notes.extend(p.note.clone());
        if sources.tensors.contains_key("lm_head.weight") {
            notes.push(
                "lm_head.weight skipped: an embedding model's GGUF has no output head (as \
                 bitnet.cpp's converter writes it)"
                    .into(),
            );
        }
        Some(p)
    } else {
        None
    };
    let name = opts.name.clone().unwrap_or_else(|| {
        std::fs::canonicalize(dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "model".into())
    });
    let mut meta = match &pooling {
        Some(p) => metadata::build_embedding(&cfg, &name, types.weights, p.pooling_type, &vocab),
        None => metadata::build(&cfg, &name, types.weights, &vocab),
    };
    if let Some(plan) = &opts.calibration {
        if plan.n_layer() != cfg.n_layer {
            return Err(ConvertError::Calibration {
                plan_layers: plan.n_layer(),
                model_layers: cfg.n_layer,
            });
        }
        meta.insert(
            bitnet_core::plan::PLAN_METADATA_KEY,
            plan.to_json().as_str(),
        );
    }
    let infos: Vec<TensorInfo> = jobs.iter().map(|j| j.info.clone()).collect();
    let config = ModelConfig::from_parts(&meta, &infos)?;
    let mut inputs = vec![dir.join("config.json")];
    inputs.extend(sources.index.iter().cloned());
    inputs.extend(sources.files.iter().map(|f| f.path.clone()));
    inputs.extend(vocab.inputs.iter().cloned());
    inputs.extend(pooling.into_iter().flat_map(|p| p.inputs));
    inputs.extend(files::checkpoint_files(dir));
    Ok(Plan {
        dir: dir.to_owned(),
        cfg,
        sources,
        types,
        jobs,
        meta,
        vocab,
        config,
        inputs,
        notes,
    })
}

/// Streams the planned GGUF into `out`.
pub fn write_gguf<W: Write>(
    plan: &Plan,
    out: W,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<W, ConvertError> {
    let infos = plan.infos();
    let mut w = GgufWriter::new(out, 3, &plan.meta, &infos, false)?;
    progress(Progress::Start {
        total: plan.data_bytes(),
        tensors: plan.jobs.len(),
    });
    for (index, job) in plan.jobs.iter().enumerate() {
        progress(Progress::Tensor { index, job });
        encode::write_job(&mut w, &plan.sources, job, &mut |n| {
            progress(Progress::Bytes(n))
        })?;
    }
    let out = w.finish()?;
    progress(Progress::Done);
    Ok(out)
}

/// Writes the planned GGUF to `target` (checked with [`output::check_destination`])
/// through a temporary file; returns the file size.
pub fn write_file(
    plan: &Plan,
    target: &Path,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<u64, ConvertError> {
    let real = output::check_destination(target)?;
    refuse_overwriting_inputs(plan, &real)?;
    let mut out = output::OutputFile::create(&real)?;
    let temp = out.temp_path().to_owned();
    {
        let mut buf = BufWriter::with_capacity(1 << 20, out.file());
        write_gguf(plan, &mut buf, progress)?;
        buf.flush().map_err(ConvertError::io(&temp))?;
    }
    out.commit()?;
    Ok(std::fs::metadata(&real)
        .map_err(ConvertError::io(&real))?
        .len())
}

/// Converts the checkpoint in `dir` to `target`.
pub fn convert(
    dir: &Path,
    target: &Path,
    opts: &Options,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<(Plan, u64), ConvertError> {
    // The destination is checked before the (possibly long) planning.
    output::check_destination(target)?;
    let plan = plan(dir, opts)?;
    let bytes = write_file(&plan, target, progress)?;
    Ok((plan, bytes))
}

/// The output must not replace one of the checkpoint's files: the shards are
/// memory-mapped while we write, and the others would simply be lost. Compared by file
/// identity, so a symlink, a hard link or a path through a linked directory is caught.
fn refuse_overwriting_inputs(plan: &Plan, real: &Path) -> Result<(), ConvertError> {
    let Some(out) = files::FileId::of(real) else {
        return Ok(()); // does not exist yet, so it is none of the inputs
    };
    match plan
        .inputs
        .iter()
        .find(|p| files::FileId::of(p).as_ref() == Some(&out))
    {
        Some(input) => Err(ConvertError::Output {
            path: real.to_owned(),
            reason: format!("is the checkpoint's input file {}", input.display()),
        }),
        None => Ok(()),
    }
}
