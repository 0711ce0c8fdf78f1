//! A SIGBUS on the memory file's mapping (`-e`): the kernel's answer when
//! a page of the file cannot be read in (an I/O error of its disk) or lies
//! past the file's end (the file cut short under the server). A full file
//! system cannot cause one: the file's blocks are reserved at start (see
//! `memfile::reserve`). The handler marks the file's header so that the
//! next start does not take the file over (it would meet the same pages
//! again: a crash at every start), writes one line to stderr and ends the
//! process with status 74 (EX_IOERR). A SIGBUS anywhere else keeps the
//! default action.
//!
//! Only async-signal-safe work in the handler: loads of atomics set
//! before it was installed, one store into the header (when the fault is
//! not in the header's own page), `write(2)` and `_exit(2)`.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;

/// `Header::open` after a SIGBUS: the next start begins clean.
pub(crate) const OPEN_IO_ERROR: u64 = 2;

/// Exit status after a SIGBUS on the memory file (sysexits' EX_IOERR).
const EXIT_IO_ERROR: libc::c_int = 74;

static START: AtomicUsize = AtomicUsize::new(0);
static LEN: AtomicUsize = AtomicUsize::new(0);
/// Bytes of the header page at the mapping's start (where `open` lives).
static HEADER_LEN: AtomicUsize = AtomicUsize::new(0);
static OPEN_FLAG: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
static MESSAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static MESSAGE_LEN: AtomicUsize = AtomicUsize::new(0);
static INSTALL: Once = Once::new();

/// Watches the mapping of `len` bytes at `start` (the memory file `path`,
/// whose header of `header_len` bytes holds the `open` field `open`) for
/// SIGBUS, from now until [`unwatch`].
pub(crate) fn watch(
    path: &std::path::Path,
    start: *mut u8,
    len: usize,
    header_len: usize,
    open: &AtomicU64,
) {
    let message = format!(
        "osmium: I/O error on the memory file {} (SIGBUS: a page of it could not be read, or \
         the file was cut short); stopping. The next start begins with a clean cache.\n",
        path.display()
    )
    .into_bytes()
    .into_boxed_slice();
    let len_msg = message.len();
    // Kept for the life of the process: the handler may read it any time.
    let message = Box::leak(message);
    MESSAGE_LEN.store(0, Ordering::Release);
    MESSAGE.store(message.as_mut_ptr(), Ordering::Release);
    MESSAGE_LEN.store(len_msg, Ordering::Release);
    OPEN_FLAG.store(
        open as *const AtomicU64 as *mut AtomicU64,
        Ordering::Release,
    );
    LEN.store(len, Ordering::Release);
    HEADER_LEN.store(header_len, Ordering::Release);
    START.store(start as usize, Ordering::Release);
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a zeroed (valid) struct we fill; the
        // handler only does async-signal-safe work (module comment).
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigbus as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
        }
    });
}

/// Stops watching the mapping at `start` (it is being unmapped).
pub(crate) fn unwatch(start: *mut u8) {
    if START
        .compare_exchange(start as usize, 0, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        OPEN_FLAG.store(std::ptr::null_mut(), Ordering::Release);
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let start = START.load(Ordering::Acquire);
    let len = LEN.load(Ordering::Acquire);
    if start == 0 || addr < start || addr >= start + len {
        // Not the memory file's: the default action (the fault happens
        // again when the handler returns).
        // SAFETY: signal(2) is async-signal-safe.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        return;
    }
    let open = OPEN_FLAG.load(Ordering::Acquire);
    if !open.is_null() && addr >= start + HEADER_LEN.load(Ordering::Acquire) {
        // SAFETY: the header page is mapped (the fault was elsewhere) for
        // as long as START is set.
        unsafe { (*open).store(OPEN_IO_ERROR, Ordering::Release) };
    }
    let msg = MESSAGE.load(Ordering::Acquire);
    let n = MESSAGE_LEN.load(Ordering::Acquire);
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the message is
    // leaked, never freed.
    unsafe {
        if !msg.is_null() {
            libc::write(2, msg as *const libc::c_void, n);
        }
        libc::_exit(EXIT_IO_ERROR);
    }
}
