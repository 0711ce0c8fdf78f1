//! What `/proc/PID/status` says of a process: its resident set (`VmRSS`)
//! and the CPUs it may run on (`Cpus_allowed_list`).

/// The `Cpus_allowed_list` of process `pid` (`0`, `0-1`), from
/// `/proc/PID/status`.
pub fn cpus_allowed_list(pid: u32) -> Option<String> {
    status_field(pid, "Cpus_allowed_list:")
}

/// The resident set of process `pid` in bytes (`VmRSS` of
/// `/proc/PID/status`, which gives kB).
pub fn rss_bytes(pid: u32) -> Result<u64, String> {
    let value = status_field(pid, "VmRSS:")
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status (has it exited?)"))?;
    let mut parts = value.split_whitespace();
    let kb: u64 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("bad VmRSS {value:?}"))?;
    if parts.next() != Some("kB") {
        return Err(format!("bad VmRSS unit in {value:?}"));
    }
    Ok(kb * 1024)
}

/// The value of the line of `/proc/PID/status` starting `name`, trimmed.
fn status_field(pid: u32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| v.trim().to_string())
}
