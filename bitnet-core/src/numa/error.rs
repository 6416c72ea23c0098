//! Why a NUMA placement cannot be made.

/// Why a NUMA placement cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NumaError {
    #[error("unknown NUMA mode {0:?}: give distribute, isolate or numactl")]
    UnknownMode(String),
    #[error("reading the NUMA topology: {path}: {reason}")]
    Topology { path: String, reason: String },
    #[error("--numa isolate: the node this process started on (CPU {cpu}) has no CPU it may use")]
    NothingToIsolate { cpu: usize },
    #[error("--numa {mode}: the process may use no CPU of the machine's nodes")]
    NoCpus { mode: &'static str },
    #[error(
        "--numa: the system refused to pin {unpinned} of {threads} threads to their CPUs \
         (a container or cgroup CPU policy?); run without --numa, or with --numa numactl \
         inside the CPUs allowed"
    )]
    PinRefused { unpinned: usize, threads: usize },
    #[error(
        "--numa: the system refused {call} (errno {errno}: {reason}) binding {bytes} bytes of \
         weights to node(s) {nodes} (a container without CAP_SYS_NICE, a seccomp policy, a \
         cpuset without those nodes, or a kernel without NUMA?); run without --numa, or with \
         --numa numactl"
    )]
    BindRefused {
        call: &'static str,
        errno: i32,
        reason: String,
        bytes: usize,
        nodes: String,
    },
    #[error(
        "--numa {mode} binds each node's weight rows to its memory (mbind), which only Linux \
         has; run without --numa, or with --numa numactl"
    )]
    BindUnsupported { mode: &'static str },
    #[error("--numa: reading the memory policy with {call} failed (errno {errno}: {reason})")]
    PolicyUnreadable {
        call: &'static str,
        errno: i32,
        reason: String,
    },
}
