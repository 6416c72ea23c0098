//! A plain streaming read of a byte buffer at full SIMD width: the yardstick the decode
//! kernels' weight bandwidth is compared against (benches report kernel GB/s / probe GB/s).

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;

/// Sum of all bytes of `data` (wrapping), read with the widest loads `isa` has.
pub fn sum_bytes(isa: Isa, data: &[u8]) -> u64 {
    kernels(isa).sum_bytes(data)
}

/// The sets whose read loops a "plain read" probe tries, among those this CPU runs (every set
/// with a `sum_bytes` of its own): the probes keep the fastest, so a bound never comes from a
/// slower loop than the machine has. On Zen 4 the AVX2 loop reads 7-10% faster than the
/// AVX-512 one (`bench/2026-12-07-issue50-zen4.md`).
pub fn read_sets() -> Vec<Isa> {
    let sets: Vec<Isa> = [Isa::Avx2, Isa::Avx512, Isa::Neon]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    if sets.is_empty() {
        vec![Isa::Scalar]
    } else {
        sets
    }
}
