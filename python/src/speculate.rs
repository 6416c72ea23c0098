//! Speculative decoding from Python: the `Llama`'s `draft_model` (a GGUF path: a smaller
//! model with the same vocabulary) or `lookup_ngram` (prompt lookup, no model), with the
//! CLI's `--draft-max`, `--draft-min`, `--draft-p-min` and `--draft-fixed` as keyword
//! arguments. Output is unchanged by it: greedy token for token, sampled in distribution.

use std::path::PathBuf;

use bitnet_core::scheduler::speculate::{DEFAULT_DRAFT_MAX, DEFAULT_P_MIN};
use bitnet_core::scheduler::{DraftSource, SpecParams};
use pyo3::PyResult;

use crate::error::refused;

/// The constructor's speculation arguments.
#[derive(Debug, Clone)]
pub struct SpecSettings {
    pub draft_model: Option<PathBuf>,
    pub lookup_ngram: Option<usize>,
    pub draft_max: usize,
    pub draft_min: usize,
    pub draft_p_min: f32,
    pub draft_fixed: bool,
}

impl SpecSettings {
    /// The requests' speculation (`None` without a draft source), checked against a pass of
    /// `max_batch` tokens.
    pub fn params(&self, max_batch: usize) -> PyResult<Option<SpecParams>> {
        let source = match (&self.draft_model, self.lookup_ngram) {
            (Some(_), Some(_)) => {
                return Err(refused(
                    "give draft_model or lookup_ngram, not both: each is a source of drafts",
                ));
            }
            (Some(_), None) => DraftSource::Model,
            (None, Some(n)) => DraftSource::Lookup { ngram: n },
            (None, None) => {
                if self.draft_max != DEFAULT_DRAFT_MAX
                    || self.draft_min != 0
                    || self.draft_p_min != DEFAULT_P_MIN
                    || self.draft_fixed
                {
                    return Err(refused(
                        "draft_max, draft_min, draft_p_min and draft_fixed tune speculative \
                         decoding: give draft_model or lookup_ngram too",
                    ));
                }
                return Ok(None);
            }
        };
        let params = SpecParams {
            source,
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            p_min: self.draft_p_min,
            adaptive: !self.draft_fixed,
        };
        params
            .validate(max_batch)
            .map_err(|e| refused(format!("speculative decoding: {e}")))?;
        Ok(Some(params))
    }
}
