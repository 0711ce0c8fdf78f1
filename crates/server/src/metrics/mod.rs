//! The `/metrics` endpoint (`--metrics-addr HOST:PORT`): a listener on a
//! thread of its own (`osmium-metrics`) that answers `GET /metrics` in the
//! Prometheus text format 0.0.4, or in OpenMetrics 1.0 when the client's
//! `Accept` ranks `application/openmetrics-text` first (as Prometheus
//! does). What it shows is
//! gathered per scrape by `families` from the same rows the `stats`
//! commands answer, plus osmium's own histograms and gauges.
//!
//! Crates: `prometheus-client` writes both formats from one collector
//! (the Prometheus project's Rust client: escaping, `_total` suffixes,
//! histogram buckets, `# EOF`); `httparse` (hyper's parser) parses the
//! request line and headers. The socket loop is ours rather than a
//! server crate's (`tiny_http` has no read timeouts: a client that never
//! finishes its request would hold a thread for good): each client gets
//! a thread, at most `MAX_CLIENTS` at once (more are answered 503), and
//! `TIMEOUT` to send its request (else 408) and take the reply. One
//! request per connection (`Connection: close`). Nothing here touches
//! the workers: a scrape reads their counters as `stats` does.

mod exporter;
mod families;
mod gather;
mod hot;
mod own;

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::context::Shared;
use crate::settings::Settings;

pub use families::Families;

/// Extra gauges added to every scrape after the built-in ones: one
/// function per source (e.g. the hottest keys), each adding its families
/// through `Families::gauge`/`counter`.
pub type ExtraGauges = fn(&Shared, &mut Families);

/// The extra sources, in the order they appear.
pub const EXTRA_GAUGES: &[ExtraGauges] = &[hot::add];

/// Clients served at once; more are answered 503 at once.
const MAX_CLIENTS: usize = 8;
/// How long a client has to send its request, and to take each write.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head (request line and headers) read.
const HEAD_MAX: usize = 8 * 1024;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `--metrics-addr` (None without it); an address that cannot be
/// resolved or bound is an error that stops the start.
pub fn bind(settings: &Settings) -> io::Result<Option<TcpListener>> {
    let Some(addr) = &settings.metrics_addr else {
        return Ok(None);
    };
    let fail = |e: io::Error| io::Error::new(e.kind(), format!("--metrics-addr {addr}: {e}"));
    let addrs: Vec<_> = addr.to_socket_addrs().map_err(fail)?.collect();
    let l = TcpListener::bind(&addrs[..]).map_err(fail)?;
    Ok(Some(l))
}

/// Starts the endpoint's thread.
pub fn spawn(listener: TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    if shared.verbose() > 0 {
        if let Ok(a) = listener.local_addr() {
            eprintln!("osmium serving metrics on http://{a}/metrics");
        }
    }
    std::thread::Builder::new()
        .name("osmium-metrics".into())
        .spawn(move || accept_loop(listener, shared))?;
    Ok(())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let active = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else {
            // EMFILE and the like: wait a little rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = conn.set_write_timeout(Some(TIMEOUT));
        if active.load(Ordering::Relaxed) >= MAX_CLIENTS {
            let _ = respond(&mut conn, 503, "text/plain", b"busy\n", &[]);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let (shared, done) = (shared.clone(), active.clone());
        let spawned = std::thread::Builder::new()
            .name("osmium-metrics-client".into())
            .spawn(move || {
                serve(&mut conn, &shared);
                done.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The request's outcome.
enum Request {
    /// GET or HEAD of /metrics; whether OpenMetrics was asked for.
    Metrics {
        open_metrics: bool,
        head: bool,
    },
    Error(u16, &'static str),
    /// The client left before sending a request.
    Gone,
}

fn serve(conn: &mut TcpStream, shared: &Shared) {
    let _ = conn.set_read_timeout(Some(TIMEOUT));
    match read_request(conn) {
        Request::Metrics { open_metrics, head } => {
            let (body, content_type) = render(shared, open_metrics);
            let body = match body {
                Ok(b) => b,
                Err(_) => {
                    let _ = respond(conn, 500, "text/plain", b"encoding failed\n", &[]);
                    return;
                }
            };
            let shown = if head { &b""[..] } else { body.as_bytes() };
            let _ = respond_len(conn, 200, content_type, shown, body.len(), &[]);
        }
        Request::Error(405, text) => {
            let _ = respond(
                conn,
                405,
                "text/plain",
                text.as_bytes(),
                &["Allow: GET, HEAD"],
            );
        }
        Request::Error(code, text) => {
            let _ = respond(conn, code, "text/plain", text.as_bytes(), &[]);
        }
        Request::Gone => {}
    }
}

/// Reads and parses the request head.
fn read_request(conn: &mut TcpStream) -> Request {
    let mut buf = vec![0u8; HEAD_MAX];
    let mut have = 0;
    loop {
        let n = match conn.read(&mut buf[have..]) {
            Ok(0) if have == 0 => return Request::Gone,
            Ok(0) => return Request::Error(400, "incomplete request\n"),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Request::Error(408, "request timeout\n")
            }
            Err(_) => return Request::Gone,
        };
        have += n;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..have]) {
            Ok(httparse::Status::Complete(_)) => return route(&req),
            Ok(httparse::Status::Partial) if have == buf.len() => {
                return Request::Error(431, "request head too large\n")
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Request::Error(431, "too many headers\n")
            }
            Err(_) => return Request::Error(400, "bad request\n"),
        }
    }
}

fn route(req: &httparse::Request<'_, '_>) -> Request {
    let head = match req.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Request::Error(405, "only GET /metrics\n"),
    };
    let path = req.path.unwrap_or("");
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if path != "/metrics" {
        return Request::Error(404, "not found: try /metrics\n");
    }
    let open_metrics = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("accept"))
        .any(|h| prefers_open_metrics(&String::from_utf8_lossy(h.value)));
    Request::Metrics { open_metrics, head }
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

/// One scrape in the chosen format, and its content type.
pub fn render(
    shared: &Shared,
    open_metrics: bool,
) -> (Result<String, std::fmt::Error>, &'static str) {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(gather::gather(shared)));
    let mut body = String::new();
    if open_metrics {
        let r = prometheus_client::encoding::text::encode(&mut body, &registry);
        (r.map(|_| body), OPENMETRICS)
    } else {
        let r = prometheus_client::encoding::prometheus_text::encode(&mut body, &registry);
        (
            r.map(|_| body),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )
    }
}

fn respond(
    conn: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &[u8],
    extra: &[&str],
) -> io::Result<()> {
    respond_len(conn, code, content_type, body, body.len(), extra)
}

fn respond_len(
    conn: &mut TcpStream,
    code: u16,
    content_type: &str,
    body: &[u8],
    len: usize,
    extra: &[&str],
) -> io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
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
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()?;
    let _ = conn.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::prefers_open_metrics;

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
}
