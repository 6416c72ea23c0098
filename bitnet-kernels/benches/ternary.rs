//! Criterion benches of the integer kernels on BitNet b1.58 2B-4T shapes, per kernel set, 1 and
//! 2 threads (two row halves on scoped threads):
//! - `hot`: decode matvec with the weights cached where they fit, Throughput = MACs;
//! - `cold`: decode over >= 1 GiB of weights (many matrices, cycled so nothing stays in the
//!   260 MiB LLC), Throughput = weight bytes, next to `plain_read`, a SIMD sum over the same
//!   bytes: the ratio of the two is the figure we track (target >= 0.85);
//! - `prefill`: matmul with 8 (batched decode), 128 and 512 token rows, Throughput = MACs;
//! - `binary`: 1-bit x int8 and XNOR-popcount matvec; `tl_proto`: the table-lookup prototype.
//!
//! Sample counts are small (a shared machine). For a plain table use the example instead:
//! `cargo run --release -p bitnet-kernels --example kernel_table`.
//! Set `BITNET_BENCH_COLD_GIB` to change the cold set size (default 1).

use std::hint::black_box;
use std::ops::Range;
use std::time::{Duration, Instant};

use bitnet_kernels::probe::sum_bytes;
use bitnet_kernels::{
    ActScale, AlignedVec, BinaryMatrix, Isa, TernaryMatrix, binary_binary_matvec, binary_matvec,
    quantize_act, quantize_act_binary, ternary_matmul, ternary_matvec,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

// The table-lookup prototypes are x86 (AVX-512 `vpermw`, AVX2 `pshufb`).
#[cfg(target_arch = "x86_64")]
mod tl_proto;

const SHAPES: [(&str, usize, usize); 5] = [
    ("2560x2560", 2560, 2560),
    ("640x2560", 640, 2560),
    ("6912x2560", 6912, 2560),
    ("2560x6912", 2560, 6912),
    ("head_128256x2560", 128256, 2560),
];

#[path = "../examples/shapes/mod.rs"]
mod shapes;
use shapes::LAYER;

#[derive(Debug)]
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub fn trits(n: usize, seed: u64) -> Vec<i8> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| (rng.next_u64() % 3) as i8 - 1).collect()
}

fn matrix(rows: usize, cols: usize, seed: u64) -> TernaryMatrix {
    TernaryMatrix::from_trits(&trits(rows * cols, seed), rows, cols, 0.5).expect("matrix")
}

pub fn floats(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed | 1);
    (0..n)
        .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// Quantized activations in a 64-byte-aligned buffer, as the engine keeps them (a plain
/// `Vec` may start mid-line, and then the tiles' loads straddle cache lines).
fn acts(n_tok: usize, cols: usize, pc: usize, seed: u64) -> (AlignedVec<i8>, Vec<ActScale>) {
    let x = floats(n_tok * cols, seed);
    let mut q = AlignedVec::<i8>::zeroed(n_tok * pc);
    let a = (0..n_tok)
        .map(|t| {
            quantize_act(
                Isa::Scalar,
                &x[t * cols..(t + 1) * cols],
                &mut q[t * pc..(t + 1) * pc],
            )
        })
        .collect();
    (q, a)
}

fn split(rows: usize, threads: usize, p: usize) -> Range<usize> {
    if threads == 1 {
        return 0..rows;
    }
    let mid = ((rows / 2).div_ceil(4) * 4).min(rows);
    if p == 0 { 0..mid } else { mid..rows }
}

/// `iters` runs of `f(part)` on each of `threads` scoped threads; the slowest thread's time.
fn run(threads: usize, iters: u64, f: &(dyn Fn(usize) + Sync)) -> Duration {
    if threads == 1 {
        let t = Instant::now();
        for _ in 0..iters {
            f(0);
        }
        return t.elapsed();
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|p| {
                s.spawn(move || {
                    let t = Instant::now();
                    for _ in 0..iters {
                        f(p);
                    }
                    t.elapsed()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker"))
            .max()
            .unwrap_or_default()
    })
}

/// Whether the command-line filter (if any) can select benchmarks of `group`: lets
/// `cargo bench -- hot` skip building the 1 GiB cold sets.
pub fn wanted(group: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.contains(group) || group.contains(f.split('/').next().unwrap_or("")))
}

fn isas() -> Vec<Isa> {
    Isa::available().into_iter().rev().collect()
}

fn config<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    g
}

fn hot(c: &mut Criterion) {
    if !wanted("hot") {
        return;
    }
    let mut g = config(c, "hot");
    for &(name, rows, cols) in &SHAPES {
        let w = matrix(rows, cols, 7);
        let (q, a) = acts(1, cols, w.padded_cols(), 3);
        g.throughput(Throughput::Elements((rows * cols) as u64));
        for isa in isas() {
            if isa == Isa::Scalar && rows > 10_000 {
                continue;
            }
            for threads in [1, 2] {
                let f = |p: usize| {
                    let r = split(rows, threads, p);
                    let mut out = vec![0f32; r.len()];
                    ternary_matvec(isa, &w, &q, a[0], r, &mut out);
                    black_box(&out);
                };
                g.bench_function(BenchmarkId::new(format!("{isa}/{threads}t"), name), |b| {
                    b.iter_custom(|iters| run(threads, iters, &f))
                });
            }
        }
    }
    g.finish();
}

fn cold(c: &mut Criterion) {
    if !wanted("cold") {
        return;
    }
    let gib: f64 = std::env::var("BITNET_BENCH_COLD_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let layer = LAYER.map(|(r, cl)| matrix(r, cl, (r * 31 + cl) as u64));
    let layer_bytes: usize = layer.iter().map(|m| m.packed_bytes().len()).sum();
    let n_layers = (gib * (1u64 << 30) as f64 / layer_bytes as f64).ceil() as usize;
    let all: Vec<TernaryMatrix> = (0..n_layers).flat_map(|_| layer.iter().cloned()).collect();
    let total: usize = all.iter().map(|m| m.packed_bytes().len()).sum();
    let (q, a) = acts(1, 6912, 6912, 5);
    let mut g = config(c, "cold");
    g.throughput(Throughput::Bytes(total as u64));
    for isa in isas() {
        if isa == Isa::Scalar {
            continue;
        }
        for threads in [1, 2] {
            let kernel = |p: usize| {
                let mut out = vec![0f32; 6912];
                for m in &all {
                    let r = split(m.rows(), threads, p);
                    let n = r.len();
                    ternary_matvec(isa, m, &q[..m.padded_cols()], a[0], r, &mut out[..n]);
                }
                black_box(&out);
            };
            let probe = |p: usize| {
                let mut s = 0u64;
                for m in &all {
                    let b = m.packed_bytes();
                    let half = (b.len() / 2) / 64 * 64;
                    let part = match (threads, p) {
                        (1, _) => b,
                        (_, 0) => &b[..half],
                        _ => &b[half..],
                    };
                    s = s.wrapping_add(sum_bytes(isa, part));
                }
                black_box(s);
            };
            g.bench_function(
                BenchmarkId::new(format!("ternary_matvec/{isa}"), format!("{threads}t")),
                |b| b.iter_custom(|iters| run(threads, iters, &kernel)),
            );
            g.bench_function(
                BenchmarkId::new(format!("plain_read/{isa}"), format!("{threads}t")),
                |b| b.iter_custom(|iters| run(threads, iters, &probe)),
            );
        }
    }
    g.finish();
}

fn prefill(c: &mut Criterion) {
    if !wanted("prefill") {
        return;
    }
    let mut g = config(c, "prefill");
    for &(name, rows, cols) in &SHAPES[..4] {
        let w = matrix(rows, cols, 11);
        // 8 tokens: a batched-decode step's matmul (weights here stay cached: compute only).
        for n_tok in [8usize, 128, 512] {
            let (q, a) = acts(n_tok, cols, w.padded_cols(), 13);
            g.throughput(Throughput::Elements((n_tok * rows * cols) as u64));
            for isa in isas() {
                if isa == Isa::Scalar {
                    continue;
                }
                for threads in [1, 2] {
                    let f = |p: usize| {
                        let r = split(rows, threads, p);
                        let mut out = vec![0f32; n_tok * r.len()];
                        ternary_matmul(isa, &w, &q, &a, r, &mut out);
                        black_box(&out);
                    };
                    g.bench_function(
                        BenchmarkId::new(format!("{isa}/{threads}t/{n_tok}tok"), name),
                        |b| b.iter_custom(|iters| run(threads, iters, &f)),
                    );
                }
            }
        }
    }
    g.finish();
}

fn binary(c: &mut Criterion) {
    if !wanted("binary") {
        return;
    }
    let mut g = config(c, "binary");
    let (rows, cols) = (2560, 2560);
    let mut rng = Rng(99);
    let signs: Vec<i8> = (0..rows * cols)
        .map(|_| if rng.next_u64() & 1 == 1 { 1 } else { -1 })
        .collect();
    let w = BinaryMatrix::from_signs(&signs, rows, cols, 1.0).expect("binary");
    let x = floats(cols, 5);
    let mut q = vec![0i8; w.padded_cols()];
    let a = quantize_act(Isa::Scalar, &x, &mut q);
    let mut bits = vec![0u64; w.padded_cols() / 64];
    let s = quantize_act_binary(Isa::Scalar, &x, &mut bits);
    g.throughput(Throughput::Elements((rows * cols) as u64));
    let mut out = vec![0f32; rows];
    for isa in isas() {
        g.bench_function(BenchmarkId::new("sign_x_int8", isa.name()), |b| {
            b.iter(|| binary_matvec(isa, &w, &q, a, 0..rows, &mut out))
        });
        g.bench_function(BenchmarkId::new("xnor_popcount", isa.name()), |b| {
            b.iter(|| binary_binary_matvec(isa, &w, &bits, s, 0..rows, &mut out))
        });
    }
    g.finish();
}

fn table_lookup(c: &mut Criterion) {
    #[cfg(target_arch = "x86_64")]
    tl_proto::bench(c);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = c;
}

criterion_group!(benches, hot, cold, prefill, binary, table_lookup);
criterion_main!(benches);
