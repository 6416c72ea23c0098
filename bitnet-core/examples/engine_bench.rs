//! Whole-model speed of the engine: prompt processing (pp) and token generation (tg) in
//! tokens per second, with a per-op profile of the decode steps.
//!
//! `cargo run --release -p bitnet-core --example engine_bench -- MODEL.gguf [threads] [pp] [tg] [head]`
//! If MODEL.gguf does not exist it is generated from the `2b-4t` synth preset first
//! (about 1.2 GB). `head` is `native` (default) or `q8`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bitnet_core::engine::{EngineOptions, Session};
use bitnet_core::model::{HeadMode, LoadOptions, Model};
use bitnet_core::synth::{SynthSpec, write_model};

/// User + system CPU seconds of this process so far (all threads), from /proc/self/stat;
/// on a shared machine this is steadier than wall time.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .map_or("/tmp/bitnet-2b-4t-synth.gguf", String::as_str);
    let threads: usize = args.get(1).map_or(Ok(0), |s| s.parse())?;
    let pp: usize = args.get(2).map_or(Ok(128), |s| s.parse())?;
    let tg: usize = args.get(3).map_or(Ok(32), |s| s.parse())?;
    let head = match args.get(4).map(String::as_str) {
        Some("q8") => HeadMode::Q8,
        _ => HeadMode::Native,
    };
    if !Path::new(path).exists() {
        eprintln!("generating {path} from the 2b-4t preset ...");
        let spec = SynthSpec::preset("2b-4t")?;
        write_model(&spec, Path::new(path), |_, _| {})?;
    }
    let opts = LoadOptions {
        head: Some(head),
        ..LoadOptions::default()
    };
    let engine = EngineOptions {
        threads,
        n_ctx: pp + tg + 8,
        ..EngineOptions::default()
    };
    let model = Arc::new(Model::load(path, &opts)?);
    let st = model.load_stats();
    println!(
        "loaded in {:.2}s on {} threads: {:.0} MiB weights in memory, {:.0} MiB mapped, isa {}, head {}",
        st.load_secs,
        st.threads,
        st.weight_bytes as f64 / 1048576.0,
        st.mapped_bytes as f64 / 1048576.0,
        st.isa,
        st.head_mode.name()
    );
    let n_vocab = model.n_vocab() as u32;
    let prompt: Vec<u32> = (0..pp as u32).map(|i| (i * 7919 + 1) % n_vocab).collect();
    let mut s = Session::new(model, &engine)?;
    println!(
        "engine: {} threads, context {}, batch {}",
        s.threads(),
        s.n_ctx(),
        s.prefill_chunk()
    );
    // Warm-up (page in the map, touch every buffer).
    s.eval(&prompt[..pp.min(8)], false)?;
    s.reset();

    s.set_profiling(true);
    let (t, c) = (Instant::now(), cpu_secs());
    s.eval(&prompt, false)?;
    let pp_secs = t.elapsed().as_secs_f64();
    let pp_cpu = cpu_secs() - c;
    println!(
        "pp{pp}: {:.1} tok/s ({pp_secs:.3}s wall, {:.1} tok per cpu-second)",
        pp as f64 / pp_secs,
        pp as f64 / pp_cpu
    );

    print_profile(&s.profile().clone(), pp_secs, 1);
    s.set_profiling(false);
    s.set_profiling(true);
    let mut tok = 1u32;
    let (t, c) = (Instant::now(), cpu_secs());
    for i in 0..tg {
        let logits = s.eval(&[tok], false)?;
        let best = logits
            .iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (j, &v)| if v > b.1 { (j, v) } else { b });
        tok = (best.0 as u32 + i as u32) % n_vocab;
    }
    let tg_secs = t.elapsed().as_secs_f64();
    let tg_cpu = cpu_secs() - c;
    println!(
        "tg{tg}: {:.2} tok/s ({:.2} ms/token wall, {:.2} cpu-ms/token)",
        tg as f64 / tg_secs,
        1e3 * tg_secs / tg as f64,
        1e3 * tg_cpu / tg as f64
    );
    print_profile(&s.profile().clone(), tg_secs, tg);
    Ok(())
}

fn print_profile(prof: &bitnet_core::engine::Profile, total: f64, per: usize) {
    for r in prof.rows() {
        println!(
            "  {:<16} {:>9.2} ms/eval {:>6.1}%  ({} calls)",
            r.name,
            1e3 * r.seconds / per as f64,
            100.0 * r.seconds / total,
            r.calls
        );
    }
}
