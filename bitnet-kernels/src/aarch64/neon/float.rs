// PLACEHOLDER: the scalar reference until the NEON kernel lands.
use crate::float::RowFormat;
use crate::scalar::float as s;
use std::ops::Range;
pub unsafe fn f16_to_f32_slice(src: &[u16], dst: &mut [f32]) {
    s::f16_to_f32_slice(src, dst)
}
pub unsafe fn f32_to_f16_slice(src: &[f32], dst: &mut [u16]) {
    s::f32_to_f16_slice(src, dst)
}
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    s::dot_f32(a, b)
}
pub unsafe fn matmul_plain(
    fmt: RowFormat,
    data: &[u8],
    row_len: usize,
    x: &[f32],
    n_tok: usize,
    rows: Range<usize>,
    out: &mut [f32],
) {
    s::matmul_f32(fmt, data, row_len, x, n_tok, rows, out)
}
pub unsafe fn rmsnorm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    s::rmsnorm(x, weight, eps, out)
}
pub unsafe fn softmax_inplace(x: &mut [f32]) -> (f32, f32) {
    s::softmax_inplace(x)
}
pub unsafe fn silu(x: &mut [f32]) {
    s::silu(x)
}
pub unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    s::silu_mul(gate, up)
}
pub unsafe fn relu2(x: &mut [f32]) {
    s::relu2(x)
}
pub unsafe fn relu2_mul(gate: &mut [f32], up: &[f32]) {
    s::relu2_mul(gate, up)
}
pub unsafe fn add_inplace(dst: &mut [f32], src: &[f32]) {
    s::add_inplace(dst, src)
}
pub unsafe fn mul_inplace(dst: &mut [f32], src: &[f32]) {
    s::mul_inplace(dst, src)
}
pub unsafe fn scale_inplace(x: &mut [f32], s_: f32) {
    s::scale_inplace(x, s_)
}
