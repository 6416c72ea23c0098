//! `bitnet inspect MODEL.gguf`: what a user needs to know before running a model —
//! architecture and hyper-parameters, tokenizer, the tensor table with bits per weight, totals
//! per type, and the memory a run needs (weights + KV cache at `--ctx`). `--weights` adds, per
//! weight tensor, the bit width, whether it has a zero point and, for ternary tensors, the
//! share of -1/0/+1. The file's chat template is named (its family, when it has a known
//! one); `--template` prints its text. `--json` prints the same as one JSON document.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use bitnet_core::chat::{BuiltinTemplate, ChatTemplate};
use bitnet_core::kv::KvType;
use bitnet_gguf::{GgufFile, LoadMode, Metadata, TensorInfo, TensorType, Value};
use bitnet_kernels::Isa;
use bitnet_kernels::isa::KERNEL_ENV;
use bitnet_kernels::prefetch::{PREFETCH_ENV, StreamPrefetch};
use bitnet_kernels::ternary::{TernaryMatrix, TernarySource};
use serde::Serialize;

use crate::output::{count, human_bytes, human_count};
use crate::setup::{open_gguf, watch_mapped_file};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF file to inspect.
    #[arg(required_unless_present = "model_flag", conflicts_with = "model_flag")]
    pub model: Option<PathBuf>,
    /// The GGUF file, spelled as the other commands take it (`-m FILE`).
    #[arg(short = 'm', long = "model", id = "model_flag", value_name = "MODEL")]
    pub model_flag: Option<PathBuf>,
    /// Context length used for the KV-cache memory estimate (default, or 0: the model's
    /// training context).
    #[arg(
        short = 'c',
        long = "ctx-size",
        visible_alias = "ctx",
        value_name = "N"
    )]
    pub ctx: Option<u64>,
    /// Per weight tensor: bit width, zero point, and the -1/0/+1 histogram of ternary tensors.
    #[arg(long)]
    pub weights: bool,
    /// Print the file's chat template (tokenizer.chat_template) in full.
    #[arg(long)]
    pub template: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Read the file into memory instead of mapping it.
    #[arg(long)]
    pub no_mmap: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    path: String,
    gguf_version: u32,
    file_bytes: u64,
    alignment: u64,
    architecture: Option<String>,
    name: Option<String>,
    /// `ARCH.*` keys: numbers, strings and booleans as themselves; arrays as a list when short
    /// and numeric, else a `[N x type]` summary.
    hyper_parameters: BTreeMap<String, serde_json::Value>,
    tokenizer: Option<TokenizerSummary>,
    chat_template: Option<ChatTemplateSummary>,
    tensors: Vec<TensorRow>,
    totals_by_type: Vec<TypeTotal>,
    n_params: u64,
    memory: Option<MemoryEstimate>,
    weights: Option<Vec<WeightDetail>>,
    kernels: KernelSummary,
}

/// The kernel set a model-running command would pick here, and what this CPU runs.
#[derive(Debug, Serialize)]
struct KernelSummary {
    /// `BITNET_KERNEL` if set (or why it cannot run here), else the best set.
    selected: String,
    available: Vec<&'static str>,
    /// How one-token decode prefetches its weights: `BITNET_PREFETCH` if set (or why it is
    /// refused), else this CPU's policy.
    decode_prefetch: String,
}

fn kernel_summary() -> KernelSummary {
    KernelSummary {
        selected: match Isa::from_env() {
            Ok(isa) => isa.name().to_owned(),
            Err(e) => format!("none ({KERNEL_ENV}: {e})"),
        },
        available: Isa::available().into_iter().map(Isa::name).collect(),
        decode_prefetch: match StreamPrefetch::from_env() {
            Ok(p) => p.name().to_owned(),
            Err(e) => format!("refused ({e})"),
        },
    }
}

#[derive(Debug, Serialize)]
struct TokenizerSummary {
    model: String,
    pre: Option<String>,
    n_tokens: usize,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
}

/// The file's own chat template: what `chat` and `serve` call it, and its text.
#[derive(Debug, Serialize)]
struct ChatTemplateSummary {
    name: String,
    /// The built-in family whose markers it writes, if any.
    family: Option<&'static str>,
    bytes: usize,
    /// In the JSON always; in the tables with `--template`.
    text: String,
}

#[derive(Debug, Serialize)]
struct TensorRow {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    /// ggml order: the first number is the row length.
    shape: Vec<u64>,
    elements: u64,
    bytes: u64,
    bits_per_weight: f64,
}

#[derive(Debug, Serialize)]
struct TypeTotal {
    #[serde(rename = "type")]
    ty: String,
    tensors: usize,
    elements: u64,
    bytes: u64,
}

#[derive(Debug, Serialize)]
struct MemoryEstimate {
    ctx: u64,
    weight_bytes: u64,
    kv_f16_bytes: u64,
    kv_q8_bytes: u64,
    total_f16_kv: u64,
    total_q8_kv: u64,
    /// Every KV cache type (`-ctk` / `-ctv`), as if both K and V used it.
    kv_types: Vec<KvTypeMemory>,
}

#[derive(Debug, Serialize)]
struct KvTypeMemory {
    #[serde(rename = "type")]
    ty: &'static str,
    /// K and V bytes of one token in one layer; `None` if the type's blocks do not divide
    /// the head dimension (the engine refuses that type for this model).
    bytes_per_token_per_layer: Option<u64>,
    kv_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct WeightDetail {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    bits: f64,
    zero_point: bool,
    /// Shares of -1, 0 and +1 for ternary tensors.
    ternary_shares: Option<[f64; 3]>,
}

pub fn run(mut args: Args) -> Result<()> {
    if args.model.is_none() {
        args.model = args.model_flag.take();
    }
    let Some(model) = args.model.clone() else {
        anyhow::bail!("give the GGUF file to inspect: `bitnet inspect FILE` or `-m FILE`");
    };
    let mode = if args.no_mmap {
        LoadMode::Read
    } else {
        LoadMode::Mmap
    };
    if mode == LoadMode::Mmap {
        watch_mapped_file(&model);
    }
    let file = open_gguf(&model, mode)?;
    let report = build_report(&args, &file)?;
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if args.json {
        // A closed pipe surfaces inside serde_json's error; `main` recognises it there.
        serde_json::to_writer_pretty(&mut out, &report).context("writing JSON")?;
        writeln!(out)?;
    } else {
        print_report(&mut out, &report, args.template).context("writing the report")?;
    }
    out.flush()?;
    Ok(())
}

fn build_report(args: &Args, file: &GgufFile) -> Result<Report> {
    let md = file.metadata();
    let architecture = md.get_opt_str("general.architecture")?.map(str::to_owned);
    let hyper_parameters = architecture
        .as_deref()
        .map(|arch| arch_keys(md, arch))
        .unwrap_or_default();

    let tensors: Vec<TensorRow> = file.tensors().iter().map(tensor_row).collect();
    let mut by_type: BTreeMap<String, TypeTotal> = BTreeMap::new();
    for t in file.tensors() {
        let e = by_type
            .entry(t.ty.name().to_owned())
            .or_insert_with(|| TypeTotal {
                ty: t.ty.name().to_owned(),
                tensors: 0,
                elements: 0,
                bytes: 0,
            });
        e.tensors += 1;
        e.elements += t.n_elements;
        e.bytes += t.n_bytes;
    }
    let mut totals_by_type: Vec<TypeTotal> = by_type.into_values().collect();
    totals_by_type.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    let n_params = file.tensors().iter().map(|t| t.n_elements).sum();
    let weight_bytes = file.tensors().iter().map(|t| t.n_bytes).sum();

    let memory = architecture
        .as_deref()
        .and_then(|arch| kv_shape(md, arch))
        .map(|kv| {
            let ctx = args.ctx.filter(|&c| c > 0).unwrap_or(kv.ctx_train).max(1);
            let elems = 2 * kv.n_layer * ctx * kv.kv_width;
            let kv_f16_bytes = elems * 2;
            // Q8_0: 34 bytes per 32 values.
            let kv_q8_bytes = elems.div_ceil(32) * 34;
            let kv_types = KvType::ALL
                .iter()
                .map(|&t| {
                    let per_token = usize::try_from(kv.head_dim)
                        .ok()
                        .and_then(|hd| t.row_bytes(hd))
                        .and_then(|row| row.checked_mul(2 * kv.n_head_kv));
                    KvTypeMemory {
                        ty: t.name(),
                        bytes_per_token_per_layer: per_token,
                        kv_bytes: per_token.and_then(|b| b.checked_mul(kv.n_layer * ctx)),
                    }
                })
                .collect();
            MemoryEstimate {
                ctx,
                weight_bytes,
                kv_f16_bytes,
                kv_q8_bytes,
                total_f16_kv: weight_bytes + kv_f16_bytes,
                total_q8_kv: weight_bytes + kv_q8_bytes,
                kv_types,
            }
        });

    let weights = if args.weights {
        Some(
            file.tensors()
                .iter()
                .filter(|t| t.dims.len() >= 2)
                .map(|t| weight_detail(file, t))
                .collect::<Result<Vec<_>>>()?,
        )
    } else {
        None
    };

    Ok(Report {
        path: args
            .model
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        gguf_version: file.version(),
        file_bytes: file.file_size(),
        alignment: file.alignment(),
        architecture,
        name: md.get_opt_str("general.name")?.map(str::to_owned),
        hyper_parameters,
        tokenizer: tokenizer_summary(md)?,
        chat_template: md
            .get_opt_str("tokenizer.chat_template")?
            .map(|text| ChatTemplateSummary {
                name: ChatTemplate::file_template_name(text),
                family: BuiltinTemplate::family_of(text).map(|f| f.name),
                bytes: text.len(),
                text: text.to_owned(),
            }),
        tensors,
        totals_by_type,
        n_params,
        memory,
        weights,
        kernels: kernel_summary(),
    })
}

/// Every `ARCH.*` key as a JSON value.
fn arch_keys(md: &Metadata, arch: &str) -> BTreeMap<String, serde_json::Value> {
    let prefix = format!("{arch}.");
    md.iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(&prefix)
                .map(|rest| (rest.to_owned(), json_value(v)))
        })
        .collect()
}

/// Arrays longer than this are summarised rather than listed.
const MAX_LISTED_ARRAY: usize = 64;

fn json_value(v: &Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        Value::String(s) => J::String(s.clone()),
        Value::Bool(b) => J::Bool(*b),
        // Through the shortest decimal text of the f32, so 1e-5 stays 1e-5 and does not
        // become 9.999999747378752e-6.
        Value::F32(x) => float_json(x.to_string().parse().unwrap_or(f64::from(*x))),
        Value::F64(x) => float_json(*x),
        Value::Array(a) => match a.to_i64_vec() {
            Some(list) if a.len() <= MAX_LISTED_ARRAY => {
                J::Array(list.into_iter().map(J::from).collect())
            }
            _ => J::String(format!("[{} x {}]", a.len(), a.type_name())),
        },
        other => match other.as_int() {
            Some(i) => i64::try_from(i)
                .map(J::from)
                .or_else(|_| u64::try_from(i).map(J::from))
                .unwrap_or_else(|_| J::String(i.to_string())),
            None => J::String(other.type_name().to_owned()),
        },
    }
}

/// A float as a JSON number; NaN and infinities (not JSON) as text.
fn float_json(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x)
        .map_or_else(|| serde_json::Value::String(x.to_string()), Into::into)
}

/// A hyper-parameter for the text report: strings without quotes, the rest as JSON.
fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tokenizer_summary(md: &Metadata) -> Result<Option<TokenizerSummary>> {
    let Some(model) = md.get_opt_str("tokenizer.ggml.model")? else {
        return Ok(None);
    };
    let n_tokens = match md.get("tokenizer.ggml.tokens") {
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    };
    Ok(Some(TokenizerSummary {
        model: model.to_owned(),
        pre: md.get_opt_str("tokenizer.ggml.pre")?.map(str::to_owned),
        n_tokens,
        bos_id: md.get_opt_u32("tokenizer.ggml.bos_token_id")?,
        eos_id: md.get_opt_u32("tokenizer.ggml.eos_token_id")?,
    }))
}

struct KvShape {
    n_layer: u64,
    n_head_kv: u64,
    head_dim: u64,
    kv_width: u64,
    ctx_train: u64,
}

/// The KV-cache shape from the standard llama.cpp keys; `None` if the file lacks them
/// (a vocab-only file, an unknown architecture).
fn kv_shape(md: &Metadata, arch: &str) -> Option<KvShape> {
    let key = |k: &str| format!("{arch}.{k}");
    let n_layer = md.get_opt_u64(&key("block_count")).ok()??;
    let n_embd = md.get_opt_u64(&key("embedding_length")).ok()??;
    let n_head = md.get_opt_u64(&key("attention.head_count")).ok()??;
    if n_head == 0 {
        return None;
    }
    let n_head_kv = md
        .get_opt_u64(&key("attention.head_count_kv"))
        .ok()?
        .unwrap_or(n_head);
    let head_dim = md
        .get_opt_u64(&key("attention.key_length"))
        .ok()?
        .unwrap_or(n_embd / n_head);
    let ctx_train = md.get_opt_u64(&key("context_length")).ok()?.unwrap_or(2048);
    Some(KvShape {
        n_layer,
        n_head_kv,
        head_dim,
        kv_width: n_head_kv.checked_mul(head_dim)?,
        ctx_train,
    })
}

fn tensor_row(t: &TensorInfo) -> TensorRow {
    TensorRow {
        name: t.name.clone(),
        ty: t.ty.name().to_owned(),
        shape: t.dims.clone(),
        elements: t.n_elements,
        bytes: t.n_bytes,
        bits_per_weight: if t.n_elements == 0 {
            0.0
        } else {
            t.n_bytes as f64 * 8.0 / t.n_elements as f64
        },
    }
}

/// Types whose blocks store a minimum / offset besides the scale.
fn has_zero_point(ty: TensorType) -> bool {
    matches!(
        ty,
        TensorType::Q4_1
            | TensorType::Q5_1
            | TensorType::Q2_K
            | TensorType::Q4_K
            | TensorType::Q5_K
    )
}

fn weight_detail(file: &GgufFile, t: &TensorInfo) -> Result<WeightDetail> {
    let ternary_shares = ternary_histogram(file, t)?.map(|h| {
        let total = (h[0] + h[1] + h[2]).max(1) as f64;
        [
            h[0] as f64 / total,
            h[1] as f64 / total,
            h[2] as f64 / total,
        ]
    });
    Ok(WeightDetail {
        name: t.name.clone(),
        ty: t.ty.name().to_owned(),
        bits: t.ty.bits_per_weight(),
        zero_point: has_zero_point(t.ty),
        ternary_shares,
    })
}

/// Counts of -1/0/+1 in a ternary tensor, decoded through the kernels' repack (so the same
/// decoder the runtime uses is the one reported).
fn ternary_histogram(file: &GgufFile, t: &TensorInfo) -> Result<Option<[u64; 3]>> {
    let data = file.tensor_data(t);
    let source = match t.ty {
        TensorType::I2_S => TernarySource::I2S(data),
        TensorType::TQ2_0 => TernarySource::Tq2_0(data),
        TensorType::TQ1_0 => TernarySource::Tq1_0(data),
        _ => return Ok(None),
    };
    let cols = usize::try_from(t.row_len()).context("row length")?;
    let rows = usize::try_from(t.rows()).context("row count")?;
    let m = TernaryMatrix::from_source(source, rows, cols)
        .with_context(|| format!("decoding ternary tensor {}", t.name))?;
    Ok(Some(m.value_histogram()))
}

/// The template's name line, and with `full` its text, indented, with control characters
/// other than newlines and tabs escaped (a hostile file could hide terminal sequences there).
fn print_chat_template(
    out: &mut impl Write,
    t: Option<&ChatTemplateSummary>,
    full: bool,
) -> io::Result<()> {
    let Some(t) = t else {
        return writeln!(
            out,
            "chat template: none in the file (chat uses plain unless --chat-template names one)"
        );
    };
    if !full {
        return writeln!(
            out,
            "chat template: {}, {} (--template prints it)",
            t.name,
            count(t.bytes, "byte")
        );
    }
    writeln!(
        out,
        "chat template: {}, {}:",
        t.name,
        count(t.bytes, "byte")
    )?;
    for line in t.text.lines() {
        let shown: String = line
            .chars()
            .flat_map(|c| {
                let keep = !c.is_control() || c == '\t';
                let one = keep.then_some(c).into_iter();
                let escaped = (!keep).then(|| c.escape_default()).into_iter().flatten();
                one.chain(escaped)
            })
            .collect();
        writeln!(out, "  {shown}")?;
    }
    Ok(())
}

fn print_report(out: &mut impl Write, r: &Report, show_template: bool) -> io::Result<()> {
    writeln!(
        out,
        "{}: GGUF v{}, {}, {}, alignment {}",
        r.path,
        r.gguf_version,
        human_bytes(r.file_bytes),
        count(r.tensors.len(), "tensor"),
        r.alignment
    )?;
    match &r.architecture {
        Some(a) => writeln!(
            out,
            "architecture: {a}{}",
            r.name
                .as_deref()
                .map(|n| format!("  (name: {n})"))
                .unwrap_or_default()
        )?,
        None => writeln!(
            out,
            "architecture: (none: not a model file, e.g. vocab only)"
        )?,
    }
    writeln!(
        out,
        "kernels: {} (this CPU runs: {}; `--kernel` or {KERNEL_ENV} chooses)",
        r.kernels.selected,
        r.kernels.available.join(", ")
    )?;
    writeln!(
        out,
        "decode prefetch: {} (this CPU's: {}; {PREFETCH_ENV} chooses)",
        r.kernels.decode_prefetch,
        StreamPrefetch::for_cpu().name()
    )?;
    if !r.hyper_parameters.is_empty() {
        writeln!(out, "\nhyper-parameters:")?;
        for (k, v) in &r.hyper_parameters {
            writeln!(out, "  {k:<40} {}", value_text(v))?;
        }
    }
    match &r.tokenizer {
        Some(t) => writeln!(
            out,
            "\ntokenizer: {}{} with {}, bos {}, eos {}",
            t.model,
            t.pre
                .as_deref()
                .map(|p| format!(" (pre: {p})"))
                .unwrap_or_default(),
            count(t.n_tokens, "token"),
            t.bos_id.map_or("-".into(), |v| v.to_string()),
            t.eos_id.map_or("-".into(), |v| v.to_string()),
        )?,
        None => writeln!(out, "\ntokenizer: none")?,
    }
    print_chat_template(out, r.chat_template.as_ref(), show_template)?;

    if !r.tensors.is_empty() {
        let w = r
            .tensors
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        writeln!(out, "\ntensors:")?;
        writeln!(
            out,
            "  {:<w$}  {:<7}  {:<22}  {:>12}  {:>6}",
            "name", "type", "shape", "bytes", "bpw"
        )?;
        for t in &r.tensors {
            let shape = t
                .shape
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" x ");
            writeln!(
                out,
                "  {:<w$}  {:<7}  {:<22}  {:>12}  {:>6.3}",
                t.name, t.ty, shape, t.bytes, t.bits_per_weight
            )?;
        }
        writeln!(out, "\ntotals by type:")?;
        writeln!(
            out,
            "  {:<7}  {:>7}  {:>14}  {:>12}",
            "type", "tensors", "elements", "bytes"
        )?;
        for t in &r.totals_by_type {
            writeln!(
                out,
                "  {:<7}  {:>7}  {:>14}  {:>12}",
                t.ty,
                t.tensors,
                t.elements,
                human_bytes(t.bytes)
            )?;
        }
        writeln!(
            out,
            "  parameters: {} ({})",
            human_count(r.n_params),
            r.n_params
        )?;
    }

    if let Some(m) = &r.memory {
        writeln!(out, "\nmemory for a run at ctx {}:", m.ctx)?;
        writeln!(
            out,
            "  weights          {:>12}",
            human_bytes(m.weight_bytes)
        )?;
        // One line per cache type, K and V both of it (-ctk / -ctv mix them).
        writeln!(
            out,
            "  {:<14} {:>12} {:>14}",
            "KV cache", "size", "B/token/layer"
        )?;
        for t in &m.kv_types {
            match (t.bytes_per_token_per_layer, t.kv_bytes) {
                (Some(per), Some(kv)) => writeln!(
                    out,
                    "  KV cache {:<5} {:>12} {:>14}   total {}",
                    t.ty,
                    human_bytes(kv),
                    per,
                    human_bytes(m.weight_bytes.saturating_add(kv))
                )?,
                _ => writeln!(
                    out,
                    "  KV cache {:<5} unavailable: the head dimension is not whole blocks",
                    t.ty
                )?,
            }
        }
    }

    if let Some(ws) = &r.weights {
        let w = ws.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
        writeln!(out, "\nweights:")?;
        writeln!(
            out,
            "  {:<w$}  {:<7}  {:>6}  {:<10}  {:>7} {:>7} {:>7}",
            "name", "type", "bits", "zero point", "-1", "0", "+1"
        )?;
        for d in ws {
            let hist = match d.ternary_shares {
                Some([n, z, p]) => format!(
                    "{:>6.1}% {:>6.1}% {:>6.1}%",
                    n * 100.0,
                    z * 100.0,
                    p * 100.0
                ),
                None => String::new(),
            };
            writeln!(
                out,
                "  {:<w$}  {:<7}  {:>6.3}  {:<10}  {}",
                d.name,
                d.ty,
                d.bits,
                if d.zero_point { "yes" } else { "no" },
                hist
            )?;
        }
    }
    Ok(())
}
