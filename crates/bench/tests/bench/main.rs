//! osmium-bench's integration tests, one test binary (the release profile
//! links the dependency tree once, not once per file): each module runs one
//! mode of the real `osmium-bench` binary; `common` finds the binaries.

mod common;
mod density;
mod flash;
mod floor;
mod foreign;
mod hitratio;
mod hotkeys;
mod load;
mod resize;
mod restart;
mod signals;
mod tls;
