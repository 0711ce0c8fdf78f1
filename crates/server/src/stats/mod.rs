//! Statistics: the request counters every worker keeps (`counters`), the
//! per-key-prefix figures of `stats detail` (`prefix`), the latency
//! histograms of `/metrics` (`latency`) and the binary upgrades this
//! process went through (`upgrades`). The `stats` replies built from
//! them are the executor's (`execute::report`), and `/metrics` is built
//! from those replies (`metrics`).

pub(crate) mod counters;
pub(crate) mod latency;
pub(crate) mod prefix;
pub(crate) mod upgrades;
