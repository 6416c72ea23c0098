//! Turning one checkpoint tensor into the bytes of one GGUF tensor, streamed to the writer.
//!
//! Float tensors (embedding, head, norms) go through in chunks of rows, so even a
//! 128k x 2560 embedding never sits in memory whole. A ternary projection needs the whole
//! matrix once (absmean is a mean over the matrix, and I2_S stores one scale per tensor),
//! as one byte per weight plus the packed output: about 1.25 bytes per weight.
//!
//! Ternary rules:
//! - Packed checkpoints (transformers `integrations/bitnet.py`, `unpack_weights`): a uint8
//!   tensor of shape `[out / 4, in]`; output row `o = i * (out / 4) + r` is bits `2i..2i+2`
//!   of packed row `r` (the four row blocks are stacked, not interleaved), code `c` means
//!   weight `c - 1`, and code 3 is invalid. The scale is `1 / weight_scale` for
//!   `BitLinear` (see [`ScaleMode`]).
//! - Latent float weights (BitNet b1.58's absmean rule, as in bitnet.cpp's
//!   `preprocess-huggingface-bitnet.py` and testdata/README.md): `e = mean|W|` over the
//!   matrix (accumulated in f64, clamped below at 1e-5 like the reference), trits =
//!   `clamp(round_half_even(W / e), -1, 1)` (torch's `round` is half-to-even), scale `e`.
//! - Latent float weights of the BitNet embedding models: the same rule as bitnet.cpp's
//!   embedding converter computes it in numpy, bit for bit (`numpy_absmean.rs`).
//!
//! Gemma's norm weights are written as `1 + w` ([`Route::FloatPlusOne`]): the sum in f32,
//! then the cast to the output type, as the reference's `w.astype(np.float32) + 1.0`.

mod numpy_absmean;

use std::io::Write;

use bitnet_gguf::{GgufWriter, TensorType};
use bitnet_kernels::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, quantize_row_q8_0};
use bitnet_kernels::{pack_i2s, pack_tq1_0, pack_tq2_0};
use safetensors::Dtype;

use crate::error::ConvertError;
use crate::hf::ScaleMode;
use crate::mapping::{Job, Route, TernarySource};
use crate::source::{Sources, TensorRef};

/// Bytes of f32 decoded per chunk of a float tensor.
const CHUNK_F32_BYTES: usize = 4 << 20;

/// Smallest absmean scale, as transformers' `WeightQuant` and bitnet.cpp clamp it.
const MIN_SCALE: f32 = 1e-5;

/// Decodes `bytes` (elements of `dtype`) into `out`, refusing NaN and infinities.
/// `first` is the flat index of `bytes[0]` in the tensor, for the error.
fn decode_floats(
    sources: &Sources,
    t: &TensorRef,
    bytes: &[u8],
    first: usize,
    out: &mut [f32],
) -> Result<(), ConvertError> {
    match t.dtype {
        Dtype::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        Dtype::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        Dtype::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        other => {
            return Err(ConvertError::Tensor {
                path: sources.path(t).to_owned(),
                tensor: t.name.clone(),
                reason: format!("dtype {other:?} is not a float type (F32, F16, BF16)"),
            });
        }
    }
    if let Some(i) = out.iter().position(|v| !v.is_finite()) {
        return Err(ConvertError::NonFinite {
            path: sources.path(t).to_owned(),
            tensor: t.name.clone(),
            index: first + i,
            value: out[i],
        });
    }
    Ok(())
}

fn elem_bytes(d: Dtype) -> usize {
    d.bitsize() / 8
}

/// Appends `x` encoded as `ty` (F32, F16, BF16, Q8_0) to `out`.
fn encode_row(ty: TensorType, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        TensorType::F32 => x
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        TensorType::F16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_f16(v).to_le_bytes())),
        TensorType::BF16 => x
            .iter()
            .for_each(|&v| out.extend_from_slice(&f32_to_bf16(v).to_le_bytes())),
        TensorType::Q8_0 => {
            let start = out.len();
            // 34 bytes per block of 32; the planner checked the row length.
            out.resize(start + x.len() / 32 * 34, 0);
            quantize_row_q8_0(x, &mut out[start..]);
        }
        other => unreachable!("planner allowed float type {}", other.name()),
    }
}

/// Writes one planned tensor; `progress(bytes)` after each chunk.
pub fn write_job<W: Write>(
    w: &mut GgufWriter<W>,
    sources: &Sources,
    job: &Job,
    progress: &mut dyn FnMut(u64),
) -> Result<(), ConvertError> {
    let result = match &job.route {
        Route::Float => write_float(w, sources, job, 0.0, progress),
        Route::FloatPlusOne => write_float(w, sources, job, 1.0, progress),
        Route::Ternary {
            source,
            permute_heads,
        } => {
            let (trits, scale) = match source {
                TernarySource::Packed { scale, mode } => {
                    let s = read_scale(sources, scale, *mode)?;
                    (unpack(sources, &job.src)?, s)
                }
                TernarySource::Latent => ternarize(sources, &job.src)?,
                TernarySource::LatentNumpy => {
                    numpy_absmean::ternarize(&decode_whole(sources, &job.src)?)
                }
            };
            let trits = match permute_heads {
                Some(h) => permute_rows(&trits, job.src_rows(), *h),
                None => trits,
            };
            let enc = |e| ConvertError::Encode {
                tensor: job.info.name.clone(),
                source: e,
            };
            let bytes = match job.info.ty {
                TensorType::I2_S => pack_i2s(&trits, scale).map_err(enc)?,
                TensorType::TQ2_0 => pack_tq2_0(&trits, scale).map_err(enc)?,
                TensorType::TQ1_0 => pack_tq1_0(&trits, scale).map_err(enc)?,
                other => unreachable!("planner allowed ternary type {}", other.name()),
            };
            drop(trits);
            w.write_tensor_data(&bytes)?;
            progress(bytes.len() as u64);
            Ok(())
        }
    };
    sources.release(&job.src);
    result
}

impl Job {
    /// Rows of the HF matrix (output features).
    fn src_rows(&self) -> usize {
        self.info.rows() as usize
    }
}

/// Writes a float tensor in chunks of rows, each value plus `offset` (in f32) first.
fn write_float<W: Write>(
    w: &mut GgufWriter<W>,
    sources: &Sources,
    job: &Job,
    offset: f32,
    progress: &mut dyn FnMut(u64),
) -> Result<(), ConvertError> {
    let t = &job.src;
    let row_len = job.info.row_len() as usize;
    let rows = job.info.rows() as usize;
    let eb = elem_bytes(t.dtype);
    let data = sources.data(t);
    let rows_per_chunk = (CHUNK_F32_BYTES / 4 / row_len).max(1);
    let mut x = vec![0f32; rows_per_chunk.min(rows) * row_len];
    let mut out = Vec::new();
    let mut r = 0;
    while r < rows {
        let n = rows_per_chunk.min(rows - r);
        let xs = &mut x[..n * row_len];
        let bytes = &data[r * row_len * eb..(r + n) * row_len * eb];
        decode_floats(sources, t, bytes, r * row_len, xs)?;
        if offset != 0.0 {
            xs.iter_mut().for_each(|v| *v += offset);
        }
        out.clear();
        for row in xs.chunks_exact(row_len) {
            encode_row(job.info.ty, row, &mut out);
        }
        w.write_tensor_data(&out)?;
        progress(out.len() as u64);
        // The pages behind us are done with: keep resident memory at about one chunk.
        let base = t.start + r * row_len * eb;
        sources.files_release(t, base, base + n * row_len * eb);
        r += n;
    }
    Ok(())
}

/// The effective scale of a packed tensor from its `weight_scale`.
fn read_scale(sources: &Sources, t: &TensorRef, mode: ScaleMode) -> Result<f32, ConvertError> {
    let mut v = [0f32];
    decode_floats(sources, t, sources.data(t), 0, &mut v)?;
    let ws = v[0];
    if ws <= 0.0 {
        return Err(ConvertError::Tensor {
            path: sources.path(t).to_owned(),
            tensor: t.name.clone(),
            reason: format!("weight_scale {ws} is not positive"),
        });
    }
    let s = match mode {
        ScaleMode::Divide => 1.0 / ws,
        ScaleMode::Multiply => ws,
    };
    if !s.is_finite() {
        return Err(ConvertError::Tensor {
            path: sources.path(t).to_owned(),
            tensor: t.name.clone(),
            reason: format!("weight_scale {ws} gives the non-finite scale {s}"),
        });
    }
    Ok(s)
}

/// Unpacks an HF packed tensor `[P, cols]` into `4P x cols` trits, row-major.
fn unpack(sources: &Sources, t: &TensorRef) -> Result<Vec<i8>, ConvertError> {
    let (p, cols) = (t.shape[0], t.shape[1]);
    let data = sources.data(t);
    let mut trits = vec![0i8; 4 * p * cols];
    for (o, row) in trits.chunks_exact_mut(cols).enumerate() {
        let (i, r) = (o / p, o % p);
        let src = &data[r * cols..(r + 1) * cols];
        for (c, (dst, &byte)) in row.iter_mut().zip(src).enumerate() {
            let code = (byte >> (2 * i)) & 3;
            if code == 3 {
                return Err(ConvertError::BadTernaryCode {
                    path: sources.path(t).to_owned(),
                    tensor: t.name.clone(),
                    row: o,
                    col: c,
                });
            }
            *dst = code as i8 - 1;
        }
    }
    Ok(trits)
}

/// A whole float tensor as f32 (the embedding route's absmean needs it at once: numpy's
/// pairwise mean runs over the flattened tensor).
fn decode_whole(sources: &Sources, t: &TensorRef) -> Result<Vec<f32>, ConvertError> {
    let mut x = vec![0f32; t.numel()];
    decode_floats(sources, t, sources.data(t), 0, &mut x)?;
    Ok(x)
}

/// Absmean ternarization of a float matrix: `(trits, scale)`.
fn ternarize(sources: &Sources, t: &TensorRef) -> Result<(Vec<i8>, f32), ConvertError> {
    let n = t.numel();
    let eb = elem_bytes(t.dtype);
    let data = sources.data(t);
    let chunk = CHUNK_F32_BYTES / 4;
    let mut x = vec![0f32; chunk.min(n)];
    let mut sum = 0f64;
    let mut i = 0;
    while i < n {
        let m = chunk.min(n - i);
        decode_floats(sources, t, &data[i * eb..(i + m) * eb], i, &mut x[..m])?;
        sum += x[..m].iter().map(|v| f64::from(v.abs())).sum::<f64>();
        i += m;
    }
    let scale = ((sum / n as f64) as f32).max(MIN_SCALE);
    let mut trits = vec![0i8; n];
    let mut i = 0;
    while i < n {
        let m = chunk.min(n - i);
        decode_floats(sources, t, &data[i * eb..(i + m) * eb], i, &mut x[..m])?;
        for (d, &v) in trits[i..i + m].iter_mut().zip(&x[..m]) {
            *d = (v / scale).round_ties_even().clamp(-1.0, 1.0) as i8;
        }
        i += m;
    }
    Ok((trits, scale))
}

/// Reorders the rows of a `[heads * head_dim, cols]` matrix from HF's rotate-half layout
/// (the two halves of each head's rotated pairs apart) to ggml's normal rope layout
/// (pairs adjacent), as llama.cpp's converter does for Llama q/k: new row `2j + h` of a
/// head is old row `h * head_dim / 2 + j`.
pub fn permute_rows(trits: &[i8], rows: usize, heads: usize) -> Vec<i8> {
    let cols = trits.len() / rows.max(1);
    let hd = rows / heads.max(1);
    let half = hd / 2;
    let mut out = vec![0i8; trits.len()];
    for head in 0..heads {
        for j in 0..half {
            for h in 0..2 {
                let new = head * hd + 2 * j + h;
                let old = head * hd + h * half + j;
                out[new * cols..(new + 1) * cols]
                    .copy_from_slice(&trits[old * cols..(old + 1) * cols]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::permute_rows;

    #[test]
    fn permute_interleaves_the_halves_of_each_head() {
        // 2 heads of dim 4, one column: rows 0..8.
        let rows: Vec<i8> = (0..8).collect();
        let p = permute_rows(&rows, 8, 2);
        assert_eq!(p, vec![0, 2, 1, 3, 4, 6, 5, 7]);
    }
}
