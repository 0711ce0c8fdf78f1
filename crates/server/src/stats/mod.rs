//! Statistics: the request counters every worker keeps (`counters`) and
//! the per-key-prefix figures of `stats detail` (`prefix`). The `stats`
//! replies built from them are the executor's (`execute::report`).

pub mod counters;
pub mod prefix;
