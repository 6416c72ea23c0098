//! `generate -v`'s load figures: where the load's time went (one entry per step of
//! `Model::load`, then the engine's creation) and where the weights live, beside the KV
//! cache. `scripts/load-mem.sh` reads the memory line to check peak RSS against what the run
//! needs, so its wording is an interface: `weights in use X MiB`, `KV Y MiB` and
//! `peak RSS Z MiB`.

use bitnet_core::model::{LoadStats, WeightMemory};

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// `load phases: open 0.012s, tokenizer 0.031s, ... | engine 0.002s`.
pub fn phases_line(stats: &LoadStats, engine_secs: f64) -> String {
    let steps: Vec<String> = stats
        .phases
        .iter()
        .map(|p| {
            let beside = if p.beside { " (own thread)" } else { "" };
            format!("{} {:.3}s{beside}", p.name, p.secs)
        })
        .collect();
    format!(
        "load phases: {} (total {:.3}s, {}) | engine {engine_secs:.3}s",
        steps.join(", "),
        stats.load_secs,
        crate::output::count(stats.threads, "thread")
    )
}

/// `memory: weights in use X MiB (repacked A, copied C, mapped B MiB; E MiB mapped, read by
/// row), KV Y MiB, peak RSS Z MiB`: the weights a run keeps resident
/// ([`WeightMemory::in_use`]), the KV cache's bytes, and the process's peak resident set so
/// far (`VmHWM`; left out where it cannot be read).
pub fn memory_line(m: &WeightMemory, kv_bytes: u64, peak_rss: u64) -> String {
    let peak = if peak_rss > 0 {
        format!(", peak RSS {} MiB", mib(peak_rss))
    } else {
        String::new()
    };
    format!(
        "memory: weights in use {} MiB (repacked {}, copied {}, mapped {} MiB; {} MiB mapped, read by row), KV {} MiB{peak}",
        mib(m.in_use()),
        mib(m.repacked),
        mib(m.copied),
        mib(m.mapped),
        mib(m.mapped_by_row),
        mib(kv_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The number right after `key` in `line` (as `scripts/load-mem.sh` reads it).
    fn figure(line: &str, key: &str) -> f64 {
        let rest = &line[line.find(key).expect(key) + key.len()..];
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'));
        rest[..end.unwrap_or(rest.len())].parse().unwrap()
    }

    #[test]
    fn memory_line_parts_add_up() {
        let m = WeightMemory {
            repacked: 500 << 20,
            copied: 300 << 20,
            mapped: 7 << 20,
            mapped_by_row: 600 << 20,
        };
        let line = memory_line(&m, 288 << 20, 1200 << 20);
        assert_eq!(figure(&line, "weights in use "), 807.0);
        assert_eq!(
            figure(&line, "(repacked ") + figure(&line, "copied ") + figure(&line, "mapped "),
            807.0
        );
        assert_eq!(figure(&line, "KV "), 288.0);
        assert_eq!(figure(&line, "peak RSS "), 1200.0);
        assert!(!memory_line(&m, 0, 0).contains("peak"));
        assert!(line.contains("600.0 MiB mapped, read by row"), "{line}");
    }
}
