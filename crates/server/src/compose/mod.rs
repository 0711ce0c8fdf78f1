//! Composing replies: what a request did (`outcome`, decided by the
//! executor), one reply encoder per protocol that says it in memcached's
//! bytes (`text`, `meta`, `binary`, chosen by [`write`]), the key dumps'
//! own formats (`dump`), stats rows as data (`stat_rows`), the
//! connection's output (`output`, with direct writes from item memory),
//! the executor's view of it (`replies`: outcomes only) and where its
//! responses start over UDP (`udp_marks`). Nothing here touches the store's state or counts stats:
//! the executor decides what happened, the encoders write it, and the
//! executor never writes reply bytes itself.

pub(crate) mod binary;
pub(crate) mod dump;
pub(crate) mod meta;
pub(crate) mod outcome;
pub(crate) mod output;
pub(crate) mod replies;
pub(crate) mod stat_rows;
pub(crate) mod text;
pub(crate) mod udp_marks;

use osmium_protocol::request::Reply;

use outcome::Outcome;
use output::Output;

/// Has the composer of the request's protocol say `o`; true when memcached
/// sends the reply at once (a binary error).
#[inline]
pub(crate) fn write(out: &mut Output, reply: &Reply<'_>, o: &Outcome<'_>) -> bool {
    match reply {
        Reply::Text { noreply } => {
            text::outcome(out, *noreply, o);
            false
        }
        Reply::Meta(m) => {
            meta::outcome(out, m, o);
            false
        }
        Reply::Binary(r) => binary::outcome(out, r, o),
    }
}

/// Whether no reply to this request can be written (a meta `O` token
/// longer than memcached returns): memcached then answers with an error
/// instead of running some commands.
#[inline]
pub(crate) fn unwritable(reply: &Reply<'_>) -> bool {
    match reply {
        Reply::Meta(m) => meta::unwritable(m),
        _ => false,
    }
}

/// A text or meta error line decided elsewhere (a parser's): the meta
/// protocol sends errors even with `q`; the text protocol honours
/// noreply.
pub(crate) fn error_line(out: &mut Output, reply: &Reply<'_>, msg: &str) {
    write(out, reply, &Outcome::Message(msg));
}
