//! Parse cost per request line (`ascii::parse_line`, given the whole line as
//! the server gives it) on the hot requests: a get, a set header, a
//! 10-key gets, an mg; and the prefetch peek (`peek::keys`, on the GET
//! path) over a pipeline of 16 text gets and of 16 binary GETs.

// criterion_group! defines the `pub fn benches` it runs, and takes no
// doc comment for it.
#![allow(missing_docs)]

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use osmium_protocol::ascii::parse_line;
use osmium_protocol::client::encode;
use osmium_protocol::peek;
use osmium_protocol::request::KeyBuffer;

const GET: &[u8] = b"get user:profile:0000012345:summary\r\n";
const SET: &[u8] = b"set user:profile:0000012345:summary 0 3600 64\r\n";
const MG: &[u8] = b"mg user:profile:0000012345:summary v\r\n";
const GETS10: &[u8] =
    b"gets k:0001 k:0002 k:0003 k:0004 k:0005 k:0006 k:0007 k:0008 k:0009 k:0010\r\n";

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    for (name, line) in [("get", GET), ("set", SET), ("gets10", GETS10), ("mg", MG)] {
        g.bench_function(name, |b| {
            let mut keys = KeyBuffer::new();
            b.iter(|| {
                let req = parse_line(black_box(line), &mut keys);
                black_box(&req);
            })
        });
    }
    g.finish();
}

fn peek(c: &mut Criterion) {
    let mut g = c.benchmark_group("peek");
    let (mut text, mut binary) = (Vec::new(), Vec::new());
    for i in 0..16 {
        let key = format!("user:profile:{i:010}:summary");
        encode::get(&mut text, b"get", [key.as_bytes()]);
        encode::binary(&mut binary, 0x00, key.as_bytes(), &[], &[], i, 0);
    }
    for (name, input) in [("text16", &text), ("binary16", &binary)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let n: usize = peek::keys(black_box(input)).map(<[u8]>::len).sum();
                black_box(n);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, parse, peek);
criterion_main!(benches);
