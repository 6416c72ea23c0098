//! Structured output from the command line, with llama.cpp's flags: `--grammar` (GBNF text),
//! `--grammar-file`, `-j/--json-schema` (schema text), `-jf/--json-schema-file`; a grammar
//! whose text starts with `%llguidance` is read as llguidance's Lark dialect, as llama.cpp
//! does. `--json` asks for any JSON value, `--regex` for a match of a regular expression.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use bitnet_core::Model;
use bitnet_core::constrain::{Constraint, ConstraintSpec};

/// The largest grammar or schema file read (real ones are a few KiB).
const MAX_GRAMMAR_BYTES: u64 = 4 << 20;

#[derive(Debug, Default, clap::Args)]
pub struct GrammarArgs {
    /// Constrain the output to this GBNF grammar (start rule `root`); text starting with
    /// `%llguidance` is a Lark grammar (start rule `start`).
    #[arg(long, value_name = "GRAMMAR", allow_hyphen_values = true)]
    pub grammar: Option<String>,
    /// --grammar, read from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub grammar_file: Option<PathBuf>,
    /// Constrain the output to JSON valid under this JSON Schema (`{}` for any JSON value).
    #[arg(
        short = 'j',
        long,
        value_name = "SCHEMA",
        conflicts_with_all = ["grammar", "grammar_file"]
    )]
    pub json_schema: Option<String>,
    /// --json-schema, read from a file.
    #[arg(
        long,
        visible_alias = "jf",
        value_name = "FILE",
        conflicts_with_all = ["grammar", "grammar_file", "json_schema"]
    )]
    pub json_schema_file: Option<PathBuf>,
    /// Constrain the output to a match of this regular expression.
    #[arg(
        long,
        value_name = "REGEX",
        allow_hyphen_values = true,
        conflicts_with_all = ["grammar", "grammar_file", "json_schema", "json_schema_file"]
    )]
    pub regex: Option<String>,
}

impl GrammarArgs {
    /// What the flags ask for, if anything; a file that cannot be read or a schema that is
    /// not JSON is an error naming the flag.
    pub fn spec(&self) -> Result<Option<ConstraintSpec>> {
        let grammar = match (&self.grammar, &self.grammar_file) {
            (Some(g), _) => Some(g.clone()),
            (None, Some(f)) => Some(read(f, "--grammar-file")?),
            (None, None) => None,
        };
        if let Some(g) = grammar {
            return Ok(Some(ConstraintSpec::grammar(g)));
        }
        let schema = match (&self.json_schema, &self.json_schema_file) {
            (Some(s), _) => Some((s.clone(), "--json-schema")),
            (None, Some(f)) => Some((read(f, "--json-schema-file")?, "--json-schema-file")),
            (None, None) => None,
        };
        if let Some((text, flag)) = schema {
            let value: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{flag}: the schema is not valid JSON"))?;
            return Ok(Some(ConstraintSpec::JsonSchema(value)));
        }
        Ok(self.regex.clone().map(ConstraintSpec::Regex))
    }

    /// The flags' constraint compiled for `model` (None without one).
    pub fn constraint(&self, model: &Model) -> Result<Option<Constraint>> {
        let Some(spec) = self.spec()? else {
            return Ok(None);
        };
        let vocab = model.constraint_vocab()?;
        let c = Constraint::compile(&spec, &vocab)
            .with_context(|| format!("compiling the {}", spec.kind()))?;
        Ok(Some(c))
    }
}

fn read(path: &PathBuf, flag: &str) -> Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("{flag}: cannot read {}", path.display()))?;
    if !meta.is_file() {
        bail!("{flag}: {} is not a file", path.display());
    }
    if meta.len() > MAX_GRAMMAR_BYTES {
        bail!(
            "{flag}: {} holds {} bytes, more than the {} a grammar or schema may have",
            path.display(),
            meta.len(),
            MAX_GRAMMAR_BYTES
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("{flag}: cannot read {}", path.display()))
}
