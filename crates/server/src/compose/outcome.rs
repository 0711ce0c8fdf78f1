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
use osmium_store::{RemoveResult, StoreStatus};

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
    /// Stats rows, each in memcached's `STAT <name> <value>\r\n` form (the
    /// form its stats code builds for every protocol), then the end of
    /// the reply.
    Stats(&'a [u8]),
    /// `stats detail dump`: the prefix report, a format of its own that
    /// ends itself.
    PrefixDump(&'a [u8]),
    /// A SASL step (binary only).
    Auth(Auth),
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
