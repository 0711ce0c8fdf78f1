//! Transports: where a connection's bytes come from and go to. Stream
//! connections (TCP, TLS over TCP, unix-domain sockets: `stream`) are
//! accepted by the acceptor (`listen`) and served by the worker event
//! loops (`worker`); TLS is `tls` (a connection's record layer; its output
//! leaves through `tls_send`; the server's certificates are
//! `crate::tls_context`); a replication link's Noise frames over TCP are
//! `noise`; UDP datagrams are framed by `udp`.
//! Each feeds a `Session`, which knows no transport.
//! `flash_io` is a worker's reads of the flash tier (io_uring);
//! `idle_spin` how long a worker polls before it sleeps; `carried` the
//! listening sockets a binary upgrade carried, taken instead of bound.

pub(crate) mod affinity;
pub(crate) mod carried;
pub(crate) mod flash_io;
pub(crate) mod idle_spin;
pub(crate) mod listen;
pub(crate) mod noise;
pub(crate) mod stream;
pub(crate) mod tls;
mod tls_send;
pub(crate) mod udp;
pub(crate) mod worker;
