//! The `bitnet` binary (being written).
fn main() {}
