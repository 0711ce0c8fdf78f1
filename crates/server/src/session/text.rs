//! Text framing (the classic commands and the meta commands): request
//! lines, the data blocks of storage commands, and the states between
//! them.
//!
//! ```text
//!   <command line>\r\n                 one request (a lone \n also ends it)
//!   [<data block: value_len bytes>\r\n] storage commands only
//! ```
//!
//! A storage command refused at its command line (a key over 250 bytes,
//! a bad number, a value too large, a bad meta flag) has its data block
//! swallowed: those bytes are never read as commands. A line with no `\n`
//! in 2048 bytes closes the connection, as in memcached, unless it is a
//! get: memcached buffers a get line of any length; osmium serves a get
//! line's complete keys as they arrive once it is `STREAM_AFTER` bytes
//! long without its end, so a multi-get of any size needs no more than a
//! read buffer. Such a streamed get differs from memcached's in one case
//! only: if a key over 250 bytes comes after replies that already left,
//! the error line follows them instead of replacing them.

use osmium_protocol::ascii::{frame, parse_line, partial_get, Frame};
use osmium_protocol::request::{Command, Keys, KEY_MAX_LENGTH};

use super::{gather_for, verbose, Flow, Session};
use crate::compose::output::{Output, Sink};
use crate::compose::replies::Replies;
use crate::compose::text as compose_text;
use crate::compose::udp_marks::{mark_replies, ReplyShape};
use crate::context::WorkerCtx;
use crate::execute::store::{self, Admit};
use crate::execute::{self, Dump, Next};
use crate::logger::CloseReason;
use crate::replication::rights;
use crate::stats::latency::Cmd;

/// A get line this long without its end is served as it arrives.
pub(crate) const STREAM_AFTER: usize = 16 * 1024;

/// Stop adding dump lines while this much output waits to be sent.
const DUMP_CHUNK: usize = 256 * 1024;

/// A huge get line being served as it arrives.
pub(crate) struct StreamingGet {
    with_cas: bool,
    touch: Option<i64>,
    /// Where this get's reply starts in the output, while none of it has
    /// left (so an error can still replace it).
    reply_start: Option<(usize, u64)>,
    /// A key was over 250 bytes: the rest of the line is skipped and the
    /// reply ends with the error instead of END.
    failed: bool,
}

pub(crate) fn process<S: Sink>(s: &mut Session, ctx: &WorkerCtx, sink: &mut S) -> Flow {
    let mut done = 0;
    loop {
        if !s.swallow_input() {
            return Flow::Wait;
        }
        if s.output.has_refs()
            && (s.dump.is_some() || s.incoming.is_some() || s.streaming.is_some())
        {
            gather_for(&mut s.output, false, sink, &ctx.stats);
        }
        if s.dump.is_some() {
            if let Some(flow) = dump_step(s, ctx) {
                return flow;
            }
        }
        if s.incoming.is_some() {
            match finish_incoming(s, ctx, &mut done) {
                Some(flow) => return flow,
                None => continue,
            }
        }
        if s.streaming.is_some() {
            match stream(s, ctx) {
                Some(flow) => return flow,
                None => continue,
            }
        }
        let avail = s.input.len();
        if avail == 0 || avail < s.need {
            return Flow::Wait;
        }
        if s.must_yield(ctx, done) {
            return Flow::Yield;
        }
        let consumed = match frame(s.input.input()) {
            Frame::Line(consumed) => consumed,
            Frame::Incomplete => {
                if s.datagram.is_none() && avail >= STREAM_AFTER && start_stream(s) {
                    continue;
                }
                return Flow::Wait;
            }
            Frame::Close => return Flow::Close,
        };
        done += 1;
        let stop = run_line(s, ctx, consumed, sink);
        s.send_due(sink, &ctx.stats);
        if let Some(flow) = stop {
            return flow;
        }
    }
}

/// Parses and runs the line of `consumed` bytes at the front of the
/// input; Some(flow) to stop.
fn run_line<S: Sink>(
    s: &mut Session,
    ctx: &WorkerCtx,
    consumed: usize,
    sink: &mut S,
) -> Option<Flow> {
    let conn = s.conn_view();
    let datagram = s.datagram.is_some();
    let stop_at_flush = s.datagram.as_ref().is_some_and(|d| d.stop_at_flush);
    let input = s.input.input();
    let line = &input[..consumed];
    // A storage line waiting for its data runs again when it came: it
    // is logged once, the first time.
    let logged = ctx.shared.verbose() > 1;
    if logged && s.need == 0 {
        verbose::command(s.fd, line);
    }
    s.ahead.step(ctx.store());
    let req = parse_line(line, &mut s.keys);
    let log_replies = logged.then(|| verbose::replies(&req.command, &req.reply));
    if logged {
        s.output.unsent_verdict = None;
    }
    let cmd = Cmd::of(&req);
    if ctx.peers && !rights::carries(ctx.peer.get(), &req.command, &req.reply) {
        // A replication connection sent what its role does not carry:
        // nothing of it runs, the connection ends.
        ctx.shared.replication.link_refused(
            ctx.peer.get(),
            &String::from_utf8_lossy(&line[..line.len().min(64)]),
        );
        compose_text::line(&mut s.output, false, "ERROR");
        s.input.consume(consumed);
        s.close_after_write = true;
        return Some(Flow::Wait);
    }
    gather_for(
        &mut s.output,
        matches!(req.command, Command::Get { touch: None, .. }),
        sink,
        &ctx.stats,
    );
    let out = &mut s.output;
    let reply_start = out.len();
    let mut shape = ReplyShape::Single;
    let mut used = consumed;
    match req.command {
        Command::Store(st) => {
            if let Admit::Refused { discard } =
                store::admit(ctx, &st, &req.reply, &mut Replies::new(out))
            {
                s.swallow = discard;
            } else {
                let have = input.len() - consumed;
                if !datagram && store::reads_into_item(ctx, &st, have, 2) {
                    // The rest of the value goes straight into the item.
                    let take = have.min(st.value_len);
                    let first = &input[consumed..consumed + take];
                    match store::begin_incoming(ctx, &st, &req.reply, first, &mut Replies::new(out))
                    {
                        Some(incoming) => s.incoming = Some(incoming),
                        None => s.swallow = st.value_len + 2 - take,
                    }
                    s.log_incoming = log_replies.is_some();
                    s.need = 0;
                    s.input.consume(consumed + take);
                    ctx.lap(cmd);
                    return None;
                }
                let total = consumed + st.value_len + 2;
                if input.len() < total {
                    s.need = total;
                    return Some(Flow::Wait);
                }
                s.need = 0;
                store::complete(
                    ctx,
                    &st,
                    &req.reply,
                    &input[consumed..total],
                    &mut Replies::new(out),
                );
                used = total;
            }
        }
        Command::Error { message, discard } => {
            execute::error_line(out, &req.reply, message);
            s.swallow = discard;
        }
        Command::Get { keys, .. } => {
            if execute::execute(ctx, conn, &req, &mut Replies::new(out)).next == Next::AwaitFlash {
                return Some(Flow::Flash);
            }
            shape = ReplyShape::PerKey(keys);
        }
        Command::Noop => {
            execute::execute(ctx, conn, &req, &mut Replies::new(out));
            // mn makes memcached write what is queued at once.
            out.commit();
            shape = ReplyShape::Flush;
        }
        _ => match execute::execute(ctx, conn, &req, &mut Replies::new(out)).next {
            Next::Continue => {}
            Next::CloseAfterWrite => {
                mark(out, datagram, reply_start, ReplyShape::Empty);
                s.input.consume(consumed);
                s.close_after_write = true;
                s.close_reason = CloseReason::Normal;
                ctx.lap(cmd);
                return Some(Flow::Wait);
            }
            Next::CloseNow => return Some(Flow::Close),
            Next::Shutdown => {
                s.close_reason = CloseReason::Shutdown;
                return Some(Flow::Close);
            }
            Next::StartDump(kind) => s.dump = Some(Dump::new(kind)),
            Next::AwaitFlash => return Some(Flow::Flash),
        },
    }
    // (Checked again: `verbosity` may just have lowered it.)
    if let Some(kind) = log_replies.filter(|_| ctx.shared.verbose() > 1) {
        let unsent = out.unsent_verdict.take();
        let reply = out.composed().get(reply_start..).unwrap_or_default();
        verbose::replies_sent(s.fd, kind, reply, unsent);
    }
    ctx.lap(cmd);
    let flushed = mark(out, datagram, reply_start, shape);
    s.input.consume(used);
    (flushed && stop_at_flush).then_some(Flow::Wait)
}

/// Datagram sessions: records the responses a command wrote from `start`
/// (true when memcached would send them at once).
fn mark(out: &mut Output, datagram: bool, start: usize, shape: ReplyShape<'_>) -> bool {
    if !datagram {
        return false;
    }
    let mut marks = std::mem::take(&mut out.marks);
    let flushed = mark_replies(&mut marks, out.buf(), start, shape);
    out.marks = marks;
    flushed
}

/// A data block read into its item: waits for the rest of it (the
/// transport reads into the item), then for its `\r\n`.
fn finish_incoming(s: &mut Session, ctx: &WorkerCtx, done: &mut usize) -> Option<Flow> {
    let filled = s.incoming.as_ref().is_some_and(|i| i.item.is_filled());
    if !filled {
        return Some(Flow::Wait);
    }
    if s.input.len() < 2 {
        s.need = 2;
        return Some(Flow::Wait);
    }
    if s.must_yield(ctx, *done) {
        return Some(Flow::Yield);
    }
    s.need = 0;
    *done += 1;
    let terminated = &s.input.input()[..2] == b"\r\n";
    s.input.consume(2);
    if let Some(incoming) = s.incoming.take() {
        let start = s.output.len();
        s.output.unsent_verdict = None;
        store::finish_incoming(ctx, incoming, terminated, &mut Replies::new(&mut s.output));
        if std::mem::take(&mut s.log_incoming) {
            let unsent = s.output.unsent_verdict.take();
            let reply = s.output.composed().get(start..).unwrap_or_default();
            verbose::replies_sent(s.fd, verbose::Replies::Lines, reply, unsent);
        }
    }
    None
}

/// Adds the next dump lines; Some(flow) while the dump goes on.
fn dump_step(s: &mut Session, ctx: &WorkerCtx) -> Option<Flow> {
    while s.output.queued() < DUMP_CHUNK {
        let finished = s.dump.as_mut().is_some_and(|d| d.step(ctx, &mut s.output));
        if finished {
            s.dump = None;
            return None;
        }
    }
    Some(Flow::Yield)
}

/// Starts serving a huge get line as it arrives; false if the input does
/// not start with one.
fn start_stream(s: &mut Session) -> bool {
    let Some(get) = partial_get(s.input.input()) else {
        return false;
    };
    let touch = match get.touch {
        Ok(t) => t,
        // A bad gat exptime: the whole line is answered with the error.
        Err(_) => return false,
    };
    s.input.consume(get.keys_start);
    s.streaming = Some(StreamingGet {
        with_cas: get.with_cas,
        touch,
        reply_start: Some((s.output.len(), s.output.epoch())),
        failed: false,
    });
    true
}

/// Serves the complete keys of a streaming get; at its end, END (or the
/// error). Some(flow) to stop.
fn stream(s: &mut Session, ctx: &WorkerCtx) -> Option<Flow> {
    if s.output.queued() > crate::compose::output::WRITE_HIGH_WATER {
        return Some(Flow::Yield);
    }
    let input = s.input.input();
    let newline = memchr::memchr(b'\n', input);
    // The keys known complete: up to the line's end, or to the last space.
    let (keys_end, consumed) = match newline {
        Some(nl) => {
            let end = if nl > 0 && input[nl - 1] == b'\r' {
                nl - 1
            } else {
                nl
            };
            (end, nl + 1)
        }
        None => match memchr::memrchr(b' ', input) {
            Some(sp) => (sp, sp + 1),
            None => {
                // One partial key so far: a key longer than memcached
                // accepts cannot become valid.
                if input.len() > KEY_MAX_LENGTH {
                    fail_stream(s);
                    s.input.clear();
                }
                return Some(Flow::Wait);
            }
        },
    };
    let st = s.streaming.as_mut().expect("streaming");
    if !st.failed {
        let keys = Keys::list(&input[..keys_end]);
        let ok = execute::text_keys(
            ctx,
            keys,
            st.touch,
            st.with_cas,
            &mut Replies::new(&mut s.output),
            |_| crate::compose::text::Direct::No,
        );
        if ok.is_err() {
            fail_stream(s);
        }
    }
    s.input.consume(consumed);
    if newline.is_some() {
        let st = s.streaming.take().expect("streaming");
        if st.failed {
            s.output
                .buf()
                .extend_from_slice(osmium_protocol::ascii::GET_KEY_TOO_LONG);
        } else {
            compose_text::end(&mut s.output);
        }
    }
    None
}

/// A streamed get met a key over 250 bytes: its replies not yet sent are
/// dropped and the rest of the line is skipped.
fn fail_stream(s: &mut Session) {
    let Some(st) = s.streaming.as_mut() else {
        return;
    };
    if let Some((start, epoch)) = st.reply_start {
        if s.output.epoch() == epoch {
            s.output.truncate(start);
        }
    }
    st.failed = true;
}
