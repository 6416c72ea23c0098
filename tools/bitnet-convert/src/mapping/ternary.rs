//! The language-model routes (BitNet b1.58, 1bitLLM, ternary Llama): the runtime's own
//! tensor list, each tensor found in the checkpoint by its known names, projections packed
//! or ternarized into I2_S, TQ2_0 or TQ1_0.

use std::collections::BTreeSet;
use std::path::Path;

use bitnet_core::config::{Arch, RopeStyle, TensorRole};
use bitnet_gguf::{TensorInfo, TensorType};
use safetensors::Dtype;

use super::common::{
    Job, OutputTypes, Route, TERNARY_TYPES, TernarySource, TypeOptions, check_blocks, find_source,
    hf_names, ignorable, is_float, model_config, refuse_unused, shape_mismatch,
};
use crate::error::ConvertError;
use crate::hf::HfConfig;
use crate::source::Sources;

/// The types of the language-model routes: a ternary projection type; F16 embedding and
/// head unless chosen, F32 norms.
pub(super) fn output_types(
    cfg: &HfConfig,
    opts: &TypeOptions,
    names: impl Fn(&[TensorType]) -> String,
) -> Result<OutputTypes, String> {
    if !TERNARY_TYPES.contains(&opts.weights) {
        return Err(format!(
            "output type {} is not supported for {} (one of {}; f16 and f32 are for the \
             BitNet embedding models)",
            opts.weights.name(),
            cfg.hf_arch,
            names(&TERNARY_TYPES)
        ));
    }
    Ok(OutputTypes {
        weights: opts.weights,
        embd: opts.embd.unwrap_or(TensorType::F16),
        head: opts.head.unwrap_or(TensorType::F16),
        norms: TensorType::F32,
    })
}

/// Plans every GGUF tensor: resolves its source, checks shapes and dtypes, and refuses
/// missing and unexpected tensors.
pub(super) fn plan(
    dir: &Path,
    cfg: &HfConfig,
    types: &OutputTypes,
    sources: &Sources,
) -> Result<Vec<Job>, ConvertError> {
    let mc = model_config(cfg, types);
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut jobs = Vec::new();
    for e in mc.expected_tensors() {
        let src = find_source(dir, sources, &hf_names(&e.name), &e.name)?;
        used.insert(src.name.as_str());
        let ty = match e.role {
            TensorRole::Embedding => types.embd,
            TensorRole::Head => types.head,
            TensorRole::Norm | TensorRole::Scale => types.norms,
            TensorRole::Matrix => types.weights,
        };
        let hf_shape: Vec<usize> = e.dims.iter().rev().map(|&d| d as usize).collect();
        let shape_err = |expected: String| shape_mismatch(sources, src, expected);
        let route = if e.role == TensorRole::Matrix {
            let scale_name = src
                .name
                .strip_suffix(".weight")
                .map(|s| format!("{s}.weight_scale"));
            let scale = scale_name.as_deref().and_then(|n| sources.tensors.get(n));
            let source = if src.dtype == Dtype::U8 {
                let rows = hf_shape[0];
                let packed = [rows / 4, hf_shape[1]];
                if !rows.is_multiple_of(4) || src.shape != packed {
                    return Err(shape_err(format!(
                        "U8 [{}, {}] (config.json: {rows} x {} packed four per byte)",
                        rows / 4,
                        hf_shape[1],
                        hf_shape[1]
                    )));
                }
                let Some(scale) = scale else {
                    return Err(ConvertError::MissingTensor {
                        dir: dir.to_owned(),
                        tensor: scale_name.unwrap_or_default(),
                        gguf: format!("the scale of packed {}", e.name),
                    });
                };
                if !is_float(scale.dtype) || scale.numel() != 1 {
                    return Err(ConvertError::ShapeMismatch {
                        path: sources.path(scale).to_owned(),
                        tensor: scale.name.clone(),
                        found: scale.shape.clone(),
                        dtype: format!("{:?}", scale.dtype),
                        expected: "one F32/F16/BF16 value".into(),
                    });
                }
                used.insert(scale.name.as_str());
                TernarySource::Packed {
                    scale: scale.clone(),
                    mode: cfg.scale_mode,
                }
            } else {
                if !is_float(src.dtype) || src.shape != hf_shape {
                    return Err(shape_err(format!(
                        "F32/F16/BF16 {hf_shape:?}, or U8 [{}, {}] packed",
                        hf_shape[0] / 4,
                        hf_shape[1]
                    )));
                }
                if let Some(scale) = scale {
                    return Err(ConvertError::Tensor {
                        path: sources.path(scale).to_owned(),
                        tensor: scale.name.clone(),
                        reason: format!(
                            "a weight_scale beside the unpacked float weight {}: latent weights are ternarized with their own absmean scale",
                            src.name
                        ),
                    });
                }
                TernarySource::Latent
            };
            check_blocks(&e.name, &e.dims, types.weights, sources, src)?;
            let permute_heads = match (mc.rope, e.name.rsplit('.').nth(1)) {
                (RopeStyle::Normal, Some("attn_q")) => Some(cfg.n_head),
                (RopeStyle::Normal, Some("attn_k")) => Some(cfg.n_head_kv),
                _ => None,
            };
            Route::Ternary {
                source,
                permute_heads,
            }
        } else {
            if !is_float(src.dtype) || src.shape != hf_shape {
                return Err(shape_err(format!("F32/F16/BF16 {hf_shape:?}")));
            }
            check_blocks(&e.name, &e.dims, ty, sources, src)?;
            Route::Float
        };
        let info = TensorInfo::new(e.name.clone(), e.dims.clone(), ty)?;
        jobs.push(Job {
            info,
            role: e.role,
            src: src.clone(),
            route,
        });
    }
    refuse_unused(cfg, sources, &used, |name| ignorable(name, cfg))?;
    if cfg.arch == Arch::Llama
        && jobs.iter().any(|j| {
            matches!(
                j.route,
                Route::Ternary {
                    source: TernarySource::Latent,
                    ..
                }
            )
        })
    {
        // A Llama marked bitnet ships packed weights; float ones would be full precision.
        let j = jobs
            .iter()
            .find(|j| {
                matches!(
                    j.route,
                    Route::Ternary {
                        source: TernarySource::Latent,
                        ..
                    }
                )
            })
            .map(|j| &j.src);
        if let Some(src) = j {
            return Err(ConvertError::Tensor {
                path: sources.path(src).to_owned(),
                tensor: src.name.clone(),
                reason: "a ternary Llama checkpoint stores its projections packed (U8 with weight_scale); this one is float".into(),
            });
        }
    }
    Ok(jobs)
}
