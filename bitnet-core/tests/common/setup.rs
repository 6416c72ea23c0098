//! Loading a model and opening sessions the way the tests describe them: one options
//! struct for what used to be one (how to load, and how the engine runs), so a test case
//! reads `Opts { head: Some(HeadMode::Q8), ..opts(2) }`.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use bitnet_core::CoreError;
use bitnet_core::engine::{EngineOptions, Session};
use bitnet_core::kv::KvType;
use bitnet_core::model::{HeadMode, LoadMode, LoadOptions, Model};
use bitnet_kernels::Isa;

/// Load options and engine options of a test case.
#[derive(Clone, Debug)]
pub struct Opts {
    pub mode: LoadMode,
    pub isa: Option<Isa>,
    pub head: Option<HeadMode>,
    pub threads: usize,
    pub pin: bool,
    pub n_ctx: usize,
    pub prefill_chunk: usize,
    pub k_type: KvType,
    pub v_type: KvType,
    pub mlock: bool,
}

impl Default for Opts {
    fn default() -> Self {
        let (l, e) = (LoadOptions::default(), EngineOptions::default());
        Opts {
            mode: l.mode,
            isa: l.isa,
            head: l.head,
            threads: e.threads,
            pin: e.pin,
            n_ctx: e.n_ctx,
            prefill_chunk: e.batch,
            k_type: e.k_type,
            v_type: e.v_type,
            mlock: l.mlock,
        }
    }
}

/// A loaded model and the engine options its sessions get.
#[derive(Debug)]
pub struct Loaded {
    pub model: Arc<Model>,
    pub engine: EngineOptions,
}

impl Deref for Loaded {
    type Target = Model;
    fn deref(&self) -> &Model {
        &self.model
    }
}

impl Loaded {
    /// A session with room for `n_ctx` tokens (0: the case's context).
    pub fn session(&self, n_ctx: usize) -> Result<Session, CoreError> {
        let mut e = self.engine.clone();
        if n_ctx != 0 {
            e.n_ctx = n_ctx;
        }
        Session::new(self.model.clone(), &e)
    }
}

pub fn load(path: impl AsRef<Path>, o: &Opts) -> Result<Loaded, CoreError> {
    let load = LoadOptions {
        mode: o.mode,
        isa: o.isa,
        head: o.head,
        mlock: o.mlock,
    };
    let engine = EngineOptions {
        threads: o.threads,
        pin: o.pin,
        n_ctx: o.n_ctx,
        batch: o.prefill_chunk,
        k_type: o.k_type,
        v_type: o.v_type,
        ..EngineOptions::default()
    };
    Ok(Loaded {
        model: Arc::new(Model::load(path, &load)?),
        engine,
    })
}

/// `n` deterministic token ids spread over the vocabulary.
pub fn spread_prompt(n: usize, n_vocab: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % n_vocab) as u32).collect()
}

/// The logits of every token of `toks` evaluated as one prompt in a fresh session.
pub fn prefill_all(model: &Loaded, toks: &[u32]) -> Vec<f32> {
    let mut s = model.session(0).unwrap();
    s.eval(toks, true).unwrap().to_vec()
}

/// The logits of `toks` decoded one token at a time in a fresh session.
pub fn decode_all(model: &Loaded, toks: &[u32]) -> Vec<f32> {
    let mut s = model.session(0).unwrap();
    let mut out = Vec::new();
    for &t in toks {
        out.extend_from_slice(s.eval(&[t], false).unwrap());
    }
    out
}
