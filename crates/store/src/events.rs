//! What the engine reports to its owner as it happens (evictions, flash
//! tier writes), for the server's log watchers. The engine knows no
//! protocol: it calls a hook the owner sets, with plain facts, and only
//! for the kinds of event the owner asked for; an event nobody asked for
//! costs one relaxed load.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// An item evicted to make room (not reclaimed: expired and flushed items
/// are not reported; nor is an item demoted to the flash tier).
#[derive(Debug, Clone, Copy)]
pub struct Evicted<'a> {
    /// The key.
    pub key: &'a [u8],
    /// It was read since it was written.
    pub fetched: bool,
    /// Seconds left to live, -1 for no expiry.
    pub ttl: i64,
    /// Seconds since its last access.
    pub last_access: u32,
    /// Client flags.
    pub flags: u32,
    /// Value length.
    pub value_len: usize,
}

/// A write buffer of the flash tier written to its page.
#[derive(Debug, Clone, Copy)]
pub struct FlashWritten {
    /// The page (its index over all the tier's files).
    pub page: usize,
    /// Where in the page.
    pub offset: usize,
    /// Bytes written (whole blocks).
    pub bytes: usize,
    /// Whether the write failed.
    pub failed: bool,
}

/// An event ([`Store::set_event_hook`](crate::Store::set_event_hook)).
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// An item evicted to make room.
    Evicted(Evicted<'a>),
    /// A write buffer of the flash tier written.
    FlashWritten(FlashWritten),
}

/// The owner's hook.
pub type Hook = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// Report evictions.
pub const EVICTIONS: u8 = 1;
/// Report flash tier writes.
pub const FLASH_WRITES: u8 = 2;

/// Which events are reported, and to whom.
#[derive(Default)]
pub(crate) struct Events {
    wanted: AtomicU8,
    hook: OnceLock<Hook>,
}

impl Events {
    #[inline(always)]
    pub(crate) fn wanted(&self, kind: u8) -> bool {
        self.wanted.load(Ordering::Relaxed) & kind != 0
    }

    pub(crate) fn set_wanted(&self, kinds: u8) {
        self.wanted.store(kinds, Ordering::Relaxed);
    }

    pub(crate) fn set_hook(&self, hook: Hook) {
        let _ = self.hook.set(hook);
    }

    #[cold]
    pub(crate) fn emit(&self, e: &Event<'_>) {
        if let Some(h) = self.hook.get() {
            h(e);
        }
    }
}
