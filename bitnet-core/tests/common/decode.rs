//! Independent decoders of every tensor type the models use, written from the format
//! descriptions (ggml's `block_*` structs, bitnet.cpp's I2_S, testdata/README.md) and not
//! sharing code with `bitnet-kernels`, so the reference forward pass also checks the
//! kernels' encoders and the engine's decoders.

use bitnet_gguf::{GgufFile, TensorInfo, TensorType};

/// IEEE half to f32, by hand.
pub fn f16(bits: u16) -> f32 {
    let sign = if bits & 0x8000 != 0 { -1.0f32 } else { 1.0 };
    let exp = ((bits >> 10) & 0x1F) as i32;
    let man = (bits & 0x3FF) as f32;
    match exp {
        0 => sign * man * 2f32.powi(-24),
        31 => {
            if man == 0.0 {
                sign * f32::INFINITY
            } else {
                f32::NAN
            }
        }
        e => sign * (1.0 + man / 1024.0) * 2f32.powi(e - 15),
    }
}

fn rd_f16(b: &[u8], at: usize) -> f32 {
    f16(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// A decoded matrix: `rows x cols` f32 values, row-major (`dims = [cols, rows]`).
#[derive(Clone, Debug)]
pub struct Mat {
    pub rows: usize,
    pub cols: usize,
    pub w: Vec<f32>,
}

impl Mat {
    pub fn row(&self, r: usize) -> &[f32] {
        &self.w[r * self.cols..(r + 1) * self.cols]
    }
}

/// Decodes a whole tensor to f32 (ternary and binary types: trit/sign times its scale).
pub fn decode(file: &GgufFile, t: &TensorInfo) -> Mat {
    let data = file.tensor_data(t);
    let cols = t.dims[0] as usize;
    let n = t.n_elements as usize;
    let rows = n / cols;
    let mut w = vec![0f32; n];
    match t.ty {
        TensorType::F32 => {
            for (o, c) in w.iter_mut().zip(data.chunks_exact(4)) {
                *o = f32::from_le_bytes(c.try_into().unwrap());
            }
        }
        TensorType::F16 => {
            for (o, c) in w.iter_mut().zip(data.chunks_exact(2)) {
                *o = f16(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        TensorType::BF16 => {
            for (o, c) in w.iter_mut().zip(data.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16);
            }
        }
        TensorType::Q8_0 => {
            for (o, b) in w.chunks_exact_mut(32).zip(data.chunks_exact(34)) {
                let d = rd_f16(b, 0);
                for j in 0..32 {
                    o[j] = d * f32::from(b[2 + j] as i8);
                }
            }
        }
        TensorType::Q4_0 => {
            for (o, b) in w.chunks_exact_mut(32).zip(data.chunks_exact(18)) {
                let d = rd_f16(b, 0);
                for j in 0..16 {
                    o[j] = d * (f32::from(b[2 + j] & 0xF) - 8.0);
                    o[j + 16] = d * (f32::from(b[2 + j] >> 4) - 8.0);
                }
            }
        }
        TensorType::Q6_K => {
            for (o, b) in w.chunks_exact_mut(256).zip(data.chunks_exact(210)) {
                let d = rd_f16(b, 208);
                for half in 0..2 {
                    let ql = &b[64 * half..];
                    let qh = &b[128 + 32 * half..];
                    let sc = |i: usize| f32::from(b[192 + 8 * half + i] as i8);
                    let y = &mut o[128 * half..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = i32::from((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                        let q2 = i32::from((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                        let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                        let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                        y[l] = d * sc(is) * q1 as f32;
                        y[l + 32] = d * sc(is + 2) * q2 as f32;
                        y[l + 64] = d * sc(is + 4) * q3 as f32;
                        y[l + 96] = d * sc(is + 6) * q4 as f32;
                    }
                }
            }
        }
        TensorType::TQ2_0 => {
            for (o, b) in w.chunks_exact_mut(256).zip(data.chunks_exact(66)) {
                let d = rd_f16(b, 64);
                for (k, v) in o.iter_mut().enumerate() {
                    let (h, l, m) = (k / 128, (k % 128) / 32, k % 32);
                    let code = (b[32 * h + m] >> (2 * l)) & 3;
                    *v = d * (f32::from(code) - 1.0);
                }
            }
        }
        TensorType::TQ1_0 => {
            const POW3: [u16; 5] = [1, 3, 9, 27, 81];
            let trit = |byte: u8, n: usize| {
                let q = (u16::from(byte) * POW3[n]) & 0xFF;
                ((q * 3) >> 8) as f32 - 1.0
            };
            for (o, b) in w.chunks_exact_mut(256).zip(data.chunks_exact(54)) {
                let d = rd_f16(b, 52);
                // (byte range, trits per byte): value order is byte-major within a trit
                // position, as in the README's description of TQ1_0
                let mut k = 0;
                for (bytes, per) in [(0..32, 5), (32..48, 5), (48..52, 4)] {
                    for n in 0..per {
                        for &byte in &b[bytes.clone()] {
                            o[k] = d * trit(byte, n);
                            k += 1;
                        }
                    }
                }
                assert_eq!(k, 256);
            }
        }
        TensorType::I2_S => {
            let scale = f32::from_le_bytes(data[n / 4..n / 4 + 4].try_into().unwrap());
            for (j, v) in w.iter_mut().enumerate() {
                let (blk, k) = (j / 128, j % 128);
                let code = (data[blk * 32 + k % 32] >> (6 - 2 * (k / 32))) & 3;
                assert!(code < 3, "I2_S code 3 in {}", t.name);
                *v = scale * (f32::from(code) - 1.0);
            }
        }
        TensorType::Q1_0 => {
            for (o, b) in w.chunks_exact_mut(128).zip(data.chunks_exact(18)) {
                let d = rd_f16(b, 0);
                for (j, v) in o.iter_mut().enumerate() {
                    let bit = (b[2 + j / 8] >> (j % 8)) & 1;
                    *v = if bit == 1 { d } else { -d };
                }
            }
        }
        other => panic!("no test decoder for {}", other.name()),
    }
    Mat { rows, cols, w }
}

/// Decodes the tensor `name`, panicking if absent.
pub fn decode_named(file: &GgufFile, name: &str) -> Mat {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    decode(file, t)
}

#[test]
fn f16_decoder_matches_known_values() {
    assert_eq!(f16(0x3C00), 1.0);
    assert_eq!(f16(0xC000), -2.0);
    assert_eq!(f16(0x0001), 2f32.powi(-24));
    assert_eq!(f16(0x7BFF), 65504.0);
    assert_eq!(f16(0x3555), 0.333_251_95);
}
