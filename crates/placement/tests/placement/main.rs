//! osmium-placement's property tests, one test binary (the release profile
//! links the dependency tree once, not once per file): one module per suite.

mod hashes;
mod moved;
