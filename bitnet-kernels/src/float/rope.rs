//! Rotary position embeddings, as a safe API: [`RopeTable`] holds the cos/sin of every
//! position and applies NeoX (rotate-half) or GPT-J (adjacent pairs) rotations through the
//! kernel set asked for (`crate::scalar::rope` is the specification, matched bit for bit).

use crate::dispatch::kernels;
use crate::isa::Isa;
use crate::ops::Kernels;

/// Rotary position embedding tables: `cos`/`sin` of `pos * theta^(-2i/rope_dim)` for every
/// position below `max_pos` and `i < rope_dim/2`, angles computed in f64, stored in f32.
#[derive(Clone, Debug)]
pub struct RopeTable {
    rope_dim: usize,
    max_pos: usize,
    theta: f32,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// # Panics
    /// If `rope_dim` is odd or zero.
    pub fn new(rope_dim: usize, theta: f32, max_pos: usize) -> Self {
        assert!(
            rope_dim > 0 && rope_dim.is_multiple_of(2),
            "rope_dim must be even, got {rope_dim}"
        );
        let half = rope_dim / 2;
        let freqs: Vec<f64> = (0..half)
            .map(|i| f64::from(theta).powf(-((2 * i) as f64) / rope_dim as f64))
            .collect();
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for pos in 0..max_pos {
            for &f in &freqs {
                let a = pos as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        RopeTable {
            rope_dim,
            max_pos,
            theta,
            cos,
            sin,
        }
    }

    pub fn rope_dim(&self) -> usize {
        self.rope_dim
    }

    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    /// `(cos, sin)` of position `pos`, `rope_dim/2` each.
    pub fn row(&self, pos: usize) -> (&[f32], &[f32]) {
        let half = self.rope_dim / 2;
        (
            &self.cos[pos * half..(pos + 1) * half],
            &self.sin[pos * half..(pos + 1) * half],
        )
    }

    fn check(&self, x: &[f32], head_dim: usize, n_heads: usize, pos: usize) {
        assert!(
            pos < self.max_pos,
            "rope: position {pos} >= table size {}",
            self.max_pos
        );
        assert!(
            self.rope_dim <= head_dim,
            "rope: rope_dim {} > head_dim {head_dim}",
            self.rope_dim
        );
        assert_eq!(
            Some(x.len()),
            head_dim.checked_mul(n_heads),
            "rope: x must be n_heads x head_dim"
        );
    }

    /// NeoX / rotate-half RoPE on `n_heads` heads of `head_dim` at position `pos`: pairs
    /// `(i, i + rope_dim/2)`; dimensions past `rope_dim` are left alone.
    pub fn apply_neox(&self, isa: Isa, x: &mut [f32], head_dim: usize, n_heads: usize, pos: usize) {
        self.check(x, head_dim, n_heads, pos);
        let (c, s) = self.row(pos);
        kernels(isa).rope_neox(x, head_dim, n_heads, self.rope_dim, c, s)
    }

    /// `(cos, sin)` of a rotation by `delta` positions (negative: back), angles in f64:
    /// RoPE rotations compose, so a key rotated for position `p` and then by `delta` is the
    /// key rotated for `p + delta` (what moving cached keys needs).
    pub fn shift_row(&self, delta: i64) -> (Vec<f32>, Vec<f32>) {
        let half = self.rope_dim / 2;
        (0..half)
            .map(|i| {
                let f = f64::from(self.theta).powf(-((2 * i) as f64) / self.rope_dim as f64);
                let a = delta as f64 * f;
                (a.cos() as f32, a.sin() as f32)
            })
            .unzip()
    }

    /// [`RopeTable::apply_neox`] with a given `(cos, sin)` row (from [`RopeTable::shift_row`]).
    pub fn apply_neox_row(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        (c, s): (&[f32], &[f32]),
    ) {
        self.check(x, head_dim, n_heads, 0);
        assert!(
            c.len() == self.rope_dim / 2 && s.len() == c.len(),
            "rope: row size"
        );
        kernels(isa).rope_neox(x, head_dim, n_heads, self.rope_dim, c, s)
    }

    /// [`RopeTable::apply_normal`] with a given `(cos, sin)` row.
    pub fn apply_normal_row(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        (c, s): (&[f32], &[f32]),
    ) {
        self.check(x, head_dim, n_heads, 0);
        assert!(
            c.len() == self.rope_dim / 2 && s.len() == c.len(),
            "rope: row size"
        );
        kernels(isa).rope_normal(x, head_dim, n_heads, self.rope_dim, c, s)
    }

    /// GPT-J / "normal" RoPE: adjacent pairs `(2i, 2i + 1)`.
    pub fn apply_normal(
        &self,
        isa: Isa,
        x: &mut [f32],
        head_dim: usize,
        n_heads: usize,
        pos: usize,
    ) {
        self.check(x, head_dim, n_heads, pos);
        let (c, s) = self.row(pos);
        kernels(isa).rope_normal(x, head_dim, n_heads, self.rope_dim, c, s)
    }
}
