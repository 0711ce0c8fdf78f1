//! The upgrades a process went through from its first start on, the same
//! for the server and the proxy: carried from image to image in the
//! state's [`Origin`] (the image that starts goes on from it), and put
//! into the origin of the state the running image writes.

use std::os::fd::BorrowedFd;

use crate::state::Origin;

/// The upgrades this process went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    /// When the process first started (unix seconds), before any upgrade.
    pub first_start: i64,
    /// Upgrades done.
    pub upgrades: u64,
    /// Upgrades that failed (refused at the check, or handed back).
    pub failures: u64,
}

impl History {
    /// None yet, not even a start (for a static set at start).
    pub const NONE: History = History {
        first_start: 0,
        upgrades: 0,
        failures: 0,
    };

    /// A first start, now.
    pub fn fresh() -> History {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        History {
            first_start: now as i64,
            ..History::NONE
        }
    }

    /// The history a state carries; `upgraded`: its upgrade is done (else
    /// it was handed back: one more failure).
    pub fn from_origin(origin: &Origin, upgraded: bool) -> History {
        History {
            first_start: origin.first_start,
            upgrades: origin.upgrades + u64::from(upgraded),
            failures: origin.failures + u64::from(!upgraded),
        }
    }

    /// The origin of the state this process writes: `version`, running
    /// the image `old_exe` (its file's id), with this history.
    pub fn origin(self, version: &str, old_exe: BorrowedFd<'_>) -> Origin {
        Origin {
            version: version.into(),
            exe: crate::image::file_id(old_exe).unwrap_or_default(),
            pid: std::process::id(),
            first_start: self.first_start,
            upgrades: self.upgrades,
            failures: self.failures,
            failed: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn origin(upgrades: u64, failures: u64) -> Origin {
        Origin {
            version: "9.9.9".into(),
            exe: (1, 2),
            pid: 3,
            first_start: 1_700_000_000,
            upgrades,
            failures,
            failed: None,
        }
    }

    #[test]
    fn the_history_goes_on_from_the_first_start() {
        let done = History::from_origin(&origin(2, 1), true);
        assert_eq!(
            (done.first_start, done.upgrades, done.failures),
            (1_700_000_000, 3, 1)
        );
        let handed_back = History::from_origin(&origin(2, 1), false);
        assert_eq!((handed_back.upgrades, handed_back.failures), (2, 2));
        let fresh = History::fresh();
        assert_eq!((fresh.upgrades, fresh.failures), (0, 0));
        assert!(fresh.first_start > 1_700_000_000);
    }

    #[test]
    fn the_origin_names_this_process_and_its_image() {
        let image = crate::running_image().unwrap();
        let o = History::from_origin(&origin(2, 1), true).origin("9.9.9", image.as_fd());
        assert_eq!(o.pid, std::process::id());
        assert_eq!(o.exe, crate::image::file_id(image.as_fd()).unwrap());
        assert_eq!(
            (o.first_start, o.upgrades, o.failures),
            (1_700_000_000, 3, 1)
        );
        assert_eq!((o.version.as_str(), o.failed), ("9.9.9", None));
    }
}
