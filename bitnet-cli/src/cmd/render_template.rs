//! `bitnet __render-template` (hidden): the child process that renders the chat templates
//! read from files, under a memory limit it sets on itself before it reads anything
//! ([`crate::template_worker`] starts it and owns the protocol). It answers one JSON line
//! ([`Answer`]) per job line on stdin, until stdin closes. A template that outgrows the
//! limit makes an allocation fail, which aborts this process alone; the parent reads that
//! from its exit and its stderr.

use std::io::{BufRead, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};

use anyhow::{Context, Result};
use bitnet_core::chat::{ChatError, RenderJob};

use crate::template_worker::Answer;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The address space this process may use, in bytes.
    #[arg(long, value_name = "BYTES")]
    pub memory_budget: u64,
}

pub fn run(args: Args) -> Result<()> {
    limit_memory(args.memory_budget)?;
    // A panic is answered (below), not printed: stderr is read only when the process died.
    std::panic::set_hook(Box::new(|_| {}));
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line.context("reading a render job")?;
        let job: RenderJob = serde_json::from_str(&line).context("parsing a render job")?;
        let answer = match catch_unwind(AssertUnwindSafe(|| job.render())) {
            Ok(Ok(text)) => Answer::Text(text),
            Ok(Err(ChatError::Render { detail, .. })) => Answer::Error(detail),
            Ok(Err(e)) => Answer::Error(e.to_string()),
            Err(panic) => Answer::Error(format!(
                "the template engine failed: {}",
                panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic")
            )),
        };
        serde_json::to_writer(&mut out, &answer).context("writing a render's answer")?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
}

/// Caps this process's address space (soft and hard, so nothing in it can raise the cap
/// again), never above a hard limit it was started under.
#[cfg(unix)]
fn limit_memory(budget: u64) -> Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // OpenBSD has no RLIMIT_AS; its RLIMIT_DATA covers malloc's mappings.
    #[cfg(target_os = "openbsd")]
    let resource = Resource::Data;
    #[cfg(not(target_os = "openbsd"))]
    let resource = Resource::As;
    let cap = getrlimit(resource)
        .maximum
        .map_or(budget, |hard| hard.min(budget));
    setrlimit(
        resource,
        Rlimit {
            current: Some(cap),
            maximum: Some(cap),
        },
    )
    .with_context(|| format!("limiting the template renderer's memory to {cap} bytes"))
}

/// Windows: a Job Object's per-process memory limit ([`crate::job_object`]).
#[cfg(windows)]
fn limit_memory(budget: u64) -> Result<()> {
    crate::job_object::limit_own_memory(budget).with_context(|| {
        format!("limiting the template renderer's memory to {budget} bytes (Job Object)")
    })
}

/// Neither Unix nor Windows: no memory limit to set. The render still runs in its own
/// process, so a template that exhausts memory kills this process, not the one serving,
/// and the parent's timeout still ends it.
#[cfg(not(any(unix, windows)))]
fn limit_memory(_budget: u64) -> Result<()> {
    Ok(())
}
