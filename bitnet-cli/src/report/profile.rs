//! The `--profile` table: where decode time goes per op kind, with shares of the total.

use std::io::{self, Write};

use bitnet_core::engine::Profile;

pub fn write_profile(out: &mut impl Write, profile: &Profile, tokens: usize) -> io::Result<()> {
    let rows = profile.rows();
    let total = profile.total_seconds();
    let per_tok = |s: f64| {
        if tokens > 0 {
            s * 1e3 / tokens as f64
        } else {
            0.0
        }
    };
    writeln!(
        out,
        "| {:<24} | {:>10} | {:>10} | {:>7} |",
        "op", "ms/token", "calls/tok", "share"
    )?;
    writeln!(
        out,
        "| {} | {} | {} | {} |",
        "-".repeat(24),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(7)
    )?;
    for r in &rows {
        writeln!(
            out,
            "| {:<24} | {:>10.3} | {:>10.1} | {:>6.1}% |",
            r.name,
            per_tok(r.seconds),
            r.calls as f64 / tokens.max(1) as f64,
            if total > 0.0 {
                r.seconds / total * 100.0
            } else {
                0.0
            }
        )?;
    }
    writeln!(
        out,
        "| {:<24} | {:>10.3} | {:>10} | {:>6.1}% |",
        "total",
        per_tok(total),
        "",
        100.0
    )
}
