//! Loading a GGUF into a [`Model`]: the config is read and checked first (a clear error
//! before any weight byte is touched), then the ternary and 1-bit projections are repacked
//! into the kernels' layouts (tensors in parallel, the tokenizer built beside them), norms
//! copied, the head re-quantized if asked (`load_steps.rs`), and the embedding and head kept
//! as views of the file map (or copied out, and the map dropped). Every source page that is
//! not read again is given back as soon as possible, so the resident set stays near the
//! weights in use ([`WeightMemory`]); each step's time is kept in [`LoadStats::phases`].
//!
//! `--mlock` is the one `unsafe` here (`mlock(2)` / `mlockall(2)` take raw addresses; on
//! Windows `VirtualLock`, after growing the working set it counts against).

// `mlock(2)` / `mlockall(2)` / `VirtualLock`: see the module doc.
#![allow(unsafe_code)]

use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bitnet_gguf::{GgufFile, TensorInfo, TensorType};
use bitnet_kernels::float::RowFormat;
use bitnet_kernels::{BinaryMatrix, Isa, TernaryMatrix, TernarySource};

use super::linear::{Linear, LinearKind, padded};
use super::load_steps::{copy_out, head_q4r, head_q6kr, head_q8r};
use super::ternarize::absmean_trits;
use super::{
    Blob, Embedding, FloatRows, Head, HeadMode, Layer, LoadMode, LoadOptions, LoadPhase, LoadStats,
    Model, Store, WeightMemory,
};
use crate::config::{self, ActBits, ModelConfig, Proj};
use crate::error::CoreError;
use crate::threadpool::physical_core_count;
use crate::tokenizer::Tokenizer;

/// The row format of a float tensor type, if it has one.
pub(crate) fn row_format(ty: TensorType) -> Option<RowFormat> {
    Some(match ty {
        TensorType::F32 => RowFormat::F32,
        TensorType::F16 => RowFormat::F16,
        TensorType::BF16 => RowFormat::BF16,
        TensorType::Q8_0 => RowFormat::Q8_0,
        TensorType::Q4_0 => RowFormat::Q4_0,
        TensorType::Q6_K => RowFormat::Q6K,
        _ => return None,
    })
}

fn bad(name: &str, reason: impl Into<String>) -> CoreError {
    CoreError::BadTensor {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

fn tensor<'f>(file: &'f GgufFile, name: &str) -> Result<&'f TensorInfo, CoreError> {
    file.tensor(name)
        .ok_or_else(|| bad(name, "missing (the config check should have caught this)"))
}

/// Absolute byte range of `t` in the file.
fn file_range(file: &GgufFile, t: &TensorInfo) -> Result<Range<usize>, CoreError> {
    let start = usize::try_from(file.data_offset() + t.offset)
        .map_err(|_| bad(&t.name, "offset does not fit in memory"))?;
    let len = usize::try_from(t.n_bytes).map_err(|_| bad(&t.name, "too large"))?;
    Ok(start..start + len)
}

/// A vector of exactly `len` elements stored as F32, F16 or BF16 (bitnet.cpp's embedding
/// converter writes its norms as F16), widened to f32.
fn f32_vec(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, CoreError> {
    let t = tensor(file, name)?;
    let fmt = match t.ty {
        TensorType::F32 | TensorType::F16 | TensorType::BF16 => row_format(t.ty),
        _ => None,
    };
    let (Some(fmt), true) = (fmt, t.n_elements == len as u64) else {
        return Err(bad(
            name,
            format!(
                "expected {len} F32, F16 or BF16 values, found {} {}",
                t.n_elements,
                t.ty.name()
            ),
        ));
    };
    let mut v = vec![0f32; len];
    let data = file.tensor_data(t);
    if fmt.row_bytes(len) != Some(data.len()) {
        return Err(bad(name, "byte size does not match its shape"));
    }
    bitnet_kernels::float::dequantize_row(fmt, data, &mut v);
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(bad(name, format!("value {i} is not finite ({})", v[i])));
    }
    // Copied: the mapped pages (a norm sits between two projections, and a read may map a
    // large page-cache folio around it) need not stay resident.
    file.release_tensor_pages(t);
    Ok(v)
}

fn float_rows(file: &GgufFile, t: &TensorInfo) -> Result<FloatRows, CoreError> {
    let fmt = row_format(t.ty).ok_or_else(|| {
        bad(
            &t.name,
            format!("type {} is not a float row format", t.ty.name()),
        )
    })?;
    let (cols, rows) = (t.row_len() as usize, t.rows() as usize);
    let row_bytes = fmt.row_bytes(cols).ok_or_else(|| {
        bad(
            &t.name,
            format!("rows of {cols} are not whole {} blocks", fmt.name()),
        )
    })?;
    if row_bytes as u64 * rows as u64 != t.n_bytes {
        return Err(bad(&t.name, "byte size does not match its shape"));
    }
    Ok(FloatRows {
        fmt,
        blob: Blob::File(file_range(file, t)?),
        rows,
        cols,
        row_bytes,
    })
}

/// One projection, repacked for the kernels (or kept as float rows in the file).
fn load_linear(
    file: &GgufFile,
    cfg: &ModelConfig,
    layer: usize,
    p: Proj,
) -> Result<Linear, CoreError> {
    let name = config::proj_name(layer, p);
    let t = tensor(file, &name)?;
    let (cols, rows) = (t.row_len() as usize, t.rows() as usize);
    let data = file.tensor_data(t);
    let kind = match t.ty {
        TensorType::I2_S => LinearKind::Ternary(TernaryMatrix::from_source(
            TernarySource::I2S(data),
            rows,
            cols,
        )?),
        TensorType::TQ2_0 => LinearKind::Ternary(TernaryMatrix::from_source(
            TernarySource::Tq2_0(data),
            rows,
            cols,
        )?),
        TensorType::TQ1_0 => LinearKind::Ternary(TernaryMatrix::from_source(
            TernarySource::Tq1_0(data),
            rows,
            cols,
        )?),
        TensorType::Q1_0 => LinearKind::Binary(BinaryMatrix::from_q1_bits(data, rows, cols)?),
        // A BitNet embedding model's float projections are latent weights: ternarized here
        // by absmean, as its BitLinear and bitnet.cpp's I2_S converter do.
        ty if cfg.proj_norms && row_format(ty).is_some() => {
            let fr = float_rows(file, t)?;
            let mut w = vec![0f32; rows * cols];
            for (r, out) in w.chunks_exact_mut(cols).enumerate() {
                let row = &data[r * fr.row_bytes..(r + 1) * fr.row_bytes];
                bitnet_kernels::float::dequantize_row(fr.fmt, row, out);
            }
            let (values, scale) = absmean_trits(&w);
            LinearKind::Ternary(TernaryMatrix::from_source(
                TernarySource::Trits {
                    values: &values,
                    scale,
                },
                rows,
                cols,
            )?)
        }
        ty => match row_format(ty) {
            Some(_) => {
                let fr = float_rows(file, t)?;
                LinearKind::Float {
                    fmt: fr.fmt,
                    blob: fr.blob,
                }
            }
            None => {
                return Err(CoreError::Unsupported(format!(
                    "tensor \"{name}\" of type {}",
                    ty.name()
                )));
            }
        },
    };
    if !matches!(kind, LinearKind::Float { .. }) {
        // Repacked into memory of its own: the source bytes are never read again, so their
        // pages need not stay resident (a map's pages otherwise count twice, issue 13/14).
        file.release_tensor_pages(t);
    }
    let pc = match &kind {
        LinearKind::Ternary(m) => Some(m.padded_cols()),
        LinearKind::Binary(m) => Some(m.padded_cols()),
        LinearKind::Float { .. } => None,
    };
    if pc.is_some_and(|pc| pc != padded(cols)) {
        return Err(bad(
            &name,
            format!(
                "kernel layout pads {cols} columns to {pc:?}, the engine expects {}",
                padded(cols)
            ),
        ));
    }
    if cfg.act_bits == ActBits::Binary && matches!(kind, LinearKind::Ternary(_)) {
        return Err(CoreError::Unsupported(format!(
            "1-bit activations with ternary weights (\"{name}\" is {})",
            t.ty.name()
        )));
    }
    let scale_name = config::proj_scale_name(layer, p);
    let scale = match file.tensor(&scale_name) {
        None => None,
        Some(_) => Some(f32_vec(file, &scale_name, 1)?[0]),
    };
    Ok(Linear {
        kind,
        rows,
        cols,
        scale,
    })
}

/// Repacks every projection, `threads` at a time; results in `(layer, Proj::ALL)` order.
fn load_linears(
    file: &GgufFile,
    cfg: &ModelConfig,
    threads: usize,
) -> Result<Vec<Linear>, CoreError> {
    let jobs: Vec<(usize, Proj)> = (0..cfg.n_layer)
        .flat_map(|l| Proj::ALL.into_iter().map(move |p| (l, p)))
        .collect();
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, Result<Linear, CoreError>)>> = Mutex::new(Vec::new());
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(l, p)) = jobs.get(i) else { break };
            let r = load_linear(file, cfg, l, p);
            let failed = r.is_err();
            done.lock().unwrap_or_else(|e| e.into_inner()).push((i, r));
            if failed {
                // Stop handing out work; the first error is reported.
                next.store(jobs.len(), Ordering::Relaxed);
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads.min(jobs.len()).max(1) {
            s.spawn(work);
        }
        work();
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// The weight bytes of a loaded model by where they live (see [`WeightMemory`]).
fn weight_memory(
    layers: &[Layer],
    output_norm: &[f32],
    store: &Store,
    embed: &Embedding,
    head: &Head,
) -> WeightMemory {
    let norm_floats: usize = layers
        .iter()
        .flat_map(|l| l.norms())
        .map(Vec::len)
        .sum::<usize>()
        + output_norm.len();
    let linears = || layers.iter().flat_map(|l| l.linears());
    let repacked = linears().map(|lin| lin.memory_bytes() as u64).sum();
    let head_copy = match head {
        Head::Q8(q) => q.bytes().len() as u64,
        Head::Q6(q) => q.bytes().len() as u64,
        Head::Q4(q) => q.bytes().len() as u64,
        Head::Rows(_) => 0,
    };
    let copied = 4 * norm_floats as u64
        + store.owned.iter().map(|o| o.len() as u64).sum::<u64>()
        + head_copy;
    // Mapped ranges read whole every token, and the embedding if it is read only by row.
    let streamed = blobs_read_whole(layers, head);
    let by_row = match embed {
        Embedding::Rows(FloatRows {
            blob: Blob::File(r),
            ..
        }) if !streamed.contains(r) => r.len() as u64,
        _ => 0,
    };
    WeightMemory {
        repacked,
        copied,
        mapped: streamed.iter().map(|r| r.len() as u64).sum(),
        mapped_by_row: by_row,
    }
}

/// The file ranges read whole every token: the head and float projections used in place
/// (each range once, however many users it has).
fn blobs_read_whole(layers: &[Layer], head: &Head) -> Vec<Range<usize>> {
    let float_blobs = layers
        .iter()
        .flat_map(|l| l.linears())
        .filter_map(|lin| match &lin.kind {
            LinearKind::Float { blob, .. } => Some(blob),
            _ => None,
        });
    let mut out: Vec<Range<usize>> = Vec::new();
    let head_blob = match head {
        Head::Rows(f) => Some(&f.blob),
        Head::Q8(_) | Head::Q6(_) | Head::Q4(_) => None,
    };
    for b in head_blob.into_iter().chain(float_blobs) {
        if let Blob::File(r) = b
            && !out.contains(r)
        {
            out.push(r.clone());
        }
    }
    out
}

/// The clock of [`Model::load`]'s steps.
struct Phases {
    last: Instant,
    done: Vec<LoadPhase>,
}

impl Phases {
    fn start() -> Self {
        Phases {
            last: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Ends step `name` (begun when the previous one ended).
    fn end(&mut self, name: &'static str) {
        let now = Instant::now();
        self.done.push(LoadPhase {
            name,
            secs: (now - self.last).as_secs_f64(),
            beside: false,
        });
        self.last = now;
    }

    /// Records step `name` that took `secs` on its own thread beside the next step.
    fn beside(&mut self, name: &'static str, secs: f64) {
        self.done.push(LoadPhase {
            name,
            secs,
            beside: true,
        });
    }
}

/// Locks `bytes` in memory.
#[cfg(unix)]
fn mlock(bytes: &[u8], path: &Path) -> Result<(), CoreError> {
    if bytes.is_empty() {
        return Ok(());
    }
    // SAFETY: mlock only reads the address range's page mapping; `bytes` is a live borrow of
    // mapped memory for the duration of the call and nothing is dereferenced.
    let rc = unsafe { libc::mlock(bytes.as_ptr().cast(), bytes.len()) };
    if rc != 0 {
        return Err(CoreError::Io {
            path: path.to_owned(),
            what: "mlock",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Locks `bytes` in memory. Windows locks pages into the process's working set, and
/// `VirtualLock` fails once the locked pages would pass its minimum: the minimum (and the
/// maximum with it) is grown by the range's size first.
#[cfg(windows)]
fn mlock(bytes: &[u8], path: &Path) -> Result<(), CoreError> {
    use windows_sys::Win32::System::Memory::VirtualLock;
    use windows_sys::Win32::System::Threading::{
        GetCurrentProcess, GetProcessWorkingSetSize, SetProcessWorkingSetSize,
    };
    if bytes.is_empty() {
        return Ok(());
    }
    let failed = |what: &'static str| CoreError::Io {
        path: path.to_owned(),
        what,
        source: std::io::Error::last_os_error(),
    };
    let (mut min, mut max) = (0usize, 0usize);
    // SAFETY: the pseudo-handle of this process is always valid; both out-pointers are live
    // locals.
    if unsafe { GetProcessWorkingSetSize(GetCurrentProcess(), &mut min, &mut max) } == 0 {
        return Err(failed("GetProcessWorkingSetSize"));
    }
    // A page on each side: the range need not start or end on a page boundary.
    let grow = bytes.len().saturating_add(2 * 4096);
    // SAFETY: as above; only sizes are passed.
    let grown = unsafe {
        SetProcessWorkingSetSize(
            GetCurrentProcess(),
            min.saturating_add(grow),
            max.saturating_add(grow),
        )
    };
    if grown == 0 {
        return Err(failed("SetProcessWorkingSetSize (for --mlock)"));
    }
    // SAFETY: VirtualLock only changes the residency of the pages of the range; `bytes` is a
    // live borrow of committed memory for the duration of the call and nothing is
    // dereferenced.
    if unsafe { VirtualLock(bytes.as_ptr().cast_mut().cast(), bytes.len()) } == 0 {
        return Err(failed("VirtualLock"));
    }
    Ok(())
}

/// Neither Unix nor Windows: `--mlock` is refused, with the reason.
#[cfg(not(any(unix, windows)))]
fn mlock(_bytes: &[u8], _path: &Path) -> Result<(), CoreError> {
    Err(CoreError::Unsupported(
        "--mlock: this OS has neither mlock(2) nor VirtualLock".into(),
    ))
}

/// Locks all current memory of the process (the repacked weights live on the heap).
#[cfg(unix)]
fn mlockall(path: &Path) -> Result<(), CoreError> {
    // SAFETY: mlockall takes only flags and touches no Rust-visible memory.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT) };
    if rc != 0 {
        return Err(CoreError::Io {
            path: path.to_owned(),
            what: "mlockall",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Windows has no `mlockall`: with the file read into memory (`--no-mmap`) the weights are
/// spread over the heap, where no one range names them, so `--mlock` is refused there. With
/// the file mapped (the default) `--mlock` locks its ranges with `VirtualLock`.
#[cfg(not(unix))]
fn mlockall(_path: &Path) -> Result<(), CoreError> {
    Err(CoreError::Unsupported(
        "--mlock with --no-mmap locks the whole process (mlockall), which Windows does not \
         have; leave the model mapped (drop --no-mmap) to lock its pages with VirtualLock"
            .into(),
    ))
}

impl Model {
    /// Loads the model at `path`; see [`LoadOptions`].
    pub fn load(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Model, CoreError> {
        let path = path.as_ref();
        let t0 = Instant::now();
        let mut phases = Phases::start();
        let isa = match opts.isa {
            Some(i) => i.require()?,
            None => Isa::from_env()?,
        };
        // A misspelt BITNET_PREFETCH is refused here rather than ignored by the kernels.
        bitnet_kernels::prefetch::StreamPrefetch::from_env()?;
        // Repacking uses every core; the engine's thread count is its own option.
        let threads = physical_core_count().max(1);
        // Both modes read the file through a map while loading: tensors that are repacked
        // release their source pages as they go, so the peak stays near the weights in use
        // (reading the whole file into a buffer first held every byte twice). Without mmap
        // (`LoadMode::Read`) what is still needed is copied out and the map dropped before
        // `load` returns, so a run never touches the file afterwards. A file that cannot be
        // mapped is read whole, as before.
        let file = match GgufFile::open(path, bitnet_gguf::LoadMode::Mmap) {
            Ok(f) => f,
            Err(bitnet_gguf::GgufError::Io { .. }) if opts.mode == LoadMode::Read => {
                GgufFile::open(path, bitnet_gguf::LoadMode::Read)?
            }
            Err(e) => return Err(e.into()),
        };
        let cfg = ModelConfig::from_gguf(&file)?;
        // The header is parsed into owned values: its pages are not read again.
        file.release_pages(0..usize::try_from(file.data_offset()).unwrap_or(usize::MAX));
        phases.end("open");
        let md = file.metadata();
        let chat_template = md
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        if let Some(mode) = opts.head
            && !cfg.n_embd.is_multiple_of(mode.col_multiple())
        {
            return Err(CoreError::InvalidOption {
                option: "head",
                reason: format!(
                    "{} needs n_embd a multiple of {}, got {}",
                    mode.name(),
                    mode.col_multiple(),
                    cfg.n_embd
                ),
            });
        }

        // The tokenizer (hash maps over the whole vocabulary, one thread's work) is built on
        // a thread of its own while the projections are repacked; its error, if any, is
        // still the one reported first.
        let (tokenizer, linears) = std::thread::scope(|s| {
            let tok = s.spawn(|| {
                let t = Instant::now();
                let tok = if md.contains("tokenizer.ggml.model") {
                    Tokenizer::from_metadata(md).map(Some)
                } else {
                    Ok(None)
                };
                (tok, t.elapsed().as_secs_f64())
            });
            let linears = load_linears(&file, &cfg, threads);
            (tok.join(), linears)
        });
        let (tokenizer, tok_secs) = match tokenizer {
            Ok(t) => t,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let tokenizer = tokenizer?;
        let mut linears = linears?.into_iter();
        phases.beside("tokenizer", tok_secs);
        phases.end("repack");

        let e = cfg.n_embd;
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for l in 0..cfg.n_layer {
            let mut next = || {
                linears
                    .next()
                    .ok_or_else(|| bad("layers", "missing projection"))
            };
            let (q, k, v, o, gate, up, down) = (
                next()?,
                next()?,
                next()?,
                next()?,
                next()?,
                next()?,
                next()?,
            );
            let sub = |which: &str, len: usize| -> Result<Option<Vec<f32>>, CoreError> {
                if cfg.sub_norms {
                    Ok(Some(f32_vec(&file, &config::norm_name(l, which), len)?))
                } else {
                    Ok(None)
                }
            };
            let opt = |on: bool, which: &str, len: usize| -> Result<Option<Vec<f32>>, CoreError> {
                on.then(|| f32_vec(&file, &config::norm_name(l, which), len))
                    .transpose()
            };
            let norm_in = if cfg.proj_norms {
                let mut v = Vec::with_capacity(Proj::ALL.len());
                for p in Proj::ALL {
                    let width = cfg.proj_dims(p)[0] as usize;
                    v.push(f32_vec(&file, &config::proj_norm_name(l, p), width)?);
                }
                let arr: [Vec<f32>; 7] = v.try_into().expect("one norm a projection");
                Some(Box::new(arr))
            } else {
                None
            };
            let hd = cfg.head_dim;
            layers.push(Layer {
                norm_in,
                q_norm: opt(cfg.qk_norms, "attn_q_norm", hd)?,
                k_norm: opt(cfg.qk_norms, "attn_k_norm", hd)?,
                post_attn_norm: opt(cfg.post_norms, "post_attention_norm", e)?,
                post_ffn_norm: opt(cfg.post_norms, "post_ffw_norm", e)?,
                attn_norm: f32_vec(&file, &config::norm_name(l, "attn_norm"), e)?,
                attn_sub_norm: sub("attn_sub_norm", cfg.q_dim())?,
                ffn_norm: f32_vec(&file, &config::norm_name(l, "ffn_norm"), e)?,
                ffn_sub_norm: sub("ffn_sub_norm", cfg.n_ff)?,
                q,
                k,
                v,
                o,
                gate,
                up,
                down,
            });
        }
        let output_norm = f32_vec(&file, config::OUTPUT_NORM, e)?;
        let embed = float_rows(&file, tensor(&file, config::TOKEN_EMBD)?)?;
        if embed.rows != cfg.n_vocab || embed.cols != e {
            return Err(bad(config::TOKEN_EMBD, "shape does not match the config"));
        }
        let head_rows = if cfg.tied_head {
            embed.clone()
        } else {
            float_rows(&file, tensor(&file, config::OUTPUT)?)?
        };
        if head_rows.rows != cfg.n_vocab || head_rows.cols != e {
            return Err(bad(config::OUTPUT, "shape does not match the config"));
        }
        let head_mode = match opts.head {
            // A head already in the asked format is used as the file has it.
            Some(mode) if mode.row_format() == Some(head_rows.fmt) => HeadMode::Native,
            Some(mode) => mode,
            // An embedding model's head is never run (its passes end at the final norm):
            // nothing is re-quantized for it.
            None if cfg.is_embedding_model() => HeadMode::Native,
            None => HeadMode::auto_for(
                head_rows.fmt,
                head_rows.rows.saturating_mul(head_rows.row_bytes),
                cfg.n_embd,
            ),
        };

        phases.end("norms");

        // A tied Q8_0 embedding of a Q8_0 head, or a tied Q6_K one of a Q6_K head (both
        // taken into their grouped layouts), is read from the head's copy (the same bytes),
        // so the file's is not kept.
        let runs_head = !(cfg.is_embedding_model() && opts.head.is_none());
        let q6k_native =
            head_mode == HeadMode::Native && head_rows.fmt == RowFormat::Q6K && runs_head;
        let q4_0_native =
            head_mode == HeadMode::Native && head_rows.fmt == RowFormat::Q4_0 && runs_head;
        let embed_in_head = cfg.tied_head
            && match head_rows.fmt {
                RowFormat::Q8_0 => head_mode == HeadMode::Q8,
                RowFormat::Q6K => q6k_native,
                RowFormat::Q4_0 => q4_0_native,
                _ => false,
            };
        let mut embed_blob = (!embed_in_head).then(|| embed.blob.clone());
        let mut store = Store {
            file: None,
            owned: Vec::new(),
        };
        let mut head = match head_mode {
            HeadMode::Q8 => {
                let Blob::File(r) = &head_rows.blob else {
                    unreachable!("blobs point into the file until it is dropped")
                };
                // The source is read whole once; from then on at most the embedding's rows
                // of the tokens seen are (a tied float head), so its pages need not stay
                // resident.
                let base = r.start;
                let release = |rr: Range<usize>| file.release_pages(base + rr.start..base + rr.end);
                let src = &file.as_bytes()[r.clone()];
                let q8 = head_q8r(isa, src, &head_rows, threads, &release)?;
                phases.end("head_q8");
                Head::Q8(q8)
            }
            // A Q6_K head (the file's, or re-quantized) runs in the grouped layout.
            HeadMode::Q6K | HeadMode::Native if head_mode == HeadMode::Q6K || q6k_native => {
                let Blob::File(r) = &head_rows.blob else {
                    unreachable!("blobs point into the file until it is dropped")
                };
                let base = r.start;
                let release = |rr: Range<usize>| file.release_pages(base + rr.start..base + rr.end);
                let src = &file.as_bytes()[r.clone()];
                let q6 = head_q6kr(src, &head_rows, threads, &release)?;
                phases.end("head_q6k");
                Head::Q6(q6)
            }
            // A Q4_0 head (the file's, or re-quantized) runs in the grouped layout.
            HeadMode::Q4_0 | HeadMode::Native if head_mode == HeadMode::Q4_0 || q4_0_native => {
                let Blob::File(r) = &head_rows.blob else {
                    unreachable!("blobs point into the file until it is dropped")
                };
                let base = r.start;
                let release = |rr: Range<usize>| file.release_pages(base + rr.start..base + rr.end);
                let src = &file.as_bytes()[r.clone()];
                let q4 = head_q4r(src, &head_rows, threads, &release)?;
                phases.end("head_q4_0");
                Head::Q4(q4)
            }
            HeadMode::Q6K | HeadMode::Q4_0 => {
                unreachable!("a Q6_K or Q4_0 head takes its grouped layout above")
            }
            HeadMode::Native => Head::Rows(head_rows),
        };

        // Without a map, copy out what is still read from the file and drop its buffer.
        let mut blobs: Vec<&mut Blob> = embed_blob.iter_mut().collect();
        if let Head::Rows(f) = &mut head {
            blobs.push(&mut f.blob);
        }
        for layer in &mut layers {
            for lin in layer.linears_mut() {
                if let LinearKind::Float { blob, .. } = &mut lin.kind {
                    blobs.push(blob);
                }
            }
        }
        let mut kept: Vec<Range<usize>> = Vec::new();
        for b in &blobs {
            if let Blob::File(r) = &**b
                && !kept.contains(r)
            {
                kept.push(r.clone());
            }
        }
        let mapped = opts.mode == LoadMode::Mmap;
        let mapped_bytes: u64 = if mapped {
            kept.iter().map(|r| r.len() as u64).sum()
        } else {
            0
        };
        if !mapped {
            let first_owned = store.owned.len();
            for r in &kept {
                // Copied a slice at a time, each slice's map pages released once copied, so
                // the copy and its source are never both whole in memory.
                let base = r.start;
                let release = |rr: Range<usize>| file.release_pages(base + rr.start..base + rr.end);
                store
                    .owned
                    .push(copy_out(&file.as_bytes()[r.clone()], threads, &release));
            }
            for b in blobs {
                if let Blob::File(r) = &*b {
                    let i = kept.iter().position(|k| k == r).unwrap_or(0);
                    *b = Blob::Owned(first_owned + i);
                }
            }
            drop(file);
            phases.end("copy_out");
        } else {
            drop(blobs);
            // Pages read while loading can still be mapped: read-around while one tensor was
            // read mapped some of its neighbour's, released just before. One last sweep
            // releases everything but what is read whole from now on.
            let mut whole: Vec<Range<usize>> = blobs_read_whole(&layers, &head);
            whole.sort_by_key(|r| r.start);
            let mut at = 0;
            for r in &whole {
                file.release_pages(at..r.start);
                at = at.max(r.end);
            }
            file.release_pages(at..usize::MAX);
            // An embedding read only a row per token (the head is another tensor or a
            // re-quantized copy): each look-up should bring in just the pages of its row.
            if let Some(Blob::File(r)) = &embed_blob
                && !whole.contains(r)
            {
                file.advise_rows(r.clone());
            }
            // What the model reads from now on is the bytes; the parsed header (metadata,
            // tensor names) is dropped.
            store.file = Some(file.into_data());
        }
        let embed = match embed_blob {
            Some(blob) => Embedding::Rows(FloatRows { blob, ..embed }),
            None => Embedding::Head,
        };

        if opts.mlock {
            if mapped {
                for r in &kept {
                    mlock(store.bytes(&Blob::File(r.clone())), path)?;
                }
                for o in &store.owned {
                    mlock(o, path)?;
                }
                match &head {
                    Head::Q8(q) => mlock(q.bytes(), path)?,
                    Head::Q6(q) => mlock(q.bytes(), path)?,
                    Head::Q4(q) => mlock(q.bytes(), path)?,
                    Head::Rows(_) => {}
                }
            } else {
                mlockall(path)?;
            }
            phases.end("mlock");
        }

        let memory = weight_memory(&layers, &output_norm, &store, &embed, &head);
        let weight_bytes = memory.repacked + memory.copied;
        let mut phase_list = phases.done;
        let load_secs = t0.elapsed().as_secs_f64();
        let timed: f64 = phase_list
            .iter()
            .filter(|p| !p.beside)
            .map(|p| p.secs)
            .sum();
        phase_list.push(LoadPhase {
            name: "other",
            secs: (load_secs - timed).max(0.0),
            beside: false,
        });
        let stats = LoadStats {
            load_secs,
            weight_bytes,
            mapped_bytes,
            memory,
            phases: phase_list,
            isa,
            threads,
            head_mode,
        };
        Ok(Model {
            config: cfg,
            tokenizer,
            chat_template,
            store,
            embed,
            head,
            head_mode,
            output_norm,
            layers,
            isa,
            stats,
            constraint_vocab: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{SynthSpec, write_model};

    #[test]
    fn repacked_bytes_do_not_depend_on_the_thread_count() {
        for ty in [TensorType::I2_S, TensorType::TQ2_0, TensorType::TQ1_0] {
            let spec = SynthSpec {
                n_vocab: 300,
                weight_type: ty,
                ..SynthSpec::preset("tiny").unwrap()
            };
            let path = bitnet_test_scratch::fresh_dir("loader").join("m.gguf");
            write_model(&spec, &path, |_, _| {}).unwrap();
            let file = GgufFile::open(&path, bitnet_gguf::LoadMode::Mmap).unwrap();
            let cfg = ModelConfig::from_gguf(&file).unwrap();
            let bytes = |threads| -> Vec<Vec<u8>> {
                load_linears(&file, &cfg, threads)
                    .unwrap()
                    .iter()
                    .map(|l| match &l.kind {
                        LinearKind::Ternary(m) => m.packed_bytes().to_vec(),
                        _ => panic!("{ty:?} is not repacked as ternary"),
                    })
                    .collect()
            };
            let serial = bytes(1);
            assert_eq!(serial.len(), cfg.n_layer * Proj::ALL.len());
            for threads in [2, 3, 16] {
                assert!(bytes(threads) == serial, "{ty:?}, {threads} threads");
            }
            std::fs::remove_file(&path).ok();
        }
    }
}
