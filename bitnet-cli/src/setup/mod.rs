//! Loading a model and making an engine the way every model-running command wants: the
//! load options and engine options of the command line ([`crate::args`]), a clear message
//! for a vocab-only file or a mapped file cut short, the context's memory checked before it
//! is allocated ([`limits`]).

pub mod limits;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use bitnet_core::config::ModelConfig;
use bitnet_core::embed::Pooling;
use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::model::{LoadMode, LoadOptions, Model};
use bitnet_core::tokenizer::Tokenizer;
use bitnet_gguf::GgufFile;

use crate::args::attn_entropy::AttnEntropyArgs;
use crate::args::model::ModelArgs;
use crate::output::note;

/// A model loaded as the command line says, and the engine options it runs with.
#[derive(Debug)]
pub struct Setup {
    pub model: Arc<Model>,
    pub engine_opts: EngineOptions,
}

impl Setup {
    /// Loads the model at `path` with the options of `args` (and of `attn`, the attention
    /// entropy flags, for the commands that take them).
    pub fn load(path: &Path, args: &ModelArgs, attn: Option<&AttnEntropyArgs>) -> Result<Setup> {
        let opts = args.load_options()?;
        let mut engine_opts = args.engine_options();
        if let Some(a) = attn {
            a.apply(&mut engine_opts)?;
        }
        let model = load_model(path, &opts)?;
        args.apply_plan(&model, &mut engine_opts)?;
        Ok(Setup { model, engine_opts })
    }

    /// The model's tokenizer, or an error naming the keys it lacks.
    pub fn tokenizer(&self) -> Result<&Tokenizer> {
        self.model
            .tokenizer()
            .context("the model file has no tokenizer (tokenizer.ggml.* keys)")
    }

    /// Checks the context before anything is allocated (see [`limits::check_context`]);
    /// the context size.
    pub fn check_context(&self) -> Result<usize> {
        limits::check_context(&self.model, &self.engine_opts)
    }

    /// Says on stderr when the model is an embedding model, whose head (if it has one) was
    /// not trained to write text: `generate` and `chat` still run it, for whoever wants to
    /// look, but its text means nothing.
    pub fn warn_if_embedding_model(&self) {
        if let Some(why) = embedding_model(self.model.config()) {
            note!(
                "warning: the file is an embedding model ({why}): its output is not a language \
                 model's, so the text below means nothing; `bitnet embed` or `bitnet serve \
                 --embeddings` use it"
            );
        }
    }

    /// The engine (on the calling thread: its pool pins it).
    pub fn engine(&self) -> Result<Engine> {
        Engine::new(self.model.clone(), &self.engine_opts).context("creating the engine")
    }
}

/// Why a file is an embedding model (see `ModelConfig::is_embedding_model`), in words for
/// the messages that refuse it completions; `None` for a language model.
pub fn embedding_model(config: &ModelConfig) -> Option<String> {
    if !config.is_embedding_model() {
        return None;
    }
    Some(match config.pooling_type {
        Some(v) => {
            let name = Pooling::from_gguf(i64::from(v)).map_or("rank", Pooling::name);
            format!("{}.pooling_type {v}, {name}", config.arch_name)
        }
        None => "its projections have their own input norms".to_owned(),
    })
}

/// Loads a model, arranging for a clear message if the mapped file is truncated while in
/// use; a vocab-only file is named as such.
pub fn load_model(path: &Path, opts: &LoadOptions) -> Result<Arc<Model>> {
    if opts.mode == LoadMode::Mmap {
        watch_mapped_file(path);
    }
    Model::load(path, opts).map(Arc::new).map_err(|e| {
        if let Some(hint) = checkpoint_hint(path) {
            anyhow::anyhow!("{hint}")
        } else if vocab_only(path) {
            // The loader's own complaint (a missing tensor, zero layers) would only mislead.
            anyhow::anyhow!(
                "{} holds only a tokenizer (a vocab-only GGUF, no weights): it can be used with \
                 `bitnet tokenize`, not run",
                path.display()
            )
        } else {
            anyhow::Error::from(e).context(format!("loading {}", path.display()))
        }
    })
}

/// Opens `path` as a GGUF file (for the commands that read it without loading a model),
/// naming a checkpoint the converter takes as such.
pub fn open_gguf(path: &Path, mode: bitnet_gguf::LoadMode) -> Result<GgufFile> {
    GgufFile::open(path, mode).map_err(|e| match checkpoint_hint(path) {
        Some(hint) => anyhow::anyhow!("{hint}"),
        None => anyhow::Error::from(e).context(format!("opening {}", path.display())),
    })
}

/// What to say when `path`, which did not open as a GGUF, is a directory or a Hugging Face
/// checkpoint (a folder with config.json, or one of its `.safetensors` files): for a
/// checkpoint, the converter's command for it.
pub fn checkpoint_hint(path: &Path) -> Option<String> {
    let (what, folder) = if path.is_dir() {
        ("a directory", path)
    } else if path.extension().is_some_and(|e| e == "safetensors") {
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        ("a safetensors file", folder)
    } else {
        return None;
    };
    if !folder.join("config.json").is_file() {
        return Some(format!(
            "{} is {what}, not a GGUF model: -m takes a .gguf file (models/shakespeare.gguf \
             ships with the repository)",
            path.display()
        ));
    }
    Some(format!(
        "{} is {what} of a Hugging Face checkpoint, not a GGUF model: convert the checkpoint \
         first, `bitnet-convert {} -o OUT.gguf`, then give -m OUT.gguf",
        path.display(),
        folder.display()
    ))
}

/// Installs the SIGBUS message for a file about to be mapped (see `bitnet_core::model::install_sigbus_message`).
pub fn watch_mapped_file(path: &Path) {
    if let Err(e) = bitnet_core::model::install_sigbus_message(path) {
        note!("warning: cannot install the SIGBUS handler ({e})");
    }
}

/// True when `path` parses as a GGUF without tensors but with a tokenizer. Asked only after
/// a load failed, so a good load never parses the file twice.
fn vocab_only(path: &Path) -> bool {
    GgufFile::open(path, bitnet_gguf::LoadMode::Mmap)
        .is_ok_and(|f| f.tensors().is_empty() && f.metadata().get("tokenizer.ggml.model").is_some())
}
