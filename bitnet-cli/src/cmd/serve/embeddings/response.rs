//! The answer of an embedding request in either shape: OpenAI's (`object: "list"`, `data`
//! with each input's vector as floats or base64, `model`, `usage`) and llama-server's bare
//! array (`index`, and `embedding` as a list of rows: one pooled row, or one a token without
//! pooling). Written straight from the vectors: a large answer builds no tree of JSON
//! values on the way.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;

use crate::cmd::serve::error::{ApiError, ApiResult};

#[derive(Serialize)]
struct OpenAiList<'a> {
    object: &'static str,
    data: Vec<OpenAiItem<'a>>,
    model: &'a str,
    usage: Usage,
}

#[derive(Serialize)]
struct OpenAiItem<'a> {
    object: &'static str,
    index: usize,
    embedding: Values<'a>,
}

/// A vector as OpenAI's `encoding_format` asks for it.
#[derive(Serialize)]
#[serde(untagged)]
enum Values<'a> {
    Floats(&'a [f32]),
    Base64(String),
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

#[derive(Serialize)]
struct LlamaItem<'a> {
    index: usize,
    embedding: &'a [Vec<f32>],
}

/// OpenAI's embeddings answer: input `i`'s pooled vector (the one of `sets[i]`) at index
/// `i`, as floats or base64; `n_tokens` is every input's token count together, specials
/// included (both `prompt_tokens` and `total_tokens`: nothing is generated).
pub fn openai_body(
    sets: &[Vec<Vec<f32>>],
    base64: bool,
    model: &str,
    n_tokens: usize,
) -> ApiResult<Vec<u8>> {
    let data = sets
        .iter()
        .enumerate()
        .map(|(index, set)| {
            let v = set.first().map_or(&[][..], Vec::as_slice);
            OpenAiItem {
                object: "embedding",
                index,
                embedding: if base64 {
                    Values::Base64(base64_f32(v))
                } else {
                    Values::Floats(v)
                },
            }
        })
        .collect();
    let list = OpenAiList {
        object: "list",
        data,
        model,
        usage: Usage {
            prompt_tokens: n_tokens,
            total_tokens: n_tokens,
        },
    };
    serde_json::to_vec(&list).map_err(|e| ApiError::internal(format!("writing the answer: {e}")))
}

/// llama-server's answer (`/embedding`, `/embeddings`, or `content`): `[{"index": i,
/// "embedding": [[...], ...]}]`, every input's rows as floats.
pub fn llama_body(sets: &[Vec<Vec<f32>>]) -> ApiResult<Vec<u8>> {
    let items: Vec<LlamaItem<'_>> = sets
        .iter()
        .enumerate()
        .map(|(index, set)| LlamaItem {
            index,
            embedding: set,
        })
        .collect();
    serde_json::to_vec(&items).map_err(|e| ApiError::internal(format!("writing the answer: {e}")))
}

/// The values as OpenAI's base64 encoding gives them: the f32s' bytes, little-endian (what
/// its client decodes with `np.frombuffer(..., dtype="float32")` on every machine it runs
/// on), in standard base64 with padding.
pub fn base64_f32(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_holds_little_endian_f32s() {
        // 1.0 = 00 00 80 3f, -2.0 = 00 00 00 c0.
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[]), "");
    }

    #[test]
    fn both_shapes() {
        let sets = vec![vec![vec![0.5f32, -0.25]], vec![vec![1.0, 0.0]]];
        let v: serde_json::Value =
            serde_json::from_slice(&openai_body(&sets, false, "m", 7).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "object": "list",
                "data": [
                    {"object": "embedding", "index": 0, "embedding": [0.5, -0.25]},
                    {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
                ],
                "model": "m",
                "usage": {"prompt_tokens": 7, "total_tokens": 7},
            })
        );
        let v: serde_json::Value = serde_json::from_slice(&llama_body(&sets).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"index": 0, "embedding": [[0.5, -0.25]]},
                {"index": 1, "embedding": [[1.0, 0.0]]},
            ])
        );
    }
}
