//! Tool calls from Python: OpenAI's `tools` and `tool_choice` read (as JSON text the Python
//! layer dumps), the grammar that makes a `required` or named call parse (and the generic
//! JSON answer of a template that knows nothing of tools), and an answer split into its text
//! and its calls, in the syntax the model's chat template writes them in. The same core
//! functions the server uses (`bitnet_core::chat::tools`).

use bitnet_core::chat::{Tool, ToolChoice};
use serde_json::Value;

use pyo3::PyResult;

use crate::error::refused;

/// Most tools one call may offer (as the server).
const MAX_TOOLS: usize = 128;

/// The tools of a chat call and what it asks of them.
#[derive(Debug)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

impl ToolRequest {
    /// Whether the answer may hold calls (and is read for them).
    pub fn active(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }
}

/// Reads `tools` (a JSON list), `tool_choice` (JSON: a string or an object; `null` is
/// `auto`) and `parallel_tool_calls`.
pub fn read(tools_json: &str, choice_json: &str, parallel: bool) -> PyResult<ToolRequest> {
    let list: Vec<Value> = serde_json::from_str::<Option<Vec<Value>>>(tools_json)
        .map_err(|e| refused(format!("tools: a list of tools is expected: {e}")))?
        .unwrap_or_default();
    if list.len() > MAX_TOOLS {
        return Err(refused(format!("tools: at most {MAX_TOOLS} tools")));
    }
    let tools = list
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_value::<Tool>(t).map_err(|e| {
                refused(format!(
                    "tools[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", \"description\", \"parameters\"}}}}: {e}"
                ))
            })
        })
        .collect::<PyResult<Vec<Tool>>>()?;
    let choice_value: Value =
        serde_json::from_str(choice_json).map_err(|e| refused(format!("tool_choice: {e}")))?;
    let choice =
        ToolChoice::from_openai(&choice_value).map_err(|e| refused(format!("tool_choice: {e}")))?;
    if !matches!(choice, ToolChoice::Auto | ToolChoice::None) {
        choice
            .check(&tools)
            .map_err(|e| refused(format!("tool_choice: {e}")))?;
    }
    Ok(ToolRequest {
        tools,
        choice,
        parallel,
    })
}
