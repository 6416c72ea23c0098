//! Where a one-token ternary product's row-group sums go: the AVX-512, AVX2, NEON and dotprod
//! `raw_dots` compute 4 rows at a time ([`ROW_GROUP`]) and store them into the caller's rows.

// Only the SIMD kernels store through this.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use std::ops::Range;

use crate::layout::ternary::ROW_GROUP;

/// Stores the sums `d` of row group `g` (rows `g * ROW_GROUP..`) into `out`, which holds rows
/// `rows`: a group wholly inside `rows` in one copy, the first and last groups (which `rows`
/// may cut) row by row. A check a row held short rows back measurably
/// (bench/2026-12-07-zen4-decode-gaps.md).
#[inline(always)]
pub(crate) fn store_group_sums(
    out: &mut [i32],
    rows: &Range<usize>,
    g: usize,
    d: &[i32; ROW_GROUP],
) {
    let r0 = g * ROW_GROUP;
    if r0 >= rows.start && r0 + ROW_GROUP <= rows.end {
        out[r0 - rows.start..][..ROW_GROUP].copy_from_slice(d);
        return;
    }
    for (rr, &v) in d.iter().enumerate() {
        let r = r0 + rr;
        if rows.contains(&r) {
            out[r - rows.start] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_range_gets_its_group_sum_and_nothing_else_is_written() {
        for start in 0..9 {
            for end in start + 1..=14 {
                let rows = start..end;
                let mut out = vec![-1; rows.len() + 2];
                for g in start / ROW_GROUP..end.div_ceil(ROW_GROUP) {
                    let d = std::array::from_fn(|i| (g * ROW_GROUP + i) as i32 * 10);
                    store_group_sums(&mut out, &rows, g, &d);
                }
                let want: Vec<i32> = rows.clone().map(|r| r as i32 * 10).collect();
                assert_eq!(&out[..rows.len()], &want[..], "rows {rows:?}");
                assert_eq!(&out[rows.len()..], &[-1, -1], "rows {rows:?}");
            }
        }
    }
}
