//! Feeds arbitrary bytes to the reader of the binary upgrade's hand-over
//! state (`osmium_upgrade::State::decode`): once as a whole document
//! (header, checksum, records), and once as a body of records under a
//! header and checksum made for it, so that the records' own parsing is
//! reached. Any panic is a bug; so is a state that reads but does not
//! read back the same from its own encoding.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_upgrade::{fuzzing, State};

fuzz_target!(|data: &[u8]| {
    for doc in [data.to_vec(), fuzzing::sealed(data)] {
        if let Ok(state) = State::decode(&doc) {
            let again = state.encode();
            assert_eq!(State::decode(&again).as_ref(), Ok(&state));
        }
    }
});
