#!/usr/bin/env bash
# Builds the Debian package target/debian/osmium_<version>-1_<arch>.deb
# from an existing release build (`cargo build --release --workspace`):
# the man pages of osmium, osmium-proxy, osmium-bench and osmium-tool are
# written from their clap definitions
# (`--generate-man DIR`) into target/release/man, gzipped, then
# `cargo deb --no-build` packs what crates/server/Cargo.toml's
# [package.metadata.deb] lists (binaries, unit, conf, man pages, README.md
# and the docs/ manual under /usr/share/doc/osmium/, LICENSE as
# /usr/share/doc/osmium/copyright).
#
# Needs cargo-deb: cargo install cargo-deb --locked --version 3.8.0
set -euo pipefail
cd "$(dirname "$0")/.."

release=target/release
for b in osmium osmium-proxy osmium-bench osmium-tool; do
    [ -x "$release/$b" ] || { echo "$release/$b missing: run cargo build --release --workspace first" >&2; exit 1; }
done
mkdir -p "$release/man"
rm -f "$release"/man/*.1 "$release"/man/*.1.gz
for b in osmium osmium-proxy osmium-bench osmium-tool; do
    "$release/$b" --generate-man "$release/man"
done
gzip -9n "$release"/man/*.1
# --strip: the release profile keeps line tables (debug = 1) for profiling;
# the package does not need them.
cargo deb -p osmium-server --no-build --strip "$@"
ls -l target/debian/osmium_*.deb
