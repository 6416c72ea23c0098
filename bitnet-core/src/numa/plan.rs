//! Which CPU (and so which node) each pool thread runs on under a `--numa` mode.

use super::Topology;
use super::error::NumaError;
use crate::threadpool::ThreadGroups;

/// llama.cpp's `--numa` modes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NumaMode {
    /// Threads spread over every node the process may run on, in proportion to the CPUs it
    /// may use there; each node's threads are consecutive (thread 0 on the first).
    Distribute,
    /// Only the node the process started on (where its memory was first touched).
    Isolate,
    /// Only the CPUs an outer `numactl` (or `taskset`, or a cgroup) left the process, in
    /// their order.
    Numactl,
}

impl NumaMode {
    pub fn parse(s: &str) -> Result<NumaMode, NumaError> {
        match s {
            "distribute" => Ok(NumaMode::Distribute),
            "isolate" => Ok(NumaMode::Isolate),
            "numactl" => Ok(NumaMode::Numactl),
            _ => Err(NumaError::UnknownMode(s.to_owned())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NumaMode::Distribute => "distribute",
            NumaMode::Isolate => "isolate",
            NumaMode::Numactl => "numactl",
        }
    }

    /// Whether the engine binds each node's weight rows to that node (`numa::bind`).
    /// `numactl` leaves memory to the outer `numactl` (its `--membind` or `--interleave`
    /// stays in force); the other two bind.
    pub fn binds_memory(self) -> bool {
        !matches!(self, NumaMode::Numactl)
    }
}

/// Each thread's CPU and node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub cpus: Vec<usize>,
    pub nodes: Vec<usize>,
}

impl Placement {
    /// Threads per node, `(node, threads)` in node order.
    pub fn threads_per_node(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for &n in &self.nodes {
            match out.iter_mut().find(|(id, _)| *id == n) {
                Some((_, c)) => *c += 1,
                None => out.push((n, 1)),
            }
        }
        out.sort_unstable();
        out
    }

    /// The threads grouped by node (one group per node with threads, at most
    /// [`crate::threadpool::MAX_GROUPS`]; a group's labels are its nodes): how the pool
    /// shares rows out and how the weights are bound.
    pub fn thread_groups(&self) -> ThreadGroups {
        ThreadGroups::new(&self.nodes)
    }
}

/// The placement of `threads` threads: `allowed` are the CPUs the process may use, in the
/// order to take them (distinct physical cores first); `start_cpu` the CPU the process runs
/// on now (its node is `isolate`'s). More threads than CPUs take them round again.
pub fn plan(
    mode: NumaMode,
    topo: &Topology,
    allowed: &[usize],
    threads: usize,
    start_cpu: usize,
) -> Result<Placement, NumaError> {
    // Each node's allowed CPUs, in `allowed`'s order.
    let per_node: Vec<(usize, Vec<usize>)> = topo
        .nodes
        .iter()
        .map(|n| {
            let cpus = allowed
                .iter()
                .copied()
                .filter(|c| n.cpus.contains(c))
                .collect();
            (n.id, cpus)
        })
        .filter(|(_, c): &(usize, Vec<usize>)| !c.is_empty())
        .collect();
    let take = |cpus: &[usize], k: usize| cpus[k % cpus.len()];
    let mut placement = Placement {
        cpus: Vec::with_capacity(threads),
        nodes: Vec::with_capacity(threads),
    };
    match mode {
        NumaMode::Isolate => {
            let node = topo.node_of(start_cpu);
            let cpus = per_node
                .iter()
                .find(|(id, _)| Some(*id) == node)
                .map(|(_, c)| c.as_slice())
                .ok_or(NumaError::NothingToIsolate { cpu: start_cpu })?;
            for t in 0..threads {
                placement.cpus.push(take(cpus, t));
                placement.nodes.push(node.unwrap_or(0));
            }
        }
        NumaMode::Numactl => {
            let cpus: Vec<usize> = allowed
                .iter()
                .copied()
                .filter(|&c| topo.node_of(c).is_some())
                .collect();
            if cpus.is_empty() {
                return Err(NumaError::NoCpus { mode: mode.name() });
            }
            for t in 0..threads {
                let c = take(&cpus, t);
                placement.cpus.push(c);
                placement.nodes.push(topo.node_of(c).unwrap_or(0));
            }
        }
        NumaMode::Distribute => {
            if per_node.is_empty() {
                return Err(NumaError::NoCpus { mode: mode.name() });
            }
            // Threads in proportion to each node's CPUs (largest remainders), at least one a
            // node while threads last.
            let total: usize = per_node.iter().map(|(_, c)| c.len()).sum();
            let mut counts: Vec<usize> = per_node
                .iter()
                .map(|(_, c)| threads * c.len() / total)
                .collect();
            let mut order: Vec<usize> = (0..per_node.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse((threads * per_node[i].1.len()) % total));
            let mut left = threads - counts.iter().sum::<usize>();
            for &i in order.iter().cycle().take(per_node.len() * 2) {
                if left == 0 {
                    break;
                }
                if counts[i] == 0 || counts.iter().all(|&c| c > 0) {
                    counts[i] += 1;
                    left -= 1;
                }
            }
            for ((id, cpus), &n) in per_node.iter().zip(&counts) {
                for k in 0..n {
                    placement.cpus.push(take(cpus, k));
                    placement.nodes.push(*id);
                }
            }
        }
    }
    Ok(placement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numa::Topology;
    use crate::numa::topology::tests::fake_tree;

    fn two_nodes() -> Topology {
        let root = fake_tree(
            "plan2",
            &[
                ("0-3,8-11", "10 21 17"),
                ("4-7,12-15", "21 10 28"),
                ("", "17 28 10"),
            ],
            Some("0-15"),
        );
        Topology::read(&root).unwrap()
    }

    #[test]
    fn modes_parse_by_name() {
        for m in [NumaMode::Distribute, NumaMode::Isolate, NumaMode::Numactl] {
            assert_eq!(NumaMode::parse(m.name()).unwrap(), m);
        }
        assert!(
            NumaMode::parse("spread")
                .unwrap_err()
                .to_string()
                .contains("distribute")
        );
    }

    #[test]
    fn distribute_spreads_threads_over_nodes_in_proportion() {
        let t = two_nodes();
        let all: Vec<usize> = (0..16).collect();
        let p = plan(NumaMode::Distribute, &t, &all, 8, 0).unwrap();
        assert_eq!(p.threads_per_node(), vec![(0, 4), (1, 4)]);
        assert_eq!(p.cpus, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        // An uneven mask: 6 CPUs on node 0, 2 on node 1; 4 threads go 3 + 1.
        let mask = [0, 1, 2, 3, 8, 9, 12, 13];
        let p = plan(NumaMode::Distribute, &t, &mask, 4, 0).unwrap();
        assert_eq!(p.threads_per_node(), vec![(0, 3), (1, 1)]);
        // One thread stays on the first node; three on 8+8 CPUs give 2 + 1.
        assert_eq!(
            plan(NumaMode::Distribute, &t, &all, 1, 5).unwrap().nodes,
            vec![0]
        );
        let p = plan(NumaMode::Distribute, &t, &all, 3, 0).unwrap();
        assert_eq!(p.threads_per_node().iter().map(|x| x.1).sum::<usize>(), 3);
        assert_eq!(p.threads_per_node().len(), 2);
        // More threads than CPUs go round again.
        let p = plan(NumaMode::Distribute, &t, &[0, 4], 4, 0).unwrap();
        assert_eq!(p.cpus, vec![0, 0, 4, 4]);
    }

    #[test]
    fn groups_follow_the_nodes_with_threads_and_skip_a_memory_only_node() {
        let t = two_nodes();
        // 6 CPUs on node 0, 2 on node 1: 4 threads go 3 + 1; node 2 has memory only.
        let mask = [0, 1, 2, 3, 8, 9, 12, 13];
        let g = plan(NumaMode::Distribute, &t, &mask, 4, 0)
            .unwrap()
            .thread_groups();
        assert_eq!((g.len(), g.threads(0), g.threads(1)), (2, 3, 1));
        assert_eq!((g.labels(0), g.labels(1)), (&[0][..], &[1][..]));
        assert_eq!(
            (0..4).map(|t| g.of_thread(t)).collect::<Vec<_>>(),
            [0, 0, 0, 1]
        );
        let g = plan(NumaMode::Isolate, &t, &mask, 4, 13)
            .unwrap()
            .thread_groups();
        assert_eq!((g.len(), g.labels(0)), (1, &[1][..]));
        assert!(NumaMode::Distribute.binds_memory() && !NumaMode::Numactl.binds_memory());
    }

    #[test]
    fn isolate_keeps_the_start_node_and_refuses_an_empty_one() {
        let t = two_nodes();
        let all: Vec<usize> = (0..16).collect();
        let p = plan(NumaMode::Isolate, &t, &all, 4, 13).unwrap();
        assert_eq!(p.cpus, vec![4, 5, 6, 7]);
        assert_eq!(p.threads_per_node(), vec![(1, 4)]);
        let e = plan(NumaMode::Isolate, &t, &[0, 1], 2, 13).unwrap_err();
        assert_eq!(e, NumaError::NothingToIsolate { cpu: 13 });
    }

    #[test]
    fn numactl_takes_the_mask_as_it_is() {
        let t = two_nodes();
        let p = plan(NumaMode::Numactl, &t, &[12, 13, 2], 3, 0).unwrap();
        assert_eq!(p.cpus, vec![12, 13, 2]);
        assert_eq!(p.nodes, vec![1, 1, 0]);
        assert!(plan(NumaMode::Numactl, &t, &[99], 1, 0).is_err());
    }

    #[test]
    fn one_node_machine_every_mode_gives_the_same_cpus() {
        let root = fake_tree("plan1", &[("0-1", "10")], Some("0-1"));
        let t = Topology::read(&root).unwrap();
        for m in [NumaMode::Distribute, NumaMode::Isolate, NumaMode::Numactl] {
            let p = plan(m, &t, &[0, 1], 2, 1).unwrap();
            assert_eq!(
                (p.cpus.as_slice(), p.nodes.as_slice()),
                (&[0, 1][..], &[0, 0][..]),
                "{m:?}"
            );
        }
    }
}
