//! NUMA placement (`--numa`): which CPUs the thread pool runs on when memory sits on several
//! nodes (two sockets, or one EPYC in NPS2/NPS4 mode), as llama.cpp's `--numa` chooses them,
//! and where the weights live.
//!
//! - [`topology`] reads the nodes, their CPUs and distances from sysfs (any root, so tests
//!   read fake trees);
//! - [`plan`] turns a mode, the topology, the CPUs the process may use and a thread count
//!   into each thread's CPU and node ([`Placement`]), and the threads into groups by node
//!   ([`Placement::thread_groups`]: the pool claims each node's share of a product's rows on
//!   that node's threads first, `threadpool/groups.rs`);
//! - [`bind`] binds each node's share of every weight matrix to the node (`mbind`).

pub mod bind;
mod error;
pub mod plan;
pub mod topology;

pub use error::NumaError;

pub use plan::{NumaMode, Placement, plan};
pub use topology::{Node, Topology};

/// This machine's placement of `threads` threads under `mode`: the topology from sysfs, the
/// CPUs of the calling thread's mask (distinct physical cores first), and the CPU it runs on.
pub fn placement(mode: NumaMode, threads: usize) -> Result<Placement, NumaError> {
    let topo = Topology::current()?;
    let mut allowed: Vec<usize> = crate::threadpool::core_order()
        .into_iter()
        .map(|c| c.id)
        .collect();
    if allowed.is_empty() {
        allowed = topo
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect();
    }
    let start = crate::threadpool::current_cpu()
        .or_else(|| allowed.first().copied())
        .ok_or(NumaError::NoCpus { mode: mode.name() })?;
    plan(mode, &topo, &allowed, threads, start)
}
