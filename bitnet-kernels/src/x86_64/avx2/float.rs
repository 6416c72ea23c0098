//! Float-side kernels (placeholder until written).
