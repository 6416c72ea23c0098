//! A plain streaming read of a byte buffer at full SIMD width: the yardstick the decode
//! kernels' weight bandwidth is compared against (benches report kernel GB/s / probe GB/s).

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;

/// Sum of all bytes of `data` (wrapping), read with the widest loads `isa` has.
pub fn sum_bytes(isa: Isa, data: &[u8]) -> u64 {
    kernels(isa).sum_bytes(data)
}
