//! Which CPUs a process runs on: this thread's affinity mask, and pinning
//! the calling thread (and what it starts from then on) or a child about
//! to exec to one CPU ([`crate::CacheServer::cpu`]). What the kernel lets
//! a process use is in its status ([`crate::cpus_allowed_list`]).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The CPUs this thread may run on (its affinity mask), in order; empty
/// if the kernel would not say.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a cpu_set_t of the size given; pid 0 is
    // the calling thread.
    let got =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if got != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE, inside the set.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// Allows the calling thread (and the threads and processes it starts
/// from then on) to run on CPU `cpu` only. Async-signal-safe: it makes one
/// system call and allocates nothing, so it may run between fork and exec.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: plain data; zeroed is the empty set; cpu is inside the set.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Has the process `cmd` starts run on CPU `cpu` only, it and every
/// thread it starts (pinned between fork and exec).
pub(crate) fn pin_command(cmd: &mut Command, cpu: usize) {
    // SAFETY: between fork and exec the child only makes the
    // sched_setaffinity system call on itself (`pin_to_cpu`), which
    // allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || pin_to_cpu(cpu));
    }
}
