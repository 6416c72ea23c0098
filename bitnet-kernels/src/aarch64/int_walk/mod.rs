//! The AArch64 integer products written once over their dot step ([`crate::aarch64::int_dot`]):
//! `binary` (1-bit rows x int8), `kv_int8` (integer-coded keys x an int8 query) and
//! `q8q8` (Q8_0 x Q8_0). The `neon/` and `dotprod/` files of these names
//! are their entry points, compiled with each set's features.

pub(crate) mod binary;
pub(crate) mod kv_int8;
pub(crate) mod q4q8;
pub(crate) mod q8q8;
