//! Tool calls from Python: OpenAI's `tools` and `tool_choice` as JSON text the Python layer
//! dumps, read by the core's [`ToolRequest`] (the server's reader too).

use bitnet_core::chat::{ToolRequest, ToolRequestError};
use pyo3::PyResult;
use serde_json::Value;

use crate::error::refused;

/// Reads `tools` (a JSON list or `null`), `tool_choice` (JSON: a string, an object, or
/// `null` for `auto`) and `parallel_tool_calls`.
pub fn read(tools_json: &str, choice_json: &str, parallel: bool) -> PyResult<ToolRequest> {
    let json = |field: &str, text: &str| {
        serde_json::from_str::<Value>(text).map_err(|e| refused(format!("{field}: {e}")))
    };
    let tools = json("tools", tools_json)?;
    let choice = json("tool_choice", choice_json)?;
    ToolRequest::from_fields(Some(&tools), Some(&choice), Some(&Value::Bool(parallel))).map_err(
        |e| match e {
            // Already names its field.
            ToolRequestError::BadField { .. } => refused(e.to_string()),
            ToolRequestError::Invalid { field, message } => refused(format!("{field}: {message}")),
        },
    )
}
