//! Every prefetch hint of the one-token ternary kernels (`x86_64/stream.rs`) gives the
//! scalar reference's dots: prefetching is only a hint. Its own file so that the kernels'
//! import of `stream` and this test's import of the kernels make no circle.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Isa;
use crate::layout::ternary::{BLOCK, TernaryMatrix};
use crate::x86_64::stream::{L1, L2, OFF};
use crate::x86_64::{avx2, avx512, avxvnni};

type Groups =
    unsafe fn(&TernaryMatrix, &[i8], std::ops::Range<usize>, std::ops::Range<usize>, &mut [i32]);

/// Each set's one-token kernel under each hint (prefetching must never change a dot).
fn kernels() -> Vec<(Isa, [Groups; 3])> {
    vec![
        (
            Isa::Avx2,
            [
                avx2::ternary::groups::<OFF>,
                avx2::ternary::groups::<L1>,
                avx2::ternary::groups::<L2>,
            ],
        ),
        (
            Isa::AvxVnni,
            [
                avxvnni::ternary::groups::<OFF>,
                avxvnni::ternary::groups::<L1>,
                avxvnni::ternary::groups::<L2>,
            ],
        ),
        (
            Isa::Avx512,
            [
                avx512::ternary::groups::<OFF>,
                avx512::ternary::groups::<L1>,
                avx512::ternary::groups::<L2>,
            ],
        ),
    ]
}

#[test]
fn every_hint_gives_the_reference_dots() {
    let mut rng = StdRng::seed_from_u64(50);
    // 13 blocks: the AVX2 kernel widens its i16 sums after 4, 8, 12 and at the end.
    let (rows, cols) = (37, 13 * BLOCK - 70);
    let trits: Vec<i8> = (0..rows * cols)
        .map(|_| rng.random_range(-1i8..=1))
        .collect();
    let w = TernaryMatrix::from_trits(&trits, rows, cols, 1.0).unwrap();
    let pc = w.padded_cols();
    let mut q: Vec<i8> = (0..pc)
        .map(|_| rng.random_range(-128i16..=127) as i8)
        .collect();
    q[cols..].fill(0);
    let mut tested = 0;
    for (isa, by_hint) in kernels() {
        if !isa.is_available() {
            continue;
        }
        for (rows, blocks) in [(0..rows, 0..pc / BLOCK), (5..31, 3..11), (2..3, 12..13)] {
            let mut want = vec![0i32; rows.len()];
            crate::scalar::ternary::raw_dots(&w, &q, rows.clone(), blocks.clone(), &mut want);
            for (h, groups) in by_hint.iter().enumerate() {
                let mut got = vec![i32::MIN; rows.len()];
                // SAFETY: the set is available; rows and blocks lie inside the matrix and
                // are not empty; `q` holds padded_cols values.
                unsafe { groups(&w, &q, rows.clone(), blocks.clone(), &mut got) };
                assert_eq!(got, want, "{isa} hint {h} rows {rows:?} blocks {blocks:?}");
            }
            tested += 1;
        }
    }
    // Every x86-64 CPU the tests run on has AVX2.
    assert!(tested >= 3, "no SIMD set ran");
}
