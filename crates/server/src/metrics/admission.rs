//! Which metrics clients are served at once: at most a total, and at most
//! a few from one source, so that one client holding connections open
//! (a slow-loris attack, or a stuck scraper) cannot take every place. A
//! source is a client's IPv4 address, or the /64 network of an IPv6 one
//! (one host commonly holds a whole /64); an IPv4-mapped IPv6 address is
//! its IPv4 address. A place is held by a [`Slot`] and given back when
//! the slot is dropped, whatever ends the client's thread.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Where clients come from, as far as the limits are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    V4(u32),
    /// The first 64 bits of the address.
    V6Net(u64),
}

impl Source {
    fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(v4.into()),
                None => Source::V6Net((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Default)]
struct Held {
    total: usize,
    /// Sources with at least one place (at most `total` entries).
    by_source: HashMap<Source, usize>,
}

/// The places of the metrics endpoint.
pub(crate) struct Admission {
    max_total: usize,
    max_per_source: usize,
    held: Mutex<Held>,
}

/// One client's place, given back when dropped.
pub(crate) struct Slot {
    admission: Arc<Admission>,
    source: Source,
}

impl Admission {
    pub(crate) fn new(max_total: usize, max_per_source: usize) -> Arc<Admission> {
        Arc::new(Admission {
            max_total,
            max_per_source,
            held: Mutex::new(Held::default()),
        })
    }

    /// A place for a client from `ip`, or None when every place, or every
    /// place its source may take, is held.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let source = Source::of(ip);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let from_source = held.by_source.get(&source).copied().unwrap_or(0);
        if held.total >= self.max_total || from_source >= self.max_per_source {
            return None;
        }
        held.total += 1;
        held.by_source.insert(source, from_source + 1);
        Some(Slot {
            admission: self.clone(),
            source,
        })
    }

    fn release(&self, source: Source) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total = held.total.saturating_sub(1);
        if let Some(n) = held.by_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                held.by_source.remove(&source);
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.release(self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_source_cannot_take_every_place() {
        let a = Admission::new(4, 2);
        let first = a.admit(ip("127.0.0.1")).unwrap();
        let _second = a.admit(ip("127.0.0.1")).unwrap();
        assert!(a.admit(ip("127.0.0.1")).is_none());
        // Another address still gets in, up to the total.
        let _c = a.admit(ip("127.0.0.2")).unwrap();
        let _d = a.admit(ip("10.0.0.1")).unwrap();
        assert!(a.admit(ip("10.0.0.2")).is_none(), "the total");
        drop(first);
        assert!(a.admit(ip("127.0.0.1")).is_some(), "a place given back");
        assert!(a.held.lock().unwrap().by_source.len() <= 4);
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64() {
        let a = Admission::new(8, 2);
        let _x = a.admit(ip("2001:db8:1:2::1")).unwrap();
        let _y = a.admit(ip("2001:db8:1:2:ffff::9")).unwrap();
        assert!(a.admit(ip("2001:db8:1:2::77")).is_none());
        assert!(a.admit(ip("2001:db8:1:3::1")).is_some(), "another /64");
        // A mapped IPv4 address is that address.
        let _v4 = a.admit(ip("192.0.2.1")).unwrap();
        let _v4b = a.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert!(a.admit(ip("192.0.2.1")).is_none());
    }

    #[test]
    fn places_come_back_when_slots_drop() {
        let a = Admission::new(2, 2);
        let slots: Vec<_> = (0..2).map(|_| a.admit(ip("::1")).unwrap()).collect();
        assert!(a.admit(ip("127.0.0.1")).is_none());
        drop(slots);
        let held = a.held.lock().unwrap();
        assert_eq!(held.total, 0);
        assert!(held.by_source.is_empty());
    }
}
