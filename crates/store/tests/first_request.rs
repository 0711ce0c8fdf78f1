//! The first lookup does not pay the process's one-time set-up: opening
//! the store registers the process for `membarrier` (the kernel waits for
//! an RCU grace period, 5 to 15 ms, before it returns), which the first
//! pin of the first GET or SET did before. Not a timing test: it checks
//! that the work is done by `Store::open`, before any request.
//! (One test in this binary: the registration is per process.)

use osmium_store::{epoch, Store, StoreConfig, StoreMode, StoreStatus, Write};

#[test]
fn opening_the_store_does_the_first_requests_set_up() {
    assert!(!epoch::prepared(), "registered before the store was opened");
    let s = Store::new(StoreConfig::default());
    assert!(
        epoch::prepared(),
        "Store::open left the registration to a request"
    );
    let w = Write {
        mode: StoreMode::Set,
        key: b"k",
        value: b"v",
        ..Write::default()
    };
    assert_eq!(s.store(0, &w).0, StoreStatus::Stored);
}
