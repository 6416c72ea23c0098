//! The K and V formats of a cache as a list with one entry per layer (a calibration may give
//! every layer its own pair): whether the list is one pair for every layer, and a short
//! summary of it for people (`k q8_0 x20, q4_0 x10; v f16 x30`), which the CLI, the server and
//! the snapshot errors print instead of thirty pairs.

use super::format::KvType;

/// The pair every layer of `layers` uses, when they all use the same one (`None` for an
/// empty list or a mixed one).
pub fn uniform_layer_types(layers: &[(KvType, KvType)]) -> Option<(KvType, KvType)> {
    let first = *layers.first()?;
    layers.iter().all(|&t| t == first).then_some(first)
}

/// For messages: `k q8_0, v f16` when every layer stores the same pair, else the count of
/// layers of each format, in order of first use: `per layer: k q8_0 x20, q4_0 x10; v f16
/// x30`.
pub fn describe_layer_types(layers: &[(KvType, KvType)]) -> String {
    if let Some((k, v)) = uniform_layer_types(layers) {
        return format!("k {}, v {}", k.name(), v.name());
    }
    let k = counted(layers.iter().map(|&(k, _)| k.name()));
    let v = counted(layers.iter().map(|&(_, v)| v.name()));
    format!("per layer: k {k}; v {v}")
}

/// `a x2, b x1` for the items `a, b, a`: each distinct item once, in order of first
/// appearance, with how many times it appears.
pub(crate) fn counted<T: PartialEq + std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    let mut seen: Vec<(T, usize)> = Vec::new();
    for item in items {
        match seen.iter_mut().find(|(s, _)| *s == item) {
            Some((_, n)) => *n += 1,
            None => seen.push((item, 1)),
        }
    }
    let parts: Vec<String> = seen.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use KvType::*;

    #[test]
    fn a_uniform_list_reads_as_one_pair_and_a_mixed_one_by_counts() {
        assert_eq!(uniform_layer_types(&[]), None);
        assert_eq!(uniform_layer_types(&[(Q8_0, F16); 3]), Some((Q8_0, F16)));
        assert_eq!(describe_layer_types(&[(Q8_0, F16); 3]), "k q8_0, v f16");
        let mixed = [(Q8_0, F16), (Q4_0, F16), (Q8_0, F16)];
        assert_eq!(uniform_layer_types(&mixed), None);
        assert_eq!(
            describe_layer_types(&mixed),
            "per layer: k q8_0 x2, q4_0 x1; v f16 x3"
        );
    }
}
