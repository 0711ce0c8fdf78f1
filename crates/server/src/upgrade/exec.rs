//! t1-t4 of the sequence in `mod.rs`: the server quiesced, its state
//! filled, then written and the new image run
//! (`osmium_upgrade::handover`, which runs the old image again when the
//! new one cannot be); and the last resort when neither can be: the
//! server started again in this process.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use osmium_store::Store;
use osmium_upgrade::{CheckAnswer, CommandLine, MemoryRec, State};

use crate::server::Started;
use crate::settings::OSMIUM_VERSION;
use crate::stats::upgrades::{count_failure, history};
use crate::upgrade::adopt;
use crate::upgrade::check::{refused, store_fingerprint, Checked};

/// How long running requests may take to finish at the quiesce.
const DRAIN: Duration = Duration::from_millis(300);

/// Item memory and the flash tier's metadata handed over by fd (t3), once
/// no thread touches the store. Item memory in a memfd (the default
/// without `-e`) is handed over with the cache in it: its header records
/// the clock and a clean stop, and a duplicate of the memfd (not
/// close-on-exec) goes into the state, for the image that starts to take
/// the cache over (`adopt::start_from`). With `-e` nothing is: the next
/// image takes the file over by its path as after a kill (the file's fd is
/// close-on-exec, so its lock goes with the old image; it is neither
/// written out nor marked closed), and `FILE.flash` the same way.
/// Anonymous memory (`-o item_memory=anonymous`) ends with this image: the
/// next one starts with an empty cache. The flash tier's metadata in a
/// memfd (with item memory in a memfd) is handed over the same way, after
/// the tier's graceful stop (its write buffers written out, the metadata
/// marked whole: `Store::hand_over_flash`).
///
/// A new binary whose check did not say it takes item memory over
/// (`takes=memory`: a build from before memfds) is handed none: it would
/// leave the memfd open, its memory held, for the life of the process;
/// the same for the flash tier's metadata (`takes=flash`).
fn hand_over_store(
    store: &Arc<Store>,
    answer: &CheckAnswer,
) -> (Option<MemoryRec>, Option<MemoryRec>) {
    if !answer.takes(osmium_upgrade::TAKES_MEMORY) {
        if store.item_memory() == "memfd" {
            tracing::warn!(
                "upgrade: the new binary does not take item memory over: the cache starts empty"
            );
        }
        return (None, None);
    }
    let memory = handed(
        store.hand_over(),
        "the item memory",
        "the cache starts empty",
    );
    let flash_meta = if !answer.takes(osmium_upgrade::TAKES_FLASH) {
        if store.flash().is_some() && store.item_memory() == "memfd" {
            tracing::warn!(
                "upgrade: the new binary does not take the flash tier over: it starts empty"
            );
        }
        None
    } else {
        handed(store.hand_over_flash(), "the flash tier", "it starts empty")
    };
    (memory, flash_meta)
}

/// The record of a memfd the store handed over (`what` in the log line
/// when it could not, with what follows then).
fn handed(memfd: io::Result<Option<OwnedFd>>, what: &str, then: &str) -> Option<MemoryRec> {
    match memfd {
        Ok(fd) => fd.map(|fd| MemoryRec {
            fd: fd.into_raw_fd(),
            path: None,
            consistent: true,
        }),
        Err(e) => {
            tracing::warn!("upgrade: {what} cannot be handed over ({e}): {then}");
            None
        }
    }
}

/// t1-t4: quiesces the server, writes the state and runs the new image.
/// Returns only if no image could be run: the server started again in
/// this process from the state.
pub(super) fn run(started: Started, checked: Checked) -> io::Result<Started> {
    // The fallback, opened before anything stops.
    let old_exe = match osmium_upgrade::running_image() {
        Ok(fd) => fd,
        Err(e) => {
            refused(&checked.path, &format!("cannot open /proc/self/exe: {e}"));
            // The reload the check began ends here (`Started::serve`).
            crate::service::ready();
            return Ok(started);
        }
    };
    let argv: Vec<OsString> = std::env::args_os().collect();
    let fingerprint = store_fingerprint(&started.shared.settings);
    // A signal from here on waits for the image that serves next (which
    // unblocks them once its handlers are installed). Threads the quiesce
    // has not stopped yet may still take one, whose flag then goes with
    // this image.
    osmium_upgrade::image::block_signals();
    let stopping = Instant::now();
    // A new binary that does not say it takes connections (a build from
    // before they were carried) would leave their fds open, its clients
    // waiting for ever: they are closed instead.
    let carry_conns = checked.answer.takes(osmium_upgrade::TAKES_CONNS);
    let quiesced = started.quiesce(stopping + DRAIN, carry_conns);
    let stopped = stopping.elapsed();
    let (memory, flash_meta) = hand_over_store(&quiesced.store, &checked.answer);
    tracing::warn!(
        "upgrade: threads stopped in {:.1} ms; item memory {}{}",
        stopped.as_secs_f64() * 1000.0,
        match (&memory, quiesced.store.item_memory()) {
            (Some(_), _) => "handed over (memfd)",
            (None, "file") => "in the memory file (taken over by its path)",
            (None, "memfd") => "not handed over: the cache starts empty",
            (None, _) => "not kept (anonymous memory): the cache starts empty",
        },
        match (
            &flash_meta,
            quiesced.store.flash(),
            quiesced.store.item_memory()
        ) {
            (_, None, _) => "",
            (Some(_), _, _) => "; the flash tier handed over (memfd)",
            (None, _, "file") => "; the flash tier in FILE.flash (taken over by its path)",
            (None, _, _) => "; the flash tier not kept: it starts empty",
        }
    );
    super::stall::stall_at("quiesced");
    let state = State {
        origin: history().origin(OSMIUM_VERSION, old_exe.as_fd()),
        command_line: CommandLine::as_given(&argv, fingerprint),
        memory,
        flash_meta,
        old_exe: old_exe.as_raw_fd(),
        listeners: quiesced.listeners,
        conns: quiesced.conns,
        watchers: quiesced.watchers,
        repl: quiesced.repl,
        counters: quiesced.counters,
        secrets: Vec::new(),
        live: quiesced.live,
        extra: Vec::new(),
    };
    tracing::warn!(
        "upgrade: {} client connections handed over",
        state.conns.len()
    );
    if quiesced.closed > 0 {
        tracing::warn!(
            "upgrade: {} connections closed at the drain deadline",
            quiesced.closed
        );
    }
    let (why, written) = osmium_upgrade::handover::exec_new(
        &state,
        &checked,
        "osmium",
        old_exe.as_fd(),
        &argv,
        warn,
    );
    start_here(state, written, quiesced.store, &why)
}

fn warn(line: std::fmt::Arguments<'_>) {
    tracing::warn!("{line}");
}

/// The last resort, when no image could be run: the server starts again
/// in this process from the state it could not hand over.
fn start_here(
    state: State,
    written: Option<OwnedFd>,
    store: Arc<Store>,
    why: &str,
) -> io::Result<Started> {
    count_failure(why);
    tracing::warn!("upgrade failed: {why}; serving with osmium {OSMIUM_VERSION} (started again in this process)");
    // The store's memory and its file's lock go before the start takes
    // them again.
    drop(store);
    drop(written);
    let settings = adopt::parse_settings(&state.command_line.expanded).map_err(io::Error::other)?;
    let files = crate::launch::load(&settings).map_err(|r| io::Error::other(r.message))?;
    adopt::start_from(state, settings, files)
}
