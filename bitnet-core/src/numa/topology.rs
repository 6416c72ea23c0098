//! The machine's NUMA nodes as Linux describes them under `/sys/devices/system/node`:
//! `nodeN/cpulist` (the node's CPUs, `0-3,8-11`), `nodeN/distance` (one figure per node,
//! 10 for itself), and `/sys/devices/system/cpu/online` for the CPUs that are up. A node may
//! have no CPU (memory only: CXL or HBM expanders); offline CPUs are left out. Without the
//! tree (another OS, a container that hides it) the machine is one node of every online CPU.

use std::path::Path;

use super::error::NumaError;

/// One node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: usize,
    /// Online CPUs, ascending.
    pub cpus: Vec<usize>,
    /// Distance to each node of [`Topology::nodes`], in their order (empty if unknown).
    pub distances: Vec<u32>,
}

/// The nodes, ascending by id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    pub nodes: Vec<Node>,
}

/// The nodes that have memory (`/sys/devices/system/node/has_memory`), ascending; `None`
/// where the file is missing or unreadable (then every node is taken to have some).
pub fn nodes_with_memory() -> Option<Vec<usize>> {
    nodes_with_memory_in(Path::new("/sys/devices/system"))
}

/// [`nodes_with_memory`] under `root` (a copy of `/sys/devices/system`).
pub fn nodes_with_memory_in(root: &Path) -> Option<Vec<usize>> {
    let text = std::fs::read_to_string(root.join("node/has_memory")).ok()?;
    parse_cpulist(text.trim()).ok()
}

impl Topology {
    /// The machine's topology (`/sys/devices/system`).
    pub fn current() -> Result<Topology, NumaError> {
        Topology::read(Path::new("/sys/devices/system"))
    }

    /// The topology under `root` (a copy of `/sys/devices/system`: `node/` and `cpu/online`).
    pub fn read(root: &Path) -> Result<Topology, NumaError> {
        let err = |path: &Path, reason: String| NumaError::Topology {
            path: path.display().to_string(),
            reason,
        };
        let read =
            |path: &Path| std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()));
        let online_path = root.join("cpu/online");
        let online = match std::fs::read_to_string(&online_path) {
            Ok(s) => Some(parse_cpulist(s.trim()).map_err(|r| err(&online_path, r))?),
            Err(_) => None,
        };
        let node_dir = root.join("node");
        let mut ids: Vec<usize> = match std::fs::read_dir(&node_dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()
                        .and_then(|n| n.strip_prefix("node"))
                        .and_then(|n| n.parse().ok())
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        ids.sort_unstable();
        if ids.is_empty() {
            // No NUMA tree: one node of the online CPUs (or of every CPU the OS reports).
            let cpus = online.unwrap_or_else(|| {
                (0..std::thread::available_parallelism().map_or(1, usize::from)).collect()
            });
            return Ok(Topology {
                nodes: vec![Node {
                    id: 0,
                    cpus,
                    distances: vec![10],
                }],
            });
        }
        let mut nodes = Vec::with_capacity(ids.len());
        for &id in &ids {
            let dir = node_dir.join(format!("node{id}"));
            let list_path = dir.join("cpulist");
            let mut cpus =
                parse_cpulist(read(&list_path)?.trim()).map_err(|r| err(&list_path, r))?;
            if let Some(on) = &online {
                cpus.retain(|c| on.binary_search(c).is_ok());
            }
            let dist_path = dir.join("distance");
            let distances = match std::fs::read_to_string(&dist_path) {
                Ok(s) => {
                    let d: Result<Vec<u32>, _> = s.split_whitespace().map(str::parse).collect();
                    let d = d.map_err(|e| err(&dist_path, e.to_string()))?;
                    if d.len() != ids.len() {
                        return Err(err(
                            &dist_path,
                            format!("{} distances for {} nodes", d.len(), ids.len()),
                        ));
                    }
                    d
                }
                Err(_) => Vec::new(),
            };
            nodes.push(Node {
                id,
                cpus,
                distances,
            });
        }
        Ok(Topology { nodes })
    }

    /// The node CPU `cpu` belongs to.
    pub fn node_of(&self, cpu: usize) -> Option<usize> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map(|n| n.id)
    }

    /// `"2 nodes: 0 (CPUs 0-7), 1 (CPUs 8-15)"`, as `bench` reports it.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                if n.cpus.is_empty() {
                    format!("{} (memory only)", n.id)
                } else {
                    format!("{} (CPUs {})", n.id, format_cpulist(&n.cpus))
                }
            })
            .collect();
        let count = self.nodes.len();
        format!(
            "{count} node{}: {}",
            if count == 1 { "" } else { "s" },
            nodes.join(", ")
        )
    }
}

/// `0-3,8,10-11` -> `[0, 1, 2, 3, 8, 10, 11]` (empty text: no CPU).
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("{part:?} is not a CPU or a range of CPUs");
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            None => {
                let a: usize = part.parse().map_err(|_| bad())?;
                (a, a)
            }
        };
        if a > b || b >= 1 << 16 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The inverse of [`parse_cpulist`]: runs as ranges.
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake `/sys/devices/system` with `nodes` (cpulist, distance line) and `online`.
    pub(crate) fn fake_tree(name: &str, nodes: &[(&str, &str)], online: Option<&str>) -> PathBuf {
        // Tests run in parallel: each tree is its own folder.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root =
            std::env::temp_dir().join(format!("bitnet-numa-{name}-{}-{k}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (i, (cpus, dist)) in nodes.iter().enumerate() {
            let dir = root.join(format!("node/node{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cpulist"), format!("{cpus}\n")).unwrap();
            std::fs::write(dir.join("distance"), format!("{dist}\n")).unwrap();
        }
        std::fs::create_dir_all(root.join("cpu")).unwrap();
        if let Some(on) = online {
            std::fs::write(root.join("cpu/online"), format!("{on}\n")).unwrap();
        }
        root
    }

    #[test]
    fn cpulists_parse_and_print_back() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        for bad in ["x", "3-1", "1-", "-", "0-99999"] {
            assert!(parse_cpulist(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn one_node() {
        let root = fake_tree("one", &[("0-3", "10")], Some("0-3"));
        let t = Topology::read(&root).unwrap();
        assert_eq!(
            t.nodes,
            vec![Node {
                id: 0,
                cpus: vec![0, 1, 2, 3],
                distances: vec![10]
            }]
        );
        assert_eq!(t.describe(), "1 node: 0 (CPUs 0-3)");
    }

    #[test]
    fn two_nodes_with_a_cpu_less_memory_node_and_offline_cpus() {
        let root = fake_tree(
            "three",
            &[
                ("0-3,8-11", "10 21 17"),
                ("4-7,12-15", "21 10 28"),
                ("", "17 28 10"),
            ],
            Some("0-5,8-15"),
        );
        let t = Topology::read(&root).unwrap();
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.nodes[0].cpus, vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(
            t.nodes[1].cpus,
            vec![4, 5, 12, 13, 14, 15],
            "6 and 7 are offline"
        );
        assert!(t.nodes[2].cpus.is_empty());
        assert_eq!(t.nodes[1].distances, vec![21, 10, 28]);
        assert_eq!(t.node_of(13), Some(1));
        assert_eq!(t.node_of(6), None);
        assert_eq!(
            t.describe(),
            "3 nodes: 0 (CPUs 0-3,8-11), 1 (CPUs 4-5,12-15), 2 (memory only)"
        );
        // No has_memory file: unknown, so binding keeps every node.
        assert_eq!(nodes_with_memory_in(&root), None);
        // Node 1 has CPUs but no memory: its share is left unbound.
        std::fs::write(root.join("node/has_memory"), "0,2\n").unwrap();
        assert_eq!(nodes_with_memory_in(&root), Some(vec![0, 2]));
    }

    #[test]
    fn no_tree_is_one_node_and_a_bad_tree_is_an_error_naming_the_file() {
        let root = fake_tree("none", &[], Some("0-1"));
        let t = Topology::read(&root).unwrap();
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].cpus, vec![0, 1]);
        let root = fake_tree("bad", &[("0-x", "10")], None);
        let e = Topology::read(&root).unwrap_err().to_string();
        assert!(e.contains("node0/cpulist") && e.contains("0-x"), "{e}");
        let root = fake_tree("baddist", &[("0", "10 20")], None);
        let e = Topology::read(&root).unwrap_err().to_string();
        assert!(e.contains("2 distances for 1 nodes"), "{e}");
    }
}
