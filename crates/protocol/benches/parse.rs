//! Parse cost per request line: the 1.6.18 parser (`text::parse_command`,
//! `meta::parse_meta`) against the 1.6.45 one (`ascii::parse_line`), on the
//! hot requests: a get, a set header, an mg. The old parser is given the
//! line without its terminator (its caller strips it), the new one the
//! whole line, each as its server calls it.
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use osmium_protocol::ascii::parse_line;
use osmium_protocol::meta::parse_meta;
use osmium_protocol::request::KeyBuffer;
use osmium_protocol::text::{self, parse_command};

const GET: &[u8] = b"get user:profile:0000012345:summary\r\n";
const SET: &[u8] = b"set user:profile:0000012345:summary 0 3600 64\r\n";
const MG: &[u8] = b"mg user:profile:0000012345:summary v\r\n";
const GETS10: &[u8] =
    b"gets k:0001 k:0002 k:0003 k:0004 k:0005 k:0006 k:0007 k:0008 k:0009 k:0010\r\n";

fn strip(line: &[u8]) -> &[u8] {
    &line[..line.len() - 2]
}

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    for (name, line) in [("get", GET), ("set", SET), ("gets10", GETS10)] {
        g.bench_function(format!("{name}/old"), |b| {
            b.iter(|| {
                let cmd = parse_command(black_box(strip(line)));
                black_box(&cmd);
            })
        });
        g.bench_function(format!("{name}/new"), |b| {
            let mut keys = KeyBuffer::new();
            b.iter(|| {
                let req = parse_line(black_box(line), &mut keys);
                black_box(&req);
            })
        });
    }
    g.bench_function("mg/old", |b| {
        b.iter(|| {
            let req = parse_meta(text::Tokens::new(black_box(strip(MG))));
            black_box(&req);
        })
    });
    g.bench_function("mg/new", |b| {
        let mut keys = KeyBuffer::new();
        b.iter(|| {
            let req = parse_line(black_box(MG), &mut keys);
            black_box(&req);
        })
    });
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
