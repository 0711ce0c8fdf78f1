//! Model-based property test of the engine's command semantics: random
//! sequences of storage, retrieval, arithmetic, touch, delete and flush
//! commands over a few keys, from several write heads, checked against a
//! plain map that follows memcached's rules. The store is large enough that
//! nothing is evicted, so the two must agree exactly, CAS uniques included:
//! a unique stays the same until its item is modified, a new version of a
//! live item gets a larger one, and no unique is ever handed out twice for
//! a key. (A key deleted and stored again gets a new unique, but not
//! necessarily a larger one: uniques come from item locations; see
//! `crates/store/src/item.rs`.)

use osmium_store::{ArithResult, Lookup, Store, StoreConfig, StoreMode, StoreStatus, Write};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

#[derive(Clone, Debug)]
enum Op {
    Store {
        mode: u8,
        key: u8,
        flags: u32,
        value: Vec<u8>,
        head: usize,
        cas_from: u8,
    },
    Get(u8),
    Arith {
        key: u8,
        incr: bool,
        delta: u64,
        head: usize,
    },
    Touch(u8, u8),
    Delete(u8),
    Flush,
}

#[derive(Clone, Debug)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    cas: u64,
}

fn op() -> impl Strategy<Value = Op> {
    let value = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        (0u64..200).prop_map(|n| n.to_string().into_bytes()),
    ];
    prop_oneof![
        6 => (0u8..6, 0u8..6, prop_oneof![Just(0u32), any::<u32>()], value, 0usize..3, 0u8..3)
            .prop_map(|(mode, key, flags, value, head, cas_from)| Op::Store {
                mode, key, flags, value, head, cas_from
            }),
        4 => (0u8..6).prop_map(Op::Get),
        2 => (0u8..6, any::<bool>(), 0u64..1000, 0usize..3)
            .prop_map(|(key, incr, delta, head)| Op::Arith { key, incr, delta, head }),
        1 => (0u8..6, 0u8..3).prop_map(|(k, t)| Op::Touch(k, t)),
        1 => (0u8..6).prop_map(Op::Delete),
        1 => Just(Op::Flush),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

fn read(s: &Store, k: u8) -> Option<Item> {
    match s.get(&key(k), None, |it| Item {
        value: it.value().to_vec().unwrap(),
        flags: it.flags(),
        cas: it.cas(),
    }) {
        Lookup::Hit(i) => Some(i),
        _ => None,
    }
}

/// What memcached's incr/decr does to a value made of decimal digits
/// optionally followed by spaces (what earlier incr/decr leave): the new
/// number (64-bit wrap up, 0 floor down) and the new value, space padded to
/// the old length when shorter. None for any other value (those the test
/// leaves to the store: strtoull accepts more than the model knows).
fn arith(old: &[u8], incr: bool, delta: u64) -> Option<(u64, Vec<u8>)> {
    let digits = old.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || digits > 19 || old.len() >= 24 || old[digits..].iter().any(|&c| c != b' ') {
        return None;
    }
    let n: u64 = std::str::from_utf8(&old[..digits]).ok()?.parse().ok()?;
    let v = if incr {
        n.wrapping_add(delta)
    } else {
        n.saturating_sub(delta)
    };
    let mut out = v.to_string().into_bytes();
    if out.len() < old.len() {
        out.resize(old.len(), b' ');
    }
    Some((v, out))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_a_map(ops in proptest::collection::vec(op(), 1..120)) {
        let s = Store::new(StoreConfig {
            memory_limit: 64 << 20,
            write_heads: 3,
            ..StoreConfig::default()
        });
        let mut model: HashMap<u8, Item> = HashMap::new();
        // Every CAS unique handed out per key, to check they never repeat.
        let mut seen: HashMap<u8, HashSet<u64>> = HashMap::new();
        for op in ops {
            match op {
                Op::Store { mode, key: k, flags, value, head, cas_from } => {
                    let mode = [
                        StoreMode::Set,
                        StoreMode::Add,
                        StoreMode::Replace,
                        StoreMode::Append,
                        StoreMode::Prepend,
                        StoreMode::Cas,
                    ][mode as usize];
                    let current = model.get(&k).cloned();
                    let cas = match (cas_from, &current) {
                        (0, Some(i)) => i.cas,
                        (1, Some(i)) => i.cas.wrapping_sub(1),
                        _ => 12345,
                    };
                    let kb = key(k);
                    let w = Write {
                        mode,
                        key: &kb,
                        flags,
                        value: &value,
                        cas: if mode == StoreMode::Cas { cas } else { 0 },
                        ..Write::default()
                    };
                    let (status, new_cas) = s.store(head, &w);
                    let expect = match (mode, &current) {
                        (StoreMode::Set, _) => Some(Item { value: value.clone(), flags, cas: 0 }),
                        (StoreMode::Add, None) => Some(Item { value: value.clone(), flags, cas: 0 }),
                        (StoreMode::Replace, Some(_)) => {
                            Some(Item { value: value.clone(), flags, cas: 0 })
                        }
                        (StoreMode::Append, Some(i)) => {
                            Some(Item { value: [&i.value[..], &value[..]].concat(), flags: i.flags, cas: 0 })
                        }
                        (StoreMode::Prepend, Some(i)) => {
                            Some(Item { value: [&value[..], &i.value[..]].concat(), flags: i.flags, cas: 0 })
                        }
                        (StoreMode::Cas, Some(i)) if i.cas == cas => {
                            Some(Item { value: value.clone(), flags, cas: 0 })
                        }
                        _ => None,
                    };
                    match expect {
                        Some(mut item) => {
                            prop_assert_eq!(status, StoreStatus::Stored);
                            if let Some(old) = &current {
                                prop_assert!(new_cas > old.cas, "cas {} after {}", new_cas, old.cas);
                            }
                            prop_assert!(seen.entry(k).or_default().insert(new_cas), "cas {} again", new_cas);
                            item.cas = new_cas;
                            model.insert(k, item);
                        }
                        None => {
                            let want = match (mode, &current) {
                                (StoreMode::Cas, None) => StoreStatus::NotFound,
                                (StoreMode::Cas, Some(_)) => StoreStatus::Exists,
                                _ => StoreStatus::NotStored,
                            };
                            prop_assert_eq!(status, want);
                        }
                    }
                }
                Op::Get(k) => {
                    let got = read(&s, k);
                    match (got, model.get(&k)) {
                        (None, None) => {}
                        (Some(g), Some(m)) => {
                            prop_assert_eq!(&g.value, &m.value);
                            prop_assert_eq!(g.flags, m.flags);
                            prop_assert_eq!(g.cas, m.cas);
                        }
                        (g, m) => prop_assert!(false, "key{}: store {:?}, model {:?}", k, g, m),
                    }
                }
                Op::Arith { key: k, incr, delta, head } => {
                    let r = s.arith(head, &key(k), incr, delta);
                    match model.get(&k).cloned() {
                        None => prop_assert_eq!(r, ArithResult::NotFound),
                        Some(i) => {
                            if i.value.is_empty() {
                                prop_assert_eq!(r, ArithResult::NonNumeric);
                            }
                            let expected = arith(&i.value, incr, delta);
                            if let Some((v, _)) = expected {
                                prop_assert_eq!(r, ArithResult::Value(v));
                            }
                            if let ArithResult::Value(v) = r {
                                let g = read(&s, k).expect("incremented item");
                                let mut text = v.to_string().into_bytes();
                                if text.len() < i.value.len() {
                                    text.resize(i.value.len(), b' ');
                                }
                                prop_assert_eq!(&g.value, &text);
                                prop_assert_eq!(g.flags, i.flags);
                                prop_assert!(g.cas > i.cas);
                                prop_assert!(seen.entry(k).or_default().insert(g.cas));
                                model.insert(k, Item { value: text, flags: i.flags, cas: g.cas });
                            }
                        }
                    }
                }
                Op::Touch(k, t) => {
                    let exptime = if t == 0 { 0 } else { s.clock().expiry(1000 * t as i32) };
                    let live = matches!(s.touch(&key(k), exptime), Lookup::Hit(()));
                    prop_assert_eq!(live, model.contains_key(&k));
                    // A touch keeps the CAS unique (checked by the next Get).
                }
                Op::Delete(k) => {
                    prop_assert_eq!(s.delete(&key(k)), model.remove(&k).is_some());
                }
                Op::Flush => {
                    s.flush_all(0);
                    model.clear();
                }
            }
        }
    }
}
