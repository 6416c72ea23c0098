//! Absmean ternarization of a float projection at load: what a BitNet model's float
//! (latent) weights mean, since its BitLinear quantizes them so in training. The BitNet
//! embedding models' F16 and F32 GGUFs hold such weights, and bitnet.cpp's converter
//! (`utils/convert-bitnet-embedding-to-gguf.py`, `quantize_to_i2_s`) writes its I2_S files
//! by exactly this rule: one scale for the whole tensor, `alpha = max(mean |W|, 1e-5)`,
//! each weight `clamp(round_half_even(W / alpha), -1, 1)`, dequantized as `trit * alpha`.

/// The trits and scale of `w` (the whole tensor, any order), by the rule above. The mean is
/// summed in f64 (numpy sums float32 pairwise: the two differ in the last bits of alpha at
/// most, far below a weight's rounding margin).
pub(crate) fn absmean_trits(w: &[f32]) -> (Vec<i8>, f32) {
    let sum: f64 = w.iter().map(|&x| f64::from(x.abs())).sum();
    let mean = if w.is_empty() {
        0.0
    } else {
        sum / w.len() as f64
    };
    let alpha = (mean as f32).max(1e-5);
    let trits = w
        .iter()
        .map(|&x| (x / alpha).round_ties_even().clamp(-1.0, 1.0) as i8)
        .collect();
    (trits, alpha)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_round_to_even_and_values_clamp() {
        let w = [0.5, -0.5, 1.5, -1.5, 0.0, 1.0, -2.0, 0.0];
        let (t, a) = absmean_trits(&w);
        assert_eq!(a, 0.875);
        // w / 0.875: 0.571 -> 1, -0.571 -> -1, 1.71 -> 1, -1.71 -> -1, 0, 1.14 -> 1, -2.29 -> -1.
        assert_eq!(t, [1, -1, 1, -1, 0, 1, -1, 0]);
        let (t, a) = absmean_trits(&[1.0, -3.0, 0.5, 0.5]);
        assert_eq!(a, 1.25);
        // 0.8 -> 1, -2.4 -> -1, 0.4 -> 0.
        assert_eq!(t, [1, -1, 0, 0]);
        let (t, a) = absmean_trits(&[1.25, -1.25, 0.625, 0.0]);
        // alpha 0.78125: 1.6 -> 1, -1.6 -> -1, 0.8 -> 1.
        assert_eq!((t, a), (vec![1, -1, 1, 0], 0.781_25));
        // Exact ties at alpha 1: 0.5 and -0.5 round to 0 (even), 1.5 to 2, clamped to 1.
        let (t, a) = absmean_trits(&[0.5, -0.5, 1.5, 1.5, 0.5, 1.5, 0.5, 1.5]);
        assert_eq!(a, 1.0);
        assert_eq!(t, [0, 0, 1, 1, 0, 1, 0, 1]);
        let (t, a) = absmean_trits(&[0.0; 4]);
        assert_eq!((t, a), (vec![0; 4], 1e-5));
    }
}
