//! Random tensor contents, encoded in the requested storage type and streamed to the writer
//! one tensor (or, for embeddings, a block of rows) at a time.
//!
//! Each tensor draws from its own PRNG stream keyed by its name, so a tensor's values do not
//! depend on the others, and models generated with the same seed in different ternary types
//! (I2_S, TQ2_0, TQ1_0) decode to bit-identical weights: the per-matrix scale is rounded to
//! an f16 value first, which every ternary type stores exactly.

use std::io::Write;

use bitnet_gguf::{GgufWriter, TensorInfo, TensorType};
use bitnet_kernels::float::{
    f16_to_f32, f32_to_bf16, f32_to_f16, quantize_row_q4_0, quantize_row_q6_k, quantize_row_q8_0,
};
use bitnet_kernels::{pack_i2s, pack_q1, pack_tq1_0, pack_tq2_0};

use super::error::SynthError;
use super::rng::Rng;
use crate::config::TensorRole;

/// Rows of an embedding generated and written per chunk (bounds memory for huge vocabs).
const ROWS_PER_CHUNK: usize = 256;

/// FNV-1a of the tensor name: the PRNG stream of that tensor.
fn stream_of(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3)
    })
}

/// Parameters of the value distributions.
#[derive(Copy, Clone, Debug)]
pub(super) struct Dist {
    pub seed: u64,
    /// Share of zero trits in ternary matrices.
    pub zero_share: f32,
    /// Standard deviation of embedding / head values.
    pub embd_std: f32,
    /// Float projections hold latent (Gaussian) weights, not trits times a scale.
    pub latent: bool,
}

/// Appends `x` (one row) encoded as `ty` to `out`.
fn encode_row(ty: TensorType, x: &[f32], out: &mut Vec<u8>) -> Result<(), SynthError> {
    let start = out.len();
    let n_bytes = ty.bytes_for(x.len() as u64)? as usize;
    out.resize(start + n_bytes, 0);
    let dst = &mut out[start..];
    match ty {
        TensorType::F32 => {
            for (d, v) in dst.chunks_exact_mut(4).zip(x) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        TensorType::F16 => {
            for (d, &v) in dst.chunks_exact_mut(2).zip(x) {
                d.copy_from_slice(&f32_to_f16(v).to_le_bytes());
            }
        }
        TensorType::BF16 => {
            for (d, &v) in dst.chunks_exact_mut(2).zip(x) {
                d.copy_from_slice(&f32_to_bf16(v).to_le_bytes());
            }
        }
        TensorType::Q8_0 => quantize_row_q8_0(x, dst),
        TensorType::Q4_0 => quantize_row_q4_0(x, dst),
        TensorType::Q6_K => quantize_row_q6_k(x, dst),
        other => {
            return Err(SynthError::Spec(format!(
                "{} cannot hold float rows",
                other.name()
            )));
        }
    }
    Ok(())
}

/// The scale of a projection with `fan_in` inputs: about `1 / sqrt(fan_in * nonzero share)`
/// (outputs keep the magnitude of the inputs), jittered by +-20%, rounded to f16.
fn proj_scale(rng: &mut Rng, fan_in: u64, nonzero: f32) -> f32 {
    let base = 1.0 / ((fan_in as f32) * nonzero.max(0.05)).sqrt();
    let s = base * (0.8 + 0.4 * rng.next_f32());
    f16_to_f32(f32_to_f16(s))
}

/// Generates and writes one tensor; calls `progress(bytes)` after each chunk written.
pub(super) fn write_tensor<W: Write>(
    w: &mut GgufWriter<W>,
    info: &TensorInfo,
    role: TensorRole,
    dist: &Dist,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SynthError> {
    let mut rng = Rng::new(dist.seed, stream_of(&info.name));
    let row_len = info.row_len() as usize;
    let rows = info.rows() as usize;
    match role {
        TensorRole::Norm => {
            let x: Vec<f32> = (0..row_len * rows)
                .map(|_| 1.0 + 0.1 * rng.normal())
                .collect();
            emit_rows(w, info.ty, &x, row_len, progress)
        }
        TensorRole::Scale => {
            let x = [0.5 + rng.next_f32()];
            emit_rows(w, info.ty, &x, 1, progress)
        }
        TensorRole::Embedding | TensorRole::Head => {
            let mut x = vec![0f32; row_len * ROWS_PER_CHUNK.min(rows)];
            let mut r = 0;
            while r < rows {
                let n = ROWS_PER_CHUNK.min(rows - r);
                let chunk = &mut x[..n * row_len];
                chunk
                    .iter_mut()
                    .for_each(|v| *v = dist.embd_std * rng.normal());
                emit_rows(w, info.ty, chunk, row_len, progress)?;
                r += n;
            }
            Ok(())
        }
        TensorRole::Matrix => write_matrix(w, info, dist, &mut rng, progress),
    }
}

fn emit_rows<W: Write>(
    w: &mut GgufWriter<W>,
    ty: TensorType,
    x: &[f32],
    row_len: usize,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SynthError> {
    let mut bytes = Vec::new();
    for row in x.chunks_exact(row_len) {
        encode_row(ty, row, &mut bytes)?;
    }
    w.write_tensor_data(&bytes)?;
    progress(bytes.len() as u64);
    Ok(())
}

fn write_matrix<W: Write>(
    w: &mut GgufWriter<W>,
    info: &TensorInfo,
    dist: &Dist,
    rng: &mut Rng,
    progress: &mut dyn FnMut(u64),
) -> Result<(), SynthError> {
    let row_len = info.row_len() as usize;
    let n = info.n_elements as usize;
    if info.ty == TensorType::Q1_0 {
        let scale = proj_scale(rng, row_len as u64, 1.0);
        let signs: Vec<i8> = (0..n)
            .map(|_| if rng.next_u64() >> 63 == 0 { -1 } else { 1 })
            .collect();
        let bytes = pack_q1(&signs, row_len, scale)?;
        w.write_tensor_data(&bytes)?;
        progress(bytes.len() as u64);
        return Ok(());
    }
    if dist.latent && !info.ty.is_ternary() && info.ty != TensorType::Q1_0 {
        // A BitNet embedding model's float projections are latent weights, ternarized by
        // absmean at load: Gaussian values, not trits times a scale.
        let scale = proj_scale(rng, row_len as u64, 1.0);
        let x: Vec<f32> = (0..n).map(|_| scale * rng.normal()).collect();
        let mut bytes = Vec::new();
        for row in x.chunks_exact(row_len) {
            encode_row(info.ty, row, &mut bytes)?;
        }
        w.write_tensor_data(&bytes)?;
        progress(bytes.len() as u64);
        return Ok(());
    }
    let scale = proj_scale(rng, row_len as u64, 1.0 - dist.zero_share);
    let trits: Vec<i8> = (0..n).map(|_| rng.trit(dist.zero_share)).collect();
    let bytes = match info.ty {
        TensorType::I2_S => pack_i2s(&trits, scale)?,
        TensorType::TQ2_0 => pack_tq2_0(&trits, scale)?,
        TensorType::TQ1_0 => pack_tq1_0(&trits, scale)?,
        ty => {
            let x: Vec<f32> = trits.iter().map(|&t| f32::from(t) * scale).collect();
            let mut bytes = Vec::new();
            for row in x.chunks_exact(row_len) {
                encode_row(ty, row, &mut bytes)?;
            }
            bytes
        }
    };
    w.write_tensor_data(&bytes)?;
    progress(bytes.len() as u64);
    Ok(())
}
