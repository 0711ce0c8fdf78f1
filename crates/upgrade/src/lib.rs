//! osmium-upgrade: what a binary upgrade in place needs that is not the
//! server's own business, shared by `osmium` and `osmium-proxy`.
//!
//! * [`state`]: the hand-over document, a sealed memfd the old image
//!   writes and the new one reads (`OSMIUM_UPGRADE_FD=<n>`): a versioned,
//!   checksummed list of records naming every file descriptor kept across
//!   the `execve` (listeners, connections, item memory, the old image).
//! * [`image`]: the process side: file descriptors kept across an exec,
//!   the fd of the running image (the fallback), the fd of the new one,
//!   and the exec itself with the signals blocked.
//! * [`carried`]: the image that starts takes the carried listeners
//!   (matched by kind, type and address) and connections as duplicates,
//!   then closes the state's socket fds.
//! * [`check`]: the pre-flight check: the new file is run with
//!   `--upgrade-check` while the old image serves, and answers one line
//!   (its version, the state formats it reads, whether it takes the
//!   command line).
//! * [`checker`]: the running image's side of the check: the file it
//!   runs from, the check on a thread of its own, its outcome.
//! * [`History`]: the upgrades a process went through, carried in the
//!   state's origin.
//! * [`handover`]: the state written, its fds kept, the new image run,
//!   and the old one again when it cannot be.
//!
//! Compatibility rule: a release reads the state format its previous
//! release writes ([`READS`] covers the previous [`FORMAT`]); the check's
//! answer says the range, so an upgrade to a build that cannot read this
//! one's state is refused before anything stops.

pub mod carried;
pub mod check;
pub mod checker;
pub mod handover;
mod history;
pub mod image;
pub mod state;
mod tlv;

pub use check::{
    answer_check, check_line, run_check, CheckAnswer, CHECK_FLAG, CHECK_TIMEOUT, TAKES_CONNS,
    TAKES_FLASH, TAKES_MEMORY, TAKES_PROXY,
};
pub use history::History;
pub use image::{exec_image, keep_fd, open_image, running_image, take_env, Inherited};
pub use state::{
    CommandLine, ConnRec, ListenerKind, ListenerRec, MemoryRec, Origin, ProxyConnRec, RawRecord,
    ReplQueueRec, State, WatcherRec,
};
pub use tlv::StateError;

/// The state format this build writes.
pub const FORMAT: u32 = 1;
/// The state formats this build reads.
pub const READS: std::ops::RangeInclusive<u32> = 1..=1;
/// The environment variable naming the state memfd in the new image.
pub const ENV_FD: &str = "OSMIUM_UPGRADE_FD";
/// Set when a new image hands the state back to the old one: why it
/// could not take it over.
pub const ENV_FAILED: &str = "OSMIUM_UPGRADE_FAILED";
/// The fd the image was exec'd through ([`exec_image`]'s `image`): not
/// close-on-exec (a `#!` script is run as `/dev/fd/N`), so the image
/// that starts closes it.
pub const ENV_IMAGE_FD: &str = "OSMIUM_UPGRADE_IMAGE_FD";

#[cfg(test)]
mod testing;

/// For the fuzz target only: a body of records under a header and
/// checksum made for it, so that fuzzed records reach the record parser.
#[doc(hidden)]
pub mod fuzzing {
    /// `body` as a document of this build's format.
    pub fn sealed(body: &[u8]) -> Vec<u8> {
        crate::tlv::seal(crate::FORMAT, *crate::READS.start(), body)
    }
}

/// A 64-bit hash (xxh3) of `bytes`: the settings' cross-check in
/// [`CommandLine::store_fingerprint`].
pub fn fingerprint(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}
