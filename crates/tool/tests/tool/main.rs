//! osmium-tool's integration tests, one test binary (the release profile
//! links the dependency tree once, not once per file): each module runs the
//! real `osmium-tool` binary against real servers; `common` starts them.

mod common;
mod memcached_tool;
mod top;
mod upgrade;
mod verbs;
