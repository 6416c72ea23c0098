//! Can a denser weight layout move decode past the memory-bandwidth bound? A prototype of a
//! 1.6-bit ternary matvec (five trits a byte, TQ1_0-style base 3) measured against the crate's
//! 2-bit kernel on the same weights, streaming the 2B-4T projections from DRAM, in the same
//! run, rounds alternating which goes first.
//!
//! `cargo run --release -p bitnet-kernels --example dense_ternary_proto -- [--layers N]
//!  [--rounds N] [--threads 1,2]`
//!
//! Layout: 160-column blocks, 4 rows interleaved per block, 32 bytes a row; byte `j` of a row's
//! block holds the codes `t = w + 1` of columns `32 k + j`, `k = 0..5`, as `v = sum t_k 3^(4-k)`
//! stored as `ceil(256 v / 243) ^ 0x80`. Decoding digit `k` needs no multiply: with the stored
//! byte read as a signed state `s`, `t_k = [s > -43] + [s > 42]` (two signed compares give
//! `-t_k`) and the next state is `3 s` wrapping in 8 bits (two byte adds; the `^ 0x80` offset
//! survives the tripling because `3 * 128 = 384 = 128 mod 256`). `maddubs` takes the
//! activations offset by 128 as its unsigned operand and `-t_k` as the signed one, so
//! `dot = -R - 128 * sum(t) - sum(a)`, where `sum(t)` is a per-row constant of the layout.
//!
//! That is 8 vector operations a 32 weights (2 compares, 3 adds, the multiply-add, the
//! accumulation, one load) against the 2-bit kernel's 4.75 (its three shifts and four masks are
//! shared by 128 weights), for 20% fewer bytes. Measured on the AVX2 machine of 2026-11-26
//! (2 cores of an AMD EPYC, Zen 3), the figures are in `bench/2026-11-26-1a68c04-dense-ternary.md`:
//! the dense kernel is bound by its arithmetic at about half the 2-bit kernel's rate per
//! thread, so here it loses. It would win only where a thread's share of the bandwidth is
//! below its decode rate (many cores on few memory channels), which nothing here can measure.

#[path = "shapes/mod.rs"]
mod shapes;

#[cfg(target_arch = "x86_64")]
mod proto {
    use std::arch::x86_64::*;
    use std::hint::black_box;
    use std::ops::Range;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use bitnet_kernels::{ActScale, AlignedVec, Isa, TernaryMatrix, quantize_act, ternary_matvec};

    /// Columns a 32-byte row block covers.
    const BLOCK_COLS: usize = 160;
    const ROW_GROUP: usize = 4;
    const GROUP_BLOCK_BYTES: usize = ROW_GROUP * 32;
    /// Blocks whose i16 sums fit (5 digits x 2 x 255 x 2 = 5100 a lane per block).
    const I16_BLOCKS: usize = 6;
    const PREFETCH_BYTES: usize = 4096;

    use super::shapes::LAYER;

    fn encode5(t: [u8; 5]) -> u8 {
        let v = t.iter().fold(0u32, |v, &d| v * 3 + u32::from(d));
        ((v * 256).div_ceil(243) as u8) ^ 0x80
    }

    /// The scalar decoder the SIMD one mirrors.
    fn decode5(byte: u8) -> [u8; 5] {
        let mut s = byte as i8;
        let mut t = [0u8; 5];
        for d in &mut t {
            *d = u8::from(s > -43) + u8::from(s > 42);
            s = s.wrapping_mul(3);
        }
        t
    }

    pub struct DenseMatrix {
        rows: usize,
        cols: usize,
        blocks: usize,
        data: AlignedVec<u8>,
        code_sums: Vec<i32>,
    }

    impl DenseMatrix {
        pub fn new(trits: &[i8], rows: usize, cols: usize) -> Self {
            let blocks = cols.div_ceil(BLOCK_COLS);
            let groups = rows.div_ceil(ROW_GROUP);
            let mut data = AlignedVec::<u8>::zeroed(groups * blocks * GROUP_BLOCK_BYTES);
            let mut code_sums = vec![0i32; groups * ROW_GROUP];
            for r in 0..rows {
                for b in 0..blocks {
                    for j in 0..32 {
                        let mut t = [0u8; 5];
                        for (k, d) in t.iter_mut().enumerate() {
                            let c = b * BLOCK_COLS + 32 * k + j;
                            // Padding: code 0 against activation 0 adds nothing.
                            *d = if c < cols {
                                (trits[r * cols + c] + 1) as u8
                            } else {
                                0
                            };
                            code_sums[r] += i32::from(*d);
                        }
                        let at = ((r / ROW_GROUP) * blocks + b) * GROUP_BLOCK_BYTES;
                        data[at + (r % ROW_GROUP) * 32 + j] = encode5(t);
                    }
                }
            }
            DenseMatrix {
                rows,
                cols,
                blocks,
                data,
                code_sums,
            }
        }

        pub fn bytes(&self) -> usize {
            self.data.len()
        }
    }

    /// Activations as the dense kernel reads them: `a + 128` padded to whole blocks, and `sum(a)`.
    pub struct DenseActs {
        offset: Vec<u8>,
        sum: i32,
    }

    impl DenseActs {
        pub fn new(q: &[i8], cols: usize) -> Self {
            let mut offset = vec![0x80u8; cols.div_ceil(BLOCK_COLS) * BLOCK_COLS];
            for (o, &v) in offset.iter_mut().zip(&q[..cols]) {
                *o = (v as u8) ^ 0x80;
            }
            let sum = q[..cols].iter().map(|&v| i32::from(v)).sum();
            DenseActs { offset, sum }
        }
    }

    #[target_feature(enable = "avx2")]
    fn hsum(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }

    /// `R` (see the module docs) of the 4 rows of one group.
    ///
    /// # Safety
    /// AVX2; `w` holds `blocks` group blocks, `a` holds `blocks * BLOCK_COLS` bytes.
    #[target_feature(enable = "avx2")]
    unsafe fn group_r(w: *const u8, a: *const u8, blocks: usize) -> [i32; 4] {
        let above_third = _mm256_set1_epi8(-43);
        let above_two_thirds = _mm256_set1_epi8(42);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_si256(); ROW_GROUP];
        let mut b = 0;
        while b < blocks {
            let end = (b + I16_BLOCKS).min(blocks);
            let mut acc16 = [_mm256_setzero_si256(); ROW_GROUP];
            while b < end {
                // SAFETY: block `b` of the group and of the activations is readable.
                unsafe {
                    let wb = w.add(b * GROUP_BLOCK_BYTES);
                    let ab = a.add(b * BLOCK_COLS);
                    _mm_prefetch::<_MM_HINT_T1>(wb.wrapping_add(PREFETCH_BYTES).cast());
                    _mm_prefetch::<_MM_HINT_T1>(wb.wrapping_add(PREFETCH_BYTES + 64).cast());
                    for (r, acc16) in acc16.iter_mut().enumerate() {
                        let mut s = _mm256_load_si256(wb.add(32 * r).cast());
                        let mut sum = _mm256_setzero_si256();
                        for k in 0..5 {
                            let neg_t = _mm256_add_epi8(
                                _mm256_cmpgt_epi8(s, above_third),
                                _mm256_cmpgt_epi8(s, above_two_thirds),
                            );
                            let act = _mm256_loadu_si256(ab.add(32 * k).cast());
                            sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(act, neg_t));
                            if k < 4 {
                                s = _mm256_add_epi8(s, _mm256_add_epi8(s, s));
                            }
                        }
                        *acc16 = _mm256_add_epi16(*acc16, sum);
                    }
                }
                b += 1;
            }
            for (a, a16) in acc.iter_mut().zip(&acc16) {
                *a = _mm256_add_epi32(*a, _mm256_madd_epi16(*a16, ones));
            }
        }
        acc.map(|a| hsum(a))
    }

    /// Integer dots of `rows` (on 4-row boundaries, or to the end) with the activations.
    pub fn dense_dots(m: &DenseMatrix, a: &DenseActs, rows: Range<usize>, out: &mut [i32]) {
        assert!(is_x86_feature_detected!("avx2"));
        assert!(rows.start.is_multiple_of(ROW_GROUP) && rows.end <= m.rows);
        assert!(a.offset.len() >= m.blocks * BLOCK_COLS && out.len() >= rows.len());
        for g in rows.start / ROW_GROUP..rows.end.div_ceil(ROW_GROUP) {
            // SAFETY: AVX2 checked; group `g` has `blocks` blocks and the activations cover
            // them (asserted above).
            let r4 = unsafe {
                group_r(
                    m.data.as_ptr().add(g * m.blocks * GROUP_BLOCK_BYTES),
                    a.offset.as_ptr(),
                    m.blocks,
                )
            };
            for (rr, &raw) in r4.iter().enumerate() {
                let r = g * ROW_GROUP + rr;
                if r < rows.end {
                    out[r - rows.start] = -raw - 128 * m.code_sums[r] - a.sum;
                }
            }
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn trits(&mut self, n: usize) -> Vec<i8> {
            (0..n).map(|_| (self.next_u64() % 3) as i8 - 1).collect()
        }
    }

    /// A reusable spinning barrier: a futex wake per matrix would cost more than a small
    /// matrix's whole time (the engine's pool spins too).
    struct SpinBarrier {
        n: usize,
        arrived: AtomicUsize,
    }
    impl SpinBarrier {
        fn wait(&self) {
            let round = self.arrived.fetch_add(1, Ordering::AcqRel) / self.n;
            while self.arrived.load(Ordering::Acquire) / self.n == round {
                std::hint::spin_loop();
            }
        }
    }

    /// Row range of part `p` of `parts`, on 4-row boundaries.
    fn part(rows: usize, p: usize, parts: usize) -> Range<usize> {
        let cut = |i: usize| ((rows * i / parts).div_ceil(ROW_GROUP) * ROW_GROUP).min(rows);
        cut(p)..cut(p + 1)
    }

    fn pass(threads: usize, n_mats: usize, f: &(dyn Fn(usize, Range<usize>, usize) + Sync)) -> f64 {
        let barrier = SpinBarrier {
            n: threads,
            arrived: AtomicUsize::new(0),
        };
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for p in 0..threads {
                let barrier = &barrier;
                s.spawn(move || {
                    for i in 0..n_mats {
                        let rows = LAYER[i % LAYER.len()].0;
                        f(i, part(rows, p, threads), p);
                        barrier.wait();
                    }
                });
            }
        });
        t0.elapsed().as_secs_f64()
    }

    fn arg(name: &str) -> Option<String> {
        let args: Vec<String> = std::env::args().collect();
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1).cloned())
    }

    pub fn main() {
        if !is_x86_feature_detected!("avx2") {
            println!("this prototype needs AVX2");
            return;
        }
        for v in 0..243u32 {
            let mut t = [0u8; 5];
            let mut x = v;
            for d in t.iter_mut().rev() {
                *d = (x % 3) as u8;
                x /= 3;
            }
            assert_eq!(decode5(encode5(t)), t, "codec at {v}");
        }
        let layers: usize = arg("--layers").map_or(30, |s| s.parse().expect("--layers N"));
        let rounds: usize = arg("--rounds").map_or(8, |s| s.parse().expect("--rounds N"));
        let thread_counts: Vec<usize> = arg("--threads").map_or(vec![1, 2], |s| {
            s.split(',')
                .map(|t| t.parse().expect("--threads 1,2"))
                .collect()
        });

        let mut rng = Rng(99);
        let mut two_bit = Vec::new();
        let mut dense = Vec::new();
        for _ in 0..layers {
            for &(r, c) in &LAYER {
                let trits = rng.trits(r * c);
                two_bit.push(TernaryMatrix::from_trits(&trits, r, c, 1.0).expect("matrix"));
                dense.push(DenseMatrix::new(&trits, r, c));
            }
        }
        // Activations per width, in both kernels' forms.
        let acts: Vec<(Vec<i8>, ActScale, DenseActs)> = [2560usize, 6912]
            .iter()
            .map(|&cols| {
                let x: Vec<f32> = (0..cols)
                    .map(|i| (i * 7919 % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                let pc = two_bit
                    .iter()
                    .find(|m| m.cols() == cols)
                    .expect("width")
                    .padded_cols();
                let mut q = vec![0i8; pc];
                let scale = quantize_act(Isa::Scalar, &x, &mut q[..cols]);
                let d = DenseActs::new(&q, cols);
                (q, scale, d)
            })
            .collect();
        let act = |cols: usize| &acts[usize::from(cols != 2560)];

        // The dense layout against plain integer dots, on sampled rows of the first layer
        // (the 2-bit kernel has its own tests).
        let mut check = Rng(99);
        for (m, &(r, c)) in dense.iter().zip(&LAYER) {
            let trits = check.trits(r * c);
            let (q, _, d) = act(c);
            let mut out = vec![0i32; r];
            dense_dots(m, d, 0..r, &mut out);
            for row in (0..r).step_by(37) {
                let want: i32 = (0..c)
                    .map(|j| i32::from(trits[row * c + j]) * i32::from(q[j]))
                    .sum();
                assert_eq!(out[row], want, "{r}x{c} row {row}");
            }
        }
        let two_bit_bytes: usize = two_bit.iter().map(|m| m.packed_bytes().len()).sum();
        let dense_bytes: usize = dense.iter().map(DenseMatrix::bytes).sum();
        let weights: usize = two_bit.iter().map(|m| m.rows() * m.cols()).sum();
        println!(
            "{layers} layers of 2B-4T projections ({:.2} G weights): 2-bit {:.0} MB, dense {:.0} MB; checked against integer dots",
            weights as f64 / 1e9,
            two_bit_bytes as f64 / 1e6,
            dense_bytes as f64 / 1e6
        );
        println!(
            "\n| threads | 2-bit G weights/s | dense G weights/s | dense / 2-bit per round, median (range) | dense faster |"
        );
        println!("|---|---|---|---|---|");
        for &threads in &thread_counts {
            let run_two_bit = |i: usize, rows: Range<usize>, _p: usize| {
                let m = &two_bit[i];
                let (q, scale, _) = act(m.cols());
                let mut out = vec![0f32; rows.len()];
                ternary_matvec(Isa::Avx2, m, q, *scale, rows, &mut out);
                black_box(&out);
            };
            let run_dense = |i: usize, rows: Range<usize>, _p: usize| {
                let m = &dense[i];
                let mut out = vec![0i32; rows.len()];
                dense_dots(m, &act(m.cols).2, rows, &mut out);
                black_box(&out);
            };
            pass(threads, two_bit.len(), &run_two_bit);
            pass(threads, dense.len(), &run_dense);
            let (mut t2, mut td, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds {
                let (a, b) = if round % 2 == 0 {
                    let a = pass(threads, two_bit.len(), &run_two_bit);
                    (a, pass(threads, dense.len(), &run_dense))
                } else {
                    let b = pass(threads, dense.len(), &run_dense);
                    (pass(threads, two_bit.len(), &run_two_bit), b)
                };
                t2.push(a);
                td.push(b);
                ratios.push(a / b);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let wins = ratios.iter().filter(|&&r| r > 1.0).count();
            let (lo, hi) = ratios
                .iter()
                .fold((f64::INFINITY, 0f64), |(l, h), &r| (l.min(r), h.max(r)));
            let g = |t: f64| weights as f64 / t / 1e9;
            println!(
                "| {threads} | {:.1} | {:.1} | {:.3} ({lo:.3}-{hi:.3}) | {wins}/{rounds} |",
                g(median(&mut t2)),
                g(median(&mut td)),
                median(&mut ratios)
            );
        }
    }
}

fn main() {
    #[cfg(target_arch = "x86_64")]
    proto::main();
    #[cfg(not(target_arch = "x86_64"))]
    println!("this prototype is x86_64 only");
}
