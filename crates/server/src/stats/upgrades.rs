//! The binary upgrades (SIGUSR2) this process went through, from its
//! first start on: carried from image to image in the upgrade's state
//! (`osmium_upgrade::Origin`), shown by `stats` (`upgrades`,
//! `upgrade_failures`) and `stats upgrade` (`execute::report::upgrade`),
//! which adds the first start and why the last upgrade failed (what
//! `osmium-tool upgrade` prints when one is refused).

use std::sync::Mutex;

use osmium_upgrade::{History, Origin};

/// The upgrades this process went through.
static HISTORY: Mutex<History> = Mutex::new(History::NONE);

/// The last failure this image saw (it noted it, or the new image that
/// handed the state back said it): when (unix seconds) and why, short.
/// Not carried to the image a later upgrade runs.
static LAST_FAILURE: Mutex<Option<(i64, String)>> = Mutex::new(None);

/// The longest reason `stats upgrade` shows (bytes).
const REASON_MAX: usize = 200;

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Notes how this image started: afresh (no `origin`), or from an
/// upgrade's state, taken over (`failed` None) or handed back by a new
/// image that could not take it (`failed`: why).
pub(crate) fn note_start(origin: Option<&Origin>, failed: Option<&str>) {
    let mut h = HISTORY.lock().unwrap_or_else(|p| p.into_inner());
    *h = match origin {
        None => History::fresh(),
        Some(o) => History::from_origin(o, failed.is_none()),
    };
    drop(h);
    if let Some(why) = failed.filter(|_| origin.is_some()) {
        note_reason(why);
    }
}

/// The upgrades so far.
pub(crate) fn history() -> History {
    *HISTORY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts an upgrade that failed, and why.
pub(crate) fn count_failure(why: &str) {
    HISTORY.lock().unwrap_or_else(|p| p.into_inner()).failures += 1;
    note_reason(why);
}

fn note_reason(why: &str) {
    *LAST_FAILURE.lock().unwrap_or_else(|p| p.into_inner()) = Some((unix_now(), short(why)));
}

/// `why` as one line a `STAT` row can carry: control characters (a line
/// break would end the row) as spaces, at most `REASON_MAX` bytes.
fn short(why: &str) -> String {
    let line: String = why
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.len() <= REASON_MAX {
        return line;
    }
    let mut end = REASON_MAX - 3;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

/// The last failure this image saw: when (unix seconds) and why (as the
/// log's `upgrade refused: PATH: WHY` or `upgrade failed: WHY` says it,
/// without the path; one line).
pub(crate) fn last_failure() -> Option<(i64, String)> {
    LAST_FAILURE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_short_line() {
        assert_eq!(
            short(" exit status: 1\r\nsecond line\n"),
            "exit status: 1  second line"
        );
        let long = "é".repeat(300);
        let cut = short(&long);
        assert!(cut.len() <= REASON_MAX && cut.ends_with("..."), "{cut}");
        assert!(cut.starts_with("éé"));
    }
}
