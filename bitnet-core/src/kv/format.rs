//! The KV element formats as a table (in the style of ggml's `type_traits`): each entry says
//! how many bytes a row of K or V takes, how to encode f32 rows into it, and which attention
//! kernels score queries against a block of keys and accumulate a block of weighted values.
//! The paged pool and the attention loop only ever go through an entry, so a new format
//! (int4, fp8, binary) is one more entry, not more `match` arms in the engine.
//!
//! Strides are always in bytes: position `p` of a block starts at byte `p * stride`, and
//! head `h` of a position at byte `h * head_bytes` within it.

use bitnet_kernels::Isa;
use bitnet_kernels::float::{
    self, Q8_0_BLOCK_BYTES, QK8_0, RowFormat, dequantize_row, f16_to_f32_slice, f32_to_f16_slice,
    quantize_row_q8_0,
};

/// Element storage of the KV cache, as a user picks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// IEEE half precision, 2 bytes per element.
    #[default]
    F16,
    /// ggml Q8_0: per 32 elements an f16 scale and 32 `i8` (34 bytes).
    Q8,
}

impl KvType {
    /// Every type, in table order.
    pub const ALL: [KvType; 2] = [KvType::F16, KvType::Q8];

    /// The table entry of this type.
    pub fn format(self) -> &'static KvFormat {
        match self {
            KvType::F16 => &FORMATS[0],
            KvType::Q8 => &FORMATS[1],
        }
    }

    /// Bytes of one row of `n` elements (`None` on overflow or a partial block).
    pub fn row_bytes(self, n: usize) -> Option<u64> {
        (self.format().row_bytes)(n).map(|b| b as u64)
    }

    /// Short lower-case name (`f16`, `q8_0`), as llama.cpp's `--cache-type-k` spells it.
    pub fn name(self) -> &'static str {
        self.format().name
    }

    /// The type named `name` (`f16`, `q8_0`; `q8` is accepted too).
    pub fn parse(name: &str) -> Option<KvType> {
        match name {
            "q8" => Some(KvType::Q8),
            _ => KvType::ALL.into_iter().find(|t| t.name() == name),
        }
    }
}

/// Scores of `n_q` query heads (`q` is `[n_q][d]`) against `n_pos` key rows at byte stride
/// `stride`: `out[h * n_pos + p] = scale * dot(q_h, k_p)`.
pub type ScoresFn = fn(
    isa: Isa,
    q: &[f32],
    n_q: usize,
    k: &[u8],
    stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
);

/// `out[h] += Σ_p w[h * n_pos + p] * v_p` for `n_q` heads (`out` is `[n_q][d]`).
pub type WsumFn =
    fn(isa: Isa, w: &[f32], n_q: usize, v: &[u8], stride: usize, n_pos: usize, out: &mut [f32]);

/// One row of the format table; see the module docs.
#[derive(Debug)]
pub struct KvFormat {
    pub kind: KvType,
    pub name: &'static str,
    /// Values per block: a head's row must be a whole number of blocks (1 for plain floats).
    pub block_len: usize,
    /// Bytes of one row of `n` elements; `None` if `n` is not a whole number of the
    /// format's blocks (or overflows).
    pub row_bytes: fn(n: usize) -> Option<usize>,
    /// Encodes whole head rows: `src` holds rows of `d` floats (one KV head's part of a
    /// position each), `dst` the same rows encoded back to back.
    pub encode: fn(isa: Isa, d: usize, src: &[f32], dst: &mut [u8]),
    /// Decodes one row of `dst.len()` elements.
    pub decode: fn(isa: Isa, src: &[u8], dst: &mut [f32]),
    pub scores: ScoresFn,
    pub wsum: WsumFn,
}

/// The table; [`KvType::format`] indexes it.
pub static FORMATS: [KvFormat; 2] = [
    KvFormat {
        kind: KvType::F16,
        name: "f16",
        block_len: 1,
        row_bytes: |n| n.checked_mul(2),
        encode: |isa, _, src, dst| f32_to_f16_slice(isa, src, as_u16_mut(dst)),
        decode: |isa, src, dst| f16_to_f32_slice(isa, as_u16(src), dst),
        scores: |isa, q, n_q, k, stride, n_pos, scale, out| {
            float::attn_scores_f16_group(isa, q, n_q, as_u16(k), stride / 2, n_pos, scale, out)
        },
        wsum: |isa, w, n_q, v, stride, n_pos, out| {
            float::attn_weighted_sum_f16_group(isa, w, n_q, as_u16(v), stride / 2, n_pos, out)
        },
    },
    KvFormat {
        kind: KvType::Q8,
        name: "q8_0",
        block_len: QK8_0,
        row_bytes: |n| {
            n.is_multiple_of(QK8_0)
                .then(|| (n / QK8_0).checked_mul(Q8_0_BLOCK_BYTES))
                .flatten()
        },
        // Rows are whole blocks, so several rows encode like the rows one by one.
        encode: |_, _, src, dst| quantize_row_q8_0(src, dst),
        decode: |_, src, dst| dequantize_row(RowFormat::Q8_0, src, dst),
        scores: |isa, q, n_q, k, stride, n_pos, scale, out| {
            let d = q.len() / n_q.max(1);
            for (qh, oh) in q
                .chunks_exact(d.max(1))
                .zip(out.chunks_exact_mut(n_pos.max(1)))
            {
                float::attn_scores_q8_0(isa, qh, k, stride, n_pos, scale, &mut oh[..n_pos]);
            }
        },
        wsum: |isa, w, n_q, v, stride, n_pos, out| {
            let d = out.len() / n_q.max(1);
            for (h, oh) in out.chunks_exact_mut(d.max(1)).enumerate() {
                let wh = &w[h * n_pos..(h + 1) * n_pos];
                float::attn_weighted_sum_q8_0(isa, wh, v, stride, n_pos, oh);
            }
        },
    },
];

/// The KV pool's blocks are 64-byte aligned and f16 rows start at even offsets, so these
/// casts cannot fail in the engine; a misuse is a bug and panics.
fn as_u16(b: &[u8]) -> &[u16] {
    bytemuck::cast_slice(&b[..b.len() & !1])
}

fn as_u16_mut(b: &mut [u8]) -> &mut [u16] {
    let n = b.len() & !1;
    bytemuck::cast_slice_mut(&mut b[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_order_matches_the_enum() {
        for t in KvType::ALL {
            assert_eq!(t.format().kind, t);
            assert_eq!(KvType::parse(t.name()), Some(t));
        }
        assert_eq!(KvType::parse("q8"), Some(KvType::Q8));
        assert_eq!(KvType::parse("int3"), None);
        assert_eq!(KvType::Q8.row_bytes(64), Some(68));
        assert_eq!(KvType::Q8.row_bytes(40), None);
        assert_eq!(KvType::F16.row_bytes(64), Some(128));
    }
}
