//! The KV element formats as a table (in the style of ggml's `type_traits`): each entry says
//! how many bytes a row of K or V takes, how to encode f32 rows into it, and which attention
//! kernels score queries against a block of keys and accumulate a block of weighted values.
//! The paged pool and the attention loop only ever go through an entry, so a new format is
//! one more entry, not more `match` arms in the engine. K and V pick their entries
//! independently (`-ctk`, `-ctv`).
//!
//! Strides are always in bytes: in a run of one KV head's rows (the pool is head-major, see
//! `KvStorage`), position `p` starts at byte `p * stride`. Keys of the integer formats are
//! scored against an int8 query by default (`int8_scores`). The quantized layouts are
//! documented in `bitnet_kernels::float::kv`.

use bitnet_kernels::Isa;
use bitnet_kernels::float::{
    self, KvQuant, attn_scores_kv, attn_weighted_sum_kv, f16_to_f32_slice, f32_to_f16_slice,
    kv_dequantize, kv_quantize,
};

/// Element storage of the KV cache, as a user picks it (llama.cpp's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// IEEE half precision, 2 bytes per element.
    #[default]
    F16,
    /// IEEE single precision, 4 bytes per element (the reference the others are measured
    /// against).
    F32,
    /// ggml Q8_0: per 32 elements an f16 scale and 32 `i8` (34 bytes).
    Q8_0,
    /// int8 with one f32 scale per head row (per token and KV head), as the BitNet papers
    /// quantize activations: `head_dim + 4` bytes per head row.
    Q8R,
    /// OCP FP8 E4M3 with an f16 scale per 32 elements (34 bytes).
    Fp8,
    /// ggml Q4_0: per 32 elements an f16 scale and 32 nibbles (18 bytes).
    Q4_0,
    /// Sign bits with an f16 scale (the block's mean magnitude) per 32 elements (6 bytes).
    B1,
}

impl KvType {
    /// Every type, in table order.
    pub const ALL: [KvType; 7] = [
        KvType::F16,
        KvType::F32,
        KvType::Q8_0,
        KvType::Q8R,
        KvType::Fp8,
        KvType::Q4_0,
        KvType::B1,
    ];

    /// The table entry of this type.
    pub fn format(self) -> &'static KvFormat {
        match self {
            KvType::F16 => &FORMATS[0],
            KvType::F32 => &FORMATS[1],
            KvType::Q8_0 => &FORMATS[2],
            KvType::Q8R => &FORMATS[3],
            KvType::Fp8 => &FORMATS[4],
            KvType::Q4_0 => &FORMATS[5],
            KvType::B1 => &FORMATS[6],
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

    /// The type named `name` (`f16`, `q8_0`, ...; `q8`, `q8r` and `e4m3` are accepted too).
    pub fn parse(name: &str) -> Option<KvType> {
        match name {
            "q8" => Some(KvType::Q8_0),
            "q8r" => Some(KvType::Q8R),
            "e4m3" | "fp8_e4m3" => Some(KvType::Fp8),
            _ => KvType::ALL.into_iter().find(|t| t.name() == name),
        }
    }
}

/// Which sides of the KV cache are stored Hadamard-rotated (`--kv-rotate`; see
/// [`crate::kv::KvStorage::set_rotation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvRotate {
    /// Neither (plain rows).
    #[default]
    Off,
    /// K only.
    K,
    /// V only.
    V,
    /// K and V.
    Kv,
    /// The sides whose type has fewer than 8 bits per value (`q4_0`, `b1`).
    Auto,
}

impl KvRotate {
    pub const ALL: [KvRotate; 5] = [
        KvRotate::Off,
        KvRotate::K,
        KvRotate::V,
        KvRotate::Kv,
        KvRotate::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KvRotate::Off => "off",
            KvRotate::K => "k",
            KvRotate::V => "v",
            KvRotate::Kv => "kv",
            KvRotate::Auto => "auto",
        }
    }

    /// `off`, `k`, `v`, `kv` or `auto` (`none`, `on` and `both` are accepted too).
    pub fn parse(name: &str) -> Option<KvRotate> {
        match name {
            "none" => Some(KvRotate::Off),
            "on" | "both" => Some(KvRotate::Kv),
            _ => KvRotate::ALL.into_iter().find(|r| r.name() == name),
        }
    }

    /// Whether K and whether V are rotated when they are stored as `k` and `v`.
    pub fn sides(self, k: KvType, v: KvType) -> (bool, bool) {
        let low = |t: KvType| matches!(t, KvType::Q4_0 | KvType::B1);
        match self {
            KvRotate::Off => (false, false),
            KvRotate::K => (true, false),
            KvRotate::V => (false, true),
            KvRotate::Kv => (true, true),
            KvRotate::Auto => (low(k), low(v)),
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

/// Scores of `n_q` sign-quantized query heads (`qbits`, `qscales`: `[n_q][d / 32]` from
/// `bitnet_kernels::float::b1_sign_query`) by XNOR/popcount, as [`ScoresFn`] otherwise.
pub type XnorScoresFn = fn(
    isa: Isa,
    qbits: &[u32],
    qscales: &[f32],
    n_q: usize,
    k: &[u8],
    stride: usize,
    n_pos: usize,
    scale: f32,
    out: &mut [f32],
);

/// Scores of `n_q` int8 query heads (`codes` `[n_q][d]`, `scales` `[n_q][d / 32]` from
/// `bitnet_kernels::float::int8_query`) by integer block dots, as [`ScoresFn`] otherwise.
pub type Int8ScoresFn = fn(
    isa: Isa,
    codes: &[i8],
    scales: &[f32],
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
    /// Keys scored against a sign-quantized query (`--kv-xnor`), for sign formats only.
    pub xnor_scores: Option<XnorScoresFn>,
    /// Keys scored against an int8 query, for integer-coded formats: the engine's default
    /// for them (llama.cpp scores its Q8_0 and Q4_0 keys the same way).
    pub int8_scores: Option<Int8ScoresFn>,
}

/// The entry of a quantized family format: everything goes through `bitnet_kernels`'
/// `kv_*` API for that [`KvQuant`] (grouped AVX2 kernels, scalar reference elsewhere).
macro_rules! quantized {
    ($kind:expr, $q:expr) => {
        quantized!($kind, $q, None)
    };
    ($kind:expr, $q:expr, $xnor:expr) => {
        KvFormat {
            kind: $kind,
            name: $q.name(),
            block_len: float::QK_KV,
            row_bytes: |n| $q.row_bytes(n),
            encode: |_, d, src, dst| kv_quantize($q, d, src, dst),
            decode: |_, src, dst| kv_dequantize($q, src, dst),
            scores: |isa, q, n_q, k, stride, n_pos, scale, out| {
                attn_scores_kv(isa, $q, q, n_q, k, stride, n_pos, scale, out)
            },
            wsum: |isa, w, n_q, v, stride, n_pos, out| {
                attn_weighted_sum_kv(isa, $q, w, n_q, v, stride, n_pos, out)
            },
            xnor_scores: $xnor,
            int8_scores: if $q.has_int8_query_scores() {
                Some(|isa, codes, scales, n_q, k, stride, n_pos, scale, out| {
                    float::attn_scores_kv_int8_query(
                        isa, $q, codes, scales, n_q, k, stride, n_pos, scale, out,
                    )
                })
            } else {
                None
            },
        }
    };
}

/// The table; [`KvType::format`] indexes it.
pub static FORMATS: [KvFormat; 7] = [
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
        xnor_scores: None,
        int8_scores: None,
    },
    KvFormat {
        kind: KvType::F32,
        name: "f32",
        block_len: 1,
        row_bytes: |n| n.checked_mul(4),
        encode: |_, _, src, dst| as_f32_mut(dst).copy_from_slice(src),
        decode: |_, src, dst| dst.copy_from_slice(as_f32(src)),
        scores: |isa, q, n_q, k, stride, n_pos, scale, out| {
            // No group kernel: f32 is the accuracy reference, not a speed option.
            let d = q.len() / n_q.max(1);
            for (qh, oh) in q
                .chunks_exact(d.max(1))
                .zip(out.chunks_exact_mut(n_pos.max(1)))
            {
                let oh = &mut oh[..n_pos];
                float::attn_scores_f32(isa, qh, as_f32(k), stride / 4, n_pos, scale, oh);
            }
        },
        wsum: |isa, w, n_q, v, stride, n_pos, out| {
            let d = out.len() / n_q.max(1);
            for (h, oh) in out.chunks_exact_mut(d.max(1)).enumerate() {
                let wh = &w[h * n_pos..(h + 1) * n_pos];
                float::attn_weighted_sum_f32(isa, wh, as_f32(v), stride / 4, n_pos, oh);
            }
        },
        xnor_scores: None,
        int8_scores: None,
    },
    quantized!(KvType::Q8_0, KvQuant::Q8_0),
    quantized!(KvType::Q8R, KvQuant::Q8R),
    quantized!(KvType::Fp8, KvQuant::Fp8),
    quantized!(KvType::Q4_0, KvQuant::Q4_0),
    quantized!(
        KvType::B1,
        KvQuant::B1,
        Some(|isa, qbits, qscales, n_q, k, stride, n_pos, scale, out| {
            float::attn_scores_b1_xnor(isa, qbits, qscales, n_q, k, stride, n_pos, scale, out)
        })
    ),
];

// The KV pool's blocks are 64-byte aligned and float rows start at multiples of their
// element size, so these casts cannot fail in the engine; a misuse is a bug and panics.

fn as_u16(b: &[u8]) -> &[u16] {
    bytemuck::cast_slice(&b[..b.len() & !1])
}

fn as_u16_mut(b: &mut [u8]) -> &mut [u16] {
    let n = b.len() & !1;
    bytemuck::cast_slice_mut(&mut b[..n])
}

fn as_f32(b: &[u8]) -> &[f32] {
    bytemuck::cast_slice(&b[..b.len() & !3])
}

fn as_f32_mut(b: &mut [u8]) -> &mut [f32] {
    let n = b.len() & !3;
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
        let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(names, ["f16", "f32", "q8_0", "q8_r", "fp8", "q4_0", "b1"]);
        assert_eq!(KvType::parse("q8"), Some(KvType::Q8_0));
        assert_eq!(KvType::parse("int3"), None);
        assert_eq!(KvType::Q8_0.row_bytes(64), Some(68));
        assert_eq!(KvType::Q8_0.row_bytes(40), None);
        assert_eq!(KvType::F16.row_bytes(64), Some(128));
        assert_eq!(KvType::F32.row_bytes(64), Some(256));
        assert_eq!(KvType::Q8R.row_bytes(128), Some(132));
        assert_eq!(KvType::Fp8.row_bytes(128), Some(136));
        assert_eq!(KvType::Q4_0.row_bytes(128), Some(72));
        assert_eq!(KvType::B1.row_bytes(128), Some(24));
        for t in KvType::ALL {
            let f = t.format();
            assert!(matches!((f.row_bytes)(0), None | Some(0)), "{}", f.name);
            if f.block_len > 1 {
                assert_eq!((f.row_bytes)(f.block_len + 1), None, "{}", f.name);
            }
        }
    }

    #[test]
    fn rotation_names_and_sides() {
        for r in KvRotate::ALL {
            assert_eq!(KvRotate::parse(r.name()), Some(r));
        }
        assert_eq!(KvRotate::parse("on"), Some(KvRotate::Kv));
        assert_eq!(KvRotate::parse("x"), None);
        use KvType::*;
        assert_eq!(KvRotate::Auto.sides(Q4_0, Q8_0), (true, false));
        assert_eq!(KvRotate::Auto.sides(F16, B1), (false, true));
        assert_eq!(KvRotate::Auto.sides(Q8_0, Fp8), (false, false));
        assert_eq!(KvRotate::Kv.sides(F32, F32), (true, true));
        assert_eq!(KvRotate::Off.sides(B1, B1), (false, false));
        // Only a sign format has an XNOR scoring path.
        for t in KvType::ALL {
            assert_eq!(t.format().xnor_scores.is_some(), t == B1, "{}", t.name());
        }
    }

    /// Every entry's encode / decode / scores / wsum agree with each other on one row.
    #[test]
    fn entries_are_consistent() {
        let d = 64;
        let x: Vec<f32> = (0..2 * d)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let q: Vec<f32> = (0..d).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect();
        for t in KvType::ALL {
            let f = t.format();
            let rb = (f.row_bytes)(d).unwrap();
            // u64 storage keeps the rows aligned as the pool's are.
            let mut store = vec![0u64; (2 * rb).div_ceil(8)];
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut store);
            let bytes = &mut bytes[..2 * rb];
            (f.encode)(Isa::Scalar, d, &x, bytes);
            let mut dec = vec![0.0f32; 2 * d];
            for (row, o) in bytes.chunks_exact(rb).zip(dec.chunks_exact_mut(d)) {
                (f.decode)(Isa::Scalar, row, o);
            }
            let mut s = [0.0f32; 2];
            (f.scores)(Isa::Scalar, &q, 1, bytes, rb, 2, 1.0, &mut s);
            for p in 0..2 {
                let want: f32 = q.iter().zip(&dec[p * d..]).map(|(a, b)| a * b).sum();
                assert!(
                    (s[p] - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{}",
                    f.name
                );
            }
            let mut o = vec![1.0f32; d];
            (f.wsum)(Isa::Scalar, &[0.5, 2.0], 1, bytes, rb, 2, &mut o);
            // Q4_0 rounds each weight w_p s_p to a 127th of the largest (|s| <= max|dec| / 7),
            // times integers |n - 8| <= 8, over the 2 positions.
            let rounding = if t == KvType::Q4_0 {
                let dmax = dec.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                2.0 * 8.0 * (2.0 * dmax / 7.0) / 254.0
            } else {
                0.0
            };
            for i in 0..d {
                let want = 1.0 + 0.5 * dec[i] + 2.0 * dec[d + i];
                assert!(
                    (o[i] - want).abs() <= 1e-4 * (1.0 + want.abs()) + rounding,
                    "{}",
                    f.name
                );
            }
        }
    }
}
