//! The figures of each run (rates and latency percentiles) and their output as a table,
//! CSV or JSON.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Csv,
    Json,
}

/// p50, p90, p99 in milliseconds (`None` without samples).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Percentiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

impl Percentiles {
    fn of(mut secs: Vec<f64>) -> Percentiles {
        if secs.is_empty() {
            return Percentiles::default();
        }
        secs.sort_by(f64::total_cmp);
        // Nearest rank.
        let at = |q: f64| {
            let rank = (q * secs.len() as f64).ceil() as usize;
            Some(secs[rank.clamp(1, secs.len()) - 1] * 1e3)
        };
        Percentiles {
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// `closed` (concurrency) or `open` (requests per second offered).
    pub mode: String,
    pub level: f64,
    pub seconds: f64,
    pub requests_ok: u64,
    pub requests_failed: u64,
    pub requests_per_s: f64,
    pub generated_tokens: u64,
    pub tokens_per_s: f64,
    pub ttft_ms: Percentiles,
    pub inter_token_ms: Percentiles,
    pub e2e_ms: Percentiles,
    pub errors: BTreeMap<String, u64>,
    /// Waits before a next request: after a 429/503 (as `Retry-After` said) or another
    /// error (closed loop), or pauses of the clock after a 429/503 (open loop).
    pub backoffs: u64,
    /// Their total, summed over the clients.
    pub backoff_s: f64,
}

impl RunResult {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mode: String,
        level: f64,
        seconds: f64,
        ok: u64,
        tokens: u64,
        ttft: Vec<f64>,
        gaps: Vec<f64>,
        e2e: Vec<f64>,
        errors: BTreeMap<String, u64>,
        backoffs: u64,
        backoff_s: f64,
    ) -> RunResult {
        let rate = |n: u64| {
            if seconds > 0.0 {
                n as f64 / seconds
            } else {
                0.0
            }
        };
        RunResult {
            mode,
            level,
            seconds,
            requests_ok: ok,
            requests_failed: errors.values().sum(),
            requests_per_s: rate(ok),
            generated_tokens: tokens,
            tokens_per_s: rate(tokens),
            ttft_ms: Percentiles::of(ttft),
            inter_token_ms: Percentiles::of(gaps),
            e2e_ms: Percentiles::of(e2e),
            errors,
            backoffs,
            backoff_s,
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.1}"))
}

fn errors_text(e: &BTreeMap<String, u64>) -> String {
    if e.is_empty() {
        return "none".to_owned();
    }
    e.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn print(results: &[RunResult], format: Format) {
    match format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(results).expect("plain data serializes")
        ),
        Format::Csv => {
            println!(
                "mode,level,seconds,requests_ok,requests_failed,requests_per_s,generated_tokens,tokens_per_s,\
                 ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,itl_p50_ms,itl_p90_ms,itl_p99_ms,\
                 e2e_p50_ms,e2e_p90_ms,e2e_p99_ms,errors,backoffs,backoff_s"
            );
            for r in results {
                println!(
                    "{},{},{:.2},{},{},{:.3},{},{:.2},{},{},{},{},{},{},{},{},{},{},{},{:.2}",
                    r.mode,
                    r.level,
                    r.seconds,
                    r.requests_ok,
                    r.requests_failed,
                    r.requests_per_s,
                    r.generated_tokens,
                    r.tokens_per_s,
                    ms(r.ttft_ms.p50),
                    ms(r.ttft_ms.p90),
                    ms(r.ttft_ms.p99),
                    ms(r.inter_token_ms.p50),
                    ms(r.inter_token_ms.p90),
                    ms(r.inter_token_ms.p99),
                    ms(r.e2e_ms.p50),
                    ms(r.e2e_ms.p90),
                    ms(r.e2e_ms.p99),
                    errors_text(&r.errors).replace(' ', ";"),
                    r.backoffs,
                    r.backoff_s,
                );
            }
        }
        Format::Text => {
            println!(
                "{:>6} {:>6} {:>7} {:>6} {:>8} {:>9} {:>22} {:>22} {:>24} {:>14}  errors",
                "mode",
                "level",
                "ok",
                "fail",
                "req/s",
                "tok/s",
                "TTFT p50/p90/p99 ms",
                "ITL p50/p90/p99 ms",
                "E2E p50/p90/p99 ms",
                "backoffs (s)"
            );
            for r in results {
                let p = |p: &Percentiles| format!("{}/{}/{}", ms(p.p50), ms(p.p90), ms(p.p99));
                println!(
                    "{:>6} {:>6} {:>7} {:>6} {:>8.2} {:>9.1} {:>22} {:>22} {:>24} {:>14}  {}",
                    r.mode,
                    r.level,
                    r.requests_ok,
                    r.requests_failed,
                    r.requests_per_s,
                    r.tokens_per_s,
                    p(&r.ttft_ms),
                    p(&r.inter_token_ms),
                    p(&r.e2e_ms),
                    format!("{} ({:.1})", r.backoffs, r.backoff_s),
                    errors_text(&r.errors),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(|i| f64::from(i) / 1e3).collect();
        let p = Percentiles::of(v);
        assert_eq!(p.p50, Some(50.0));
        assert_eq!(p.p90, Some(90.0));
        assert_eq!(p.p99, Some(99.0));
        assert!(Percentiles::of(Vec::new()).p50.is_none());
        assert_eq!(Percentiles::of(vec![0.002]).p99, Some(2.0));
    }
}
