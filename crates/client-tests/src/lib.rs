//! Client-library tests kept out of `osmium-server` because they link what
//! the server must not: `tests/rust_memcache_tls.rs` runs the Rust
//! `memcache` crate over TLS, which it does with OpenSSL. This library is
//! empty; the tests start the `osmium` binary built by the workspace.
