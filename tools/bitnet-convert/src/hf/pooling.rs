//! How a sentence-transformers checkpoint pools its token states into one embedding, read
//! from `modules.json` (the first module whose `type` ends in `Pooling`) and that module's
//! `config.json` (`1_Pooling/config.json`), as bitnet.cpp's embedding converter reads them.
//! The first flag set wins, in the reference's order: `pooling_mode_mean_tokens` -> MEAN (1),
//! `pooling_mode_cls_token` -> CLS (2), `pooling_mode_lasttoken` -> LAST (3), llama.cpp's
//! `{arch}.pooling_type` values.
//!
//! Where the reference falls back to MEAN (no `modules.json`, no Pooling module, no pooling
//! config, no flag it knows), nothing is written instead, with a note: the BitNet embedding
//! models are trained for last-token pooling, which is what the runtime takes for a file
//! that names none, while a MEAN written on a guess would be honoured and silently wrong.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::error::ConvertError;

/// llama.cpp's `LLAMA_POOLING_TYPE_*` for the three modes sentence-transformers and the
/// reference map.
const MEAN: u32 = 1;
const CLS: u32 = 2;
const LAST: u32 = 3;

/// The pooling a checkpoint declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolingConfig {
    /// `{arch}.pooling_type` to write, `None` when the checkpoint does not say.
    pub pooling_type: Option<u32>,
    /// Why nothing is written, for the user (`None` when a type is written).
    pub note: Option<String>,
    /// The files read (the output must not replace one of them).
    pub inputs: Vec<PathBuf>,
}

/// Reads the pooling of the checkpoint in `dir`.
pub fn read(dir: &Path) -> Result<PoolingConfig, ConvertError> {
    let mut out = PoolingConfig::default();
    let why_not = match declared(dir, &mut out.inputs)? {
        Ok(ty) => {
            out.pooling_type = Some(ty);
            return Ok(out);
        }
        Err(why) => why,
    };
    out.note = Some(format!(
        "{why_not}: no pooling_type is written, and bitnet embed / serve pool such a file by \
         its last token (what the BitNet embedding models are trained for; bitnet.cpp's \
         converter would write MEAN here)"
    ));
    Ok(out)
}

/// The declared pooling type, or why there is none.
fn declared(dir: &Path, inputs: &mut Vec<PathBuf>) -> Result<Result<u32, String>, ConvertError> {
    let modules_path = dir.join("modules.json");
    let Some(modules) = super::read_json_opt(&modules_path)? else {
        return Ok(Err(
            "no modules.json (sentence-transformers) in the checkpoint".into(),
        ));
    };
    inputs.push(modules_path.clone());
    let bad = |reason: String| ConvertError::BadValue {
        path: modules_path.clone(),
        key: "modules".into(),
        reason,
    };
    let list = modules
        .as_array()
        .ok_or_else(|| bad("not a list of modules".into()))?;
    let module = list.iter().find(|m| {
        m.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with("Pooling"))
    });
    let Some(module) = module else {
        return Ok(Err("modules.json lists no Pooling module".into()));
    };
    let sub = module
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("the Pooling module {module} has no path")))?;
    // The module's folder is named by a user file: it must stay inside the checkpoint.
    let inside = Path::new(sub)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !inside {
        return Err(bad(format!(
            "the Pooling module's path {sub:?} leaves the checkpoint folder"
        )));
    }
    let config_path = dir.join(sub).join("config.json");
    let Some(config) = super::read_json_opt(&config_path)? else {
        return Ok(Err(format!("no {sub}/config.json for the Pooling module")));
    };
    inputs.push(config_path);
    let set = |key: &str| config.get(key).and_then(Value::as_bool) == Some(true);
    Ok(if set("pooling_mode_mean_tokens") {
        Ok(MEAN)
    } else if set("pooling_mode_cls_token") {
        Ok(CLS)
    } else if set("pooling_mode_lasttoken") {
        Ok(LAST)
    } else {
        let modes: Vec<&str> = config
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, v)| k.starts_with("pooling_mode_") && v.as_bool() == Some(true))
            .map(|(k, _)| k.as_str())
            .collect();
        Err(format!(
            "{sub}/config.json sets none of pooling_mode_mean_tokens / _cls_token / _lasttoken{}",
            if modes.is_empty() {
                String::new()
            } else {
                format!(" (it sets {}, which GGUF cannot name)", modes.join(", "))
            }
        ))
    })
}
