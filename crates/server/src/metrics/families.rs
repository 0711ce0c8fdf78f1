//! What `/metrics` shows, gathered once per scrape into [`Families`] and
//! written by `prometheus-client` in either exposition format: the rows
//! of `stats`, `stats settings`, `stats items` and `stats slabs`
//! (`execute::report`, the very code that answers those commands, so a
//! value is the same on the wire and on `/metrics`) turned into
//! memcached_exporter's metrics (`exporter`), then osmium's own (`own`),
//! then the extra sources (`EXTRA_GAUGES`).

use std::collections::{BTreeMap, HashMap};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use crate::compose::stat_rows::StatRows;
use crate::stats::latency::{HistogramTotals, BOUNDS_NS};

pub(super) type Labels = Vec<(String, String)>;

#[derive(Debug)]
pub(super) enum Value {
    Counter(f64),
    Gauge(f64),
    Histogram(HistogramTotals),
}

#[derive(Debug)]
pub(super) struct Family {
    /// A counter's name without its `_total`.
    name: String,
    help: &'static str,
    kind: MetricType,
    pub(super) samples: Vec<(Labels, Value)>,
}

/// Every metric of one scrape, families in the order first seen.
#[derive(Debug, Default)]
pub(crate) struct Families {
    pub(super) list: Vec<Family>,
    pub(super) index: HashMap<String, usize>,
}

impl Families {
    fn push(&mut self, name: &str, help: &'static str, kind: MetricType, labels: Labels, v: Value) {
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                self.list.push(Family {
                    name: name.to_string(),
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.index.insert(name.to_string(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        self.list[i].samples.push((labels, v));
    }

    /// A counter; `name` may end in `_total` (the encoders add it back).
    pub(crate) fn counter(&mut self, name: &str, help: &'static str, labels: Labels, v: f64) {
        let name = name.strip_suffix("_total").unwrap_or(name);
        self.push(name, help, MetricType::Counter, labels, Value::Counter(v));
    }

    pub(crate) fn gauge(&mut self, name: &str, help: &'static str, labels: Labels, v: f64) {
        self.push(name, help, MetricType::Gauge, labels, Value::Gauge(v));
    }

    pub(crate) fn histogram(
        &mut self,
        name: &str,
        help: &'static str,
        labels: Labels,
        h: HistogramTotals,
    ) {
        self.push(
            name,
            help,
            MetricType::Histogram,
            labels,
            Value::Histogram(h),
        );
    }

    /// Whether a family of this name was added (tests).
    #[cfg(test)]
    pub(super) fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }
}

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let bounds: Vec<f64> = BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain([f64::INFINITY])
            .collect();
        for f in &self.list {
            let mut family = encoder.encode_descriptor(&f.name, f.help, None, f.kind)?;
            for (labels, v) in &f.samples {
                let mut m = family.encode_family(labels)?;
                match v {
                    Value::Counter(c) => m.encode_counter::<NoLabelSet, _, f64>(c, None)?,
                    Value::Gauge(g) => m.encode_gauge(g)?,
                    Value::Histogram(h) => {
                        let buckets: Vec<(f64, u64)> =
                            bounds.iter().copied().zip(h.buckets).collect();
                        m.encode_histogram::<NoLabelSet>(
                            h.sum_ns as f64 / 1e9,
                            h.count(),
                            &buckets,
                            None,
                        )?
                    }
                }
            }
        }
        Ok(())
    }
}

/// `STAT <name> <value>` rows as a map.
pub(super) type Rows = HashMap<String, String>;

pub(super) fn rows(rows: &StatRows) -> Vec<(String, String)> {
    rows.iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

/// Rows of `STAT <name> <value>` lines (tests write reports so).
#[cfg(test)]
pub(super) fn text_rows(text: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(text)
        .split("\r\n")
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Rows `<class>:<name>` (stats slabs) or `items:<class>:<name>` (stats
/// items), by class.
pub(super) fn per_class(rows: Vec<(String, String)>, prefix: &str) -> BTreeMap<u32, Rows> {
    let mut classes: BTreeMap<u32, Rows> = BTreeMap::new();
    for (k, v) in rows {
        let Some(rest) = k.strip_prefix(prefix) else {
            continue;
        };
        let Some((class, name)) = rest.split_once(':') else {
            continue;
        };
        if let Ok(class) = class.parse() {
            classes
                .entry(class)
                .or_default()
                .insert(name.to_string(), v);
        }
    }
    classes
}

pub(super) fn num(rows: &Rows, key: &str) -> Option<f64> {
    rows.get(key).and_then(|v| v.parse().ok())
}

pub(super) fn no_labels() -> Labels {
    Vec::new()
}

pub(super) fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_by_class() {
        let out =
            b"STAT items:1:number 5\r\nSTAT items:1:age 30\r\nSTAT items:12:number 1\r\nEND\r\n";
        let c = per_class(text_rows(out), "items:");
        assert_eq!(c[&1]["number"], "5");
        assert_eq!(c[&1]["age"], "30");
        assert_eq!(c[&12]["number"], "1");
        let out = b"STAT 1:chunk_size 96\r\nSTAT active_slabs 1\r\n";
        let c = per_class(text_rows(out), "");
        assert_eq!(c.len(), 1);
        assert_eq!(c[&1]["chunk_size"], "96");
    }
}
