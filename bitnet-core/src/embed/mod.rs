//! Text embeddings from a model's final hidden states, as llama.cpp's `llama-embedding` and
//! llama-server's `/v1/embeddings` make them: the output of the model's last norm for each
//! input token ([`crate::engine::Session::hidden_states`]), pooled into one vector an input
//! ([`Pooling`]), then normalized ([`Normalize`], llama.cpp's `embd_normalize` values), and
//! optionally quantized for storage ([`precision`]). [`embed_batch`] runs many inputs
//! through shared forward passes.

mod batch;
pub mod precision;

pub use batch::embed_batch;

use crate::engine::Session;
use crate::error::CoreError;

/// How a sequence's hidden states become its embedding (llama.cpp's `llama_pooling_type`,
/// the GGUF key `{arch}.pooling_type`: none 0, mean 1, cls 2, last 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// One vector a token.
    None,
    /// The average over every token of the input, BOS and EOS included.
    Mean,
    /// The first token's (position 0).
    Cls,
    /// The last token's: what a causal model trained for embeddings (BitNet-embedding,
    /// Qwen3-Embedding) reads, after the EOS its tokenizer appends.
    Last,
}

impl Pooling {
    /// The pooling a GGUF's `{arch}.pooling_type` value names (`None` for an unknown one:
    /// 4, rank, is a classifier head this runtime does not run).
    pub fn from_gguf(v: i64) -> Option<Pooling> {
        match v {
            0 => Some(Pooling::None),
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }

    pub fn from_name(s: &str) -> Option<Pooling> {
        match s {
            "none" => Some(Pooling::None),
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "last" => Some(Pooling::Last),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }
}

/// How an embedding is scaled after pooling (llama.cpp's `embd_normalize`): `-1` none, `0`
/// max-abs to 32760 (the int16 range, still floats), `1` taxicab (sum of `|x|`), `2`
/// Euclidean (the default), `p > 2` the p-norm. The norm is summed in f64; a zero norm leaves
/// every value 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Normalize(pub i32);

impl Default for Normalize {
    fn default() -> Self {
        Normalize(2)
    }
}

impl Normalize {
    /// Scales `v` in place.
    pub fn apply(self, v: &mut [f32]) {
        let norm: f64 = match self.0 {
            p if p < 0 => return,
            0 => v.iter().fold(0.0f64, |m, &x| m.max(f64::from(x).abs())) / 32760.0,
            1 => v.iter().map(|&x| f64::from(x).abs()).sum(),
            2 => v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt(),
            p => v
                .iter()
                .map(|&x| f64::from(x).abs().powi(p))
                .sum::<f64>()
                .powf(1.0 / f64::from(p)),
        };
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        for x in v.iter_mut() {
            *x = (f64::from(*x) * scale) as f32;
        }
    }
}

/// `hidden` (`[n][e]`, one row a token of one input) pooled into the input's embeddings: one
/// vector, or `n` with [`Pooling::None`].
pub fn pool(hidden: &[f32], e: usize, pooling: Pooling) -> Vec<Vec<f32>> {
    let n = hidden.len().checked_div(e).unwrap_or(0);
    if n == 0 {
        return Vec::new();
    }
    let row = |t: usize| hidden[t * e..(t + 1) * e].to_vec();
    match pooling {
        Pooling::None => (0..n).map(row).collect(),
        Pooling::Cls => vec![row(0)],
        Pooling::Last => vec![row(n - 1)],
        Pooling::Mean => {
            let mut sum = vec![0.0f64; e];
            for r in hidden.chunks_exact(e) {
                for (s, &x) in sum.iter_mut().zip(r) {
                    *s += f64::from(x);
                }
            }
            vec![sum.iter().map(|&s| (s / n as f64) as f32).collect()]
        }
    }
}

/// The embeddings of one input of `tokens` (as the tokenizer made them: BOS, EOS and all):
/// evaluated from an empty context on `session` (which is reset before and after), pooled
/// and normalized. Last-token pooling evaluates the hidden state of the last token only.
pub fn embed_tokens(
    session: &mut Session,
    tokens: &[u32],
    pooling: Pooling,
    normalize: Normalize,
) -> Result<Vec<Vec<f32>>, CoreError> {
    if tokens.is_empty() {
        return Err(CoreError::EmptyInput);
    }
    let e = session.model().config.n_embd;
    session.reset();
    let all = pooling != Pooling::Last;
    let hidden = session.hidden_states(tokens, all);
    session.reset();
    let mut out = pool(&hidden?, e, pooling);
    for v in &mut out {
        normalize.apply(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_picks_and_averages_rows() {
        let h = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0];
        assert_eq!(pool(&h, 2, Pooling::Cls), vec![vec![1.0, 2.0]]);
        assert_eq!(pool(&h, 2, Pooling::Last), vec![vec![5.0, 9.0]]);
        assert_eq!(pool(&h, 2, Pooling::Mean), vec![vec![3.0, 5.0]]);
        assert_eq!(pool(&h, 2, Pooling::None).len(), 3);
        assert!(pool(&[], 2, Pooling::Mean).is_empty());
        for (v, p) in [
            (0, Pooling::None),
            (1, Pooling::Mean),
            (2, Pooling::Cls),
            (3, Pooling::Last),
        ] {
            assert_eq!(Pooling::from_gguf(v), Some(p));
            assert_eq!(Pooling::from_name(p.name()), Some(p));
        }
        assert_eq!(Pooling::from_gguf(4), None);
    }

    #[test]
    fn normalization_follows_llama_cpp() {
        let base = [3.0f32, -4.0];
        let norm = |p: i32| {
            let mut v = base;
            Normalize(p).apply(&mut v);
            v
        };
        assert_eq!(norm(-1), base);
        assert_eq!(norm(2), [0.6, -0.8]);
        assert_eq!(norm(1), [3.0 / 7.0, -4.0 / 7.0]);
        assert_eq!(norm(0), [3.0 * 32760.0 / 4.0, -32760.0]);
        let p3 = (27.0f64 + 64.0).powf(1.0 / 3.0);
        assert_eq!(norm(3), [(3.0 / p3) as f32, (-4.0 / p3) as f32]);
        let mut z = [0.0f32; 3];
        Normalize(2).apply(&mut z);
        assert_eq!(z, [0.0; 3]);
    }
}
