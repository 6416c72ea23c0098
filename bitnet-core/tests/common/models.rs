//! The small models the tests run and the engines they run them on, made one way: a
//! synthetic model written from a spec into the test's own directory and loaded with a
//! chosen kernel set; an unpinned engine (tests run side by side); a scheduler over it.

use std::path::PathBuf;
use std::sync::Arc;

use bitnet_core::engine::{Engine, EngineOptions};
use bitnet_core::model::{LoadOptions, Model};
use bitnet_core::scheduler::{Scheduler, SchedulerOptions};
use bitnet_core::synth::{SynthSpec, write_model};
use bitnet_kernels::Isa;

/// The `tiny` preset with `n_layer` layers.
pub fn tiny(n_layer: usize) -> SynthSpec {
    SynthSpec {
        n_layer,
        ..preset("tiny")
    }
}

/// A synth preset by name.
pub fn preset(name: &str) -> SynthSpec {
    SynthSpec::preset(name).expect("preset")
}

/// The model `spec` describes, written to `model.gguf` in a fresh directory named after
/// `tag`.
pub fn synth_file(tag: &str, spec: &SynthSpec) -> PathBuf {
    let path = super::tmp_dir(tag).join("model.gguf");
    write_model(spec, &path, |_, _| {}).expect("write synthetic model");
    path
}

/// [`synth_file`] loaded with `isa` (`None`: the best this CPU has, or `BITNET_KERNEL`);
/// the file's path comes back too.
pub fn synth_model(tag: &str, spec: &SynthSpec, isa: Option<Isa>) -> (Arc<Model>, PathBuf) {
    let path = synth_file(tag, spec);
    let opts = LoadOptions {
        isa,
        ..LoadOptions::default()
    };
    (Arc::new(Model::load(&path, &opts).unwrap()), path)
}

/// Engine options for tests: the defaults, unpinned.
pub fn unpinned() -> EngineOptions {
    EngineOptions {
        pin: false,
        ..EngineOptions::default()
    }
}

/// An unpinned engine over `model` with `n_ctx` positions, passes of `batch` tokens and
/// `threads` threads.
pub fn engine(model: &Arc<Model>, n_ctx: usize, batch: usize, threads: usize) -> Engine {
    engine_with(
        model,
        EngineOptions {
            threads,
            n_ctx,
            batch,
            ..unpinned()
        },
    )
}

/// An engine over `model` with `opts`.
pub fn engine_with(model: &Arc<Model>, opts: EngineOptions) -> Engine {
    Engine::new(model.clone(), &opts).unwrap()
}

/// A scheduler of at most `max_running` requests over [`engine`]`(model, n_ctx, batch,
/// threads)`.
pub fn sched(
    model: &Arc<Model>,
    n_ctx: usize,
    batch: usize,
    max_running: usize,
    threads: usize,
) -> Scheduler {
    Scheduler::new(
        engine(model, n_ctx, batch, threads),
        SchedulerOptions { max_running },
    )
}
