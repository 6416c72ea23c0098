//! The `--dry-run` report: the tensor mapping table and the metadata that would be written.

use std::fmt::Write as _;

use bitnet_gguf::{Array, Value};

use crate::mapping::{Route, TernarySource};
use crate::{Plan, hf::ScaleMode};

/// How a tensor is converted, in a few words.
fn route_name(route: &Route) -> String {
    match route {
        Route::Float => "float".into(),
        Route::FloatPlusOne => "float, 1 + w (Gemma norm)".into(),
        Route::Ternary {
            source,
            permute_heads,
        } => {
            let mut s = match source {
                TernarySource::Packed {
                    mode: ScaleMode::Divide,
                    ..
                } => "unpack, /weight_scale".to_owned(),
                TernarySource::Packed {
                    mode: ScaleMode::Multiply,
                    ..
                } => "unpack, *weight_scale".to_owned(),
                TernarySource::Latent => "absmean ternarize".to_owned(),
                TernarySource::LatentNumpy => "absmean ternarize (numpy rule)".to_owned(),
            };
            if permute_heads.is_some() {
                s.push_str(", rope permute");
            }
            s
        }
    }
}

/// A metadata value, arrays shortened to their length and first items.
fn show_value(v: &Value) -> String {
    const MAX: usize = 120;
    let s = match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let n = a.len();
            let head = match a {
                Array::String(v) => v
                    .iter()
                    .take(4)
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                Array::F32(v) => v
                    .iter()
                    .take(4)
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                Array::I32(v) => v
                    .iter()
                    .take(4)
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => "...".into(),
            };
            format!("[{n} items: {head}{}]", if n > 4 { ", ..." } else { "" })
        }
        other => format!("{other:?}"),
    };
    if s.chars().count() > MAX {
        let cut: String = s.chars().take(MAX).collect();
        format!("{cut}... ({} chars)", s.chars().count())
    } else {
        s
    }
}

/// The full report.
pub fn dry_run(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} -> arch {} ({} layers, {} tensors, {} bytes of tensor data)",
        plan.dir.display(),
        plan.cfg.hf_arch,
        plan.config.arch_name,
        plan.config.n_layer,
        plan.jobs.len(),
        plan.data_bytes()
    );
    let _ = writeln!(out, "tokenizer: {}", plan.vocab.source.display());
    for w in plan.vocab.warnings.iter().chain(&plan.notes) {
        let _ = writeln!(out, "warning: {w}");
    }
    let _ = writeln!(
        out,
        "\n{:<48} {:<32} {:<16} {:<6} {:<7} route",
        "HF tensor", "GGUF tensor", "shape", "dtype", "type"
    );
    for j in &plan.jobs {
        let shape = j
            .src
            .shape
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let mut hf = j.src.name.clone();
        if let Route::Ternary {
            source: TernarySource::Packed { scale, .. },
            ..
        } = &j.route
        {
            hf = format!("{hf} (+{})", scale.name.rsplit('.').next().unwrap_or(""));
        }
        let _ = writeln!(
            out,
            "{:<48} {:<32} {:<16} {:<6} {:<7} {}",
            hf,
            j.info.name,
            shape,
            format!("{:?}", j.src.dtype),
            j.info.ty.name(),
            route_name(&j.route)
        );
    }
    let _ = writeln!(out, "\nmetadata:");
    for (k, v) in plan.meta.iter() {
        let _ = writeln!(out, "  {k} = {}", show_value(v));
    }
    out
}
