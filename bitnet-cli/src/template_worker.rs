//! Renders the chat templates that came from a file (the model's own, or a user's
//! `--chat-template FILE`) in child processes under a memory limit.
//!
//! A template is code from an untrusted file, and minijinja keeps no memory budget: one that
//! doubles a string in a loop grows until an allocation fails, which aborts the process
//! (see bitnet-core's `chat::jinja`). So `serve` and `chat` hand such renders to
//! `bitnet __render-template` ([`crate::cmd::render_template`]), which caps its own address
//! space at [`MEMORY_BUDGET`] and renders with the same library code. Workers are kept
//! between renders (a request pays a pipe round trip, not a process start), one per render
//! in flight, and replaced when one dies. A worker killed by its limit, or past
//! [`RENDER_TIMEOUT`], is a typed error for that render alone. Built-in templates are our
//! own code and render in this process.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use bitnet_core::chat::{ChatError, ChatTemplate, RenderJob, TemplateRenderer};
use serde::{Deserialize, Serialize};

/// The address space a worker may use: far above any honest render (a long conversation
/// renders in a few MiB), far below what would hurt the machine. The model is not in it.
pub const MEMORY_BUDGET: u64 = 1 << 30;

/// The longest a render may take. The fuel budget ends a long loop in about a second; this
/// ends a short loop over huge strings, which fuel does not see.
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(10);

/// Idle workers kept for the next renders; more in flight at once are ended after use.
const MAX_IDLE: usize = 4;

/// What the allocator prints before it aborts a Rust process.
const ALLOCATION_FAILED: &str = "memory allocation of";

/// A worker's answer to one job, one JSON line.
#[derive(Debug, Serialize, Deserialize)]
pub enum Answer {
    Text(String),
    /// The render failed in the template (the detail of [`ChatError::Render`]).
    Error(String),
}

/// `template` with its renders moved to worker processes if it came from a file. The first
/// worker starts now: where none can start, that is said before anything is served, and the
/// first request does not wait for it.
pub fn confine(mut template: ChatTemplate) -> anyhow::Result<ChatTemplate> {
    if !template.is_builtin() {
        let pool = WorkerPool::bitnet();
        let first = Worker::spawn(&pool.program, &pool.args)
            .context("starting the chat template's renderer process")?;
        pool.put_back(first);
        template.set_renderer(Arc::new(pool));
    }
    Ok(template)
}

/// Worker processes for one program (this binary, in its hidden render mode).
#[derive(Debug)]
struct WorkerPool {
    program: PathBuf,
    args: Vec<OsString>,
    memory_budget: u64,
    timeout: Duration,
    idle: Mutex<Vec<Worker>>,
}

impl WorkerPool {
    fn bitnet() -> WorkerPool {
        WorkerPool {
            program: own_executable(),
            args: vec![
                "__render-template".into(),
                "--memory-budget".into(),
                MEMORY_BUDGET.to_string().into(),
            ],
            memory_budget: MEMORY_BUDGET,
            timeout: RENDER_TIMEOUT,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An idle worker that is still alive, else a new one.
    fn worker(&self) -> std::io::Result<Worker> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(mut w) = idle.pop() {
            if matches!(w.child.try_wait(), Ok(None)) {
                return Ok(w);
            }
        }
        drop(idle);
        Worker::spawn(&self.program, &self.args)
    }

    fn put_back(&self, w: Worker) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(w);
        }
    }
}

impl TemplateRenderer for WorkerPool {
    fn render(&self, job: &RenderJob) -> Result<String, ChatError> {
        let failed = |detail: String| ChatError::Renderer {
            name: job.name.clone(),
            detail,
        };
        let line = serde_json::to_string(job).map_err(|e| failed(e.to_string()))?;
        let mut w = self
            .worker()
            .map_err(|e| failed(format!("cannot start the template renderer process: {e}")))?;
        match w.ask(&line, self.timeout) {
            Reply::Answer(answer) => {
                self.put_back(w);
                match answer {
                    Answer::Text(text) => Ok(text),
                    Answer::Error(detail) => Err(ChatError::Render {
                        name: job.name.clone(),
                        detail,
                    }),
                }
            }
            Reply::TimedOut => Err(ChatError::TimedOut {
                name: job.name.clone(),
                limit: self.timeout,
            }),
            Reply::Garbled(detail) => Err(failed(format!(
                "the template renderer process answered nonsense: {detail}"
            ))),
            Reply::Died => {
                let (status, stderr) = w.reap();
                if stderr.contains(ALLOCATION_FAILED) {
                    Err(ChatError::OutOfMemory {
                        name: job.name.clone(),
                        budget_bytes: self.memory_budget,
                    })
                } else {
                    Err(failed(died(status, &stderr)))
                }
            }
        }
    }
}

fn died(status: Option<ExitStatus>, stderr: &str) -> String {
    let status = status.map_or("ended".to_owned(), |s| s.to_string());
    match stderr.lines().find(|l| !l.trim().is_empty()) {
        Some(line) => format!("the template renderer process died ({status}): {line}"),
        None => format!("the template renderer process died ({status})"),
    }
}

/// The process-creation flag (winbase.h) that starts a child in a process group of its own.
#[cfg(windows)]
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

/// This program, for the workers to run. On Linux through `/proc/self/exe`, which still
/// names the running binary after a package upgrade replaced the file.
fn own_executable() -> PathBuf {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if cfg!(target_os = "linux") && proc_exe.exists() {
        return proc_exe;
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("bitnet"))
}

/// One worker process and its pipes; killed when dropped.
#[derive(Debug)]
struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Its stdout's lines, read on a thread of their own so that a wait can time out.
    lines: Receiver<std::io::Result<String>>,
    stderr: Option<ChildStderr>,
}

enum Reply {
    Answer(Answer),
    TimedOut,
    Died,
    Garbled(String),
}

impl Worker {
    fn spawn(program: &PathBuf, args: &[OsString]) -> std::io::Result<Worker> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group: a Ctrl-C at the terminal (which interrupts a chat reply)
        // is not for the worker. It still ends with its parent, when its stdin closes.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // Windows: a new process group, which a console's Ctrl-C does not reach either.
        #[cfg(windows)]
        std::os::windows::process::CommandExt::creation_flags(&mut cmd, CREATE_NEW_PROCESS_GROUP);
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout), stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other("the worker's pipes were not opened"));
        };
        let (tx, lines) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("template-worker".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        let w = Worker {
            child,
            stdin,
            lines,
            stderr,
        };
        reader?;
        Ok(w)
    }

    fn ask(&mut self, job: &str, timeout: Duration) -> Reply {
        let sent = self
            .stdin
            .write_all(job.as_bytes())
            .and_then(|()| self.stdin.write_all(b"\n"))
            .and_then(|()| self.stdin.flush());
        if sent.is_err() {
            // A closed pipe: the worker is gone.
            return Reply::Died;
        }
        match self.lines.recv_timeout(timeout) {
            Ok(Ok(line)) => match serde_json::from_str(&line) {
                Ok(answer) => Reply::Answer(answer),
                Err(e) => Reply::Garbled(e.to_string()),
            },
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => Reply::Died,
            Err(RecvTimeoutError::Timeout) => Reply::TimedOut,
        }
    }

    /// The exit status and the start of stderr of a worker that died.
    fn reap(&mut self) -> (Option<ExitStatus>, String) {
        let status = self.child.wait().ok();
        let mut text = Vec::new();
        if let Some(e) = self.stderr.take() {
            let _ = e.take(4096).read_to_end(&mut text);
        }
        (status, String::from_utf8_lossy(&text).into_owned())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A pool whose workers are shell scripts standing in for `bitnet __render-template`.
    fn pool(script: &str, timeout: Duration) -> WorkerPool {
        WorkerPool {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            memory_budget: 123 << 20,
            timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn job() -> RenderJob {
        RenderJob {
            name: "t".into(),
            source: "{{ 1 }}".into(),
            bos_token: String::new(),
            eos_token: String::new(),
            messages: serde_json::json!([]),
            tools: None,
            add_generation_prompt: true,
        }
    }

    #[test]
    fn answers_come_back_and_the_worker_is_kept() {
        let p = pool(
            r#"while read -r line; do echo '{"Text":"hi"}'; done"#,
            Duration::from_secs(5),
        );
        assert_eq!(p.render(&job()).unwrap(), "hi");
        let first = p.idle.lock().unwrap()[0].child.id();
        assert_eq!(p.render(&job()).unwrap(), "hi");
        assert_eq!(p.idle.lock().unwrap()[0].child.id(), first, "reused");
        let p = pool(
            r#"read -r line; echo '{"Error":"boom (line 1)"}'"#,
            Duration::from_secs(5),
        );
        let e = p.render(&job()).unwrap_err();
        assert!(matches!(e, ChatError::Render { ref detail, .. } if detail == "boom (line 1)"));
    }

    #[test]
    fn an_allocation_failure_is_the_memory_budget_error() {
        let p = pool(
            "read -r line; echo 'memory allocation of 1073741824 bytes failed' >&2; kill -ABRT $$",
            Duration::from_secs(5),
        );
        let e = p.render(&job()).unwrap_err();
        assert!(
            matches!(e, ChatError::OutOfMemory { budget_bytes, .. } if budget_bytes == 123 << 20),
            "{e}"
        );
        assert!(e.to_string().contains("memory budget (123 MiB)"), "{e}");
        assert!(
            p.idle.lock().unwrap().is_empty(),
            "a dead worker is not kept"
        );
    }

    #[test]
    fn another_death_names_the_status_and_a_slow_one_is_killed() {
        let p = pool(
            "read -r line; echo 'it broke' >&2; exit 3",
            Duration::from_secs(5),
        );
        let e = p.render(&job()).unwrap_err().to_string();
        assert!(e.contains("died") && e.contains("it broke"), "{e}");

        let p = pool("read -r line; sleep 30", Duration::from_millis(200));
        let t0 = std::time::Instant::now();
        let e = p.render(&job()).unwrap_err();
        assert!(matches!(e, ChatError::TimedOut { .. }), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_worker_that_died_while_idle_is_replaced() {
        let p = pool(
            r#"while read -r line; do echo '{"Text":"ok"}'; done"#,
            Duration::from_secs(5),
        );
        assert_eq!(p.render(&job()).unwrap(), "ok");
        let idle = p.idle.lock().unwrap().pop().unwrap();
        let pid = idle.child.id();
        drop(idle); // killed
        p.put_back(Worker::spawn(&"sh".into(), &["-c".into(), "exit 0".into()]).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(p.render(&job()).unwrap(), "ok");
        assert_ne!(p.idle.lock().unwrap()[0].child.id(), pid);
    }
}
