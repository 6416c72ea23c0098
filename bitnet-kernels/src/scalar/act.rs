//! Reference activation quantization (see `crate::act` for the definitions; the rounding of
//! one value, `quantize_one`, is in `crate::shared::act`, as every kernel set rounds its
//! tails with it), and the plain byte sum the bandwidth probe reads with.

use crate::shared::act::quantize_one;

/// `max |x|` (0 for an empty row). NaNs are ignored, as `vmaxps` with the NaN second does.
pub fn absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0.0f32, |m, &v| if v.abs() > m { v.abs() } else { m })
}

/// Writes `q[i] = quantize_one(x[i], scale)`; returns the sum of the written values.
pub fn quantize_i8(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    let mut sum = 0i32;
    for (o, &v) in q.iter_mut().zip(x) {
        *o = quantize_one(v, scale);
        sum += *o as i32;
    }
    sum
}

/// Sets bit `j` of `bits` (little-endian bit order in each word) where `x[j] > 0`. `bits` must
/// be zeroed.
pub fn sign_bits(x: &[f32], bits: &mut [u64]) {
    for (j, &v) in x.iter().enumerate() {
        if v > 0.0 {
            bits[j / 64] |= 1u64 << (j % 64);
        }
    }
}

/// `mean |x|` accumulated in f64 (0 for an empty row).
pub fn mean_abs(x: &[f32]) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|&v| v.abs() as f64).sum::<f64>() / x.len() as f64) as f32
}

/// Sum of all bytes of `data`: the bandwidth probe's read (`crate::probe`).
pub fn sum_bytes(data: &[u8]) -> u64 {
    data.iter().map(|&b| b as u64).sum()
}
