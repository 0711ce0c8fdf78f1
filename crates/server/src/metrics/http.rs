//! The metrics endpoint's HTTP/1.1 on one connection, under one deadline
//! for the whole request: reading its head (request line and headers,
//! parsed by `httparse`) and writing the reply together must end by it,
//! whatever pace the client sends or reads at; past it the connection is
//! closed (a head not complete by then is answered 408 first, if the
//! socket takes it at once). One request per connection
//! (`Connection: close`); a request body is never read.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::admission::Slot;

/// The longest request head (request line and headers) read.
const HEAD_MAX: usize = 8 * 1024;
/// The most headers parsed.
const HEADERS_MAX: usize = 64;

/// GET or HEAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    /// Any other method.
    Other,
}

/// What the endpoint needs of a request head.
#[derive(Debug)]
pub(crate) struct Request {
    pub method: Method,
    /// The path, without its query string.
    pub path: String,
    /// The `Accept` headers rank OpenMetrics first.
    pub open_metrics: bool,
    /// The `Authorization` header's value (None: no such header, or more
    /// than one).
    pub authorization: Option<Vec<u8>>,
}

/// Why no request was read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Answer with this status and text.
    Answer(u16, &'static str),
    /// The client left before sending anything, or the socket failed:
    /// nothing to answer.
    Gone,
}

/// A client connection, its deadline and its place among the clients.
pub(crate) struct Conn {
    stream: TcpStream,
    deadline: Instant,
    /// Given back before the reply's last byte is written: a client that
    /// sends its next request when the last reply ends finds the place
    /// free.
    slot: Option<Slot>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, deadline: Instant, slot: Slot) -> Conn {
        Conn {
            stream,
            deadline,
            slot: Some(slot),
        }
    }

    /// Time left before the deadline, or None when it has passed.
    fn left(&self) -> Option<std::time::Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// Reads and parses the request head.
    pub(crate) fn read_request(&mut self) -> Result<Request, Failure> {
        let mut buf = vec![0u8; HEAD_MAX];
        let mut have = 0;
        loop {
            let Some(left) = self.left() else {
                return Err(Failure::Answer(408, "request timeout\n"));
            };
            if self.stream.set_read_timeout(Some(left)).is_err() {
                return Err(Failure::Gone);
            }
            let n = match self.stream.read(&mut buf[have..]) {
                Ok(0) if have == 0 => return Err(Failure::Gone),
                Ok(0) => return Err(Failure::Answer(400, "incomplete request\n")),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(Failure::Answer(408, "request timeout\n"))
                }
                Err(_) => return Err(Failure::Gone),
            };
            have += n;
            let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf[..have]) {
                Ok(httparse::Status::Complete(_)) => return Ok(Request::of(&req)),
                Ok(httparse::Status::Partial) if have == buf.len() => {
                    return Err(Failure::Answer(431, "request head too large\n"))
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(Failure::Answer(431, "too many headers\n"))
                }
                Err(_) => return Err(Failure::Answer(400, "bad request\n")),
            }
        }
    }

    /// Writes a reply whose body is `body` (`len` its length: a HEAD
    /// reply sends none), then closes the sending side. A 408 (the
    /// deadline passed) is written only if the socket takes it at once.
    pub(crate) fn respond(
        &mut self,
        code: u16,
        content_type: &str,
        body: &[u8],
        len: usize,
        extra: &[&str],
    ) -> io::Result<()> {
        let head = head(code, content_type, len, extra);
        if code == 408 {
            self.stream.set_nonblocking(true)?;
            let mut reply = head.into_bytes();
            reply.extend_from_slice(body);
            self.stream.write_all(&reply)?;
            drain(&mut self.stream);
        } else {
            // All but the reply's last byte, then the place back, then the
            // last byte: a client that sends its next request as soon as
            // this reply ends finds the place free (it cannot see the end
            // before the place is given back).
            let mut reply = head.into_bytes();
            reply.extend_from_slice(body);
            let last = reply.len() - 1;
            self.write_by_deadline(&reply[..last])?;
            self.slot = None;
            self.write_by_deadline(&reply[last..])?;
        }
        self.slot = None;
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        Ok(())
    }

    /// A plain-text reply (errors).
    pub(crate) fn respond_text(&mut self, code: u16, text: &str, extra: &[&str]) -> io::Result<()> {
        self.respond(code, "text/plain", text.as_bytes(), text.len(), extra)
    }

    /// Writes all of `bytes` unless the deadline passes first (each write
    /// may wait only for the time left).
    fn write_by_deadline(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let left = self
                .left()
                .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
            self.stream.set_write_timeout(Some(left))?;
            match self.stream.write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Request {
    fn of(req: &httparse::Request<'_, '_>) -> Request {
        let method = match req.method {
            Some("GET") => Method::Get,
            Some("HEAD") => Method::Head,
            _ => Method::Other,
        };
        let path = req.path.unwrap_or("");
        let path = path.split_once('?').map_or(path, |(p, _)| p).to_string();
        let open_metrics = req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("accept"))
            .any(|h| prefers_open_metrics(&String::from_utf8_lossy(h.value)));
        let mut auth = req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("authorization"));
        let authorization = match (auth.next(), auth.next()) {
            (Some(h), None) => Some(h.value.to_vec()),
            _ => None,
        };
        Request {
            method,
            path,
            open_metrics,
            authorization,
        }
    }
}

/// Answers 503 to a client that gets no place, without waiting: the
/// accepting thread writes it, and a fresh socket's buffer takes it whole
/// (or the client goes without).
pub(crate) fn refuse_busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let mut reply = head(503, "text/plain", 5, &["Retry-After: 1"]).into_bytes();
        reply.extend_from_slice(b"busy\n");
        let _ = stream.write_all(&reply);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        drain(&mut stream);
    }
}

/// Reads what a nonblocking socket already holds (at most `HEAD_MAX`
/// bytes), so that closing it sends the client a FIN after the reply
/// rather than a reset that could discard the reply unread.
fn drain(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    for _ in 0..HEAD_MAX / buf.len() {
        if !matches!(stream.read(&mut buf), Ok(n) if n > 0) {
            break;
        }
    }
}

fn head(code: u16, content_type: &str, len: usize, extra: &[&str]) -> String {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let mut head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: close\r\n"
    );
    for h in extra {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head
}

/// Whether an `Accept` value ranks OpenMetrics at least as high as the
/// text format (`q` weights; a range without one weighs 1).
fn prefers_open_metrics(accept: &str) -> bool {
    let (mut om, mut text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse::<f32>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_by_weight() {
        // Prometheus 2.x's scrape header.
        assert!(prefers_open_metrics(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        ));
        assert!(prefers_open_metrics("application/openmetrics-text"));
        assert!(!prefers_open_metrics("text/plain"));
        assert!(!prefers_open_metrics("*/*"));
        assert!(!prefers_open_metrics(""));
        assert!(!prefers_open_metrics(
            "text/plain;version=0.0.4, application/openmetrics-text; q=0.5"
        ));
        assert!(!prefers_open_metrics("application/openmetrics-text;q=0"));
    }

    fn parse(head: &[u8]) -> Request {
        let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(head).unwrap().is_complete());
        Request::of(&req)
    }

    #[test]
    fn the_head_gives_method_path_and_one_authorization() {
        let r = parse(b"GET /metrics?x=1 HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n");
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.authorization.as_deref(), Some(&b"Bearer abc"[..]));
        let r = parse(b"HEAD /hotkeys HTTP/1.1\r\n\r\n");
        assert_eq!(r.method, Method::Head);
        assert_eq!(r.authorization, None);
        // Two Authorization headers: neither is taken.
        let r = parse(
            b"POST /metrics HTTP/1.1\r\nauthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
        );
        assert_eq!(r.method, Method::Other);
        assert_eq!(r.authorization, None);
    }
}
