//! What the executor replies through: the connection's [`Output`] seen
//! only as a place that outcomes are said into. The executor has no way to
//! write bytes itself: it hands an [`Outcome`] to [`Replies::say`]
//! (`compose::write`, the composer of the request's protocol), and the
//! retrievals' hits, whose values stream from item memory under the
//! thread's epoch pin, go to the composers' value encoders
//! ([`Replies::text_value`], [`Replies::text_end`], [`Replies::binary_hit`]).
//!
//! The one way around it is [`Replies::dump_stream`], for the key dumps
//! (`stats cachedump`, the crawler's dumps), which stream lines in their
//! own formats as the socket drains (see docs/ARCHITECTURE.md, "Execute
//! decides, compose says").

use osmium_protocol::request::{BinaryReply, Reply};
use osmium_store::ItemView;

use crate::compose::outcome::Outcome;
use crate::compose::output::Output;
use crate::compose::{binary, text};

/// The connection's output, as the executor sees it.
pub(crate) struct Replies<'o> {
    out: &'o mut Output,
}

impl<'o> Replies<'o> {
    #[inline]
    pub(crate) fn new(out: &'o mut Output) -> Replies<'o> {
        Replies { out }
    }

    /// Has the composer of the request's protocol say `o`; true when
    /// memcached sends the reply at once (a binary error).
    #[inline]
    pub(crate) fn say(&mut self, reply: &Reply<'_>, o: &Outcome<'_>) -> bool {
        crate::compose::write(self.out, reply, o)
    }

    /// A get's hit in the text protocol (`text::value`): whether the
    /// reply's `END` went with it, or nothing did (a packed value that
    /// does not decode: the executor answers a miss).
    #[inline]
    pub(crate) fn text_value(
        &mut self,
        it: &ItemView<'_>,
        with_cas: bool,
        direct: impl FnOnce() -> text::Direct,
    ) -> text::Sent {
        text::value(self.out, it, with_cas, direct)
    }

    /// The end of a text get's reply (`text::end`), when its last value
    /// did not carry it: the retrieval encoders' own, as on every GET.
    #[inline]
    pub(crate) fn text_end(&mut self) {
        text::end(self.out)
    }

    /// A binary GET/GAT/TOUCH hit (`binary::hit`): false when nothing
    /// was sent (a packed value that does not decode: the executor answers
    /// a miss).
    #[inline]
    pub(crate) fn binary_hit(
        &mut self,
        r: &BinaryReply,
        it: &ItemView<'_>,
        with_value: bool,
    ) -> bool {
        binary::hit(self.out, r, it, with_value)
    }

    /// Whether the last meta hit (`say` of a `MetaHit`) had a packed value
    /// that did not decode: its reply was left out, and the executor
    /// answers a miss (and has the store drop the item,
    /// `Store::drop_corrupt`).
    #[inline]
    pub(crate) fn take_corrupt(&mut self) -> bool {
        self.out.take_corrupt()
    }

    /// Where the next reply starts (a request's replies are dropped from
    /// here when it fails as a whole).
    #[inline]
    pub(crate) fn mark(&self) -> usize {
        self.out.len()
    }

    /// Whether this is a datagram endpoint's output.
    #[inline]
    pub(crate) fn is_datagram(&self) -> bool {
        self.out.is_datagram()
    }

    /// The output itself, for a key dump that writes its own format.
    #[inline]
    pub(crate) fn dump_stream(&mut self) -> &mut Output {
        self.out
    }
}
