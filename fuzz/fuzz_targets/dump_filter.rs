//! Feeds arbitrary bytes to the key filter of osmium's crawler dumps
//! (`osmium_placement::filter`), split into tokens at spaces as the
//! server's tokenizer splits a line. Any panic is a bug; so is a filter
//! that parses but does not read back the same from its own tokens, or
//! whose command line would not fit the server's 2048-byte line limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use osmium_placement::filter::DumpFilter;

fuzz_target!(|data: &[u8]| {
    let tokens = data.split(|&b| b == b' ').filter(|t| !t.is_empty());
    let Ok(filter) = DumpFilter::parse(tokens) else {
        return;
    };
    let again = filter.tokens();
    let back = DumpFilter::parse(again.split(' ').map(str::as_bytes));
    assert_eq!(back.as_ref(), Ok(&filter), "{again}");
    assert!(filter.command().len() < 2048);
    // Every key is either listed or not, whatever it holds.
    let _ = filter.matches(data);
});
