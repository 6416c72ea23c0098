//! Structured output from Python: a grammar (llama.cpp's GBNF, or llguidance's Lark after
//! `%llguidance`) or a JSON Schema compiled against the model's vocabulary into a
//! [`CompiledConstraint`] that a generation follows, and a grammar checked on its own (what
//! `LlamaGrammar.from_string` does before any model is at hand).

use std::sync::Arc;

use bitnet_core::Model;
use bitnet_core::constrain::{Constraint, ConstraintSpec, gbnf_to_lark};
use pyo3::prelude::*;

use crate::error::{engine_error, refused};

/// A grammar or schema compiled for one model; pass it to `Model.generate(constraint=...)`.
#[pyclass(module = "bitnet._bitnet", frozen)]
#[derive(Debug, Clone)]
pub struct CompiledConstraint {
    pub inner: Constraint,
}

#[pymethods]
impl CompiledConstraint {
    /// What it constrains to: `GBNF grammar`, `JSON schema`, ...
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
}

/// Compiles `spec` for `model`'s vocabulary; `what` names the argument in the message.
pub fn compile(
    model: &Arc<Model>,
    spec: &ConstraintSpec,
    what: &str,
) -> PyResult<CompiledConstraint> {
    let vocab = model
        .constraint_vocab()
        .map_err(|e| engine_error(what, &e))?;
    Constraint::compile(spec, &vocab)
        .map(|inner| CompiledConstraint { inner })
        .map_err(|e| engine_error(what, &e))
}

/// The spec of a JSON Schema given as JSON text.
pub fn json_schema(text: &str) -> PyResult<ConstraintSpec> {
    let schema: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| refused(format!("the JSON schema is not JSON: {e}")))?;
    if !schema.is_object() && !schema.is_boolean() {
        return Err(refused("a JSON schema must be an object (or true/false)"));
    }
    Ok(ConstraintSpec::JsonSchema(schema))
}

/// Checks a grammar's syntax without a model: GBNF is translated (its errors name the line);
/// Lark is left for the compile, which needs the vocabulary.
#[pyfunction]
pub fn check_grammar(text: &str) -> PyResult<()> {
    if text.trim().is_empty() {
        return Err(refused("the grammar is empty"));
    }
    match ConstraintSpec::grammar(text) {
        ConstraintSpec::Gbnf(src) => gbnf_to_lark(&src)
            .map(|_| ())
            .map_err(|e| engine_error("grammar", &e)),
        _ => Ok(()),
    }
}
