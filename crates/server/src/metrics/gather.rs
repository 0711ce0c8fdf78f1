//! Every metric of one scrape: the stats reports read into rows, then
//! memcached_exporter's families, osmium's own, and the extra sources.

use super::families::{no_labels, per_class, rows, Families, Rows};
use super::{exporter, own, EXTRA_GAUGES};
use crate::compose::stat_rows::StatRows;
use crate::context::Shared;
use crate::execute::report;

/// Gathers every metric of one scrape.
pub(crate) fn gather(sh: &Shared) -> Families {
    let mut f = Families::default();
    let mut out = StatRows::new();
    report::general(sh, &mut out);
    let mut general: Rows = rows(&out).into_iter().collect();
    out.clear();
    report::settings(sh, &mut out);
    let settings: Rows = rows(&out).into_iter().collect();
    out.clear();
    report::items(sh, &mut out);
    let items = per_class(rows(&out), "items:");
    out.clear();
    report::slabs(sh, &mut out);
    let slab_rows = rows(&out);
    // As memcached_exporter's client: the rows of `stats slabs` that name
    // no class (`total_malloced`, `active_slabs`) are general ones.
    for (k, v) in &slab_rows {
        if !k.contains(':') {
            general.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let slabs = per_class(slab_rows, "");

    f.gauge(
        "memcached_up",
        "Could the memcached server be reached.",
        no_labels(),
        1.0,
    );
    exporter::general(&mut f, &general);
    exporter::settings(&mut f, &settings);
    exporter::items(&mut f, &items, &slabs);
    exporter::slabs(&mut f, &slabs);
    own::add(&mut f, sh, &general);
    for extra in EXTRA_GAUGES {
        extra(sh, &mut f);
    }
    f
}
