//! Comparison metrics for logits, as testdata/README.md defines them.

/// [`rel_l2`] as an `f32`, for budgets kept in `f32`.
pub fn rel_l2_f32(ours: &[f32], theirs: &[f32]) -> f32 {
    rel_l2(ours, theirs) as f32
}

/// `||ours - theirs|| / ||theirs||` over all values.
pub fn rel_l2(ours: &[f32], theirs: &[f32]) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    let (mut num, mut den) = (0f64, 0f64);
    for (&a, &b) in ours.iter().zip(theirs) {
        num += (f64::from(a) - f64::from(b)).powi(2);
        den += f64::from(b).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

/// Cosine similarity over all values.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

/// Index of the largest value (first on ties).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Rows (of `n_vocab`) whose argmax agree.
pub fn top1_agreement(a: &[f32], b: &[f32], n_vocab: usize) -> usize {
    a.chunks_exact(n_vocab)
        .zip(b.chunks_exact(n_vocab))
        .filter(|(x, y)| argmax(x) == argmax(y))
        .count()
}

/// Largest absolute difference.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .fold(0f32, |m, (&x, &y)| m.max((x - y).abs()))
}

/// All three golden metrics at once.
#[derive(Copy, Clone, Debug)]
pub struct Agreement {
    pub rel_l2: f64,
    pub cosine: f64,
    pub top1: usize,
    pub rows: usize,
}

pub fn compare(ours: &[f32], theirs: &[f32], n_vocab: usize) -> Agreement {
    Agreement {
        rel_l2: rel_l2(ours, theirs),
        cosine: cosine(ours, theirs),
        top1: top1_agreement(ours, theirs, n_vocab),
        rows: ours.len() / n_vocab,
    }
}

impl std::fmt::Display for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rel-L2 {:.4}, cosine {:.5}, top-1 {}/{}",
            self.rel_l2, self.cosine, self.top1, self.rows
        )
    }
}

/// Largest absolute difference relative to the largest magnitude in `a`.
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    let scale = a.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
    max_abs_diff(a, b) / scale
}
