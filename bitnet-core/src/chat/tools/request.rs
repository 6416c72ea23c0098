//! The tool fields of a chat request as OpenAI sends them (`tools`, `tool_choice`,
//! `parallel_tool_calls`), read and checked once for the server and the Python package;
//! each fault names its field.

use serde_json::Value;
use thiserror::Error;

use super::{Tool, ToolChoice};

/// Most tools one request may offer.
pub const MAX_TOOLS: usize = 128;

/// The tools of a request and what it asks of them.
#[derive(Debug, Default)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    pub parallel: bool,
}

/// A tool field that cannot be taken.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ToolRequestError {
    /// The field is of the wrong type or size: it must be `expected`.
    #[error("'{field}' must be {expected}")]
    BadField {
        field: &'static str,
        expected: String,
    },
    /// The field is well formed but cannot be used (an entry that is not a tool, a choice
    /// naming no offered tool).
    #[error("{message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

impl ToolRequestError {
    /// The request field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            ToolRequestError::BadField { field, .. } | ToolRequestError::Invalid { field, .. } => {
                field
            }
        }
    }
}

impl ToolRequest {
    /// Reads the three fields (each absent or `null` takes its default: no tools, `auto`,
    /// parallel calls allowed).
    pub fn from_fields(
        tools: Option<&Value>,
        choice: Option<&Value>,
        parallel: Option<&Value>,
    ) -> Result<ToolRequest, ToolRequestError> {
        let present = |v: Option<&Value>| v.filter(|v| !v.is_null()).cloned();
        let tools: Vec<Tool> = match present(tools) {
            None => Vec::new(),
            Some(Value::Array(list)) => list
                .into_iter()
                .enumerate()
                .map(|(i, t)| {
                    serde_json::from_value::<Tool>(t).map_err(|e| ToolRequestError::Invalid {
                        field: "tools",
                        message: format!(
                            "'tools[{i}]' must be {{\"type\": \"function\", \"function\": {{\"name\", \"description\", \"parameters\"}}}}: {e}"
                        ),
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(ToolRequestError::BadField {
                    field: "tools",
                    expected: "a list of tools".into(),
                });
            }
        };
        if tools.len() > MAX_TOOLS {
            return Err(ToolRequestError::BadField {
                field: "tools",
                expected: format!("a list of at most {MAX_TOOLS} tools"),
            });
        }
        let invalid_choice = |e: super::ToolError| ToolRequestError::Invalid {
            field: "tool_choice",
            message: e.to_string(),
        };
        let choice = match present(choice) {
            None => ToolChoice::Auto,
            Some(v) => {
                let c = ToolChoice::from_openai(&v).map_err(invalid_choice)?;
                if !matches!(c, ToolChoice::Auto | ToolChoice::None) {
                    c.check(&tools).map_err(invalid_choice)?;
                }
                c
            }
        };
        let parallel = match present(parallel) {
            None => true,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                return Err(ToolRequestError::BadField {
                    field: "parallel_tool_calls",
                    expected: "true or false".into(),
                });
            }
        };
        Ok(ToolRequest {
            tools,
            choice,
            parallel,
        })
    }

    /// Whether the answer may hold calls (and is read for them).
    pub fn active(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }
}
