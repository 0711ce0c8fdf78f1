//! What a request did, in words every protocol's composer understands: the
//! executor decides an [`Outcome`] and `compose::write` has the composer of
//! the request's protocol (`text`, `meta`, `binary`) say it in memcached's
//! bytes.
//!
//! ```text
//!   execute ──Outcome::Stored{..}──▶ compose::write ──▶ "STORED\r\n"       (text)
//!                                                   ──▶ "HD c42\r\n"       (meta)
//!                                                   ──▶ 81 01 .. status 0   (binary)
//! ```
//!
//! Outcomes are small `Copy` values that borrow what they describe (a key,
//! stats rows): deciding one never allocates. They live here rather than in
//! `execute` so that compose depends on nothing of the executor's.

use osmium_protocol::request::StoreMode;
use osmium_store::{ItemView, RemoveResult, StoreStatus};

use crate::compose::stat_rows::StatRows;

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome<'a> {
    /// A fixed answer; the text protocol's noreply silences it.
    Status(Status),
    /// A fixed answer sent whatever noreply says.
    Loud(Status),
    /// A line whose text was decided elsewhere (a parser's error, a TLS
    /// error's reason), sent as it is; noreply silences it.
    Message(&'a str),
    /// As `Message`, whatever noreply says.
    LoudMessage(&'a str),
    /// A storage command's verdict.
    Stored(Stored<'a>),
    /// A delete's verdict (`key`: for meta's `k` flag).
    Deleted { result: RemoveResult, key: &'a [u8] },
    /// An incr/decr's verdict.
    Counter(Counter<'a>),
    /// The server's version.
    Version,
    /// A verbosity change (binary answers it even when quiet).
    Verbosity,
    /// A no-op (`mn`, binary NOOP).
    Noop,
    /// A quit (answered in binary only).
    Quit,
    /// Stats rows, then the end of the reply.
    Stats(&'a StatRows),
    /// `stats detail dump`: the prefix report, a format of its own that
    /// ends itself.
    PrefixDump(&'a [u8]),
    /// A SASL step (binary only).
    Auth(Auth),
    /// A text get with a key over 250 bytes: the replies not yet written
    /// are dropped (those of earlier commands of the batch too; over UDP,
    /// this request's from `reply_start`), then memcached's re-sent error
    /// line, empty when `error_hidden` (noreply and the first key).
    GetKeyTooLong {
        reply_start: usize,
        error_hidden: bool,
    },
    /// A binary GET's miss: nothing when quiet, the key for GETK/GATK,
    /// else "Not found" (sent at once).
    GetMiss { key: &'a [u8] },
    /// An mg's hit (meta only): the item and what the request decided.
    MetaHit(&'a MetaHit<'a>),
    /// An mg's miss (meta only): `EN` with the `O` and `k` flags.
    MetaMiss { key: &'a [u8] },
    /// An me's answer (meta only): the item's metadata, or a miss.
    MetaDebug(Option<&'a ItemDebug<'a>>),
}

/// The fixed answers: each is one line in the text protocols and, where
/// it can answer a binary request, one status there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    /// A command memcached does not know (binary: unknown command).
    Error,
    Reset,
    NotFound,
    TooLarge,
    NoMemory,
    BadChunk,
    OpaqueTooLong,
    NonNumeric,
    CounterNoMemory,
    FlushNotAllowed,
    InvalidExptime,
    ShutdownDisabled,
    InvalidShutdownMode,
    MemlimitTooSmall,
    MemlimitNotBytes,
    MemlimitFailed,
    SlabReassignDisabled,
    HotWarmPercents,
    AgeFactors,
    WatchNotAllowed,
    BadFormat,
    BadCommandLine,
    AutomoveWindow,
    TlsNotEnabled,
    DetailNotAllowed,
    DetailUsage,
    CrawlerDisabled,
    KeyDumpNotAllowed,
    MetadumpNotAllowed,
    PipelinedMgdump,
    PipelinedMetadump,
    BadClass,
    /// A crawler dump's key filter that does not parse (osmium's).
    BadDumpFilter,
    SleepTooLong,
    CachedumpNotAllowed,
    IllegalSlabId,
}

/// A storage command's verdict and what its meta reply's flags show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stored<'a> {
    pub status: StoreStatus,
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub binary_key: bool,
    pub cas: u64,
    /// The value's size (meta `s`).
    pub size: usize,
}

/// An incr/decr's verdict and what its meta reply's flags show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counter<'a> {
    pub result: Counted,
    pub key: &'a [u8],
    /// The request's TTL (`T`) and vivify expiry (`N`), as absolute
    /// times: which of them a created item shows follows their order.
    pub ttl: Option<u32>,
    pub vivify: Option<u32>,
    /// The clock now (meta `t` shows seconds left).
    pub now: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counted {
    Value {
        value: u64,
        cas: u64,
        exptime: u32,
        created: bool,
    },
    NotFound,
    NonNumeric,
    /// The CAS did not match.
    Exists,
    NotStored,
    OutOfMemory,
    /// Creating a missing counter found no memory (binary's own text).
    CreateOutOfMemory,
}

/// An mg's hit: the item (read while the thread's epoch pin holds it) and
/// what the executor decided; the composer shows the flags the request
/// asked for, in its order, as memcached 1.6.45's `process_mget_cmd`.
#[derive(Clone, Copy)]
pub(crate) struct MetaHit<'a> {
    pub item: &'a ItemView<'a>,
    /// `VA <size>` and the value (`v`, and `C` did not match), else `HD`.
    pub send_value: bool,
    /// The expiry the flags before the first `T` or `N` see: the item's,
    /// or a created item's `N` time.
    pub exptime: u32,
    /// The expiry a `T` sets (0: never), shown by the `t` after it.
    pub ttl_exptime: u32,
    /// The item was created by `N` (which sets `vivify_exptime`).
    pub created: bool,
    pub vivify_exptime: u32,
    /// The clock now (`t` shows seconds left, `l` seconds since access).
    pub now: u32,
    /// This request won the recache token (`W`).
    pub won: bool,
}

impl std::fmt::Debug for MetaHit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaHit")
            .field("key", &self.item.key())
            .field("send_value", &self.send_value)
            .field("won", &self.won)
            .finish_non_exhaustive()
    }
}

impl PartialEq for MetaHit<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for MetaHit<'_> {}

/// An me's line: `ME <key> exp= la= cas= fetch= cls= size=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ItemDebug<'a> {
    pub key: &'a [u8],
    pub binary_key: bool,
    /// Seconds left, -1 for never.
    pub exp: i32,
    /// Seconds since the last access.
    pub last_access: u32,
    pub cas: u64,
    pub fetched: bool,
    /// memcached's slab class and item size for it.
    pub class: u32,
    pub size: usize,
}

/// A SASL exchange's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// The mechanisms offered.
    Mechanisms,
    Authenticated,
    /// The exchange goes on.
    Continue,
    Failed,
    /// SASL is off.
    Disabled,
    MechanismTooLong,
    /// Data that could never fit in an item.
    TooLarge,
}
