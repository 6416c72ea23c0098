use std::path::PathBuf;

use thiserror::Error;

/// Why a precision plan could not be read, written, chosen or run.
#[derive(Debug, Error)]
pub enum PlanError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The text is not a plan: not JSON, not this format, or a field is missing or wrong.
    #[error("not a precision plan: {0}")]
    Parse(String),
    #[error(
        "precision plan version {found}: this build reads version {supported} (a newer \
         `bitnet calibrate` wrote it)"
    )]
    Version { found: u32, supported: u32 },
    #[error("precision plan, layer {layer}: unknown {field} {value:?} (one of {allowed})")]
    UnknownValue {
        layer: usize,
        field: &'static str,
        value: String,
        allowed: String,
    },
    /// The plan was made for a model of another depth.
    #[error(
        "the precision plan has {plan} layers and the model {model}: a plan is made for one \
         model (run `bitnet calibrate` on this one)"
    )]
    LayerCount { plan: usize, model: usize },
    /// Calibration settings that cannot be run.
    #[error("calibration: {0}")]
    Calibration(String),
    /// A budget that is negative or not a number.
    #[error("KL-divergence budget {0} is not a finite number 0 or more")]
    Budget(f64),
    #[error(transparent)]
    Core(#[from] Box<crate::CoreError>),
}

impl From<crate::CoreError> for PlanError {
    fn from(e: crate::CoreError) -> Self {
        PlanError::Core(Box::new(e))
    }
}
