// PLACEHOLDER: the scalar reference until the NEON kernel lands.
pub unsafe fn absmax(x: &[f32]) -> f32 {
    crate::scalar::act::absmax(x)
}
pub unsafe fn quantize_i8(x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
    crate::scalar::act::quantize_i8(x, scale, q)
}
pub unsafe fn sign_bits(x: &[f32], bits: &mut [u64]) {
    crate::scalar::act::sign_bits(x, bits)
}
pub unsafe fn sum_bytes(data: &[u8]) -> u64 {
    data.iter().map(|&b| b as u64).sum()
}
