//! Binary framing (protocol-binary.txt), as memcached's
//! `try_read_command_binary` and `dispatch_bin_command` consume a stream:
//!
//! ```text
//!   [24-byte header][extras][key][value: body - extras - key]
//! ```
//!
//! Nothing is decided until the header is in (only then is the magic
//! checked: anything but 0x80 closes the connection), then until the
//! extras and key are in. A body over 1 GiB is refused ("Invalid
//! arguments", close); key and extras longer than the body get "Unknown
//! command" and a close; with `-S` an unauthenticated connection may only
//! list mechanisms, authenticate or ask the version. Storage commands and
//! SASL AUTH/STEP then wait for their value (a value too large is refused
//! at once and swallowed as it arrives); an unknown opcode is answered and
//! `bodylen` bytes after its extras and key are swallowed, memcached's own
//! arithmetic; STAT leaves any body past its key to be read as the next
//! request.
//!
//! memcached writes its queued replies early after some requests (NOOP,
//! most errors): only those survive a later bad magic byte, which drops
//! the rest with the connection. `committed` tracks that point.

use osmium_protocol::binary::{self as wire, status, Decoded, Scan, HEADER_LEN};
use osmium_protocol::request::{BinaryReply, Command, Reply};

use super::{gather_for, Flow, Session};
use crate::compose::binary as compose;
use crate::compose::output::Sink;
use crate::compose::replies::Replies;
use crate::compose::udp_marks::ResponseMark;
use crate::context::WorkerCtx;
use crate::execute::store::{self, Admit, IncomingStore, INCOMING_MIN};
use crate::execute::{self, Next};
use crate::logger::CloseReason;
use crate::stats::latency::Cmd;

/// memcached's `ITEM_SIZE_MAX_UPPER_LIMIT`: no body may be longer.
const BODY_MAX: u32 = 1 << 30;

/// What the connection does after one request.
enum Step {
    /// Consume this many bytes and go on.
    Consume(usize),
    /// Consume `consumed` bytes, then discard `swallow` more as they come.
    Swallow { consumed: usize, swallow: usize },
    /// The value is not all here: wait until this many bytes are buffered.
    Wait(usize),
    /// Consume, send what is queued, then close.
    Close(usize),
    /// Consume; the rest of the value is read into this item.
    Incoming(usize, IncomingStore),
    /// Nothing consumed: the request waits for flash reads.
    AwaitFlash,
}

pub(crate) fn process<S: Sink>(s: &mut Session, ctx: &WorkerCtx, sink: &mut S) -> Flow {
    if ctx.peers && ctx.peer.get() != crate::replication::PEER_NONE {
        // Replication links speak text only (`replication::rights`).
        return Flow::Close;
    }
    let mut committed = s.output.len();
    let mut done = 0;
    loop {
        if !s.swallow_input() {
            return Flow::Wait;
        }
        if s.incoming.is_some() {
            gather_for(&mut s.output, false, sink, &ctx.stats);
            // A value read into its item: wait until it is all there.
            if s.reading_into_item() {
                return Flow::Wait;
            }
            if s.must_yield(ctx, done) {
                return Flow::Yield;
            }
            done += 1;
            if let Some(incoming) = s.incoming.take() {
                if store::finish_incoming(ctx, incoming, true, &mut Replies::new(&mut s.output))
                    .flush
                {
                    committed = s.output.len();
                }
            }
            continue;
        }
        let avail = s.input.len();
        if avail == 0 || avail < s.need {
            return Flow::Wait;
        }
        if s.must_yield(ctx, done) {
            return Flow::Yield;
        }
        let header = match wire::scan_request(s.input.input()) {
            Scan::Incomplete { need } => {
                s.need = need;
                return Flow::Wait;
            }
            Scan::BadMagic(magic) => {
                if ctx.shared.verbose() > 0 {
                    tracing::info!("Invalid magic:  {magic:x}");
                }
                if s.datagram.is_some() {
                    // conn_closing: UDP drops the replies since the last flush.
                    return Flow::Close;
                }
                s.output.truncate(committed);
                s.close_after_write = true;
                return Flow::Wait;
            }
            Scan::Ready(h) => h,
        };
        s.need = 0;
        done += 1;
        s.ahead.step(ctx.store());
        let reply_start = s.output.len();
        let (step, flushes) = one(s, ctx, &header, sink);
        s.send_due(sink, &ctx.stats);
        if std::mem::take(&mut s.output.wrote_directly) {
            // Everything before this reply has left, and the rest of the
            // reply (its value was last) must follow whatever comes next.
            committed = s.output.len();
        }
        if flushes {
            committed = s.output.len();
        }
        if s.datagram.is_some() && !matches!(step, Step::Wait(_)) {
            // One memcached response per request (a quiet miss is an empty
            // one), sent at once when the request flushes.
            s.output.marks.push(ResponseMark {
                start: reply_start,
                suppressed: false,
                flush: flushes,
            });
        }
        let stop = flushes && s.datagram.as_ref().is_some_and(|d| d.stop_at_flush);
        match step {
            Step::Consume(n) => s.input.consume(n),
            Step::Swallow { consumed, swallow } => {
                s.input.consume(consumed);
                s.swallow = swallow;
            }
            Step::Wait(total) => {
                s.need = total;
                return Flow::Wait;
            }
            Step::Close(n) => {
                s.input.consume(n);
                s.close_after_write = true;
                return Flow::Wait;
            }
            Step::Incoming(n, incoming) => {
                s.input.consume(n);
                s.incoming = Some(incoming);
            }
            Step::AwaitFlash => return Flow::Flash,
        }
        if stop {
            // After a quit memcached's UDP connection ends its datagram at
            // every flush.
            return Flow::Wait;
        }
    }
}

/// Runs one request whose header, extras and key are buffered; the step to
/// take and whether memcached writes the queued replies at once.
fn one<S: Sink>(
    s: &mut Session,
    ctx: &WorkerCtx,
    h: &wire::RequestHeader,
    sink: &mut S,
) -> (Step, bool) {
    let conn = s.conn_view();
    let datagram = s.datagram.is_some();
    let input = s.input.input();
    let prefix = h.prefix_len();
    let key_start = HEADER_LEN + usize::from(h.extras_len);
    let extras = &input[HEADER_LEN..key_start];
    let key = &input[key_start..prefix];
    let reply = BinaryReply {
        opcode: h.opcode,
        opaque: h.opaque,
        quiet: false,
        with_key: false,
    };
    let out = &mut s.output;
    let decoded = wire::decode(h, extras, key);
    if decoded == Decoded::BadBodyLength {
        compose::error(out, &reply, status::UNKNOWN_COMMAND);
        return (Step::Close(prefix), true);
    }
    if h.body_len > BODY_MAX {
        compose::error(out, &reply, status::INVALID_ARGUMENTS);
        return (Step::Close(prefix), true);
    }
    if ctx.shared.auth.sasl_enabled()
        && !s.auth.authenticated
        && !wire::allowed_unauthenticated(h.opcode)
    {
        compose::error(out, &reply, status::AUTH_ERROR);
        return (Step::Close(prefix), true);
    }
    let request = match decoded {
        Decoded::Request(r) => r,
        Decoded::UnknownCommand => {
            // memcached swallows body_len bytes from after the extras and
            // key it has already read.
            compose::error(out, &reply, status::UNKNOWN_COMMAND);
            let swallow = h.body_len as usize;
            return (
                Step::Swallow {
                    consumed: prefix,
                    swallow,
                },
                swallow == 0,
            );
        }
        Decoded::InvalidArguments | Decoded::BadBodyLength => {
            if ctx.shared.verbose() > 0 {
                tracing::info!("Protocol error (opcode {:02x}), close connection", h.opcode);
            }
            compose::error(out, &reply, status::INVALID_ARGUMENTS);
            return (Step::Close(prefix), true);
        }
    };
    let use_cas = ctx.shared.settings.use_cas;
    let req = wire::to_request(h, request, use_cas);
    let cmd = Cmd::of(&req);
    gather_for(
        &mut s.output,
        matches!(req.command, Command::Get { touch: None, .. }),
        sink,
        &ctx.stats,
    );
    let out = &mut s.output;
    let Reply::Binary(r) = req.reply else {
        unreachable!("a binary request has a binary reply");
    };
    match req.command {
        Command::Store(st) => {
            if let Admit::Refused { discard } =
                store::admit(ctx, &st, &req.reply, &mut Replies::new(out))
            {
                return (
                    Step::Swallow {
                        consumed: prefix,
                        swallow: discard,
                    },
                    false,
                );
            }
            let total = prefix + st.value_len;
            if input.len() < total {
                if st.value_len < INCOMING_MIN
                    || datagram
                    || !store::reads_into_item(ctx, &st, 0, 0)
                {
                    return (Step::Wait(total), false);
                }
                // A large value: the rest of it is read into its item.
                let first = &input[prefix..];
                ctx.lap(cmd);
                return match store::begin_incoming(
                    ctx,
                    &st,
                    &req.reply,
                    first,
                    &mut Replies::new(out),
                ) {
                    Some(incoming) => (Step::Incoming(input.len(), incoming), false),
                    None => (
                        Step::Swallow {
                            consumed: input.len(),
                            swallow: total - input.len(),
                        },
                        true,
                    ),
                };
            }
            let done = store::complete(
                ctx,
                &st,
                &req.reply,
                &input[prefix..total],
                &mut Replies::new(out),
            );
            ctx.lap(cmd);
            (Step::Consume(total), done.flush)
        }
        Command::SaslAuth {
            step,
            mechanism,
            value_len,
        } => {
            if !execute::admit_sasl(ctx, mechanism, value_len, &r, &mut Replies::new(out)) {
                return (
                    Step::Swallow {
                        consumed: prefix,
                        swallow: value_len,
                    },
                    false,
                );
            }
            let total = prefix + value_len;
            if input.len() < total {
                return (Step::Wait(total), false);
            }
            let data = &input[prefix..total];
            let done = execute::execute_sasl(
                ctx,
                step,
                mechanism,
                data,
                &mut s.auth,
                &r,
                &mut Replies::new(out),
            );
            (Step::Consume(total), done.flush)
        }
        _ => {
            let done = execute::execute(ctx, conn, &req, &mut Replies::new(out));
            if done.next != Next::AwaitFlash {
                ctx.lap(cmd);
            }
            match done.next {
                Next::AwaitFlash => (Step::AwaitFlash, false),
                Next::CloseAfterWrite | Next::CloseNow | Next::Shutdown => {
                    s.close_reason = match done.next {
                        Next::CloseAfterWrite => CloseReason::Normal,
                        Next::Shutdown => CloseReason::Shutdown,
                        _ => CloseReason::Error,
                    };
                    (Step::Close(prefix), true)
                }
                _ => (Step::Consume(prefix), done.flush),
            }
        }
    }
}
