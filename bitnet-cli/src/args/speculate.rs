//! Speculative decoding flags (`--model-draft` / llama.cpp's `-md`, `--lookup-ngram`,
//! `--draft-max`, `--draft-min`, `--draft-p-min`), turning into the requests'
//! [`SpecParams`] and, with a draft model, a second engine set on the scheduler.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::model::Model;
use bitnet_core::scheduler::speculate::{DEFAULT_DRAFT_MAX, DEFAULT_P_MIN, MAX_LOOKUP_NGRAM};
use bitnet_core::scheduler::{DraftSource, Scheduler, SpecParams};

use crate::args::model::ModelArgs;
use crate::setup::load_model;

#[derive(Clone, Debug, clap::Args)]
pub struct SpeculateArgs {
    /// Speculative decoding with a draft model (llama.cpp's -md): a smaller model with the
    /// same vocabulary proposes tokens, the model verifies them in one pass. Output is
    /// unchanged (greedy: token for token; sampled: the same distribution).
    #[arg(
        long = "model-draft",
        value_name = "FILE",
        conflicts_with = "lookup_ngram"
    )]
    pub model_draft: Option<PathBuf>,
    /// Speculative decoding with no model (prompt lookup): propose the tokens that followed
    /// the most recent earlier occurrence of the last N tokens (N down to 2) in the prompt
    /// and output.
    #[arg(long = "lookup-ngram", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=MAX_LOOKUP_NGRAM as i64))]
    pub lookup_ngram: Option<u32>,
    /// Draft tokens verified per step at most; the length adapts below it to what is
    /// accepted.
    #[arg(long = "draft-max", visible_aliases = ["draft", "draft-n"], value_name = "N",
          default_value_t = DEFAULT_DRAFT_MAX)]
    pub draft_max: usize,
    /// A shorter draft is not verified.
    #[arg(long = "draft-min", value_name = "N", default_value_t = 0)]
    pub draft_min: usize,
    /// A draft model's proposal stops before a token it gives less than this probability.
    #[arg(long = "draft-p-min", value_name = "P", default_value_t = DEFAULT_P_MIN)]
    pub draft_p_min: f32,
    /// Propose --draft-max tokens every step, instead of the length that the acceptance so
    /// far and the measured cost of a pass make worth it (to measure acceptance).
    #[arg(long = "draft-fixed")]
    pub draft_fixed: bool,
}

/// A draft model loaded as the command line says, with the engine options it runs with.
#[derive(Debug)]
pub struct DraftModel {
    pub path: PathBuf,
    pub model: Arc<Model>,
    pub engine_opts: EngineOptions,
}

impl SpeculateArgs {
    /// The requests' speculation, when a draft source is given.
    pub fn params(&self) -> Option<SpecParams> {
        let source = if self.model_draft.is_some() {
            DraftSource::Model
        } else {
            DraftSource::Lookup {
                ngram: self.lookup_ngram? as usize,
            }
        };
        Some(SpecParams {
            source,
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            p_min: self.draft_p_min,
            adaptive: !self.draft_fixed,
        })
    }

    /// Checks the values against a pass of `max_batch` tokens, with the flags' names.
    pub fn check(&self, max_batch: usize) -> Result<()> {
        if let Some(p) = self.params() {
            p.validate(max_batch)
                .map_err(|e| anyhow::anyhow!("speculative decoding: {e}"))?;
        } else if self.draft_max != DEFAULT_DRAFT_MAX
            || self.draft_min != 0
            || self.draft_p_min != DEFAULT_P_MIN
            || self.draft_fixed
        {
            bail!(
                "--draft-max, --draft-min, --draft-p-min and --draft-fixed tune speculative decoding: \
                 give \
                 --model-draft FILE or --lookup-ngram N too"
            );
        }
        Ok(())
    }

    /// Loads the draft model (the target's load options; its engine runs with the target's
    /// threads, context and batch).
    pub fn load(
        &self,
        args: &ModelArgs,
        target_opts: &EngineOptions,
    ) -> Result<Option<DraftModel>> {
        let Some(path) = &self.model_draft else {
            return Ok(None);
        };
        let model = load_model(path, &args.load_options()?)
            .with_context(|| format!("loading the draft model {}", path.display()))?;
        Ok(Some(DraftModel {
            path: path.clone(),
            model,
            engine_opts: target_opts.clone(),
        }))
    }
}

impl DraftModel {
    /// Makes the draft engine on the calling thread (the scheduler's) and sets it.
    pub fn attach(&self, sched: &mut Scheduler) -> Result<()> {
        let engine = Engine::new(self.model.clone(), &self.engine_opts)
            .with_context(|| format!("creating the draft engine for {}", self.path.display()))?;
        sched
            .set_draft(engine)
            .with_context(|| format!("using {} as the draft model", self.path.display()))
    }
}

/// The speculation figures of a request that speculated, for a status line:
/// `draft: 120 proposed, 84 accepted (70.0%), 2.61 tokens a verification`.
pub fn draft_line(stats: &bitnet_core::scheduler::GenStats) -> Option<String> {
    (stats.draft_verifies > 0).then(|| {
        format!(
            "draft: {} proposed, {} accepted ({:.1}%), {:.2} tokens a verification",
            stats.draft_tokens,
            stats.draft_accepted,
            100.0 * stats.acceptance(),
            stats.mean_accepted_length()
        )
    })
}
