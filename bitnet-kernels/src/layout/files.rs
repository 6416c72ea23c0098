//! The on-disk ternary and 1-bit weight layouts, decoded to and encoded from plain trits /
//! signs. This is the only place that knows the file layouts; the kernels only ever see the
//! repacked in-memory layouts of [`crate::layout::ternary`] and [`crate::layout::binary`]. Everything here is
//! scalar and runs once at load (or model-generation) time.
//!
//! Layouts (value `j` of a block, trit code `c = w + 1` in {0, 1, 2}):
//! - **I2_S** (bitnet.cpp x86, "ACT_PARALLEL"): the whole tensor, flattened row-major, is cut
//!   in blocks of 128 values -> 32 bytes; value `j` sits in byte `j % 32`, bits
//!   `6 - 2 * (j / 32)`. After the `n / 4` packed bytes comes one little-endian f32 scale for
//!   the tensor; ggml sizes the tensor `n / 4 + 32` bytes (the rest is padding).
//! - **TQ2_0** (llama.cpp): per row, blocks of 256 values -> 66 bytes: `qs[64]` then an f16 `d`.
//!   Value `128 * h + 32 * l + m` (h < 2, l < 4, m < 32) sits in `qs[32 * h + m]` bits `2 * l`.
//! - **TQ1_0** (llama.cpp): per row, blocks of 256 values -> 54 bytes: `qs[48]`, `qh[4]`, f16 `d`.
//!   A byte holds 5 (or, in `qh`, 4) trits as a base-3 fixed-point fraction: with
//!   `q = sum c_n 3^(4-n)` the byte is `ceil(q * 256 / 243)`, and trit `n` is recovered as
//!   `((byte * 3^n) mod 256) * 3 >> 8`. Value order: `qs[0..32]` hold values `32 n + m`
//!   (n < 5), `qs[32..48]` values `160 + 16 n + m`, `qh[0..4]` values `240 + 4 n + m` (n < 4).
//! - **Q1 groups** (this project's plain 1-bit layout, provisional): per row, groups of 128
//!   weights -> 18 bytes: an f16 scale then 16 bytes of bits, bit `i` of byte `k` = weight
//!   `8k + i`, 1 = +1, 0 = -1.

use crate::error::KernelError;
use crate::layout::half::{f16_to_f32, f32_to_f16};

/// Values per I2_S block.
pub const I2S_BLOCK: usize = 128;
/// Values per TQ1_0 / TQ2_0 block.
pub const TQ_BLOCK: usize = 256;
/// Bytes per TQ2_0 block.
pub const TQ2_0_BYTES: usize = 66;
/// Bytes per TQ1_0 block.
pub const TQ1_0_BYTES: usize = 54;
/// Weights per Q1 group.
pub const Q1_GROUP: usize = 128;
/// Bytes per Q1 group.
pub const Q1_GROUP_BYTES: usize = 18;

const POW3: [u16; 6] = [1, 3, 9, 27, 81, 243];

/// Bytes ggml gives an I2_S tensor of `n` values (`n / 4` packed, then the scale and padding).
pub fn i2s_nbytes(n: usize) -> usize {
    n / 4 + 32
}

fn check_trits(trits: &[i8]) -> Result<(), KernelError> {
    match trits.iter().position(|t| !(-1..=1).contains(t)) {
        None => Ok(()),
        Some(index) => Err(KernelError::BadWeight {
            index,
            value: trits[index],
            expected: "-1, 0 or +1",
        }),
    }
}

fn check_finite(what: &'static str, value: f32) -> Result<(), KernelError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(KernelError::NonFinite {
            what,
            value: value.to_string(),
        })
    }
}

/// Encodes trits (row-major, `trits.len()` a multiple of 128) as an I2_S tensor of
/// [`i2s_nbytes`] bytes with a per-tensor `scale`.
pub fn pack_i2s(trits: &[i8], scale: f32) -> Result<Vec<u8>, KernelError> {
    let n = trits.len();
    if !n.is_multiple_of(I2S_BLOCK) {
        return Err(KernelError::BadShape {
            format: "I2_S",
            rows: 1,
            cols: n,
            reason: "the value count must be a multiple of 128",
        });
    }
    check_trits(trits)?;
    check_finite("I2_S scale", scale)?;
    let mut out = vec![0u8; i2s_nbytes(n)];
    for (blk, vals) in trits.chunks_exact(I2S_BLOCK).enumerate() {
        let bytes = &mut out[blk * 32..blk * 32 + 32];
        for (j, &t) in vals.iter().enumerate() {
            bytes[j % 32] |= ((t + 1) as u8) << (6 - 2 * (j / 32));
        }
    }
    out[n / 4..n / 4 + 4].copy_from_slice(&scale.to_le_bytes());
    Ok(out)
}

/// Decodes an I2_S tensor of `n` values into trits; returns the scale.
pub fn unpack_i2s(bytes: &[u8], n: usize, trits: &mut [i8]) -> Result<f32, KernelError> {
    let scale = f32::from_le_bytes(bytes[n / 4..n / 4 + 4].try_into().expect("4 bytes"));
    for (j, t) in trits[..n].iter_mut().enumerate() {
        let (blk, k) = (j / I2S_BLOCK, j % I2S_BLOCK);
        let code = (bytes[blk * 32 + k % 32] >> (6 - 2 * (k / 32))) & 3;
        if code == 3 {
            return Err(KernelError::BadWeight {
                index: j,
                value: 2,
                expected: "an I2_S code 0, 1 or 2",
            });
        }
        *t = code as i8 - 1;
    }
    Ok(scale)
}

/// Two consecutive I2_S blocks (256 values, 64 bytes) in the repacked block layout of
/// [`crate::ternary`] (byte `i` holds the codes of values `i`, `64 + i`, `128 + i`,
/// `192 + i` at bits 0, 2, 4, 6). The codes are the same (`w + 1`) in both layouts, so this
/// only moves bit pairs: value `j < 128` of the first block sits in byte `j % 32` at bit
/// `6 - 2 (j / 32)`, so output byte `i < 32` takes bits 6 and 2 of input byte `i` of each
/// block, and output byte `32 + i` bits 4 and 0. Returns the OR over all bit pairs of
/// `code == 3` markers (`0` when every code is valid; the caller finds the culprit).
#[inline]
pub(crate) fn i2s_pair_to_repacked(src: &[u8; 64], dst: &mut [u8; 64]) -> u8 {
    let (a, b) = src.split_at(32);
    let (lo, hi) = dst.split_at_mut(32);
    let mut bad = 0u8;
    for i in 0..32 {
        let (x, y) = (a[i], b[i]);
        lo[i] = (x >> 6) | (x & 0x0c) | ((y >> 2) & 0x30) | ((y << 4) & 0xc0);
        hi[i] = ((x >> 4) & 0x03) | ((x << 2) & 0x0c) | (y & 0x30) | (y << 6);
        bad |= (x & (x >> 1)) | (y & (y >> 1));
    }
    bad & 0x55
}

/// Encodes trits (row-major, length a multiple of 256) as TQ2_0 blocks, each with scale `d`.
pub fn pack_tq2_0(trits: &[i8], d: f32) -> Result<Vec<u8>, KernelError> {
    tq_len_check("TQ2_0", trits.len())?;
    check_trits(trits)?;
    check_finite("TQ2_0 d", d)?;
    let dh = f32_to_f16(d).to_le_bytes();
    let mut out = Vec::with_capacity(trits.len() / TQ_BLOCK * TQ2_0_BYTES);
    for vals in trits.chunks_exact(TQ_BLOCK) {
        let mut qs = [0u8; 64];
        for (k, &t) in vals.iter().enumerate() {
            let (h, l, m) = (k / 128, (k % 128) / 32, k % 32);
            qs[32 * h + m] |= ((t + 1) as u8) << (2 * l);
        }
        out.extend_from_slice(&qs);
        out.extend_from_slice(&dh);
    }
    Ok(out)
}

/// Decodes one TQ2_0 block into 256 trits; returns `d`.
pub fn unpack_tq2_0_block(blk: &[u8], trits: &mut [i8]) -> Result<f32, KernelError> {
    for (k, t) in trits[..TQ_BLOCK].chunks_exact_mut(32).enumerate() {
        let (h, l) = (k / 4, k % 4);
        for (v, &byte) in t.iter_mut().zip(&blk[32 * h..32 * h + 32]) {
            *v = ((byte >> (2 * l)) & 3) as i8 - 1;
        }
    }
    if let Some(index) = trits[..TQ_BLOCK].iter().position(|&t| t == 2) {
        return Err(KernelError::BadWeight {
            index,
            value: 2,
            expected: "a TQ2_0 code 0, 1 or 2",
        });
    }
    Ok(f16_to_f32(u16::from_le_bytes([blk[64], blk[65]])))
}

/// One TQ2_0 block's 64 bytes of 2-bit codes moved into the repacked block layout (value `i`
/// at byte `i % 64`, bits `2 * (i / 64)`), codes unchanged. TQ2_0 keeps value `j` at byte
/// `32 * (j / 128) + j % 32`, bits `2 * (j / 32 % 4)`, so repacked byte `b` (and `32 + b`)
/// gathers the even (odd) fields of source bytes `b` and `32 + b`. Returns nonzero when some
/// code is 3 (invalid).
#[inline]
pub fn tq2_0_to_repacked(src: &[u8; 64], dst: &mut [u8; 64]) -> u8 {
    let mut bad = 0u8;
    for b in 0..32 {
        let (x, y) = (src[b], src[32 + b]);
        bad |= (x & (x >> 1) | y & (y >> 1)) & 0x55;
        dst[b] = (x & 0x03) | ((x >> 2) & 0x0C) | ((y << 4) & 0x30) | ((y << 2) & 0xC0);
        dst[32 + b] = ((x >> 2) & 0x03) | ((x >> 4) & 0x0C) | ((y << 2) & 0x30) | (y & 0xC0);
    }
    bad
}

fn tq_len_check(format: &'static str, n: usize) -> Result<(), KernelError> {
    if n.is_multiple_of(TQ_BLOCK) {
        Ok(())
    } else {
        Err(KernelError::BadShape {
            format,
            rows: 1,
            cols: n,
            reason: "the value count must be a multiple of 256",
        })
    }
}

/// Packs base-3 digits `c[0]` (most significant) .. into one TQ1_0 byte.
fn tq1_byte(codes: &[u8]) -> u8 {
    let mut q: u16 = 0;
    for &c in codes {
        q = q * 3 + c as u16;
    }
    for _ in codes.len()..5 {
        q *= 3;
    }
    (q * 256).div_ceil(243) as u8
}

fn tq1_trit(byte: u8, n: usize) -> i8 {
    let q = (byte as u16 * POW3[n]) & 0xFF;
    ((q * 3) >> 8) as i8 - 1
}

/// Encodes trits (row-major, length a multiple of 256) as TQ1_0 blocks, each with scale `d`.
pub fn pack_tq1_0(trits: &[i8], d: f32) -> Result<Vec<u8>, KernelError> {
    tq_len_check("TQ1_0", trits.len())?;
    check_trits(trits)?;
    check_finite("TQ1_0 d", d)?;
    let dh = f32_to_f16(d).to_le_bytes();
    let mut out = Vec::with_capacity(trits.len() / TQ_BLOCK * TQ1_0_BYTES);
    for vals in trits.chunks_exact(TQ_BLOCK) {
        let c = |k: usize| (vals[k] + 1) as u8;
        let mut blk = [0u8; TQ1_0_BYTES];
        for (m, byte) in blk[..32].iter_mut().enumerate() {
            *byte = tq1_byte(&[c(m), c(32 + m), c(64 + m), c(96 + m), c(128 + m)]);
        }
        for m in 0..16 {
            let b = 160 + m;
            blk[32 + m] = tq1_byte(&[c(b), c(b + 16), c(b + 32), c(b + 48), c(b + 64)]);
        }
        for m in 0..4 {
            let b = 240 + m;
            blk[48 + m] = tq1_byte(&[c(b), c(b + 4), c(b + 8), c(b + 12)]);
        }
        blk[52..54].copy_from_slice(&dh);
        out.extend_from_slice(&blk);
    }
    Ok(out)
}

/// Decodes one TQ1_0 block into 256 trits; returns `d`. Every byte decodes to valid trits.
pub fn unpack_tq1_0_block(blk: &[u8], trits: &mut [i8]) -> f32 {
    let mut k = 0;
    for n in 0..5 {
        for &byte in &blk[..32] {
            trits[k] = tq1_trit(byte, n);
            k += 1;
        }
    }
    for n in 0..5 {
        for m in 0..16 {
            trits[k] = tq1_trit(blk[32 + m], n);
            k += 1;
        }
    }
    for n in 0..4 {
        for m in 0..4 {
            trits[k] = tq1_trit(blk[48 + m], n);
            k += 1;
        }
    }
    debug_assert_eq!(k, TQ_BLOCK);
    f16_to_f32(u16::from_le_bytes([blk[52], blk[53]]))
}

/// Encodes signs (row-major `rows x cols`, `cols` a multiple of 128; values +-1) as Q1 groups,
/// each group with scale `scale`.
pub fn pack_q1(signs: &[i8], cols: usize, scale: f32) -> Result<Vec<u8>, KernelError> {
    if cols == 0 || !cols.is_multiple_of(Q1_GROUP) || !signs.len().is_multiple_of(cols) {
        return Err(KernelError::BadShape {
            format: "Q1",
            rows: signs.len() / cols.max(1),
            cols,
            reason: "cols must be a non-zero multiple of 128 and divide the value count",
        });
    }
    if let Some(index) = signs.iter().position(|&s| s != 1 && s != -1) {
        return Err(KernelError::BadWeight {
            index,
            value: signs[index],
            expected: "-1 or +1",
        });
    }
    check_finite("Q1 scale", scale)?;
    let sh = f32_to_f16(scale).to_le_bytes();
    let mut out = Vec::with_capacity(signs.len() / Q1_GROUP * Q1_GROUP_BYTES);
    for g in signs.chunks_exact(Q1_GROUP) {
        out.extend_from_slice(&sh);
        for byte in g.chunks_exact(8) {
            let b = byte
                .iter()
                .enumerate()
                .fold(0u8, |acc, (i, &s)| acc | (u8::from(s > 0) << i));
            out.push(b);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_trits(n: usize, seed: u32) -> Vec<i8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((s >> 16) % 3) as i8 - 1
            })
            .collect()
    }

    #[test]
    fn i2s_round_trip_and_layout() {
        let t = pseudo_trits(512, 1);
        let b = pack_i2s(&t, 0.5).unwrap();
        assert_eq!(b.len(), 512 / 4 + 32);
        // value 33 of block 0: byte 1, bits 4..6.
        assert_eq!(((b[1] >> 4) & 3) as i8 - 1, t[33]);
        let mut back = vec![0i8; 512];
        assert_eq!(unpack_i2s(&b, 512, &mut back).unwrap(), 0.5);
        assert_eq!(back, t);
    }

    #[test]
    fn tq2_round_trip_and_layout() {
        let t = pseudo_trits(512, 2);
        let b = pack_tq2_0(&t, 0.25).unwrap();
        assert_eq!(b.len(), 2 * TQ2_0_BYTES);
        // value 128 + 32*3 + 5 sits in qs[32 + 5] bits 6..8.
        assert_eq!(((b[37] >> 6) & 3) as i8 - 1, t[128 + 96 + 5]);
        let mut back = vec![0i8; 256];
        for blk in 0..2 {
            let d = unpack_tq2_0_block(&b[blk * 66..], &mut back).unwrap();
            assert_eq!(d, 0.25);
            assert_eq!(back, t[blk * 256..(blk + 1) * 256]);
        }
    }

    #[test]
    fn tq1_round_trip_every_byte_pattern() {
        // All 243 five-trit patterns survive encode/decode.
        for q in 0..243u16 {
            let mut digits = [0u8; 5];
            let mut r = q;
            for n in (0..5).rev() {
                digits[n] = (r % 3) as u8;
                r /= 3;
            }
            let byte = tq1_byte(&digits);
            for n in 0..5 {
                assert_eq!(tq1_trit(byte, n), digits[n] as i8 - 1, "q={q} n={n}");
            }
        }
        let t = pseudo_trits(768, 3);
        let b = pack_tq1_0(&t, -1.5).unwrap();
        assert_eq!(b.len(), 3 * TQ1_0_BYTES);
        let mut back = vec![0i8; 256];
        for blk in 0..3 {
            assert_eq!(unpack_tq1_0_block(&b[blk * 54..], &mut back), -1.5);
            assert_eq!(back, t[blk * 256..(blk + 1) * 256]);
        }
    }

    #[test]
    fn encoders_reject_bad_input() {
        assert!(pack_i2s(&[0; 100], 1.0).is_err());
        assert!(pack_tq2_0(&[2; 256], 1.0).is_err());
        assert!(pack_tq1_0(&[0; 256], f32::NAN).is_err());
        assert!(pack_q1(&[0; 128], 128, 1.0).is_err());
        let mut bad = pack_tq2_0(&[0; 256], 1.0).unwrap();
        bad[0] = 3;
        assert!(unpack_tq2_0_block(&bad, &mut [0; 256]).is_err());
    }
}
