//! The walk every kernel set's product over a grouped head shares ([`crate::layout::q8r::Q8R`],
//! [`crate::layout::q6kr::Q6KR`]): per row group, the group's super-blocks in order, each
//! against tiles of the tokens (a super-block, a few KiB, stays in L1 while the tiles after
//! the first read it, so the weights come from memory once per call whatever the batch).
//! Only the super-block step depends on the set and the layout.

/// Token rows whose accumulators a walk holds through a group (more: the group is walked
/// again for the next ones, from L2).
pub(crate) const PASS: usize = 32;

/// The body of a set's product over a grouped head (`W`: `Q8R` or `Q6KR`, activations `X`
/// read through `Ptrs`, groups of `group_rows` rows whose super-blocks are `sb_bytes`
/// long): for every row group of `$rows`, its super-blocks in order against tiles of at most
/// the largest of `$tiles` tokens,
/// `$sb::<T>(super-block pointer, Ptrs, first token, super-block index, &mut [Acc; T],
/// prefetch)` adding each super-block's products to the tokens' accumulators (`$zero` at
/// the start of a group), and `$lanes(acc) -> [f32; group_rows]` giving a token's 16 row sums at the
/// end. Only the first tile of a super-block asks for prefetches (the later ones read it
/// from L1), and none does where the stream prefetch policy is off. Rows past `$rows.end` (the padding of the last group) are not stored.
///
/// A macro, not a function, so that it expands inside the set's `#[target_feature]` entry,
/// where `$sb` and `$lanes` inline. The caller checked the shapes
/// (`check_matmul` of the layout), and `$rows` is not empty.
macro_rules! group_walk {
    ($W:ty, $X:ty, $Ptrs:ty, $group_rows:expr, $sb_bytes:expr,
     $sb:ident, $lanes:ident, $zero:expr, [$($t:literal),+], $w:expr, $x:expr, $n_tok:expr, $rows:expr, $out:expr) => {{
        use $crate::shared::group_walk::PASS;
        const Q8R_ROWS: usize = $group_rows;
        const Q8R_SB_BYTES: usize = $sb_bytes;
        let (w, x, n_tok, rows, out): (&$W, &$X, usize, std::ops::Range<usize>, &mut [f32]) =
            ($w, $x, $n_tok, $rows, $out);
        const TILE: usize = { let mut m = 0; $(if $t > m { m = $t; })+ m };
        let xp = <$Ptrs>::new(x);
        let (gb, n_sb, base, nr) = (w.group_bytes(), w.super_blocks(), w.bytes().as_ptr(), rows.len());
        // Zen 4 streams the head faster with its hardware prefetchers alone
        // (`crate::prefetch::StreamPrefetch::for_cpu`).
        let prefetch = $crate::prefetch::stream_prefetch() != $crate::prefetch::StreamPrefetch::Off;
        let mut acc = [$zero; PASS];
        for g in rows.start / Q8R_ROWS..rows.end.div_ceil(Q8R_ROWS) {
            let r0 = g * Q8R_ROWS;
            let (first, live) = (r0 - rows.start, (rows.end - r0).min(Q8R_ROWS));
            let mut p0 = 0;
            while p0 < n_tok {
                let pn = (n_tok - p0).min(PASS);
                acc[..pn].fill($zero);
                for s in 0..n_sb {
                    // SAFETY: group g and its super-block s lie inside the matrix (rows.end
                    // <= w.rows, checked by the caller).
                    let sbp = unsafe { base.add(g * gb + s * Q8R_SB_BYTES) };
                    let mut t0 = 0;
                    while t0 < pn {
                        let tt = (pn - t0).min(TILE);
                        let pf = prefetch && t0 == 0;
                        // SAFETY: the super-block is whole; tokens p0 + t0.. p0 + t0 + tt are
                        // below n_tok <= the activations' capacity, and s below their
                        // super-blocks (same width); shapes checked by the caller.
                        unsafe {
                            match tt {
                                $($t => $sb::<$t>(
                                    sbp,
                                    xp,
                                    p0 + t0,
                                    s,
                                    <&mut [_; $t]>::try_from(&mut acc[t0..t0 + $t])
                                        .expect("a tile of the pass"),
                                    pf,
                                ),)+
                                _ => unreachable!("tiles cover 1..=TILE"),
                            }
                        }
                        t0 += tt;
                    }
                }
                for t in 0..pn {
                    let v: [f32; Q8R_ROWS] = $lanes(acc[t]);
                    let at = (p0 + t) * nr + first;
                    out[at..at + live].copy_from_slice(&v[..live]);
                }
                p0 += pn;
            }
        }
    }};
}
pub(crate) use group_walk;
