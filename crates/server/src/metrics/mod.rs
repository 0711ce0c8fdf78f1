//! The metrics endpoint (`--metrics-addr HOST:PORT`): a listener on a
//! thread of its own (`osmium-metrics`) that answers `GET /metrics` in the
//! Prometheus text format 0.0.4, or in OpenMetrics 1.0 when the client's
//! `Accept` ranks `application/openmetrics-text` first (as Prometheus
//! does), and with `--metrics-hotkeys` `GET /hotkeys` (the hottest keys'
//! names, `hot`). What `/metrics` shows is gathered per scrape by
//! `families` from the same rows the `stats` commands answer, plus
//! osmium's own histograms and gauges; its series are a bounded set (no
//! label carries user data: hot keys are there by rank only).
//!
//! Who may ask: everyone who reaches the address, unless
//! `--metrics-token-file` is given: then every request needs
//! `Authorization: Bearer <token>` (`token`), else 401. Key names are
//! never served where they would leak: the settings refuse
//! `--metrics-hotkeys` without a token while `-Y`, `-S` or client
//! certificates guard the cache port.
//!
//! Crates: `prometheus-client` writes both formats from one collector
//! (the Prometheus project's Rust client: escaping, `_total` suffixes,
//! histogram buckets, `# EOF`); `httparse` (hyper's parser) parses the
//! request line and headers. The socket loop is ours rather than a
//! server crate's (`tiny_http` has no read timeouts: a client that never
//! finishes its request would hold a thread for good): each client gets
//! a thread, at most `MAX_CLIENTS` at once and `MAX_PER_SOURCE` from one
//! address (`admission`; more are answered 503 at once), and `DEADLINE`
//! for its whole request, head and reply together (`http`). One request
//! per connection (`Connection: close`). Nothing here touches the
//! workers: a scrape reads their counters as `stats` does.

mod admission;
mod exporter;
mod families;
mod gather;
mod hot;
mod http;
mod own;
mod token;

use std::io;
use std::net::{TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::Shared;
use crate::settings::Settings;

pub(crate) use families::Families;
pub(crate) use token::Token;

use admission::Admission;
use http::{Conn, Failure, Method, Request};

/// Extra gauges added to every scrape after the built-in ones: one
/// function per source (e.g. the hottest keys), each adding its families
/// through `Families::gauge`/`counter`.
pub(crate) type ExtraGauges = fn(&Shared, &mut Families);

/// The extra sources, in the order they appear.
pub(crate) const EXTRA_GAUGES: &[ExtraGauges] = &[hot::add];

/// Clients served at once; more are answered 503 at once.
const MAX_CLIENTS: usize = 8;
/// Clients served at once from one source (an IPv4 address, an IPv6 /64).
const MAX_PER_SOURCE: usize = 2;
/// How long a request may take, from its accept to the end of its reply.
const DEADLINE: Duration = Duration::from_secs(5);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Who may ask for what.
struct Access {
    /// `--metrics-token-file`: every request must carry it.
    token: Option<Token>,
    /// `--metrics-hotkeys`: `/hotkeys` is served.
    hotkeys: bool,
}

/// Binds `--metrics-addr` (None without it); an address that cannot be
/// resolved or bound is an error that stops the start.
pub(crate) fn bind(settings: &Settings) -> io::Result<Option<TcpListener>> {
    let Some(addr) = &settings.metrics_addr else {
        return Ok(None);
    };
    let fail = |e: io::Error| io::Error::new(e.kind(), format!("--metrics-addr {addr}: {e}"));
    let addrs: Vec<_> = addr.to_socket_addrs().map_err(fail)?.collect();
    let l = TcpListener::bind(&addrs[..]).map_err(fail)?;
    Ok(Some(l))
}

/// The endpoint's running thread, stopped by [`Endpoint::stop`].
pub(crate) struct Endpoint {
    thread: std::thread::JoinHandle<()>,
    /// The listening socket the thread accepts on (a second descriptor).
    socket: TcpListener,
}

impl Endpoint {
    /// Ends the thread once the server's stop is requested: shutting the
    /// listening socket down wakes its `accept` (Linux returns EINVAL),
    /// the thread sees the stop and returns, and the port is free.
    /// Clients being answered finish on their own threads.
    pub(crate) fn stop(self) {
        let _ = socket2::SockRef::from(&self.socket).shutdown(std::net::Shutdown::Both);
        let _ = self.thread.join();
    }
}

/// Starts the endpoint's thread; `token` is `--metrics-token-file`'s.
pub(crate) fn spawn(
    listener: TcpListener,
    shared: Arc<Shared>,
    token: Option<Token>,
) -> io::Result<Endpoint> {
    if shared.verbose() > 0 {
        if let Ok(a) = listener.local_addr() {
            eprintln!("osmium serving metrics on http://{a}/metrics");
        }
    }
    let access = Arc::new(Access {
        token,
        hotkeys: shared.settings.metrics_hotkeys,
    });
    let socket = listener.try_clone()?;
    let thread = std::thread::Builder::new()
        .name("osmium-metrics".into())
        .spawn(move || accept_loop(listener, shared, access))?;
    Ok(Endpoint { thread, socket })
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, access: Arc<Access>) {
    let admission = Admission::new(MAX_CLIENTS, MAX_PER_SOURCE);
    for conn in listener.incoming() {
        if shared.stop_requested().is_some() {
            return;
        }
        let Ok(conn) = conn else {
            // EMFILE and the like: wait a little rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let deadline = Instant::now() + DEADLINE;
        let slot = conn.peer_addr().ok().and_then(|a| admission.admit(a.ip()));
        let Some(slot) = slot else {
            http::refuse_busy(conn);
            continue;
        };
        let (shared, access) = (shared.clone(), access.clone());
        // A failed spawn drops the closure, and the slot with it.
        let _ = std::thread::Builder::new()
            .name("osmium-metrics-client".into())
            .spawn(move || serve(Conn::new(conn, deadline, slot), &shared, &access));
    }
}

fn serve(mut conn: Conn, shared: &Shared, access: &Access) {
    let req = match conn.read_request() {
        Ok(req) => req,
        Err(Failure::Answer(code, text)) => {
            let _ = conn.respond_text(code, text, &[]);
            return;
        }
        Err(Failure::Gone) => return,
    };
    let _ = answer(&mut conn, &req, shared, access);
}

/// Answers one request: 401 without the token (when there is one), 405
/// for a method other than GET and HEAD, then by path.
fn answer(conn: &mut Conn, req: &Request, shared: &Shared, access: &Access) -> io::Result<()> {
    if let Some(token) = &access.token {
        if !req
            .authorization
            .as_deref()
            .is_some_and(|a| token.accepts(a))
        {
            return conn.respond_text(
                401,
                "a bearer token is required\n",
                &["WWW-Authenticate: Bearer realm=\"osmium\""],
            );
        }
    }
    let head_only = match req.method {
        Method::Get => false,
        Method::Head => true,
        Method::Other => {
            return conn.respond_text(405, "only GET and HEAD\n", &["Allow: GET, HEAD"]);
        }
    };
    let (body, content_type) = match req.path.as_str() {
        "/metrics" => match render(shared, req.open_metrics) {
            (Ok(body), content_type) => (body.into_bytes(), content_type),
            (Err(_), _) => {
                return conn.respond_text(500, "encoding failed\n", &[]);
            }
        },
        "/hotkeys" if access.hotkeys => (hot::names(shared), "text/plain; charset=utf-8"),
        _ => {
            let text = if access.hotkeys {
                "not found: try /metrics or /hotkeys\n"
            } else {
                "not found: try /metrics\n"
            };
            return conn.respond_text(404, text, &[]);
        }
    };
    let shown = if head_only { &b""[..] } else { &body[..] };
    conn.respond(200, content_type, shown, body.len(), &[])
}

/// One scrape in the chosen format, and its content type.
pub(crate) fn render(
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
