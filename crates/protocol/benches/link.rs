//! A replication link's crypto, as configured (`replication_link`:
//! Noise_NNpsk0_25519_AESGCM_SHA256 over snow's ring resolver): one
//! handshake (both ends, in one process), and sealing then opening one
//! frame of 100 B, 1 KiB and 64 KiB of plaintext (criterion's throughput
//! is the plaintext's).

// criterion_group! defines the `pub fn benches` it runs, and takes no
// doc comment for it.
#![allow(missing_docs)]

use std::io::Read;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use osmium_protocol::replication_link::handshake::respond_as;
use osmium_protocol::replication_link::{Initiator, Role, Secret, Transport};

fn handshake(secret: &Secret) -> (Transport, Transport) {
    let (i, hello) = Initiator::start(secret, Role::TargetLink, None).unwrap();
    let w: Vec<&str> = hello.trim_end().split(' ').collect();
    let (_, answer, r) =
        respond_as(secret, w[1].as_bytes(), w[2].as_bytes(), None, &[7; 16]).unwrap();
    (i.finish(&answer).unwrap(), r)
}

/// A socket that gives what was written to it.
struct Loop(Vec<u8>, usize);

impl Read for Loop {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.0.len() - self.1);
        buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
        self.1 += n;
        if self.1 == self.0.len() {
            self.0.clear();
            self.1 = 0;
        }
        Ok(n)
    }
}

fn link(c: &mut Criterion) {
    let secret = Secret::new(b"0f1e2d3c4b5a69788796a5b4c3d2e1f0").unwrap();
    c.bench_function("link/handshake", |b| {
        b.iter(|| black_box(handshake(&secret)))
    });
    let (i, r) = handshake(&secret);
    let mut g = c.benchmark_group("link/seal_open");
    for size in [100usize, 1024, 65519] {
        let (mut out, _) = i.clone().split();
        let (_, mut inb) = r.clone().split();
        let plain = vec![0x5au8; size];
        let mut got = vec![0u8; size];
        let mut sock = Loop(Vec::new(), 0);
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("{size}"), |b| {
            b.iter(|| {
                out.seal(black_box(&plain)).unwrap();
                out.flush_to(&mut sock.0).unwrap();
                let mut n = 0;
                while n < size {
                    n += inb.read_from(&mut sock, &mut got[n..]).unwrap();
                }
                black_box(&got);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, link);
criterion_main!(benches);
