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
}
