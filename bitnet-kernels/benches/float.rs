//! Float kernel benches: the output-head mat-vec (F16 rows and the Q8_0 x Q8_0 fast path,
//! a 32000-row slice of the 128256 x 2560 head to stay quick), RMSNorm and softmax, on every
//! kernel set this CPU runs. Throughput is the bytes of weights (or activations) read.

use std::hint::black_box;
use std::time::Duration;

use bitnet_kernels::Isa;
use bitnet_kernels::float::*;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const HIDDEN: usize = 2560;
const HEAD_ROWS: usize = 32000;

/// Deterministic pseudo-random values in [-1, 1) (no RNG needed for a bench).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect()
}

fn head(c: &mut Criterion) {
    let w = values(HEAD_ROWS * HIDDEN, 1);
    let f16: Vec<u8> = w
        .iter()
        .flat_map(|&v| f32_to_f16(v * 0.05).to_le_bytes())
        .collect();
    let rb = RowFormat::Q8_0.row_bytes(HIDDEN).unwrap();
    let mut q8 = vec![0u8; HEAD_ROWS * rb];
    for (row, out) in w.chunks_exact(HIDDEN).zip(q8.chunks_exact_mut(rb)) {
        quantize_row_q8_0(row, out);
    }
    drop(w);
    let x = values(HIDDEN, 2);
    let mut xq = vec![0u8; rb];
    quantize_row_q8_0(&x, &mut xq);
    let mut out = vec![0.0f32; HEAD_ROWS];

    let mut g = c.benchmark_group("head_matvec_32000x2560");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Bytes(f16.len() as u64));
    for isa in Isa::available() {
        g.bench_function(format!("f16/{isa}"), |b| {
            b.iter(|| {
                matvec_f32(
                    isa,
                    RowFormat::F16,
                    &f16,
                    HIDDEN,
                    &x,
                    0..HEAD_ROWS,
                    &mut out,
                );
                black_box(&out);
            })
        });
    }
    g.throughput(Throughput::Bytes(q8.len() as u64));
    for isa in Isa::available() {
        g.bench_function(format!("q8_0xq8_0/{isa}"), |b| {
            b.iter(|| {
                matvec_q8_0_q8_0(isa, &q8, HIDDEN, &xq, 0..HEAD_ROWS, &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();

    // Batched decode's head: several tokens against each weight row (multiply-adds a second).
    let mut g = c.benchmark_group("head_matmul_32000x2560");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for n_tok in [4usize, 8] {
        let x = values(n_tok * HIDDEN, 12);
        let mut xq = vec![0u8; n_tok * rb];
        for (xr, qr) in x.chunks_exact(HIDDEN).zip(xq.chunks_exact_mut(rb)) {
            quantize_row_q8_0(xr, qr);
        }
        let mut out = vec![0.0f32; n_tok * HEAD_ROWS];
        g.throughput(Throughput::Elements((n_tok * HEAD_ROWS * HIDDEN) as u64));
        for isa in Isa::available() {
            g.bench_function(format!("q8_0xq8_0_{n_tok}tok/{isa}"), |b| {
                b.iter(|| {
                    matmul_q8_0_q8_0(isa, &q8, HIDDEN, &xq, n_tok, 0..HEAD_ROWS, &mut out);
                    black_box(&out);
                })
            });
        }
    }
    g.finish();
}

fn norms(c: &mut Criterion) {
    let x = values(HIDDEN, 3);
    let wt = values(HIDDEN, 4);
    let mut out = vec![0.0f32; HIDDEN];
    let logits = values(32000, 5);
    let mut buf = logits.clone();
    let mut g = c.benchmark_group("norms");
    g.sample_size(20).measurement_time(Duration::from_secs(1));
    for isa in Isa::available() {
        g.throughput(Throughput::Elements(HIDDEN as u64));
        g.bench_function(format!("rmsnorm_2560/{isa}"), |b| {
            b.iter(|| rmsnorm(isa, black_box(&x), &wt, 1e-5, &mut out))
        });
        g.throughput(Throughput::Elements(logits.len() as u64));
        g.bench_function(format!("softmax_32000/{isa}"), |b| {
            b.iter(|| {
                buf.copy_from_slice(&logits);
                softmax_inplace(isa, black_box(&mut buf));
            })
        });
    }
    g.finish();
}

/// One decoded token's attention over a 4,096-position f16 cache for one KV head of the
/// 2B-4T shape (4 query heads of 128 sharing it, the head's rows next to each other as in
/// the pool): the scores, the softmax of the 4 rows and the weighted sum of values. The
/// cache is spread over 40 layers' worth of rows (80 MiB of K and V, past L3 as the model's
/// 300 MiB are) and each iteration reads the next layer, so the rows come from memory as in
/// decode. (With rows 640 values apart, the pool's layout before f0840eb, the three steps
/// together took 1.9x as long.)
fn attention(c: &mut Criterion) {
    const D: usize = 128;
    const G: usize = 4;
    const STRIDE: usize = D;
    const N_POS: usize = 4096;
    const LAYERS: usize = 40;
    let f16 = |v: &[f32]| -> Vec<u16> {
        let mut h = vec![0u16; v.len()];
        f32_to_f16_slice(Isa::Scalar, v, &mut h);
        h
    };
    let k = f16(&values(LAYERS * N_POS * STRIDE, 6));
    let v = f16(&values(LAYERS * N_POS * STRIDE, 7));
    let q = values(G * D, 8);
    let mut sc = vec![0.0f32; G * N_POS];
    let mut out = vec![0.0f32; G * D];
    let layer_len = N_POS * STRIDE;
    let mut g = c.benchmark_group("attention_f16_4096pos_group4");
    g.sample_size(20).measurement_time(Duration::from_secs(2));
    // Bytes of this KV head's K and V rows read per call.
    g.throughput(Throughput::Bytes((2 * N_POS * D * 2) as u64));
    for isa in Isa::available() {
        let mut layer = 0;
        g.bench_function(format!("scores_softmax_wsum/{isa}"), |b| {
            b.iter(|| {
                layer = (layer + 1) % LAYERS;
                let kl = &k[layer * layer_len..][..layer_len];
                let vl = &v[layer * layer_len..][..layer_len];
                attn_scores_f16_group(isa, &q, G, kl, STRIDE, N_POS, 0.088, &mut sc);
                for row in sc.chunks_exact_mut(N_POS) {
                    softmax_inplace(isa, row);
                }
                out.fill(0.0);
                attn_weighted_sum_f16_group(isa, &sc, G, vl, STRIDE, N_POS, black_box(&mut out));
            })
        });
        g.bench_function(format!("softmax/{isa}"), |b| {
            b.iter(|| {
                for row in sc.chunks_exact_mut(N_POS) {
                    softmax_inplace(isa, black_box(row));
                }
            })
        });
        g.bench_function(format!("scores/{isa}"), |b| {
            b.iter(|| {
                layer = (layer + 1) % LAYERS;
                let kl = &k[layer * layer_len..][..layer_len];
                attn_scores_f16_group(isa, &q, G, kl, STRIDE, N_POS, 0.088, black_box(&mut sc));
            })
        });
        g.bench_function(format!("wsum/{isa}"), |b| {
            b.iter(|| {
                layer = (layer + 1) % LAYERS;
                let vl = &v[layer * layer_len..][..layer_len];
                attn_weighted_sum_f16_group(isa, &sc, G, vl, STRIDE, N_POS, black_box(&mut out));
            })
        });
    }
    g.finish();
}

/// The attention of [`attention`] over each low-bit KV format: one KV head's 4,096 rows next
/// to each other (as in the head-major pool), 40 layers' worth so the rows come from memory,
/// scores and weighted sum timed apart. Throughput is the bytes of K (or V) rows read.
fn attention_kv(c: &mut Criterion) {
    const D: usize = 128;
    const G: usize = 4;
    const N_POS: usize = 4096;
    const LAYERS: usize = 40;
    let q = values(G * D, 8);
    let mut sc = values(G * N_POS, 9);
    for row in sc.chunks_exact_mut(N_POS) {
        softmax_inplace(Isa::Scalar, row);
    }
    let mut out = vec![0.0f32; G * D];
    for fmt in KvQuant::ALL {
        let rb = fmt.row_bytes(D).unwrap();
        let layer_len = N_POS * rb;
        let mut rows = vec![0u8; LAYERS * layer_len];
        kv_quantize(fmt, D, &values(LAYERS * N_POS * D, 6), &mut rows);
        let mut g = c.benchmark_group(format!("attention_{}_4096pos_group4", fmt.name()));
        g.sample_size(20).measurement_time(Duration::from_secs(2));
        g.throughput(Throughput::Bytes(layer_len as u64));
        for isa in Isa::available() {
            let mut layer = 0;
            g.bench_function(format!("scores/{isa}"), |b| {
                b.iter(|| {
                    layer = (layer + 1) % LAYERS;
                    let kl = &rows[layer * layer_len..][..layer_len];
                    attn_scores_kv(isa, fmt, &q, G, kl, rb, N_POS, 0.088, black_box(&mut sc));
                })
            });
            if fmt.has_int8_query_scores() {
                let (mut codes, mut qs) = (vec![0i8; G * D], vec![0.0f32; G * D / QK_KV]);
                g.bench_function(format!("scores_int8_query/{isa}"), |b| {
                    b.iter(|| {
                        layer = (layer + 1) % LAYERS;
                        let kl = &rows[layer * layer_len..][..layer_len];
                        int8_query(black_box(&q), &mut codes, &mut qs);
                        let out = black_box(&mut sc);
                        attn_scores_kv_int8_query(
                            isa, fmt, &codes, &qs, G, kl, rb, N_POS, 0.088, out,
                        );
                    })
                });
                // The engine's split of a group over 2 threads: two calls of half the heads.
                g.bench_function(format!("scores_int8_query_2x2heads/{isa}"), |b| {
                    b.iter(|| {
                        layer = (layer + 1) % LAYERS;
                        let kl = &rows[layer * layer_len..][..layer_len];
                        int8_query(black_box(&q), &mut codes, &mut qs);
                        let out = black_box(&mut sc);
                        for (half, o) in out.chunks_exact_mut(G / 2 * N_POS).enumerate() {
                            let (c, s) =
                                (&codes[half * D * G / 2..], &qs[half * G / 2 * D / QK_KV..]);
                            let (c, s) = (&c[..D * G / 2], &s[..G / 2 * D / QK_KV]);
                            attn_scores_kv_int8_query(
                                isa,
                                fmt,
                                c,
                                s,
                                G / 2,
                                kl,
                                rb,
                                N_POS,
                                0.088,
                                o,
                            );
                        }
                    })
                });
            }
            g.bench_function(format!("wsum/{isa}"), |b| {
                b.iter(|| {
                    layer = (layer + 1) % LAYERS;
                    let vl = &rows[layer * layer_len..][..layer_len];
                    attn_weighted_sum_kv(isa, fmt, &sc, G, vl, rb, N_POS, black_box(&mut out));
                })
            });
            g.bench_function(format!("wsum_2x2heads/{isa}"), |b| {
                b.iter(|| {
                    layer = (layer + 1) % LAYERS;
                    let vl = &rows[layer * layer_len..][..layer_len];
                    let o = black_box(&mut out);
                    for (w, o) in sc
                        .chunks_exact(G / 2 * N_POS)
                        .zip(o.chunks_exact_mut(G / 2 * D))
                    {
                        attn_weighted_sum_kv(isa, fmt, w, G / 2, vl, rb, N_POS, o);
                    }
                })
            });
        }
        g.finish();
    }
}

/// Scores of one GQA group of the 2B-4T shape (4 query heads of 128 over one KV head; rows
/// 5 heads apart) against 4,096 b1 keys: the float query against the decoded signs (the
/// default path) and the XNOR/popcount path, its query quantization included. Plus the
/// Hadamard rotation of one 128-value head row (`--kv-rotate`'s per-row cost).
fn kv_b1(c: &mut Criterion) {
    const D: usize = 128;
    const N_POS: usize = 4096;
    const GROUP: usize = 4;
    let rb = KvQuant::B1.row_bytes(D).unwrap();
    let stride = 5 * rb;
    let keys = values(N_POS * D, 6);
    let mut rows = vec![0u8; N_POS * rb];
    kv_quantize(KvQuant::B1, D, &keys, &mut rows);
    let mut k = vec![0u8; N_POS * stride];
    for (p, row) in rows.chunks_exact(rb).enumerate() {
        k[p * stride..][..rb].copy_from_slice(row);
    }
    let q = values(GROUP * D, 7);
    let mut out = vec![0.0f32; GROUP * N_POS];
    let (mut bits, mut qs) = (
        vec![0u32; GROUP * D / QK_KV],
        vec![0.0f32; GROUP * D / QK_KV],
    );
    let scale = 1.0 / (D as f32).sqrt();
    let mut g = c.benchmark_group("kv_b1_scores_4096x128_g4");
    g.sample_size(30).measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements((GROUP * N_POS) as u64));
    for isa in Isa::available() {
        g.bench_function(format!("float_query/{isa}"), |b| {
            b.iter(|| {
                attn_scores_kv(
                    isa,
                    KvQuant::B1,
                    black_box(&q),
                    GROUP,
                    &k,
                    stride,
                    N_POS,
                    scale,
                    &mut out,
                );
                black_box(&out);
            })
        });
        g.bench_function(format!("xnor/{isa}"), |b| {
            b.iter(|| {
                b1_sign_query(black_box(&q), &mut bits, &mut qs);
                attn_scores_b1_xnor(isa, &bits, &qs, GROUP, &k, stride, N_POS, scale, &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();
    let mut row = values(D, 8);
    let mut g = c.benchmark_group("hadamard_128");
    g.sample_size(20).measurement_time(Duration::from_secs(1));
    for isa in Isa::available() {
        g.bench_function(format!("{isa}"), |b| {
            b.iter(|| hadamard_rows(isa, D, black_box(&mut row)))
        });
    }
    g.finish();
}

criterion_group!(benches, head, norms, attention, attention_kv, kv_b1);
criterion_main!(benches);
