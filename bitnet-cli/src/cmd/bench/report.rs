//! The benchmark record: one row per (model, test, threads, batch, kernel) combination, as
//! llama.cpp's `llama-bench` reports it, and its three renderings (markdown, CSV, JSON).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};

use super::paired::Paired;
use crate::output::{human_bytes, human_count};

/// Which phase a row measures: prompt processing of `n` tokens, or generating `n` tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    Pp,
    Tg,
    /// llama-batched-bench's shape: `batch` sequences, each a prompt of `n_prompt` tokens
    /// prefilled, then `n_tokens` decoded together; `mean_tps` is the total throughput.
    Mixed,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchRow {
    pub model: String,
    pub model_bytes: u64,
    pub n_params: u64,
    pub kernel: String,
    pub threads: usize,
    pub batch: usize,
    pub mmap: bool,
    pub test: TestKind,
    /// Tokens in the test: prompt length for pp, generated tokens for tg.
    pub n_tokens: usize,
    /// Tokens per second, one entry per repetition.
    pub samples: Vec<f64>,
    pub mean_tps: f64,
    pub stddev_tps: f64,
    pub peak_rss_bytes: u64,
    /// Weight bytes streamed per decoded token (tg rows).
    pub bytes_per_token: Option<u64>,
    /// Decode bound: `read_gbs / bytes_per_token` (times the sequences of a batched row), or
    /// the separate buffer's probe where the in-place read did not run (tg rows).
    pub bound_tps: Option<f64>,
    /// `mean_tps / bound_tps`.
    pub bound_share: Option<f64>,
    /// Tg rows: the best plain read, in place on the row's own thread pool, of the weights a
    /// decoded token streams, one read before each repetition (GB/s).
    #[serde(default)]
    pub read_gbs: Option<f64>,
    /// Tg rows: the median over repetitions of each repetition's tokens/s against the bound
    /// of the read just before it. Where the machine's bandwidth drifts between repetitions
    /// (a shared host), `bound_share` sets the mean against the best read and understates;
    /// this pairs each decode with its own moment.
    #[serde(default)]
    pub read_share_paired: Option<f64>,
    /// Batched tg rows: tokens/s of each sequence (`mean_tps / batch`).
    #[serde(default)]
    pub per_seq_tps: Option<f64>,
    /// Batched tg rows: `mean_tps` as a share of the same run's pp figure (how close
    /// batched decode gets to prompt-processing efficiency).
    #[serde(default)]
    pub pp_share: Option<f64>,
    /// Mixed rows: the prompt length, and prefill and decode throughput (all sequences).
    #[serde(default)]
    pub n_prompt: Option<usize>,
    #[serde(default)]
    pub prefill_tps: Option<f64>,
    #[serde(default)]
    pub decode_tps: Option<f64>,
    /// KV cache element types (`-ctk`, `-ctv`).
    #[serde(default = "f16_name")]
    pub type_k: String,
    #[serde(default = "f16_name")]
    pub type_v: String,
    /// How the KV cache is stored or scored beyond its types (`rotate kv`, `xnor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_extra: Option<String>,
    /// Tokens of context filled before the test (llama-bench's `-d`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub n_depth: usize,
    /// `--interleave` tg rows after the first configuration: round-by-round ratios against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paired: Option<Paired>,
    /// `--json-schema` tg rows: the structured-output mask's cost per sampled token
    /// (microseconds, mask and advance), and its share of the whole step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_share: Option<f64>,
}

/// The default KV cache type (reports written before the K/V type options).
fn f16_name() -> String {
    "f16".into()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl BenchRow {
    /// `pp512` / `tg128`, as llama-bench names tests.
    pub fn test_name(&self) -> String {
        let name = match self.test {
            TestKind::Pp => format!("pp{}", self.n_tokens),
            TestKind::Tg => format!("tg{}", self.n_tokens),
            TestKind::Mixed => format!("pp{}+tg{}", self.n_prompt.unwrap_or(0), self.n_tokens),
        };
        if self.n_depth > 0 {
            format!("{name} @ d{}", self.n_depth)
        } else {
            name
        }
    }

    /// The identity a row is matched on when two reports are compared.
    pub fn key(&self) -> String {
        format!(
            "{} {} t{} b{} {}{}{}",
            self.model,
            self.test_name(),
            self.threads,
            self.batch,
            self.kernel,
            if self.mmap { "" } else { " no-mmap" },
            self.kv_note().map_or(String::new(), |n| format!(" {n}"))
        )
    }

    /// `K q8_0 V q4_0` when the KV cache is not the default f16.
    pub fn kv_note(&self) -> Option<String> {
        let extra = self
            .kv_extra
            .as_deref()
            .map_or(String::new(), |e| format!(" {e}"));
        (self.type_k != "f16" || self.type_v != "f16" || !extra.is_empty())
            .then(|| format!("K {} V {}{extra}", self.type_k, self.type_v))
    }
}

/// Mean and sample standard deviation (0 for fewer than two samples).
pub fn mean_stddev(samples: &[f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    if samples.len() < 2 {
        return (mean, 0.0);
    }
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub cpu: String,
    pub logical_cpus: usize,
    /// Read bandwidth measured by the probe in this run at the most threads, if it ran.
    pub membw_gbs: Option<f64>,
    pub membw_threads: Option<usize>,
    /// The size of the probe's buffer.
    #[serde(default)]
    pub membw_bytes: Option<u64>,
    /// The probe at every thread count of the run (each tg row's bound uses its own).
    #[serde(default)]
    pub membw_by_threads: Vec<ThreadBandwidth>,
    /// The NUMA nodes the run saw (`1 node: 0 (CPUs 0-1)`), and the `--numa` mode if any.
    #[serde(default)]
    pub numa: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadBandwidth {
    pub threads: usize,
    pub gbs: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub bitnet_version: String,
    pub commit: Option<String>,
    /// UTC, RFC 3339.
    pub date: String,
    pub machine: MachineInfo,
    pub rows: Vec<BenchRow>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Md,
    Csv,
    Json,
}

pub fn write_report(out: &mut impl Write, report: &BenchReport, format: Format) -> io::Result<()> {
    match format {
        Format::Md => write_markdown(out, report),
        Format::Csv => write_csv(out, &report.rows),
        Format::Json => {
            // `io::Error::from` hands back the underlying write error (a closed pipe stays a
            // BrokenPipe that `main` recognises), where `io::Error::other` would hide it.
            serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::from)?;
            writeln!(out)
        }
    }
}

const MD_HEADER: [&str; 12] = [
    "model",
    "size",
    "params",
    "kernel",
    "threads",
    "batch",
    "test",
    "t/s",
    "peak RSS",
    "bound t/s",
    "of bound",
    "notes",
];

fn write_markdown(out: &mut impl Write, report: &BenchReport) -> io::Result<()> {
    let rows: Vec<[String; 12]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.model.clone(),
                human_bytes(r.model_bytes),
                human_count(r.n_params),
                r.kernel.clone(),
                r.threads.to_string(),
                r.batch.to_string(),
                r.test_name(),
                format!("{:.2} ± {:.2}", r.mean_tps, r.stddev_tps),
                human_bytes(r.peak_rss_bytes),
                r.bound_tps.map_or("-".into(), |b| format!("{b:.2}")),
                r.bound_share
                    .map_or("-".into(), |s| format!("{:.0}%", s * 100.0)),
                row_notes(r),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = MD_HEADER.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut s = String::from("|");
        for (cell, w) in cells.zip(&widths) {
            s.push_str(&format!(" {cell:<w$} |"));
        }
        s
    };
    writeln!(out, "{}", line(&mut MD_HEADER.iter().copied()))?;
    let sep: String = widths.iter().fold(String::from("|"), |mut s, w| {
        s.push_str(&format!(" {} |", "-".repeat(*w)));
        s
    });
    writeln!(out, "{sep}")?;
    for row in &rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    let reads: Vec<String> = report
        .rows
        .iter()
        .filter_map(|r| r.read_gbs.map(|g| format!("{g:.1}")))
        .collect();
    if !reads.is_empty() {
        writeln!(
            out,
            "\nbound = a token's weight bytes read by a plain loop, in place on the row's own pinned \
             thread pool (the fastest of the CPU's SIMD read loops; the best of one read before \
             each repetition: {} GB/s) / those bytes",
            reads.join(", ")
        )?;
    }
    if !report.machine.membw_by_threads.is_empty() {
        let list: Vec<String> = report
            .machine
            .membw_by_threads
            .iter()
            .map(|b| format!("{:.1} GB/s with {} thread(s)", b.gbs, b.threads))
            .collect();
        writeln!(
            out,
            "{}measured read bandwidth: {} (a separate {} buffer){}",
            if reads.is_empty() { "\n" } else { "" },
            list.join(", "),
            human_bytes(report.machine.membw_bytes.unwrap_or(0)),
            if reads.is_empty() {
                "; bound = bandwidth at the row's thread count / weight bytes per token"
            } else {
                ""
            },
        )?;
    }
    if let Some(numa) = &report.machine.numa {
        writeln!(out, "NUMA: {numa}")?;
    }
    Ok(())
}

/// The batched figures of a row, in words (empty for plain pp/tg rows).
fn row_notes(r: &BenchRow) -> String {
    let mut notes = Vec::new();
    if let Some(n) = r.kv_note() {
        notes.push(n);
    }
    if let Some(p) = r.per_seq_tps {
        notes.push(format!("{p:.2} t/s per sequence"));
    }
    if let Some(s) = r.pp_share {
        notes.push(format!("{:.0}% of pp", s * 100.0));
    }
    if let (Some(p), Some(d)) = (r.prefill_tps, r.decode_tps) {
        notes.push(format!("prefill {p:.2} t/s, decode {d:.2} t/s"));
    }
    if let Some(p) = &r.paired {
        notes.push(p.describe());
    }
    if let Some(s) = r.read_share_paired {
        notes.push(format!(
            "{:.0}% of the read beside each repetition",
            s * 100.0
        ));
    }
    if let (Some(us), Some(share)) = (r.mask_us, r.mask_share) {
        notes.push(format!(
            "JSON-schema mask {us:.1} us/token, {:.2}% of the step",
            share * 100.0
        ));
    }
    notes.join("; ")
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn write_csv(out: &mut impl Write, rows: &[BenchRow]) -> io::Result<()> {
    writeln!(
        out,
        "model,model_bytes,n_params,kernel,threads,batch,mmap,test,n_tokens,mean_tps,stddev_tps,peak_rss_bytes,bytes_per_token,bound_tps,bound_share,read_gbs"
    )?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.4}"));
    for r in rows {
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{:.4},{:.4},{},{},{},{},{}",
            csv_field(&r.model),
            r.model_bytes,
            r.n_params,
            csv_field(&r.kernel),
            r.threads,
            r.batch,
            r.mmap,
            r.test_name(),
            r.n_tokens,
            r.mean_tps,
            r.stddev_tps,
            r.peak_rss_bytes,
            r.bytes_per_token.map_or(String::new(), |b| b.to_string()),
            opt(r.bound_tps),
            opt(r.bound_share),
            opt(r.read_gbs),
        )?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn row(test: TestKind, n: usize, threads: usize, samples: &[f64]) -> BenchRow {
        let (mean_tps, stddev_tps) = mean_stddev(samples);
        BenchRow {
            model: "m.gguf".into(),
            model_bytes: 1 << 30,
            n_params: 2_400_000_000,
            kernel: "avx512".into(),
            threads,
            batch: 1,
            mmap: true,
            test,
            n_tokens: n,
            samples: samples.to_vec(),
            mean_tps,
            stddev_tps,
            peak_rss_bytes: 1 << 30,
            bytes_per_token: (test == TestKind::Tg).then_some(1_000_000_000),
            bound_tps: (test == TestKind::Tg).then_some(40.0),
            bound_share: (test == TestKind::Tg).then_some(mean_tps / 40.0),
            read_gbs: None,
            read_share_paired: None,
            per_seq_tps: None,
            pp_share: None,
            n_prompt: None,
            prefill_tps: None,
            decode_tps: None,
            type_k: "f16".into(),
            type_v: "f16".into(),
            kv_extra: None,
            n_depth: 0,
            paired: None,
            mask_us: None,
            mask_share: None,
        }
    }

    pub fn report(rows: Vec<BenchRow>) -> BenchReport {
        BenchReport {
            bitnet_version: "0.1.0".into(),
            commit: Some("abc1234".into()),
            date: "2026-11-21T12:00:00Z".into(),
            machine: MachineInfo {
                cpu: "test cpu".into(),
                logical_cpus: 2,
                membw_gbs: Some(40.0),
                membw_threads: Some(2),
                membw_bytes: Some(1 << 30),
                membw_by_threads: vec![ThreadBandwidth {
                    threads: 2,
                    gbs: 40.0,
                }],
                numa: Some("1 node: 0 (CPUs 0-1)".into()),
            },
            rows,
        }
    }

    #[test]
    fn mean_and_sample_stddev() {
        let (m, s) = mean_stddev(&[10.0, 12.0, 14.0]);
        assert!((m - 12.0).abs() < 1e-12);
        assert!((s - 2.0).abs() < 1e-12);
        assert_eq!(mean_stddev(&[5.0]), (5.0, 0.0));
        assert_eq!(mean_stddev(&[]), (0.0, 0.0));
    }

    #[test]
    fn markdown_has_header_separator_and_one_line_per_row() {
        let rep = report(vec![
            row(TestKind::Pp, 512, 2, &[100.0, 110.0]),
            row(TestKind::Tg, 128, 2, &[20.0, 22.0]),
        ]);
        let mut buf = Vec::new();
        write_report(&mut buf, &rep, Format::Md).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("| model") && lines[0].contains("t/s"));
        assert!(lines[1].starts_with("| ---"));
        assert!(lines[2].contains("pp512") && lines[2].contains("105.00 ± 7.07"));
        assert!(
            lines[3].contains("tg128") && lines[3].contains("52%"),
            "{}",
            lines[3]
        );
        // every table line has the same number of cells
        let cells = |l: &str| l.matches('|').count();
        assert!(lines[..4].iter().all(|l| cells(l) == cells(lines[0])));
        assert!(text.contains("measured read bandwidth: 40.0 GB/s with 2 thread(s)"));
        assert!(text.contains("NUMA: 1 node: 0 (CPUs 0-1)"));
        assert!(text.contains("bound = bandwidth at the row's thread count"));
    }

    #[test]
    fn markdown_names_the_in_place_read_when_the_rows_have_one() {
        let mut tg = row(TestKind::Tg, 128, 2, &[20.0, 22.0]);
        tg.read_gbs = Some(38.25);
        let mut buf = Vec::new();
        write_report(&mut buf, &report(vec![tg]), Format::Md).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(
            text.contains("read by a plain loop, in place on the row's own pinned thread pool")
                && text.contains("the fastest of the CPU's SIMD read loops")
                && text.contains(": 38.2 GB/s) / those bytes"),
            "{text}"
        );
        assert!(text.contains("40.0 GB/s with 2 thread(s) (a separate 1.00 GiB buffer)\n"));
        assert!(!text.contains("bound = bandwidth at the row's thread count"));
    }

    #[test]
    fn csv_has_fixed_columns_and_quotes_commas() {
        let mut r = row(TestKind::Tg, 128, 1, &[20.0]);
        r.model = "a,b.gguf".into();
        let mut buf = Vec::new();
        write_report(&mut buf, &report(vec![r]), Format::Csv).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        let n_cols = header.split(',').count();
        assert_eq!(n_cols, 16);
        assert!(header.ends_with(",bound_share,read_gbs"));
        let line = lines.next().unwrap();
        assert!(line.starts_with("\"a,b.gguf\","));
        assert!(line.contains(",tg128,128,20.0000,0.0000,"));
    }

    #[test]
    fn json_round_trips() {
        let rep = report(vec![row(TestKind::Pp, 512, 2, &[100.0, 110.0])]);
        let mut buf = Vec::new();
        write_report(&mut buf, &rep, Format::Json).unwrap();
        let back: BenchReport = serde_json::from_slice(&buf).unwrap();
        assert_eq!(back, rep);
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["rows"][0]["test"], "pp");
        assert_eq!(v["rows"][0]["n_tokens"], 512);
    }
}
