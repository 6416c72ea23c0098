//! `kernel_table`'s Q4_0 head section (`--only head`): the `--head q4_0` product in ggml's rows
//! (`matmul_q4_0_q8_0`) and in 16-row groups (`matmul_q4r`, what the engine runs) on the 2B-4T
//! head's shape, as GB/s of Q4_0 weights beside a plain
//! read (`sum_bytes`) of a buffer of the same size, the two taken in turn in every round (the
//! machine's speed drifts), at 1 and 2 threads (each a half of the rows). Its own file: the
//! head's other formats keep their section in `kernel_table.rs`.

use std::hint::black_box;
use std::ops::Range;
use std::time::Duration;

use bitnet_kernels::float::{
    Q4_0_BLOCK_BYTES, Q4R, Q8Acts, RowFormat, f32_to_f16, matmul_q4_0_q8_0, matmul_q4r,
    quantize_row_q8_0,
};
use bitnet_kernels::probe::sum_bytes;
use bitnet_kernels::{AlignedVec, Isa};

/// What the section needs of `kernel_table`: its options and its timer.
pub struct HeadRun<'a> {
    pub rows: usize,
    pub cols: usize,
    pub tokens: &'a [usize],
    pub isas: &'a [Isa],
    pub rounds: usize,
    pub target: Duration,
    /// `timed(threads, iters, f)`: `f(part)` `iters` times on each thread, the slowest time.
    pub timed: fn(usize, usize, &(dyn Fn(usize) + Sync)) -> Duration,
    /// The fastest of the CPU's read loops over a buffer (the "read" column's loop).
    pub fastest_read: fn(&[u8]) -> Isa,
    /// Random bytes (the kernels' speed does not depend on values).
    pub random: &'a mut dyn FnMut() -> u64,
}

pub fn q4_0_table(h: HeadRun) {
    let HeadRun {
        rows,
        cols,
        tokens,
        isas,
        rounds,
        target,
        timed,
        fastest_read,
        random,
    } = h;
    let rb = RowFormat::Q4_0.row_bytes(cols).expect("whole blocks");
    let xrb = RowFormat::Q8_0.row_bytes(cols).expect("whole blocks");
    let mut w = AlignedVec::<u8>::zeroed_huge(rows * rb);
    for blk in w.chunks_exact_mut(Q4_0_BLOCK_BYTES) {
        blk[..2].copy_from_slice(&f32_to_f16(0.01).to_le_bytes());
        for q in &mut blk[2..] {
            *q = random() as u8;
        }
    }
    let grouped = Q4R::from_q4_0_rows(&w, rows, cols).expect("the head's shape");
    let mut plain = AlignedVec::<u8>::zeroed_huge(w.len());
    for b in plain.iter_mut() {
        *b = random() as u8;
    }
    let read = fastest_read(&plain);
    println!(
        "\n## Q4_0 x Q8_0 head, {rows} x {cols}: GB/s of Q4_0 weights ({:.0} MiB; read: the fastest sum_bytes over as many), best of {rounds} alternated rounds",
        w.len() as f64 / (1u64 << 20) as f64,
    );
    println!("| tokens | isa | threads | Q4_0 rows | Q4R | read | rows/read | Q4R/read |");
    println!("|---|---|---|---|---|---|---|---|");
    for &n_tok in tokens {
        let mut xq = vec![0u8; n_tok * xrb];
        for qr in xq.chunks_exact_mut(xrb) {
            let x: Vec<f32> = (0..cols)
                .map(|_| (random() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            quantize_row_q8_0(&x, qr);
        }
        let mut acts = Q8Acts::new(cols, n_tok);
        for (t, qr) in xq.chunks_exact(xrb).enumerate() {
            acts.set_row(t, qr);
        }
        for &isa in isas {
            if isa == Isa::Scalar {
                continue;
            }
            for threads in [1, 2] {
                // Halves of whole 16-row groups.
                let mid = if threads == 1 { rows } else { rows / 32 * 16 };
                let parts: Vec<Range<usize>> =
                    [0..mid, mid..rows].into_iter().take(threads).collect();
                let run_q4 = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    matmul_q4_0_q8_0(isa, &w, cols, &xq, n_tok, r, &mut out);
                    black_box(&out);
                };
                let run_read = |p: usize| {
                    let r = &parts[p];
                    black_box(sum_bytes(read, &plain[r.start * rb..r.end * rb]));
                };
                let run_q4r = |p: usize| {
                    let r = parts[p].clone();
                    let mut out = vec![0f32; n_tok * r.len()];
                    matmul_q4r(isa, &grouped, &acts, n_tok, r, &mut out);
                    black_box(&out);
                };
                let kinds: [&(dyn Fn(usize) + Sync); 3] = [&run_q4, &run_q4r, &run_read];
                let iters: Vec<usize> = kinds
                    .iter()
                    .map(|f| {
                        let once = timed(threads, 1, *f).max(Duration::from_micros(1));
                        ((target.as_secs_f64() / once.as_secs_f64()) as usize).clamp(1, 100_000)
                    })
                    .collect();
                let mut best = [f64::INFINITY; 3];
                for _ in 0..rounds {
                    for (k, f) in kinds.iter().enumerate() {
                        let s = timed(threads, iters[k], *f).as_secs_f64() / iters[k] as f64;
                        best[k] = best[k].min(s);
                    }
                }
                let gbs = best.map(|s| w.len() as f64 / s / 1e9);
                println!(
                    "| {n_tok} | {isa} | {threads} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
                    gbs[0],
                    gbs[1],
                    gbs[2],
                    gbs[0] / gbs[2],
                    gbs[1] / gbs[2]
                );
            }
        }
    }
}
