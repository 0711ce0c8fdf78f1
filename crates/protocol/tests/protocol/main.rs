//! osmium-protocol's property tests, one test binary (the release profile
//! links the dependency tree once, not once per file): one module per suite;
//! `framing_diff` (at `tests/framing_diff/`, where the fuzz target of the
//! same name includes it by path) holds the request-smuggling check.

mod ascii_properties;
mod binary_properties;
#[path = "../framing_diff/mod.rs"]
mod framing_diff;
mod properties;
mod request_framing_diff;
mod request_props;
