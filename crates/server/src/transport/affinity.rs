//! `-o thread_affinity=N`: worker thread i runs on CPU (N + i) mod the
//! CPUs the process may use.

use std::io;

/// Pins the calling thread to the `n`th CPU (mod their count) of those
/// this process may run on (`-o thread_affinity`); a failure is reported
/// and the thread runs unpinned.
pub(crate) fn pin_to_cpu(n: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is an empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size given; pid 0 is
    // the calling thread.
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) };
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE, inside the set.
        .filter(|&i| got == 0 && unsafe { libc::CPU_ISSET(i, &allowed) })
        .collect();
    if cpus.is_empty() {
        tracing::warn!("thread_affinity: cannot read this process's CPUs; not pinning");
        return;
    }
    let cpu = cpus[n % cpus.len()];
    // SAFETY: as above, plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE; then a valid set of the size given.
    let r = unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        tracing::warn!(
            "thread_affinity: pinning to CPU {cpu}: {}",
            io::Error::last_os_error()
        );
    }
}
