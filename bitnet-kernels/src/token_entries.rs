//! The ops every full SIMD tree implements (`x86_64/avx2`, `x86_64/avx512`, `aarch64/neon`):
//! [`token_entries!`] expands, inside the `impl Kernels` of each of those tokens, to one
//! method per such op. Each method checks what its kernel reads through raw pointers (where
//! the kernel does not check it itself), then calls the kernel of the same name in the
//! invoking tree (`act::absmax` is `avx2::act::absmax` in one, `neon::act::absmax` in
//! another): the same file and function names in every tree are what lets one set of bodies
//! serve them all. The signatures are the ones `crate::ops` declares; these methods, and the
//! few each token adds for itself in its `mod.rs`, are the only place the
//! `#[target_feature]` kernels are called from safe code.
//!
//! Every `unsafe` block here rests on the same two facts: `self` is a token of the invoking
//! set, which only exists once that set's CPU features were detected, and the shapes the
//! kernel reads were checked (by the kernel itself, or just above the call).

/// The `Kernels` methods of a full SIMD tree's token; see the module docs.
macro_rules! token_entries {
    () => {
        // Activations (`crate::act`, `crate::probe`).

        fn absmax(self, x: &[f32]) -> f32 {
            // SAFETY: `self` proves the target features (module docs of `token_entries`).
            unsafe { act::absmax(x) }
        }

        fn quantize_i8(self, x: &[f32], scale: f32, q: &mut [i8]) -> i32 {
            assert!(q.len() >= x.len());
            // SAFETY: `self` proves the target features; lengths checked above.
            unsafe { act::quantize_i8(x, scale, q) }
        }

        fn sum_bytes(self, data: &[u8]) -> u64 {
            // SAFETY: `self` proves the target features.
            unsafe { act::sum_bytes(data) }
        }

        fn sign_bits(self, x: &[f32], bits: &mut [u64]) {
            assert!(bits.len() >= x.len().div_ceil(64));
            // SAFETY: `self` proves the target features; lengths checked above.
            unsafe { act::sign_bits(x, bits) }
        }

        // Ternary and 1-bit products (`crate::ternary`, `crate::binary`).

        fn ternary_raw_dots(
            self,
            w: &crate::layout::ternary::TernaryMatrix,
            q: &[i8],
            rows: std::ops::Range<usize>,
            blocks: std::ops::Range<usize>,
            out: &mut [i32],
        ) {
            crate::layout::ternary::check_raw_dots(w, q, 1, &rows, &blocks, out);
            // SAFETY: `self` proves the target features; shapes checked above.
            unsafe { ternary::raw_dots(w, q, rows, blocks, out) }
        }

        fn ternary_raw_dots_multi(
            self,
            w: &crate::layout::ternary::TernaryMatrix,
            q: &[i8],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            blocks: std::ops::Range<usize>,
            out: &mut [i32],
        ) {
            crate::layout::ternary::check_raw_dots(w, q, n_tok, &rows, &blocks, out);
            // SAFETY: `self` proves the target features; shapes checked above.
            unsafe { ternary::raw_dots_multi(w, q, n_tok, rows, blocks, out) }
        }

        fn binary_raw_dots_multi(
            self,
            w: &crate::layout::binary::BinaryMatrix,
            q: &[i8],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            words: std::ops::Range<usize>,
            out: &mut [i32],
        ) {
            crate::layout::binary::check_raw_dots(w, q.len(), n_tok, &rows, &words, out);
            // SAFETY: `self` proves the target features; shapes checked above.
            unsafe { binary::raw_dots_multi(w, q, n_tok, rows, words, out) }
        }

        // Dense float (`crate::float`): the kernels check the lengths they read.

        fn f16_to_f32_slice(self, src: &[u16], dst: &mut [f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::f16_to_f32_slice(src, dst) }
        }

        fn f32_to_f16_slice(self, src: &[f32], dst: &mut [u16]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::f32_to_f16_slice(src, dst) }
        }

        fn dot_f32(self, a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::dot_f32(a, b) }
        }

        /// The kernel for each row format: plain floats and the quantized rows this set
        /// decodes in registers; Q4_0 (rare in heads) is dequantized a chunk at a time and
        /// dotted with this set's [`Self::dot_f32`].
        #[allow(clippy::too_many_arguments)]
        fn matmul_f32(
            self,
            fmt: crate::layout::rows::RowFormat,
            data: &[u8],
            row_len: usize,
            x: &[f32],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            use crate::layout::rows::RowFormat;
            match fmt {
                RowFormat::F32 | RowFormat::F16 | RowFormat::BF16 => {
                    // SAFETY: `self` proves the target features; the kernel checks the shapes.
                    unsafe { float::matmul_plain(fmt, data, row_len, x, n_tok, rows, out) }
                }
                RowFormat::Q8_0 => {
                    // SAFETY: as above.
                    unsafe { qrows::matmul_q8_0(data, row_len, x, n_tok, rows, out) }
                }
                RowFormat::Q6K => {
                    // SAFETY: as above.
                    unsafe { qrows::matmul_q6k(data, row_len, x, n_tok, rows, out) }
                }
                RowFormat::Q4_0 => {
                    let dot = |a: &[f32], b: &[f32]| self.dot_f32(a, b);
                    crate::shared::rows::matmul_by_chunks(
                        fmt, data, row_len, x, n_tok, rows, out, &dot,
                    )
                }
            }
        }

        fn matmul_q8_0_q8_0(
            self,
            w: &[u8],
            row_len: usize,
            xq: &[u8],
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { q8q8::matmul_q8_0_q8_0(w, row_len, xq, n_tok, rows, out) }
        }

        fn matmul_q8r(
            self,
            w: &crate::layout::q8r::Q8R,
            x: &crate::layout::q8r::Q8Acts,
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            crate::layout::q8r::check_matmul(w, x, n_tok, &rows, out);
            if rows.is_empty() || n_tok == 0 {
                return;
            }
            // SAFETY: `self` proves the target features; shapes checked above, rows not
            // empty.
            unsafe { q8r::matmul_q8r(w, x, n_tok, rows, out) }
        }

        fn matmul_q6kr(
            self,
            w: &crate::layout::q6kr::Q6KR,
            x: &crate::layout::q8k::Q8KActs,
            n_tok: usize,
            rows: std::ops::Range<usize>,
            out: &mut [f32],
        ) {
            crate::layout::q6kr::check_matmul(w, x, n_tok, &rows, out);
            if rows.is_empty() || n_tok == 0 {
                return;
            }
            // SAFETY: `self` proves the target features; shapes checked above, rows not
            // empty.
            unsafe { q6kr::matmul_q6kr(w, x, n_tok, rows, out) }
        }

        fn rmsnorm(self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::rmsnorm(x, weight, eps, out) }
        }

        fn softmax_inplace(self, x: &mut [f32]) -> (f32, f32) {
            // SAFETY: `self` proves the target features.
            unsafe { float::softmax_inplace(x) }
        }

        fn silu(self, x: &mut [f32]) {
            // SAFETY: `self` proves the target features.
            unsafe { float::silu(x) }
        }

        fn silu_mul(self, gate: &mut [f32], up: &[f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::silu_mul(gate, up) }
        }

        fn gelu_tanh_mul(self, gate: &mut [f32], up: &[f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::gelu_tanh_mul(gate, up) }
        }

        fn relu2(self, x: &mut [f32]) {
            // SAFETY: `self` proves the target features.
            unsafe { float::relu2(x) }
        }

        fn relu2_mul(self, gate: &mut [f32], up: &[f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::relu2_mul(gate, up) }
        }

        fn add_inplace(self, dst: &mut [f32], src: &[f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::add_inplace(dst, src) }
        }

        fn mul_inplace(self, dst: &mut [f32], src: &[f32]) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { float::mul_inplace(dst, src) }
        }

        fn scale_inplace(self, x: &mut [f32], s: f32) {
            // SAFETY: `self` proves the target features.
            unsafe { float::scale_inplace(x, s) }
        }

        // RoPE (`crate::float::RopeTable`).

        fn rope_neox(
            self,
            x: &mut [f32],
            head_dim: usize,
            n_heads: usize,
            rope_dim: usize,
            cos: &[f32],
            sin: &[f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { rope::rope_neox(x, head_dim, n_heads, rope_dim, cos, sin) }
        }

        fn rope_normal(
            self,
            x: &mut [f32],
            head_dim: usize,
            n_heads: usize,
            rope_dim: usize,
            cos: &[f32],
            sin: &[f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the shapes.
            unsafe { rope::rope_normal(x, head_dim, n_heads, rope_dim, cos, sin) }
        }

        // Attention over an f16, f32 or Q8_0 cache (`crate::float`'s `attn_*`).

        fn attn_scores_f16(
            self,
            q: &[f32],
            k: &[u16],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_scores_f16(q, k, kv_stride, n_pos, scale, out) }
        }

        fn attn_weighted_sum_f16(
            self,
            w: &[f32],
            v: &[u16],
            kv_stride: usize,
            n_pos: usize,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_weighted_sum_f16(w, v, kv_stride, n_pos, out) }
        }

        fn attn_scores_f32(
            self,
            q: &[f32],
            k: &[f32],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_scores_f32(q, k, kv_stride, n_pos, scale, out) }
        }

        fn attn_weighted_sum_f32(
            self,
            w: &[f32],
            v: &[f32],
            kv_stride: usize,
            n_pos: usize,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_weighted_sum_f32(w, v, kv_stride, n_pos, out) }
        }

        fn attn_scores_q8_0(
            self,
            q: &[f32],
            k: &[u8],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_scores_q8_0(q, k, kv_stride, n_pos, scale, out) }
        }

        fn attn_weighted_sum_q8_0(
            self,
            w: &[f32],
            v: &[u8],
            kv_stride: usize,
            n_pos: usize,
            out: &mut [f32],
        ) {
            // SAFETY: `self` proves the target features; the kernel checks the cache extent.
            unsafe { attn::attn_weighted_sum_q8_0(w, v, kv_stride, n_pos, out) }
        }

        /// `false` (and nothing done) for a group size without a kernel here (2, 4 and 8
        /// have them).
        #[allow(clippy::too_many_arguments)]
        fn attn_scores_f16_group(
            self,
            q: &[f32],
            n_q: usize,
            k: &[u16],
            kv_stride: usize,
            n_pos: usize,
            scale: f32,
            out: &mut [f32],
        ) -> bool {
            let (ql, kl, ol) = (q.len(), k.len(), out.len());
            crate::shared::attn::check_group_scores(ql, n_q, kl, kv_stride, n_pos, ol);
            // SAFETY: `self` proves the target features; shapes checked above.
            unsafe { attn_group::scores_group(q, n_q, k, kv_stride, n_pos, scale, out) }
        }

        /// `false` (and nothing done) for a group size without a kernel here (2, 4 and 8
        /// have them).
        fn attn_weighted_sum_f16_group(
            self,
            w: &[f32],
            n_q: usize,
            v: &[u16],
            kv_stride: usize,
            n_pos: usize,
            out: &mut [f32],
        ) -> bool {
            let (wl, vl, ol) = (w.len(), v.len(), out.len());
            crate::shared::attn::check_group_wsum(wl, n_q, vl, kv_stride, n_pos, ol);
            // SAFETY: `self` proves the target features; shapes checked above.
            unsafe { attn_group::wsum_group(w, n_q, v, kv_stride, n_pos, out) }
        }
    };
}

pub(crate) use token_entries;
