//! Prints the ternary kernel figures as a table (the quick, non-criterion way to fill a
//! bench record, as `bench/2026-11-26-kernels-figures.md`): hot decode GMAC/s, cold decode GB/s against a plain SIMD read of the same bytes (the fastest of the CPU's read loops),
//! and prefill GMAC/s, per kernel set and for 1 and 2 threads (two row halves). Also the
//! `--head q8` output head (Q8_0 x Q8_0, 2B-4T's 128256 x 2560) at 1, 2, 4, 8 and 32 token
//! rows, in the row layout and the grouped `Q8R` one, as GB/s of weights beside a plain read of
//! a buffer of the same size (the three alternated round by round); and a file's Q6_K head
//! (bitnet.cpp's tied embedding) the same way, its integer product against Q8_K activations
//! beside the f32 product it replaces.
//!
//! `cargo run --release -p bitnet-kernels --example kernel_table -- [--quick] [--isa NAME]...
//!  [--only hot|cold|prefill|repack|head] [--cold-gib N] [--cpu-time] [--shapes N] [--batch N]
//!  [--head-tokens N,N,...]`
//!
//! `--batch N` runs the cold decode as batched decode: N token rows per matmul.
//!
//! `--cpu-time` times each thread's on-CPU time instead of wall time (for a loaded machine).

use std::hint::black_box;
use std::ops::Range;
use std::time::{Duration, Instant};

use bitnet_kernels::float::{
    Q6K_BLOCK_BYTES, Q6KR, Q8Acts, Q8KActs, Q8R, Q8R_ROWS, RowFormat, f32_to_f16, matmul_f32,
    matmul_q6kr, matmul_q8_0_q8_0, matmul_q8r, matvec_q8_0_q8_0, quantize_row_q8_0,
};
use bitnet_kernels::probe::{read_sets, sum_bytes};
use bitnet_kernels::{
    ActScale, AlignedVec, Isa, TernaryMatrix, TernarySource, pack_i2s, pack_tq1_0, pack_tq2_0,
    quantize_act, ternary_matmul, ternary_matvec,
};

#[path = "shapes/mod.rs"]
mod shapes;
use shapes::{LAYER, SHAPES};

mod head_q4_0;

struct Opts {
    quick: bool,
    isas: Vec<Isa>,
    only: Option<String>,
    cold_gib: f64,
    shapes: usize,
    batch: usize,
    head_tokens: Vec<usize>,
}

fn parse() -> Opts {
    let mut o = Opts {
        quick: false,
        isas: Vec::new(),
        only: None,
        cold_gib: 1.0,
        shapes: SHAPES.len(),
        batch: 1,
        head_tokens: vec![1, 2, 4, 8, 32],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--isa" => o
                .isas
                .push(Isa::parse(&args.next().unwrap_or_default()).expect("--isa")),
            "--only" => o.only = args.next(),
            "--cold-gib" => {
                o.cold_gib = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--cold-gib N")
            }
            "--batch" => o.batch = args.next().and_then(|v| v.parse().ok()).expect("--batch N"),
            "--head-tokens" => {
                o.head_tokens = args
                    .next()
                    .and_then(|v| v.split(',').map(|n| n.parse().ok()).collect())
                    .expect("--head-tokens N,N,...")
            }
            "--shapes" => {
                o.shapes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--shapes N")
            }
            "--cpu-time" => CPU_TIME.store(true, std::sync::atomic::Ordering::Relaxed),
            "--bench" => {}
            other => eprintln!("ignoring argument {other:?}"),
        }
    }
    if o.isas.is_empty() {
        o.isas = Isa::available().into_iter().rev().collect();
    }
    o
}

#[derive(Debug)]
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn matrix(rows: usize, cols: usize, seed: u64) -> TernaryMatrix {
    let mut rng = Rng(seed | 1);
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| (rng.next_u64() % 3) as i8 - 1)
        .collect();
    TernaryMatrix::from_trits(&trits, rows, cols, 0.5).expect("matrix")
}

/// Quantized activations in a 64-byte-aligned buffer, as the engine keeps them (a plain
/// `Vec` may start mid-line, and then the tiles' loads straddle cache lines).
fn acts(n_tok: usize, cols: usize, pc: usize, seed: u64) -> (AlignedVec<i8>, Vec<ActScale>) {
    let mut rng = Rng(seed | 1);
    let mut q = AlignedVec::<i8>::zeroed(n_tok * pc);
    let mut a = Vec::new();
    for t in 0..n_tok {
        let x: Vec<f32> = (0..cols)
            .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        a.push(quantize_act(Isa::Scalar, &x, &mut q[t * pc..(t + 1) * pc]));
    }
    (q, a)
}

/// Row halves of `0..rows` for `threads` workers, split on row-group (4) boundaries.
fn split(rows: usize, threads: usize) -> Vec<Range<usize>> {
    let mid = if threads == 1 {
        rows
    } else {
        ((rows / 2).div_ceil(4) * 4).min(rows)
    };
    [0..mid, mid..rows].into_iter().take(threads).collect()
}

/// Nanoseconds this thread has spent on a CPU, for `--cpu-time` runs on a shared, loaded
/// machine where wall time mostly measures the other tenants.
#[cfg(unix)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Windows: kernel plus user time of this thread (`GetThreadTimes`, in 100 ns units).
#[cfg(windows)]
fn thread_cpu_ns() -> u64 {
    use windows_sys::Win32::Foundation::FILETIME;
    use windows_sys::Win32::System::Threading::{GetCurrentThread, GetThreadTimes};
    let mut t = [FILETIME::default(); 4];
    let [created, exited, kernel, user] = &mut t;
    // SAFETY: the pseudo-handle of the calling thread is always valid; the four out-pointers
    // are live, distinct FILETIMEs.
    let ok = unsafe { GetThreadTimes(GetCurrentThread(), created, exited, kernel, user) };
    assert_ne!(ok, 0, "GetThreadTimes");
    let ticks = |f: &FILETIME| (u64::from(f.dwHighDateTime) << 32) | u64::from(f.dwLowDateTime);
    (ticks(&t[2]) + ticks(&t[3])) * 100
}

static CPU_TIME: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `iters` calls of `f(p)`; returns wall or on-CPU time of this thread.
fn run_part(p: usize, iters: usize, f: &(dyn Fn(usize) + Sync)) -> Duration {
    let cpu = CPU_TIME.load(std::sync::atomic::Ordering::Relaxed);
    let (t0, c0) = (Instant::now(), thread_cpu_ns());
    for _ in 0..iters {
        f(p);
    }
    if cpu {
        Duration::from_nanos(thread_cpu_ns() - c0)
    } else {
        t0.elapsed()
    }
}

/// Runs `f(part)` `iters` times on each of `threads` threads; returns the slowest thread's time.
/// The read loop the "plain read" columns use: of the CPU's SIMD read loops
/// (`probe::read_sets`), the fastest over `data` on one thread, best of three passes each (on
/// Zen 4 the AVX-512 loop reads slower than the AVX2 one, and a kernel must not be judged
/// against a slow read).
fn fastest_read(data: &[u8]) -> Isa {
    let sets = read_sets();
    let secs = |isa: Isa| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                black_box(sum_bytes(isa, data));
                t.elapsed()
            })
            .min()
            .unwrap_or_default()
    };
    let times: Vec<Duration> = sets.iter().map(|&isa| secs(isa)).collect();
    sets.into_iter()
        .zip(times)
        .min_by_key(|&(_, t)| t)
        .map_or(Isa::Scalar, |(isa, _)| isa)
}

fn timed(threads: usize, iters: usize, f: &(dyn Fn(usize) + Sync)) -> Duration {
    if threads == 1 {
        return run_part(0, iters, f);
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|p| s.spawn(move || run_part(p, iters, f)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("worker"))
            .max()
            .unwrap_or_default()
    })
}

/// Best-of-3 seconds per iteration, with iterations sized to about `target` per run.
fn measure(threads: usize, target: Duration, f: &(dyn Fn(usize) + Sync)) -> f64 {
    let once = timed(threads, 1, f).max(Duration::from_micros(1));
    let iters = ((target.as_secs_f64() / once.as_secs_f64()) as usize).clamp(1, 100_000);
    (0..3)
        .map(|_| timed(threads, iters, f).as_secs_f64() / iters as f64)
        .fold(f64::INFINITY, f64::min)
}

/// GMAC/s of `run(rows)` doing `macs` multiply-adds over `0..rows`, on 1 thread and on 2
/// (each a row half), as table cells.
fn rate_cells(
    rows: usize,
    macs: usize,
    target: Duration,
    run: &(dyn Fn(Range<usize>) + Sync),
) -> [String; 2] {
    [1, 2].map(|threads| {
        let parts = split(rows, threads);
        let s = measure(threads, target, &|p: usize| run(parts[p].clone()));
        format!("{:.1}", macs as f64 / s / 1e9)
    })
}

fn main() {
    let o = parse();
    let target = Duration::from_millis(if o.quick { 60 } else { 300 });
    let want = |s: &str| o.only.as_deref().is_none_or(|x| x == s);
    println!(
        "# bitnet-kernels ternary figures ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "timing: {}; load average at start: {}",
        if CPU_TIME.load(std::sync::atomic::Ordering::Relaxed) {
            "on-CPU time"
        } else {
            "wall time"
        },
        load()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    if want("repack") {
        println!("\n## load-time repack of a 6912x2560 matrix, M weights/s");
        let (rows, cols) = (6912, 2560);
        let mut rng = Rng(77);
        let trits: Vec<i8> = (0..rows * cols)
            .map(|_| (rng.next_u64() % 3) as i8 - 1)
            .collect();
        let i2s = pack_i2s(&trits, 0.5).expect("i2s");
        let tq2 = pack_tq2_0(&trits, 0.5).expect("tq2");
        let tq1 = pack_tq1_0(&trits, 0.5).expect("tq1");
        for (name, src) in [
            (
                "trits",
                TernarySource::Trits {
                    values: &trits,
                    scale: 0.5,
                },
            ),
            ("I2_S", TernarySource::I2S(&i2s)),
            ("TQ2_0", TernarySource::Tq2_0(&tq2)),
            ("TQ1_0", TernarySource::Tq1_0(&tq1)),
        ] {
            let t0 = Instant::now();
            let m = TernaryMatrix::from_source(src, rows, cols).expect("repack");
            let s = t0.elapsed().as_secs_f64();
            black_box(&m);
            println!("| {name} | {:.0} |", (rows * cols) as f64 / s / 1e6);
        }
    }

    if want("hot") {
        println!("\n## hot decode (matvec, weights cached where they fit), GMAC/s");
        println!("| shape | isa | 1 thread | 2 threads |");
        println!("|---|---|---|---|");
        for &(name, rows, cols) in &SHAPES[..o.shapes] {
            if o.quick && rows > 10_000 {
                continue;
            }
            let w = matrix(rows, cols, 7);
            let (q, a) = acts(1, cols, w.padded_cols(), 3);
            for &isa in &o.isas {
                if isa == Isa::Scalar && rows > 10_000 {
                    continue;
                }
                let cells = rate_cells(rows, rows * cols, target, &|r| {
                    let mut out = vec![0f32; r.len()];
                    ternary_matvec(isa, &w, &q, a[0], r, &mut out);
                    black_box(&out);
                });
                println!("| {name} | {isa} | {} | {} |", cells[0], cells[1]);
            }
        }
    }

    if want("cold") {
        let layer = LAYER.map(|(r, c)| matrix(r, c, (r * 31 + c) as u64));
        let layer_bytes: usize = layer.iter().map(|m| m.packed_bytes().len()).sum();
        let n_layers = ((o.cold_gib * (1u64 << 30) as f64) / layer_bytes as f64).ceil() as usize;
        let all: Vec<TernaryMatrix> = (0..n_layers).flat_map(|_| layer.iter().cloned()).collect();
        let total: usize = all.iter().map(|m| m.packed_bytes().len()).sum();
        let nb = o.batch;
        let (q, a) = acts(nb, 6912, 6912, 5);
        println!(
            "\n## cold decode ({nb} token rows): {} layers of 2B-4T ({} matrices, {:.2} GiB of repacked weights), GB/s",
            n_layers,
            all.len(),
            total as f64 / (1u64 << 30) as f64
        );
        println!("| isa | threads | kernel GB/s | plain read GB/s | ratio | GMAC/s |");
        println!("|---|---|---|---|---|---|");
        let macs: usize = all.iter().map(|m| m.rows() * m.cols()).sum();
        let read = fastest_read(all[0].packed_bytes());
        for &isa in &o.isas {
            if isa == Isa::Scalar && o.quick {
                continue;
            }
            for threads in [1, 2] {
                let kernel = |p: usize| {
                    let mut out = vec![0f32; 6912 * nb];
                    for m in &all {
                        let r = split(m.rows(), threads)[p].clone();
                        let n = r.len();
                        let pc = m.padded_cols();
                        if nb == 1 {
                            ternary_matvec(isa, m, &q[..pc], a[0], r, &mut out[..n]);
                        } else {
                            // Batched rows are `padded_cols` apart: repack per shape.
                            let qq: Vec<i8> = (0..nb)
                                .flat_map(|t| q[t * 6912..t * 6912 + pc].to_vec())
                                .collect();
                            ternary_matmul(isa, m, &qq, &a, r, &mut out[..n * nb]);
                        }
                    }
                    black_box(&out);
                };
                let probe = |p: usize| {
                    let mut s = 0u64;
                    for m in &all {
                        let b = m.packed_bytes();
                        let half = (b.len() / 2) / 64 * 64;
                        let part = if threads == 1 {
                            b
                        } else if p == 0 {
                            &b[..half]
                        } else {
                            &b[half..]
                        };
                        s = s.wrapping_add(sum_bytes(read, part));
                    }
                    black_box(s);
                };
                // Interleave kernel and probe passes so both see the same machine state.
                let mut tk = f64::INFINITY;
                let mut tp = f64::INFINITY;
                for _ in 0..if o.quick { 2 } else { 4 } {
                    tk = tk.min(timed(threads, 1, &kernel).as_secs_f64());
                    tp = tp.min(timed(threads, 1, &probe).as_secs_f64());
                }
                let (gk, gp) = (total as f64 / tk / 1e9, total as f64 / tp / 1e9);
                println!(
                    "| {isa} | {threads} | {gk:.1} | {gp:.1} | {:.2} | {:.1} |",
                    gk / gp,
                    (macs * nb) as f64 / tk / 1e9
                );
            }
        }
    }

    if want("prefill") {
        println!("\n## prefill (matmul), GMAC/s");
        println!("| shape | tokens | isa | 1 thread | 2 threads |");
        println!("|---|---|---|---|---|");
        for &(name, rows, cols) in &SHAPES[..o.shapes.min(4)] {
            let w = matrix(rows, cols, 11);
            for n_tok in [128usize, 512] {
                if o.quick && n_tok == 512 {
                    continue;
                }
                let (q, a) = acts(n_tok, cols, w.padded_cols(), 13);
                for &isa in &o.isas {
                    if isa == Isa::Scalar && (o.quick || n_tok > 128) {
                        continue;
                    }
                    let cells = rate_cells(rows, n_tok * rows * cols, target, &|r| {
                        let mut out = vec![0f32; n_tok * r.len()];
                        ternary_matmul(isa, &w, &q, &a, r, &mut out);
                        black_box(&out);
                    });
                    println!("| {name} | {n_tok} | {isa} | {} | {} |", cells[0], cells[1]);
                }
            }
        }
    }
    if want("head") {
        head_table(&o, target);
        q6k_head_table(&o, target);
        let mut rng = Rng(93);
        head_q4_0::q4_0_table(head_q4_0::HeadRun {
            rows: if o.quick { 32_000 } else { 128_256 },
            cols: 2560,
            tokens: &o.head_tokens,
            isas: &o.isas,
            rounds: if o.quick { 2 } else { 4 },
            target,
            timed,
            fastest_read,
            random: &mut || rng.next_u64(),
        });
    }
    println!(
        "\nload average at end: {}",
        load()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// GB/s of each of `kinds` (a run over a part of the rows, and the bytes a whole run reads)
/// on `threads` threads, parts `0..threads`: best of `rounds`, the kinds taken in turn in
/// every round (the machine's speed drifts).
fn alternated_gbs(
    threads: usize,
    rounds: usize,
    target: Duration,
    kinds: &[(&(dyn Fn(usize) + Sync), usize)],
) -> Vec<f64> {
    let iters: Vec<usize> = kinds
        .iter()
        .map(|(f, _)| {
            let once = timed(threads, 1, *f).max(Duration::from_micros(1));
            ((target.as_secs_f64() / once.as_secs_f64()) as usize).clamp(1, 100_000)
        })
        .collect();
    let mut best = vec![f64::INFINITY; kinds.len()];
    for _ in 0..rounds {
        for (k, (f, _)) in kinds.iter().enumerate() {
            let s = timed(threads, iters[k], *f).as_secs_f64() / iters[k] as f64;
            best[k] = best[k].min(s);
        }
    }
    kinds
        .iter()
        .zip(best)
        .map(|((_, bytes), s)| *bytes as f64 / s / 1e9)
        .collect()
}

/// A file's Q6_K output head (bitnet.cpp's tied embedding, 2B-4T's 128256 x 2560) as the
/// engine runs it, in 16-row groups x Q8_K activations (`matmul_q6kr`), beside the f32 product
/// of the rows (`matmul_f32`) and a plain read (`sum_bytes`) of a buffer of the same size, all
/// huge-page backed: weight bytes over time, best of the alternated rounds, at 1 and 2
/// threads (each a half of the rows).
fn q6k_head_table(o: &Opts, target: Duration) {
    let (rows, cols) = (if o.quick { 32_000 } else { 128_256 }, 2560);
    let rb = RowFormat::Q6K.row_bytes(cols).expect("whole blocks");
    // Any code and scale bytes and one sane f16 scale: the kernels' speed does not depend on
    // values.
    let mut rng = Rng(93);
    let mut w = AlignedVec::<u8>::zeroed_huge(rows * rb);
    for blk in w.chunks_exact_mut(Q6K_BLOCK_BYTES) {
        for b in &mut blk[..208] {
            *b = rng.next_u64() as u8;
        }
        blk[208..].copy_from_slice(&f32_to_f16(0.001).to_le_bytes());
    }
    let grouped = Q6KR::from_q6k_rows(&w, rows, cols).expect("whole blocks");
    let mut plain = AlignedVec::<u8>::zeroed_huge(w.len());
    for b in plain.iter_mut() {
        *b = rng.next_u64() as u8;
    }
    let read = fastest_read(&plain);
    let rounds = if o.quick { 2 } else { 4 };
    println!(
        "\n## Q6_K head, {rows} x {cols}: GB/s of weights ({:.0} MiB; read: the fastest sum_bytes over as many), best of {rounds} alternated rounds",
        w.len() as f64 / (1u64 << 20) as f64,
    );
    println!("| tokens | isa | threads | f32 | Q8_K | read | Q8_K/read | Q8_K/f32 |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n_tok in &o.head_tokens {
        let x: Vec<f32> = (0..n_tok * cols)
            .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let mut acts = Q8KActs::new(cols, n_tok);
        for (t, xr) in x.chunks_exact(cols).enumerate() {
            acts.quantize_row(t, xr);
        }
        for &isa in &o.isas {
            if isa == Isa::Scalar || (o.quick && n_tok == 32) {
                continue;
            }
            for threads in [1, 2] {
                let mid = if threads == 1 { rows } else { rows / 2 };
                let parts: Vec<Range<usize>> =
                    [0..mid, mid..rows].into_iter().take(threads).collect();
                let run_f32 = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    matmul_f32(isa, RowFormat::Q6K, &w, cols, &x, n_tok, r, &mut out);
                    black_box(&out);
                };
                let run_q8k = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    matmul_q6kr(isa, &grouped, &acts, n_tok, r, &mut out);
                    black_box(&out);
                };
                let run_read = |p: usize| {
                    let r = &parts[p];
                    black_box(sum_bytes(read, &plain[r.start * rb..r.end * rb]));
                };
                let kinds: [(&(dyn Fn(usize) + Sync), usize); 3] = [
                    (&run_f32, w.len()),
                    (&run_q8k, w.len()),
                    (&run_read, plain.len()),
                ];
                let gbs = alternated_gbs(threads, rounds, target, &kinds);
                println!(
                    "| {n_tok} | {isa} | {threads} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
                    gbs[0],
                    gbs[1],
                    gbs[2],
                    gbs[1] / gbs[2],
                    gbs[1] / gbs[0]
                );
            }
        }
    }
}

/// The `--head q8` output head (Q8_0 x Q8_0, 2B-4T's 128256 x 2560) in the row layout and in
/// the grouped one (`Q8R`), beside a plain read (`sum_bytes`) of a buffer of the same size,
/// all three huge-page backed as the engine's: weight bytes over time, best of the rounds,
/// the three taken in turn in every round (the machine's speed drifts), at 1 and 2 threads
/// (each a half of the rows, on a group boundary).
fn head_table(o: &Opts, target: Duration) {
    let (rows, cols) = (if o.quick { 32_000 } else { 128_256 }, 2560);
    let rb = RowFormat::Q8_0.row_bytes(cols).expect("whole blocks");
    // Any quant bytes and one sane scale: the kernels' speed does not depend on values.
    let mut rng = Rng(91);
    let mut w = AlignedVec::<u8>::zeroed_huge(rows * rb);
    for blk in w.chunks_exact_mut(34) {
        blk[..2].copy_from_slice(&f32_to_f16(0.01).to_le_bytes());
        for q in &mut blk[2..] {
            *q = rng.next_u64() as u8;
        }
    }
    let q8r = Q8R::from_q8_0_rows(&w, rows, cols).expect("Q8R");
    let mut plain = AlignedVec::<u8>::zeroed_huge(q8r.bytes().len());
    for b in plain.iter_mut() {
        *b = rng.next_u64() as u8;
    }
    let read = fastest_read(&plain);
    let rounds = if o.quick { 2 } else { 4 };
    println!(
        "\n## Q8_0 x Q8_0 head, {rows} x {cols}: GB/s of weights (rows {:.0} MiB, Q8R {:.0} MiB; read: the fastest sum_bytes over {:.0} MiB), best of {rounds} alternated rounds",
        w.len() as f64 / (1u64 << 20) as f64,
        q8r.bytes().len() as f64 / (1u64 << 20) as f64,
        plain.len() as f64 / (1u64 << 20) as f64,
    );
    println!("| tokens | isa | threads | rows | Q8R | read | rows/read | Q8R/read | Q8R/rows |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &n_tok in &o.head_tokens {
        let mut xq = vec![0u8; n_tok * rb];
        let mut acts = Q8Acts::new(cols, n_tok);
        for (t, qr) in xq.chunks_exact_mut(rb).enumerate() {
            let x: Vec<f32> = (0..cols)
                .map(|_| (rng.next_u64() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            quantize_row_q8_0(&x, qr);
            acts.set_row(t, qr);
        }
        for &isa in &o.isas {
            if isa == Isa::Scalar || (o.quick && n_tok == 32) {
                continue;
            }
            for threads in [1, 2] {
                let mid = if threads == 1 {
                    rows
                } else {
                    (rows / 2).div_ceil(Q8R_ROWS) * Q8R_ROWS
                };
                let parts: Vec<Range<usize>> =
                    [0..mid, mid..rows].into_iter().take(threads).collect();
                let gb = q8r.group_bytes();
                let run_rows = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    if n_tok == 1 {
                        matvec_q8_0_q8_0(isa, &w, cols, &xq, r, &mut out);
                    } else {
                        matmul_q8_0_q8_0(isa, &w, cols, &xq, n_tok, r, &mut out);
                    }
                    black_box(&out);
                };
                let run_q8r = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    matmul_q8r(isa, &q8r, &acts, n_tok, r, &mut out);
                    black_box(&out);
                };
                let run_read = |p: usize| {
                    let r = &parts[p];
                    let bytes = &plain[r.start / Q8R_ROWS * gb..(r.end.div_ceil(Q8R_ROWS) * gb)];
                    black_box(sum_bytes(read, bytes));
                };
                let kinds: [(&(dyn Fn(usize) + Sync), usize); 3] = [
                    (&run_rows, w.len()),
                    (&run_q8r, q8r.bytes().len()),
                    (&run_read, plain.len()),
                ];
                let gbs = alternated_gbs(threads, rounds, target, &kinds);
                println!(
                    "| {n_tok} | {isa} | {threads} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.2} |",
                    gbs[0],
                    gbs[1],
                    gbs[2],
                    gbs[0] / gbs[2],
                    gbs[1] / gbs[2],
                    gbs[1] / gbs[0]
                );
            }
        }
    }
}
