//! ggml's weight-row formats as the float kernels see them: block layouts, row sizes, the
//! reference dequantizers (embedding lookup, `get_rows`) and the reference encoders.
//!
//! These are kernel-level byte layouts, identical on every CPU; the crate still knows nothing
//! of GGUF files. Every layout is little-endian and matches ggml's `block_*` structs byte for
//! byte, so rows read straight out of a mapped file can be handed over unchanged.

use crate::layout::half::{bf16_to_f32, f16_to_f32, f32_to_f16};

/// Elements per Q8_0 block.
pub const QK8_0: usize = 32;
/// Bytes per Q8_0 block. Layout: `d: f16` (bytes 0..2), `qs: [i8; 32]` (bytes 2..34);
/// value j = `d * qs[j]`.
pub const Q8_0_BLOCK_BYTES: usize = 2 + QK8_0;
/// Elements per Q4_0 block.
pub const QK4_0: usize = 32;
/// Bytes per Q4_0 block. Layout: `d: f16` (bytes 0..2), `qs: [u8; 16]` (bytes 2..18);
/// element j (< 16) is the low nibble of `qs[j]`, element j + 16 its high nibble;
/// value = `(nibble - 8) * d`.
pub const Q4_0_BLOCK_BYTES: usize = 2 + QK4_0 / 2;
/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes per Q6_K block (ggml `block_q6_K`):
/// `ql: [u8; 128]` low 4 bits (bytes 0..128), `qh: [u8; 64]` high 2 bits (128..192),
/// `scales: [i8; 16]` one per 16 elements (192..208), `d: f16` super-block scale (208..210).
/// Element ordering: see [`q6k_position`].
pub const Q6K_BLOCK_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

const _: () = assert!(Q8_0_BLOCK_BYTES == 34);
const _: () = assert!(Q4_0_BLOCK_BYTES == 18);
const _: () = assert!(Q6K_BLOCK_BYTES == 210);

/// Round-trip budgets of the reference encoders: `||x - decode(encode(x))|| / ||x||` on
/// normally distributed rows (one outlier per 512 allowed). Measured worst cases are
/// 0.0124 (Q8_0), 0.089 (Q4_0) and 0.031 (Q6_K); see `tests/float_formats.rs`.
pub const Q8_0_RMSE_BUDGET: f32 = 0.015;
/// See [`Q8_0_RMSE_BUDGET`].
pub const Q4_0_RMSE_BUDGET: f32 = 0.11;
/// See [`Q8_0_RMSE_BUDGET`].
pub const Q6K_RMSE_BUDGET: f32 = 0.04;

const Q6K_QH: usize = QK_K / 2;
const Q6K_SC: usize = Q6K_QH + QK_K / 4;
const Q6K_D: usize = Q6K_SC + QK_K / 16;

/// A weight-row format of embeddings and output heads.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RowFormat {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q6K,
}

impl RowFormat {
    pub const ALL: [RowFormat; 6] = [
        RowFormat::F32,
        RowFormat::F16,
        RowFormat::BF16,
        RowFormat::Q8_0,
        RowFormat::Q4_0,
        RowFormat::Q6K,
    ];

    /// Elements per block (1 for the plain float formats).
    pub fn block_len(self) -> usize {
        match self {
            RowFormat::F32 | RowFormat::F16 | RowFormat::BF16 => 1,
            RowFormat::Q8_0 => QK8_0,
            RowFormat::Q4_0 => QK4_0,
            RowFormat::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            RowFormat::F32 => 4,
            RowFormat::F16 | RowFormat::BF16 => 2,
            RowFormat::Q8_0 => Q8_0_BLOCK_BYTES,
            RowFormat::Q4_0 => Q4_0_BLOCK_BYTES,
            RowFormat::Q6K => Q6K_BLOCK_BYTES,
        }
    }

    /// Bytes of a row of `n` elements; `None` if `n` is not a whole number of blocks or the
    /// size overflows.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_len()) {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    pub fn name(self) -> &'static str {
        match self {
            RowFormat::F32 => "f32",
            RowFormat::F16 => "f16",
            RowFormat::BF16 => "bf16",
            RowFormat::Q8_0 => "q8_0",
            RowFormat::Q4_0 => "q4_0",
            RowFormat::Q6K => "q6_K",
        }
    }
}

/// Where element `e` (0..256) of a Q6_K block keeps its bits, as ggml's
/// `dequantize_row_q6_K` reads them: `(ql byte, high nibble?, qh byte, qh shift)`.
/// The block is two halves of 128; in half `n`, quarter `g` (32 elements), lane `l`:
/// low bits in `ql[64n + 32(g & 1) + l]` (low nibble for g < 2, high for g >= 2), high bits
/// in `qh[32n + l]` at shift `2g`. The scale of element `e` is `scales[e / 16]`.
#[inline]
pub fn q6k_position(e: usize) -> (usize, bool, usize, u32) {
    let n = e / 128;
    let g = (e % 128) / 32;
    let l = e % 32;
    (64 * n + 32 * (g & 1) + l, g >= 2, 32 * n + l, 2 * g as u32)
}

#[inline]
fn read_f16(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// Decodes one row of `out.len()` elements from `bytes` (the reference dequantizer).
///
/// # Panics
/// If `bytes.len()` is not exactly `fmt.row_bytes(out.len())` (the caller checked the
/// tensor's shape when it loaded it).
pub fn dequantize_row(fmt: RowFormat, bytes: &[u8], out: &mut [f32]) {
    let want = fmt.row_bytes(out.len());
    assert_eq!(
        want,
        Some(bytes.len()),
        "dequantize_row: {} row of {} elements needs {want:?} bytes, got {}",
        fmt.name(),
        out.len(),
        bytes.len()
    );
    let bl = fmt.block_len();
    let blocks = bytes.chunks_exact(fmt.block_bytes());
    match fmt {
        RowFormat::F32 => {
            for (o, b) in out.iter_mut().zip(blocks) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        RowFormat::F16 => {
            for (o, b) in out.iter_mut().zip(blocks) {
                *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        RowFormat::BF16 => {
            for (o, b) in out.iter_mut().zip(blocks) {
                *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        RowFormat::Q8_0 => {
            for (y, b) in out.chunks_exact_mut(bl).zip(blocks) {
                let d = read_f16(b, 0);
                for (o, &q) in y.iter_mut().zip(&b[2..]) {
                    *o = d * f32::from(q as i8);
                }
            }
        }
        RowFormat::Q4_0 => {
            for (y, b) in out.chunks_exact_mut(bl).zip(blocks) {
                let d = read_f16(b, 0);
                let (lo, hi) = y.split_at_mut(QK4_0 / 2);
                for j in 0..QK4_0 / 2 {
                    let q = b[2 + j];
                    lo[j] = f32::from((q & 0x0f) as i8 - 8) * d;
                    hi[j] = f32::from((q >> 4) as i8 - 8) * d;
                }
            }
        }
        RowFormat::Q6K => {
            for (y, b) in out.chunks_exact_mut(bl).zip(blocks) {
                let d = read_f16(b, Q6K_D);
                // ggml's loop shape (see [`q6k_position`]): per half, lane l feeds the four
                // quarters from ql[l], ql[l + 32] and the four 2-bit fields of qh[l].
                for (n, y) in y.chunks_exact_mut(128).enumerate() {
                    let ql = &b[64 * n..64 * n + 64];
                    let qh = &b[Q6K_QH + 32 * n..Q6K_QH + 32 * n + 32];
                    let sc = &b[Q6K_SC + 8 * n..Q6K_SC + 8 * n + 8];
                    for l in 0..32 {
                        let is = l / 16;
                        let h = qh[l];
                        let q = [
                            (ql[l] & 0x0f) | ((h & 3) << 4),
                            (ql[l + 32] & 0x0f) | (((h >> 2) & 3) << 4),
                            (ql[l] >> 4) | (((h >> 4) & 3) << 4),
                            (ql[l + 32] >> 4) | ((h >> 6) << 4),
                        ];
                        for (g, &q) in q.iter().enumerate() {
                            // ggml's order of operations: (d * scale) * q.
                            let scale = f32::from(sc[is + 2 * g] as i8);
                            y[l + 32 * g] = d * scale * (i32::from(q) - 32) as f32;
                        }
                    }
                }
            }
        }
    }
}

fn check_encode(fmt: RowFormat, n: usize, out_len: usize) {
    let want = fmt.row_bytes(n);
    assert_eq!(
        want,
        Some(out_len),
        "quantize: {} row of {n} elements needs {want:?} bytes, got {out_len}",
        fmt.name()
    );
}

/// ggml's `nearest_int`: round half away from zero, as an integer.
#[inline]
fn round_i32(x: f32) -> i32 {
    x.round() as i32
}

/// Encodes `x` as Q8_0 blocks (ggml's reference): per 32 elements `d = absmax / 127`,
/// `q = round(x / d)` (half away from zero), `d` stored as f16. Every `q` is in
/// `-127..=127`, never -128 (the int8 dot kernels rely on that for the activations).
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out.len()` is not its Q8_0 row size.
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    check_encode(RowFormat::Q8_0, x.len(), out.len());
    for (xb, b) in x
        .chunks_exact(QK8_0)
        .zip(out.chunks_exact_mut(Q8_0_BLOCK_BYTES))
    {
        let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in b[2..].iter_mut().zip(xb) {
            *q = round_i32(v * id).clamp(-127, 127) as i8 as u8;
        }
    }
}

/// Encodes `x` as Q4_0 blocks (ggml's reference): the element of largest magnitude `m`
/// (sign kept) maps to nibble 0, `d = m / -8`, `q = min(15, trunc(x / d + 8.5))`.
///
/// # Panics
/// If `x.len()` is not a multiple of 32 or `out.len()` is not its Q4_0 row size.
pub fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) {
    check_encode(RowFormat::Q4_0, x.len(), out.len());
    for (xb, b) in x
        .chunks_exact(QK4_0)
        .zip(out.chunks_exact_mut(Q4_0_BLOCK_BYTES))
    {
        let m = xb
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = m / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for j in 0..QK4_0 / 2 {
            b[2 + j] = q(xb[j]) | (q(xb[j + QK4_0 / 2]) << 4);
        }
    }
}

/// Encodes `x` as Q6_K blocks. Per 16 elements a sub-block scale is searched: starting from
/// the one that maps the value of largest magnitude to -32, 19 nearby scales are tried and
/// the one with the least squared error, weighted by each value's square (large values
/// decide the dot products a head computes), is kept as the least-squares scale of its
/// codes. The 16 scales are stored as i8 relative to `d = max_scale / -128` (f16); then each
/// element is re-quantized against its stored scale `d * sc` to `-32..=31`.
///
/// # Panics
/// If `x.len()` is not a multiple of 256 or `out.len()` is not its Q6_K row size.
pub fn quantize_row_q6_k(x: &[f32], out: &mut [u8]) {
    check_encode(RowFormat::Q6K, x.len(), out.len());
    for (xb, b) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(Q6K_BLOCK_BYTES))
    {
        let mut scales = [0.0f32; QK_K / 16];
        for (s, sub) in scales.iter_mut().zip(xb.chunks_exact(16)) {
            *s = q6_sub_scale(sub);
        }
        let max_scale = scales
            .iter()
            .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        b.fill(0);
        if max_scale == 0.0 || !max_scale.is_finite() {
            // All zero (or not encodable): d = 0, every element decodes to 0.
            for e in 0..QK_K {
                put_q6(b, e, 32);
            }
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d16 = f32_to_f16(1.0 / iscale);
        b[Q6K_D..Q6K_D + 2].copy_from_slice(&d16.to_le_bytes());
        let d = f16_to_f32(d16);
        for (ib, &s) in scales.iter().enumerate() {
            let sc = round_i32(iscale * s).clamp(-128, 127);
            b[Q6K_SC + ib] = sc as i8 as u8;
            let ds = d * sc as f32;
            for (e, &v) in xb.iter().enumerate().skip(16 * ib).take(16) {
                let l = if ds == 0.0 {
                    0
                } else {
                    round_i32(v / ds).clamp(-32, 31)
                };
                put_q6(b, e, (l + 32) as u8);
            }
        }
    }
}

/// The scale of one 16-element Q6_K sub-block (codes `-32..=31`): of the scales that map
/// the value of largest magnitude `m` to `-(32 + k / 10)` for `k` in `-9..=9`, the
/// least-squares scale of the codes whose weighted error (weights `x^2`) is least; `m / -32`
/// when all are zero or none improves on it.
fn q6_sub_scale(x: &[f32]) -> f32 {
    let m = x
        .iter()
        .fold(0.0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    if m == 0.0 || !m.is_finite() {
        return m / -32.0;
    }
    let fit = |iscale: f32| {
        // (sum w l x, sum w l^2) of the codes this inverse scale gives.
        let (mut lx, mut l2) = (0.0f64, 0.0f64);
        for &v in x {
            let l = round_i32(iscale * v).clamp(-32, 31) as f64;
            let w = (v as f64) * (v as f64);
            lx += w * l * v as f64;
            l2 += w * l * l;
        }
        (lx, l2)
    };
    let mut best_scale = m / -32.0;
    let (lx, l2) = fit(-32.0 / m);
    // Weighted error = sum w x^2 - lx^2 / l2 at the least-squares scale: maximise lx^2 / l2.
    let mut best = if l2 > 0.0 { lx * lx / l2 } else { 0.0 };
    for k in -9..=9 {
        let (lx, l2) = fit(-(32.0 + 0.1 * k as f32) / m);
        if l2 > 0.0 && lx * lx / l2 > best {
            best = lx * lx / l2;
            best_scale = (lx / l2) as f32;
        }
    }
    best_scale
}

/// Stores the 6-bit code `q` (0..64) of element `e` into a zero-initialised Q6_K block.
#[inline]
fn put_q6(b: &mut [u8], e: usize, q: u8) {
    let (qli, high, qhi, shift) = q6k_position(e);
    b[qli] |= if high { (q & 0x0f) << 4 } else { q & 0x0f };
    b[Q6K_QH + qhi] |= (q >> 4) << shift;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_bytes_needs_whole_blocks() {
        assert_eq!(RowFormat::F16.row_bytes(7), Some(14));
        assert_eq!(RowFormat::Q8_0.row_bytes(64), Some(68));
        assert_eq!(RowFormat::Q8_0.row_bytes(65), None);
        assert_eq!(RowFormat::Q6K.row_bytes(512), Some(420));
        assert_eq!(RowFormat::F32.row_bytes(usize::MAX / 2), None);
    }

    #[test]
    fn q6k_positions_cover_every_bit_once() {
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for e in 0..QK_K {
            let (qli, high, qhi, shift) = q6k_position(e);
            let nib = if high { 0xf0 } else { 0x0f };
            assert_eq!(ql[qli] & nib, 0, "element {e}");
            ql[qli] |= nib;
            assert_eq!(qh[qhi] & (3 << shift), 0, "element {e}");
            qh[qhi] |= 3 << shift;
        }
        assert!(ql.iter().chain(&qh).all(|&b| b == 0xff));
    }
}
