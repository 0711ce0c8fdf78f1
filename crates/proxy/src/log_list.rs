//! Lists in log lines: names joined, at most a bounded number of them.

/// The longest list a log line names in full.
const LIST_MAX: usize = 16;

/// `items` joined with `, `; past [`LIST_MAX`], the first ones and how
/// many more (a pool of thousands of servers must not make a line of
/// hundreds of kilobytes, which a full stderr pipe would block the loop
/// on).
pub fn short_list(items: &[String]) -> String {
    if items.len() <= LIST_MAX {
        return items.join(", ");
    }
    format!(
        "{}, and {} more",
        items[..LIST_MAX].join(", "),
        items.len() - LIST_MAX
    )
}
