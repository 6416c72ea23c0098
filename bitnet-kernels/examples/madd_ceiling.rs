//! The AVX2 multiply-add ceiling the ternary prefill tile is bound by, measured on this CPU:
//! how many `vpmaddubsw` + `vpaddw` pairs (32 int8 multiply-adds and their accumulation,
//! the least any AVX2 int8 dot product without VNNI spends on 32 weights) one core retires
//! per second, from registers only (no loads, no unpacking), with 12 independent
//! accumulators as the tile keeps. Also the tile's whole block loop for 8 and 12 tokens
//! (weights from L2, packed activations from L1 as memory operands, the unpacking), its
//! order fixed in `asm!`, with no per-row work: the most the kernel's loop can do. (The
//! intrinsics row this replaced, 12 sums against 12 activation registers, measured its own
//! spills: 174 GMAC/s a thread on Zen 5 where the loop reaches 212-218.) On a CPU with
//! AVX-VNNI, the same tile shape with `vpdpbusd` (32 multiply-adds and their accumulation in
//! one instruction) and the 8 accumulators of the `avxvnni` set's tile. (A `vpdpbusd`-only
//! loop of 8 accumulators and 8 sources does not fit the 16 registers: it measures spills.)
//! Also the per-token operations of the batched Q8_0 x Q8_0 head (`x86_64/avx2/q8q8.rs` and
//! its AVX-VNNI twin) for a tile of 8 tokens, from registers: the bound of the head in
//! batched decode; and the f32 FMA rate, the bound of the float attention kernels.
//!
//! `cargo run --release -p bitnet-kernels --example madd_ceiling -- [SECONDS] [THREADS]`
//!
//! Prints GMAC/s per thread and in all; several runs, best and median, because a shared
//! virtual machine's speed moves between runs. Whole-model prefill GMAC/s (2.085 G ternary
//! multiply-adds a token for the 2B-4T shape) compared with this figure says how close to
//! the instruction bound the engine runs.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    const ACC: usize = 12;

    /// `iters` rounds of 12 `maddubs` + `add` pairs; returns a value that depends on all.
    ///
    /// # Safety
    /// AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn pairs(iters: u64, seed: i8) -> i32 {
        let c = _mm256_set1_epi8(2);
        let mut a = [_mm256_setzero_si256(); ACC];
        let mut acc = [_mm256_setzero_si256(); ACC];
        for (i, v) in a.iter_mut().enumerate() {
            *v = _mm256_set1_epi8(seed.wrapping_add(i as i8));
        }
        for _ in 0..iters {
            // Each product reads its own accumulator, so none is loop-invariant (the compiler
            // would hoist those): 12 chains of a `maddubs` then an `add` (latency 5 + 1),
            // enough in flight for the ports, not the latency, to bound the rate.
            for (s, &x) in acc.iter_mut().zip(&a) {
                *s = _mm256_add_epi16(x, _mm256_maddubs_epi16(c, *s));
            }
        }
        fold(&acc)
    }

    /// `a[t] += maddubs(c, q[t * 256..])` for each listed slot `t`, in this order: the tile's
    /// step for one code vector, in `asm!` so that the compiler can neither reorder nor
    /// spill it (it does both to the intrinsics version of a 12-token tile).
    macro_rules! tile_step {
        ($c:expr, $q:expr, $a:ident, $($t:literal)*) => {
            std::arch::asm!(
                $(
                    concat!("vpmaddubsw {t}, {c}, ymmword ptr [{q} + ", $t, " * 256]"),
                    concat!("vpaddw {", $t, "}, {", $t, "}, {t}"),
                )*
                $(inout(ymm_reg) $a[$t],)*
                c = in(ymm_reg) $c,
                q = in(reg) $q,
                t = out(ymm_reg) _,
                options(pure, readonly, nostack, preserves_flags)
            )
        };
    }

    /// The register tile's block loop (`src/x86_64/avx2/ternary.rs`, `tile_block`) for `$n`
    /// tokens with nothing else: per round one 64-byte weight block (two halves, from a
    /// 512 KiB buffer read 64 bytes of every 256, as the repacked rows are: L2), its 8 code
    /// vectors unpacked (4 `and`, 3 shifts a half), each multiplied into the `$n` tokens'
    /// i16 sums with the activations as memory operands (packed as the kernel packs them,
    /// 16 blocks of 8 tokens or 10 of 12: L1). No widening and no per-row work: the most the
    /// kernel's loop can do on this CPU.
    macro_rules! tile_loop {
        ($name:ident, $n:literal, $($t:literal)*) => {
            /// # Safety
            /// AVX2.
            #[target_feature(enable = "avx2")]
            pub unsafe fn $name(iters: u64, seed: i8) -> i32 {
                const W_BLOCKS: usize = 2048;
                const Q_BLOCKS: usize = 128 / $n;
                let w: Vec<u8> = (0..W_BLOCKS * 256).map(|i| (i as u8).wrapping_mul(seed as u8 | 1)).collect();
                let q: Vec<i8> = (0..Q_BLOCKS * $n * 256).map(|i| (i % 251) as i8 ^ seed).collect();
                let m3 = _mm256_set1_epi8(3);
                let mut a = [_mm256_setzero_si256(); $n];
                for i in 0..iters as usize {
                    let wb = w.as_ptr().wrapping_add((i % W_BLOCKS) * 256);
                    let qb = q.as_ptr().wrapping_add((i % Q_BLOCKS) * $n * 256);
                    _mm_prefetch::<_MM_HINT_T1>(wb.wrapping_add(4096).cast());
                    for h in 0..2 {
                        // SAFETY: block i % W_BLOCKS of `w` and i % Q_BLOCKS of `q` lie inside
                        // the buffers (32-byte reads at offsets below 256 and $n * 256).
                        unsafe {
                            let x = _mm256_loadu_si256(wb.add(32 * h).cast());
                            let qh = qb.add(32 * h);
                            let c0 = _mm256_and_si256(x, m3);
                            tile_step!(c0, qh, a, $($t)*);
                            let c1 = _mm256_and_si256(_mm256_srli_epi16::<2>(x), m3);
                            tile_step!(c1, qh.add(64), a, $($t)*);
                            let c2 = _mm256_and_si256(_mm256_srli_epi16::<4>(x), m3);
                            tile_step!(c2, qh.add(128), a, $($t)*);
                            let c3 = _mm256_and_si256(_mm256_srli_epi16::<6>(x), m3);
                            tile_step!(c3, qh.add(192), a, $($t)*);
                        }
                    }
                }
                fold(&a)
            }
        };
    }

    tile_loop!(tile_loop8, 8, 0 1 2 3 4 5 6 7);
    tile_loop!(tile_loop12, 12, 0 1 2 3 4 5 6 7 8 9 10 11);

    /// Accumulators of the AVX-VNNI tile (`src/x86_64/avxvnni/ternary.rs`).
    const VNNI_ACC: usize = 8;

    /// The AVX-VNNI tile's shape: 4 code vectors unpacked from one register, each multiplied
    /// into all 8 accumulators (32 `vpdpbusd` a round).
    ///
    /// # Safety
    /// AVX2 and AVX-VNNI.
    #[target_feature(enable = "avx2,avxvnni")]
    pub unsafe fn unpacked_dpbusd(iters: u64, seed: i8) -> i32 {
        let m3 = _mm256_set1_epi8(3);
        let mut x = _mm256_set1_epi8(seed);
        let mut a = [_mm256_setzero_si256(); VNNI_ACC];
        for (i, v) in a.iter_mut().enumerate() {
            *v = _mm256_set1_epi8(seed.wrapping_add(i as i8));
        }
        let mut acc = [_mm256_setzero_si256(); VNNI_ACC];
        for _ in 0..iters {
            let c = [
                _mm256_and_si256(x, m3),
                _mm256_and_si256(_mm256_srli_epi16::<2>(x), m3),
                _mm256_and_si256(_mm256_srli_epi16::<4>(x), m3),
                _mm256_and_si256(_mm256_srli_epi16::<6>(x), m3),
            ];
            for &c in &c {
                for (s, &v) in acc.iter_mut().zip(&a) {
                    *s = _mm256_dpbusd_avx_epi32(*s, c, v);
                }
            }
            x = std::hint::black_box(x);
        }
        fold(&acc)
    }

    /// The batched head's work for one weight block and 8 tokens, as its tile does it (a new
    /// block's |w| each round, then per token `sign`, `maddubs`, `madd` against ones, the
    /// conversion, the scale's lane shuffle and the FMA), without the loads and the per-block
    /// scale products. 8 blocks of 32 multiply-adds a round.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn q8_head(iters: u64, seed: i8) -> i32 {
        let (one, step) = (_mm256_set1_epi16(1), _mm256_set1_epi8(1));
        // SAFETY: AVX2 and FMA, as this function's contract.
        unsafe {
            q8_head_tile(
                iters,
                seed,
                |aw, wq, x| {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, wq)), one)
                },
                step,
            )
        }
    }

    /// [`q8_head`] with the AVX-VNNI tile's integer core: `vpdpbusd` from zero.
    ///
    /// # Safety
    /// AVX2, FMA and AVX-VNNI.
    #[target_feature(enable = "avx2,fma,avxvnni")]
    pub unsafe fn q8_head_dpbusd(iters: u64, seed: i8) -> i32 {
        // SAFETY: AVX2 and FMA, as this function's contract.
        unsafe {
            q8_head_tile(
                iters,
                seed,
                |aw, wq, x| {
                    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, wq))
                },
                _mm256_set1_epi8(1),
            )
        }
    }

    /// The head tile's rounds with the integer core `dot(|w|, w, x) -> i32 lanes`. The
    /// tokens' activation blocks are loaded from L1 as in the tile (8 blocks of 8 tokens in
    /// turn; held in registers beside the 8 accumulators they would spill).
    ///
    /// # Safety
    /// AVX2 and FMA (it inlines into the `#[target_feature]` callers above).
    #[inline(always)]
    unsafe fn q8_head_tile(
        iters: u64,
        seed: i8,
        dot: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
        step: __m256i,
    ) -> i32 {
        let xs: Vec<i8> = (0..8 * 8 * 32)
            .map(|i| seed.wrapping_add((i % 251) as i8))
            .collect();
        // SAFETY: the caller guarantees AVX2 and FMA; every load lies inside `xs`.
        unsafe {
            let mut wq = _mm256_set1_epi8(seed);
            let mut d0 = _mm256_setr_ps(0.5, 0.25, 0.125, 0.0625, 0.5, 0.25, 0.125, 0.0625);
            let mut d1 = _mm256_mul_ps(d0, d0);
            let mut acc = [_mm256_setzero_ps(); 8];
            for i in 0..iters {
                // The next block: a new weight vector, its |w| and scales the compiler
                // cannot see through, as in the tile (nothing is hoisted out of the loop).
                wq = _mm256_add_epi8(wq, step);
                let aw = _mm256_abs_epi8(wq);
                (d0, d1) = (std::hint::black_box(d0), std::hint::black_box(d1));
                let xb = xs.as_ptr().add((i as usize % 8) * 8 * 32);
                for (t, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(xb.add(t * 32).cast());
                    let d = if t < 4 { d0 } else { d1 };
                    let dl = match t % 4 {
                        0 => _mm256_shuffle_ps::<0x00>(d, d),
                        1 => _mm256_shuffle_ps::<0x55>(d, d),
                        2 => _mm256_shuffle_ps::<0xaa>(d, d),
                        _ => _mm256_shuffle_ps::<0xff>(d, d),
                    };
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot(aw, wq, x)), dl, *a);
                }
            }
            let mut s = acc[0];
            for v in &acc[1..] {
                s = _mm256_add_ps(s, *v);
            }
            _mm256_cvtss_f32(s).to_bits() as i32
        }
    }

    /// f32 FMAs (8 lanes) into 12 independent accumulators: the bound of the float attention
    /// kernels (scores and weighted sums over an f16 cache are FMAs on converted rows). 12
    /// FMAs of 8 lanes a round: 96 multiply-adds.
    ///
    /// # Safety
    /// AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_f32(iters: u64, seed: i8) -> i32 {
        let mut acc = [_mm256_set1_ps(f32::from(seed)); 12];
        let (x, y) = (_mm256_set1_ps(0.999), _mm256_set1_ps(1e-4));
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let mut s = acc[0];
        for v in &acc[1..] {
            s = _mm256_add_ps(s, *v);
        }
        _mm256_cvtss_f32(s).to_bits() as i32
    }

    #[target_feature(enable = "avx2")]
    fn fold<const N: usize>(acc: &[__m256i; N]) -> i32 {
        let mut s = acc[0];
        for v in &acc[1..] {
            s = _mm256_xor_si256(s, *v);
        }
        _mm256_extract_epi32::<0>(s)
    }
}

#[cfg(target_arch = "x86_64")]
fn main() {
    use std::time::Instant;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let threads: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    if !std::arch::is_x86_feature_detected!("avx2") {
        eprintln!("this CPU has no AVX2");
        std::process::exit(1);
    }
    type Kernel = unsafe fn(u64, i8) -> i32;
    // Pairs a round of each kernel.
    let mut kernels: Vec<(&str, Kernel, u64)> = vec![
        ("maddubs+add pairs", x86::pairs, 12),
        (
            "the tile's block loop, 8 tokens (as the kernel)",
            x86::tile_loop8,
            64,
        ),
        ("the tile's block loop, 12 tokens", x86::tile_loop12, 96),
    ];
    if std::arch::is_x86_feature_detected!("avxvnni") {
        kernels.push(("dpbusd with the tile's unpacking", x86::unpacked_dpbusd, 32));
    }
    if std::arch::is_x86_feature_detected!("fma") {
        // 96 multiply-adds a round: 3 units of 32.
        kernels.push(("f32 FMA, 8 lanes (float attention)", x86::fma_f32, 3));
        kernels.push(("Q8_0 head tile of 8 tokens (AVX2)", x86::q8_head, 8));
        if std::arch::is_x86_feature_detected!("avxvnni") {
            kernels.push((
                "Q8_0 head tile of 8 tokens (AVX-VNNI)",
                x86::q8_head_dpbusd,
                8,
            ));
        }
    }
    // Rounds per second, roughly, to size the runs.
    let iters = {
        let t = Instant::now();
        // SAFETY: AVX2 was detected above.
        std::hint::black_box(unsafe { x86::pairs(1 << 20, 1) });
        ((1u64 << 20) as f64 * seconds / t.elapsed().as_secs_f64()) as u64
    };
    println!("x86 int8 multiply-add ceiling, {threads} thread(s), {seconds} s a run, 7 runs:");
    for (name, k, per_round) in kernels {
        let iters = iters * 12 / per_round;
        let mut rates: Vec<f64> = (0..7)
            .map(|run| {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for th in 0..threads {
                        s.spawn(move || {
                            // SAFETY: AVX2 was detected above, AVX-VNNI and FMA before the
                            // kernels that need them were listed.
                            let v = unsafe { k(iters, (run + th) as i8) };
                            std::hint::black_box(v)
                        });
                    }
                });
                // 32 multiply-adds a pair (or a `vpdpbusd`).
                (iters * per_round * 32 * threads as u64) as f64 / t.elapsed().as_secs_f64() / 1e9
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        println!(
            "  {name}: best {:.1}, median {:.1} GMAC/s in all ({:.1} / {:.1} a thread)",
            rates[6],
            rates[3],
            rates[6] / threads as f64,
            rates[3] / threads as f64
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("madd_ceiling measures the AVX2 bound: x86-64 only");
}
