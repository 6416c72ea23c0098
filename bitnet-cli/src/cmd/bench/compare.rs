//! `bitnet bench --compare OLD.json NEW.json`: the change per row between two reports, and
//! which rows regressed beyond the spread the two runs themselves show.

use std::io::{self, Write};

use super::report::{BenchReport, BenchRow};

#[derive(Clone, Debug, PartialEq)]
pub struct RowChange {
    pub key: String,
    pub old_tps: f64,
    pub new_tps: f64,
    /// (new - old) / old.
    pub change: f64,
    pub regressed: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comparison {
    pub changes: Vec<RowChange>,
    /// Rows present in only one of the two reports.
    pub only_old: Vec<String>,
    pub only_new: Vec<String>,
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.changes.iter().filter(|c| c.regressed).count()
    }
}

/// A row regressed when its mean fell by more than the two runs' spreads together
/// (`old.sd + new.sd`) and by more than `min_drop` (a fraction, guarding against
/// zero-spread single samples flagging noise).
pub fn is_regression(old: &BenchRow, new: &BenchRow, min_drop: f64) -> bool {
    let drop = old.mean_tps - new.mean_tps;
    drop > old.stddev_tps + new.stddev_tps && drop > min_drop * old.mean_tps
}

pub fn compare(old: &BenchReport, new: &BenchReport, min_drop: f64) -> Comparison {
    let mut cmp = Comparison::default();
    for n in &new.rows {
        match old.rows.iter().find(|o| o.key() == n.key()) {
            Some(o) => cmp.changes.push(RowChange {
                key: n.key(),
                old_tps: o.mean_tps,
                new_tps: n.mean_tps,
                change: if o.mean_tps > 0.0 {
                    (n.mean_tps - o.mean_tps) / o.mean_tps
                } else {
                    0.0
                },
                regressed: is_regression(o, n, min_drop),
            }),
            None => cmp.only_new.push(n.key()),
        }
    }
    for o in &old.rows {
        if !new.rows.iter().any(|n| n.key() == o.key()) {
            cmp.only_old.push(o.key());
        }
    }
    cmp
}

pub fn write_comparison(out: &mut impl Write, cmp: &Comparison) -> io::Result<()> {
    let w = cmp
        .changes
        .iter()
        .map(|c| c.key.len())
        .max()
        .unwrap_or(3)
        .max(3);
    writeln!(
        out,
        "| {:<w$} | {:>10} | {:>10} | {:>8} | {:<9} |",
        "row", "old t/s", "new t/s", "change", "verdict"
    )?;
    writeln!(
        out,
        "| {} | {} | {} | {} | {} |",
        "-".repeat(w),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(8),
        "-".repeat(9)
    )?;
    for c in &cmp.changes {
        writeln!(
            out,
            "| {:<w$} | {:>10.2} | {:>10.2} | {:>+7.1}% | {:<9} |",
            c.key,
            c.old_tps,
            c.new_tps,
            c.change * 100.0,
            if c.regressed { "REGRESSED" } else { "ok" }
        )?;
    }
    for k in &cmp.only_old {
        writeln!(out, "only in old: {k}")?;
    }
    for k in &cmp.only_new {
        writeln!(out, "only in new: {k}")?;
    }
    writeln!(
        out,
        "{} compared, {} regressed",
        crate::output::count(cmp.changes.len(), "row"),
        cmp.regressions()
    )
}

#[cfg(test)]
mod tests {
    use super::super::report::TestKind;
    use super::super::report::tests::{report, row};
    use super::*;

    #[test]
    fn drop_beyond_spread_is_a_regression() {
        let old = report(vec![row(TestKind::Tg, 128, 2, &[20.0, 20.5, 19.5])]);
        let new = report(vec![row(TestKind::Tg, 128, 2, &[17.0, 17.5, 16.5])]);
        let cmp = compare(&old, &new, 0.01);
        assert_eq!(cmp.changes.len(), 1);
        assert!(cmp.changes[0].regressed);
        assert!((cmp.changes[0].change - (-0.15)).abs() < 1e-9);
        assert_eq!(cmp.regressions(), 1);
    }

    #[test]
    fn drop_within_spread_is_not() {
        let old = report(vec![row(TestKind::Tg, 128, 2, &[20.0, 22.0, 18.0])]);
        let new = report(vec![row(TestKind::Tg, 128, 2, &[19.0, 21.0, 17.0])]);
        let cmp = compare(&old, &new, 0.01);
        assert!(!cmp.changes[0].regressed, "1 t/s drop with sd 2+2 is noise");
    }

    #[test]
    fn tiny_drop_with_zero_spread_is_not() {
        let old = report(vec![row(TestKind::Pp, 512, 1, &[100.0])]);
        let new = report(vec![row(TestKind::Pp, 512, 1, &[99.5])]);
        assert!(!compare(&old, &new, 0.01).changes[0].regressed);
        let worse = report(vec![row(TestKind::Pp, 512, 1, &[90.0])]);
        assert!(compare(&old, &worse, 0.01).changes[0].regressed);
    }

    #[test]
    fn improvements_are_not_regressions_and_unmatched_rows_are_listed() {
        let old = report(vec![
            row(TestKind::Pp, 512, 1, &[100.0]),
            row(TestKind::Tg, 128, 1, &[10.0]),
        ]);
        let new = report(vec![
            row(TestKind::Pp, 512, 1, &[150.0]),
            row(TestKind::Tg, 64, 1, &[10.0]),
        ]);
        let cmp = compare(&old, &new, 0.01);
        assert_eq!(cmp.changes.len(), 1);
        assert!(!cmp.changes[0].regressed);
        assert!((cmp.changes[0].change - 0.5).abs() < 1e-9);
        assert_eq!(cmp.only_old, vec!["m.gguf tg128 t1 b1 avx512".to_string()]);
        assert_eq!(cmp.only_new, vec!["m.gguf tg64 t1 b1 avx512".to_string()]);
        let mut buf = Vec::new();
        write_comparison(&mut buf, &cmp).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("+50.0%"));
        assert!(text.contains("1 row compared, 0 regressed"));
    }
}
