//! Transports: where a connection's bytes come from and go to. Stream
//! connections (TCP, unix-domain sockets: `stream`) are accepted by the
//! acceptor (`listen`) and served by the worker event loops (`worker`);
//! UDP datagrams are framed by `udp`. Each feeds a `Session`, which knows
//! no transport. A TLS transport would be one more kind of stream.
//! `flash_io` is a worker's reads of the flash tier (io_uring);
//! `idle_spin` how long a worker polls before it sleeps.

pub mod affinity;
pub mod flash_io;
pub mod idle_spin;
pub mod listen;
pub mod stream;
pub mod udp;
pub mod worker;
