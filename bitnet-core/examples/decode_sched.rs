//! Where a decode step's threads spend their time, from the scheduler's point of view: for
//! each thread of the process, the CPU time it got, the time it sat runnable on a run queue
//! waiting for a CPU (other processes on a shared machine), and its time slices, per token,
//! from `/proc/self/task/*/schedstat`. Next to the tokens/s of the same run this tells a
//! pool that does not scale apart from a machine that has no second core to give.
//!
//! `cargo run --release -p bitnet-core --example decode_sched -- MODEL.gguf [threads] [tokens] [head]`
//! (`head` is `native` or `q8`; Linux only).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bitnet_core::engine::{EngineOptions, Session};
use bitnet_core::model::{HeadMode, LoadOptions, Model};

/// `(comm, [on-cpu ns, run-queue wait ns, slices])` of every thread of this process.
fn schedstats() -> BTreeMap<u64, (String, [u64; 3])> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) else {
            continue;
        };
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let Ok(s) = std::fs::read_to_string(p.join("schedstat")) else {
            continue;
        };
        let v: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() == 3 {
            out.insert(tid, (comm.trim().to_string(), [v[0], v[1], v[2]]));
        }
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: decode_sched MODEL.gguf [threads] [tokens] [head]")?;
    let threads: usize = args.get(1).map_or(Ok(2), |s| s.parse())?;
    let tg: usize = args.get(2).map_or(Ok(32), |s| s.parse())?;
    let head = match args.get(3).map(String::as_str) {
        Some("native") => HeadMode::Native,
        _ => HeadMode::Q8,
    };
    let opts = LoadOptions {
        head: Some(head),
        ..LoadOptions::default()
    };
    let engine = EngineOptions {
        threads,
        n_ctx: tg + 16,
        ..EngineOptions::default()
    };
    let model = Arc::new(Model::load(path, &opts)?);
    let n_vocab = model.n_vocab() as u32;
    let mut s = Session::new(model, &engine)?;
    for i in 0..4u32 {
        s.eval(&[i + 1], false)?;
    }
    let before = schedstats();
    let t = Instant::now();
    let mut tok = 1u32;
    for i in 0..tg {
        let logits = s.eval(&[tok], false)?;
        let best = logits
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (j, &v)| if v > b.1 { (j, v) } else { b });
        tok = (best.0 as u32 + i as u32) % n_vocab;
    }
    let secs = t.elapsed().as_secs_f64();
    let after = schedstats();
    let per = |ns: u64| ns as f64 / 1e6 / tg as f64;
    println!(
        "{threads} threads, head {}: {:.2} tok/s, {:.2} ms/token wall",
        head.name(),
        tg as f64 / secs,
        1e3 * secs / tg as f64
    );
    println!("  thread             on-cpu ms/tok  runnable-waiting ms/tok  slices/tok");
    for (tid, (comm, a)) in &after {
        let b = before.get(tid).map_or([0; 3], |x| x.1);
        let d = [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
        if d[0] == 0 && d[1] == 0 {
            continue;
        }
        println!(
            "  {comm:<18} {:>13.2}  {:>23.2}  {:>10.1}",
            per(d[0]),
            per(d[1]),
            d[2] as f64 / tg as f64
        );
    }
    Ok(())
}
