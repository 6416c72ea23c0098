//! Table-lookup (T-MAC / bitnet.cpp TL2 style) prototype of the ternary matvec (AVX-512 here,
//! AVX2 in `avx2.rs`), kept in the benches to compare against the crate's multiply-add kernels.
//!
//! Layout: three trits form one base-3 index `c0 + 3 c1 + 9 c2` (27 values, 5 bits); three
//! indices share one u16 (9 weights in 16 bits = 1.78 bits/weight, 11% fewer bytes than the
//! 2-bit layout). Rows are grouped by 32, one row per 16-bit lane: for each group of 9
//! columns, 64 bytes. Per activation triple a 32-entry i16 table holds
//! `sum_m (c_m - 1) * a_m` for every index; `vpermw` (which reads only the low 5 index bits)
//! looks up 32 rows at once, so a u16 word needs two shifts, three `vpermw`, three adds: no
//! multiply at all. Partial sums stay exact: i16 accumulators are widened to i32 every 24 words
//! (24 * 3 * 384 < 32768).

mod avx2;

use std::arch::x86_64::*;
use std::hint::black_box;
use std::time::Duration;

use bitnet_kernels::ternary::ternary_int_dots;
use bitnet_kernels::{AlignedVec, Isa, TernaryMatrix};
use criterion::{BenchmarkId, Criterion, Throughput};

const GROUP_ROWS: usize = 32;
const FLUSH_WORDS: usize = 24;

/// A ternary matrix in the table-lookup layout.
#[derive(Debug)]
pub struct TlMatrix {
    rows: usize,
    /// u16 words per row (each covers 9 columns).
    words: usize,
    data: AlignedVec<u16>,
}

impl TlMatrix {
    pub fn new(trits: &[i8], rows: usize, cols: usize) -> Self {
        let words = cols.div_ceil(9);
        let groups = rows.div_ceil(GROUP_ROWS);
        let mut data = AlignedVec::<u16>::zeroed(groups * words * GROUP_ROWS);
        for r in 0..rows {
            for k in 0..words {
                let mut word = 0u16;
                for s in 0..3 {
                    let mut idx = 0u16;
                    for m in (0..3).rev() {
                        let c = 9 * k + 3 * s + m;
                        let code = if c < cols {
                            (trits[r * cols + c] + 1) as u16
                        } else {
                            1
                        };
                        idx = idx * 3 + code;
                    }
                    word |= idx << (5 * s);
                }
                data[((r / GROUP_ROWS) * words + k) * GROUP_ROWS + r % GROUP_ROWS] = word;
            }
        }
        // Padding rows: all-zero weights (index 13 = codes 1,1,1) so they stay harmless.
        for r in rows..groups * GROUP_ROWS {
            for k in 0..words {
                data[((r / GROUP_ROWS) * words + k) * GROUP_ROWS + r % GROUP_ROWS] =
                    13 | 13 << 5 | 13 << 10;
            }
        }
        TlMatrix { rows, words, data }
    }

    fn clone_layout(&self) -> Self {
        TlMatrix {
            rows: self.rows,
            words: self.words,
            data: self.data.clone(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.data.len() * 2
    }

    /// Activations padded to `9 * words`.
    pub fn padded_cols(&self) -> usize {
        9 * self.words
    }
}

/// Builds the per-triple tables: `tables[j * 32 + i] = sum_m (digit_m(i) - 1) * q[3j + m]`.
///
/// # Safety
/// AVX-512 F/BW; `q.len() >= 3 * tables.len() / 32`.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn build_tables(q: &[i8], tables: &mut [i16]) {
    let mut coef = [[0i16; 32]; 3];
    for (m, row) in coef.iter_mut().enumerate() {
        for (i, v) in row[..27].iter_mut().enumerate() {
            *v = ((i / [1, 3, 9][m]) % 3) as i16 - 1;
        }
    }
    // SAFETY: each coefficient row holds 32 i16.
    let c = unsafe { coef.map(|row| _mm512_loadu_si512(row.as_ptr().cast())) };
    for (j, t) in tables.chunks_exact_mut(32).enumerate() {
        let v = _mm512_add_epi16(
            _mm512_add_epi16(
                _mm512_mullo_epi16(c[0], _mm512_set1_epi16(q[3 * j] as i16)),
                _mm512_mullo_epi16(c[1], _mm512_set1_epi16(q[3 * j + 1] as i16)),
            ),
            _mm512_mullo_epi16(c[2], _mm512_set1_epi16(q[3 * j + 2] as i16)),
        );
        // SAFETY: `t` holds 32 i16.
        unsafe { _mm512_storeu_si512(t.as_mut_ptr().cast(), v) };
    }
}

/// Exact `sum_j w[r][j] q[j]` for all rows, from the tables.
///
/// # Safety
/// AVX-512 F/BW; `tables` built for this matrix's `padded_cols`; `out.len() >= rows`.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn matvec(w: &TlMatrix, tables: &[i16], out: &mut [i32]) {
    let groups = w.rows.div_ceil(GROUP_ROWS);
    for g in 0..groups {
        let mut lo = _mm512_setzero_si512();
        let mut hi = _mm512_setzero_si512();
        let mut k = 0;
        while k < w.words {
            let end = (k + FLUSH_WORDS).min(w.words);
            let mut acc = _mm512_setzero_si512();
            for kk in k..end {
                // SAFETY: word `kk` of group `g` and tables 3kk..3kk+3 exist.
                unsafe {
                    let wp = w.data.as_ptr().add((g * w.words + kk) * GROUP_ROWS);
                    // Same 4 KiB streaming prefetch as the MAD decode kernel.
                    _mm_prefetch::<_MM_HINT_T1>(wp.cast::<i8>().wrapping_add(4096));
                    let x = _mm512_load_si512(wp.cast());
                    let t = tables.as_ptr().add(3 * kk * 32);
                    let l0 = _mm512_permutexvar_epi16(x, _mm512_loadu_si512(t.cast()));
                    let l1 = _mm512_permutexvar_epi16(
                        _mm512_srli_epi16::<5>(x),
                        _mm512_loadu_si512(t.add(32).cast()),
                    );
                    let l2 = _mm512_permutexvar_epi16(
                        _mm512_srli_epi16::<10>(x),
                        _mm512_loadu_si512(t.add(64).cast()),
                    );
                    acc = _mm512_add_epi16(acc, _mm512_add_epi16(l0, _mm512_add_epi16(l1, l2)));
                }
            }
            lo = _mm512_add_epi32(lo, _mm512_cvtepi16_epi32(_mm512_castsi512_si256(acc)));
            hi = _mm512_add_epi32(
                hi,
                _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64::<1>(acc)),
            );
            k = end;
        }
        let mut lanes = [0i32; 32];
        // SAFETY: `lanes` holds 32 i32.
        unsafe {
            _mm512_storeu_si512(lanes.as_mut_ptr().cast(), lo);
            _mm512_storeu_si512(lanes.as_mut_ptr().add(16).cast(), hi);
        }
        for (i, &v) in lanes.iter().enumerate() {
            if let Some(o) = out.get_mut(g * GROUP_ROWS + i) {
                *o = v;
            }
        }
    }
}

/// Compares the prototype (tables built inside every call, as decode would) with the crate's
/// AVX-512 multiply-add matvec on the same shapes, checking exact agreement first.
pub fn bench(c: &mut Criterion) {
    if !super::wanted("tl_proto") {
        return;
    }
    bench_avx2(c);
    if !Isa::Avx512.is_available() {
        return;
    }
    let mut g = c.benchmark_group("tl_proto");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &(rows, cols) in &[(2560usize, 2560usize), (6912, 2560), (2560, 6912)] {
        let t = super::trits(rows * cols, 42);
        let tl = TlMatrix::new(&t, rows, cols);
        let mad = TernaryMatrix::from_trits(&t, rows, cols, 1.0).expect("matrix");
        let x = super::floats(cols, 9);
        let mut q = vec![0i8; mad.padded_cols().max(tl.padded_cols())];
        bitnet_kernels::quantize_act(Isa::Scalar, &x, &mut q);
        let mut tables = vec![0i16; tl.padded_cols() / 3 * 32];
        let mut got = vec![0i32; rows];
        let mut want = vec![0i32; rows];
        // SAFETY: AVX-512 checked above; table and output sizes match the matrix.
        unsafe {
            build_tables(&q, &mut tables);
            matvec(&tl, &tables, &mut got);
        }
        ternary_int_dots(Isa::Avx512, &mad, &q, 0..rows, &mut want);
        assert_eq!(got, want, "TL prototype disagrees with the MAD kernel");
        let name = format!("{rows}x{cols}");
        g.throughput(Throughput::Elements((rows * cols) as u64));
        g.bench_function(BenchmarkId::new("tl_vpermw", &name), |b| {
            b.iter(|| {
                // SAFETY: as above.
                unsafe {
                    build_tables(&q, &mut tables);
                    matvec(&tl, &tables, &mut got);
                }
                black_box(&got);
            })
        });
        g.bench_function(BenchmarkId::new("mad_vpdpbusd", &name), |b| {
            b.iter(|| {
                ternary_int_dots(Isa::Avx512, &mad, &q, 0..rows, &mut want);
                black_box(&want);
            })
        });
        eprintln!(
            "tl_proto {name}: TL layout {} bytes, MAD layout {} bytes",
            tl.bytes(),
            mad.packed_bytes().len()
        );
    }
    // Cold: >= 1 GiB of 6912x2560 matrices in each layout, cycled (decode streams weights).
    let (rows, cols) = (6912usize, 2560usize);
    let t = super::trits(rows * cols, 43);
    let tl = TlMatrix::new(&t, rows, cols);
    let mad = TernaryMatrix::from_trits(&t, rows, cols, 1.0).expect("matrix");
    let copies = (1usize << 30).div_ceil(tl.bytes());
    let tls: Vec<TlMatrix> = (0..copies).map(|_| tl.clone_layout()).collect();
    let mads: Vec<TernaryMatrix> = (0..copies).map(|_| mad.clone()).collect();
    let x = super::floats(cols, 10);
    let mut q = vec![0i8; mad.padded_cols().max(tl.padded_cols())];
    bitnet_kernels::quantize_act(Isa::Scalar, &x, &mut q);
    let mut tables = vec![0i16; tl.padded_cols() / 3 * 32];
    let mut out = vec![0i32; rows];
    g.throughput(Throughput::Elements((copies * rows * cols) as u64));
    g.bench_function(BenchmarkId::new("tl_vpermw", "cold_1GiB"), |b| {
        b.iter(|| {
            for m in &tls {
                // SAFETY: as above.
                unsafe {
                    build_tables(&q, &mut tables);
                    matvec(m, &tables, &mut out);
                }
            }
            black_box(&out);
        })
    });
    g.bench_function(BenchmarkId::new("mad_vpdpbusd", "cold_1GiB"), |b| {
        b.iter(|| {
            for m in &mads {
                ternary_int_dots(Isa::Avx512, m, &q, 0..rows, &mut out);
            }
            black_box(&out);
        })
    });
    g.finish();
}

/// The AVX2 comparison: `pshufb` table lookup against the crate's AVX2 multiply-add kernel.
fn bench_avx2(c: &mut Criterion) {
    if !Isa::Avx2.is_available() {
        return;
    }
    let mut g = c.benchmark_group("tl_proto_avx2");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for &(rows, cols) in &[(2560usize, 2560usize), (6912, 2560), (2560, 6912)] {
        let t = super::trits(rows * cols, 44);
        let tl = avx2::Tl1Matrix::new(&t, rows, cols);
        let mad = TernaryMatrix::from_trits(&t, rows, cols, 1.0).expect("matrix");
        let x = super::floats(cols, 11);
        let mut q = vec![0i8; mad.padded_cols().max(tl.padded_cols())];
        bitnet_kernels::quantize_act(Isa::Scalar, &x, &mut q);
        let mut tables = vec![0u8; tl.padded_cols() / 2 * 32];
        let mut got = vec![0i32; rows];
        let mut want = vec![0i32; rows];
        // SAFETY: AVX2 checked above; table and output sizes match the matrix.
        unsafe {
            avx2::build_tables(&q, &mut tables);
            avx2::matvec(&tl, &tables, &mut got);
        }
        ternary_int_dots(Isa::Avx2, &mad, &q, 0..rows, &mut want);
        assert_eq!(got, want, "AVX2 TL prototype disagrees with the MAD kernel");
        let name = format!("{rows}x{cols}");
        g.throughput(Throughput::Elements((rows * cols) as u64));
        g.bench_function(BenchmarkId::new("tl_pshufb", &name), |b| {
            b.iter(|| {
                // SAFETY: as above.
                unsafe {
                    avx2::build_tables(&q, &mut tables);
                    avx2::matvec(&tl, &tables, &mut got);
                }
                black_box(&got);
            })
        });
        g.bench_function(BenchmarkId::new("mad_maddubs", &name), |b| {
            b.iter(|| {
                ternary_int_dots(Isa::Avx2, &mad, &q, 0..rows, &mut want);
                black_box(&want);
            })
        });
    }
    g.finish();
}
