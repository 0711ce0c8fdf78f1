//! Statistics: the request counters every worker keeps (`counters`), the
//! per-key-prefix figures of `stats detail` (`prefix`), and the `stats`
//! replies built from them (`report`).

pub mod counters;
pub mod prefix;
pub mod report;
