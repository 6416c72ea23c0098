//! Figures the commands report about a run besides their own output: the process's peak
//! memory, where the load's time went and where the weights live ([`load`]), and where a
//! run's time went per op kind ([`profile`]).

pub mod load;
pub mod profile;

/// Peak resident set size in bytes (Windows: the peak working set), 0 where unknown.
#[cfg(windows)]
pub fn peak_rss() -> u64 {
    bitnet_core::windows_memory::peak_working_set_bytes().unwrap_or(0)
}

/// Peak resident set size in bytes (`VmHWM`), 0 where unknown.
#[cfg(not(windows))]
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_rss_is_reported_on_linux_and_windows() {
        if cfg!(any(target_os = "linux", windows)) {
            assert!(peak_rss() > 0);
        }
    }
}
