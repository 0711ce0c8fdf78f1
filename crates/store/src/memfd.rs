//! Item memory in a memfd (`BackingKind::Memfd`, the server's default
//! without `-e`): made at start, handed over at a binary upgrade, and
//! taken over by the image that starts then (the new one, or the old one
//! again after a failed upgrade), in the same process.
//!
//! The memfd has the memory file's layout and header (`backing`,
//! `memfile`), so the same checks and the same take-over serve both:
//!
//! ```text
//!  old image                                  next image (same PID)
//!  threads stopped (the upgrade's quiesce)
//!  Store::hand_over: header <- clock,         Store::open_inherited(cfg, fd):
//!    a clean stop; a duplicate of the fd,       header checked as a memory
//!    not close-on-exec, into the state          file's (-m, -I, -C, layout,
//!  execve ------------------------------->      format): taken over with
//!  (the old mapping goes with the old image;    `recover` (the index rebuilt
//!   the memfd's pages stay: the fd holds them)  from the segments), or closed
//!                                               and a new memfd made (a note
//!                                               says why)
//! ```
//!
//! The store maps a duplicate of the fd it is given and owns it
//! (close-on-exec): the caller keeps (and closes) its own, so that an
//! image that cannot start after all can still hand the same memory on.
//!
//! Where no memfd can be made (a kernel before 3.17, a seccomp filter),
//! the store falls back to anonymous memory, with a note: its cache then
//! ends with the image, as before.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::backing::{Backing, Layout};
use crate::memfile::{self, Opened, Settings};

/// Opens item memory in a memfd for a cache of `settings` laid out as
/// `layout`: the cache in `inherited` (a memfd a binary upgrade handed
/// over) when it was made with the same settings, else a clean cache in
/// a new memfd (or in anonymous memory where no memfd can be made), with
/// a note saying why. A clean cache's relative second 0 is
/// `process_started`.
pub(crate) fn open(
    settings: &Settings,
    layout: Layout,
    process_started: i64,
    inherited: Option<BorrowedFd<'_>>,
) -> io::Result<Opened> {
    let mut note = None;
    if let Some(fd) = inherited {
        match take_over(fd, settings, &layout) {
            Ok(file) => {
                let backing = Backing::adopt_memfd(file, layout)?;
                let resume = memfile::begin(&backing, true, settings, &layout, process_started);
                return Ok(Opened {
                    backing,
                    resume,
                    note: None,
                });
            }
            Err(why) => {
                note = Some(format!(
                    "the item memory handed over: {why}, starting with a clean cache"
                ))
            }
        }
    }
    let backing = match Backing::new_memfd(layout) {
        Ok(backing) => {
            memfile::begin(&backing, false, settings, &layout, process_started);
            backing
        }
        Err(e) => {
            let why = format!(
                "item memory: no memfd can be made ({e}): anonymous memory instead, whose \
                 cache a binary upgrade does not keep"
            );
            note = Some(match note {
                Some(n) => format!("{n}; {why}"),
                None => why,
            });
            Backing::anonymous(layout)?
        }
    };
    Ok(Opened {
        backing,
        resume: None,
        note,
    })
}

/// A duplicate of `fd` (close-on-exec) if the memfd it names holds a
/// cache a server with `settings` and `layout` takes over; else why not.
fn take_over(fd: BorrowedFd<'_>, settings: &Settings, layout: &Layout) -> Result<File, String> {
    let file = File::from(duplicate(fd).map_err(|e| format!("cannot be opened ({e})"))?);
    let len = file
        .metadata()
        .map_err(|e| format!("cannot be read ({e})"))?
        .len();
    if len == 0 {
        return Err("empty".into());
    }
    match memfile::refusal_of(&file, settings, layout, len) {
        Ok(None) => Ok(file),
        Ok(Some(why)) => Err(why),
        Err(e) => Err(format!("cannot be read ({e})")),
    }
}

/// A duplicate of `fd`, close-on-exec.
fn duplicate(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// A duplicate of `backing`'s memfd that is not close-on-exec, for a
/// binary upgrade's state; None for other memory.
pub(crate) fn hand_over(backing: &Backing) -> io::Result<Option<OwnedFd>> {
    let Some(fd) = backing.memfd() else {
        return Ok(None);
    };
    let copy = duplicate(fd.as_fd())?;
    keep_across_exec(&copy)?;
    Ok(Some(copy))
}

/// Clears `fd`'s close-on-exec flag.
pub(crate) fn keep_across_exec(fd: &OwnedFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFD / F_SETFD read and set the flags of an fd we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, flags & !libc::FD_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memfile::Header;

    const SETTINGS: Settings = Settings {
        memory_limit: 4 << 20,
        item_size_max: 1 << 20,
        use_cas: true,
    };

    fn resident(fd: BorrowedFd<'_>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let file = File::from(fd.try_clone_to_owned().unwrap());
        file.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn a_memfd_is_made_clean_and_taken_over_by_fd_with_what_was_written() {
        let layout = Layout::new(4, 1 << 20);
        let o = open(&SETTINGS, layout, 1000, None).unwrap();
        assert!(o.resume.is_none() && o.note.is_none(), "{:?}", o.note);
        let b = o.backing;
        assert_eq!(b.kind_name(), "memfd");
        assert_eq!(b.base() as usize % crate::backing::HUGE_PAGE, 0);
        // SAFETY: inside item memory, which the test owns.
        unsafe {
            b.base().add(4096).write(7);
            b.base().add((1 << 20) + 5).write(9);
        }
        b.control_blocks()[1]
            .seq
            .store(11, std::sync::atomic::Ordering::Relaxed);
        let before = resident(b.memfd().unwrap());
        assert!(before >= 8192, "written pages are the memfd's: {before}");
        // SAFETY: nothing in the first segment is needed any more.
        unsafe { b.release(0, 1 << 20) };
        assert!(resident(b.memfd().unwrap()) < before, "the page went back");
        // SAFETY: a released page of a shared mapping reads as zeros.
        assert_eq!(unsafe { b.base().add(4096).read() }, 0);
        Header::of(&b).note_clock(77);
        let handed = hand_over(&b).unwrap().expect("a memfd");
        drop(b);
        // The memory outlives its mapping: the fd holds it.
        let o = open(&SETTINGS, layout, 2000, Some(handed.as_fd())).unwrap();
        assert!(o.note.is_none(), "{:?}", o.note);
        let r = o.resume.expect("taken over");
        assert_eq!((r.process_started, r.clock), (1000, 77));
        let b = o.backing;
        // SAFETY: inside item memory, which the test owns.
        unsafe {
            assert_eq!(b.base().add((1 << 20) + 5).read(), 9);
            assert_eq!(b.base().add(4096).read(), 0);
        }
        assert_eq!(
            b.control_blocks()[1]
                .seq
                .load(std::sync::atomic::Ordering::Relaxed),
            11
        );
    }

    #[test]
    fn a_memfd_of_other_settings_is_not_taken_over() {
        let layout = Layout::new(4, 1 << 20);
        let b = open(&SETTINGS, layout, 1000, None).unwrap().backing;
        let handed = hand_over(&b).unwrap().unwrap();
        drop(b);
        let other = Settings {
            memory_limit: 8 << 20,
            ..SETTINGS
        };
        let o = open(&other, Layout::new(8, 1 << 20), 1000, Some(handed.as_fd())).unwrap();
        assert!(o.resume.is_none());
        assert!(
            o.note.as_deref().unwrap().contains("[maxbytes]"),
            "{:?}",
            o.note
        );
        assert_eq!(o.backing.kind_name(), "memfd");
        // A file that is no memory at all.
        let empty = open(&SETTINGS, layout, 1000, None).unwrap().backing;
        let fd = empty.memfd().unwrap().try_clone_to_owned().unwrap();
        drop(empty);
        File::from(fd.try_clone().unwrap()).set_len(0).unwrap();
        let o = open(&SETTINGS, layout, 1000, Some(fd.as_fd())).unwrap();
        assert!(o.note.unwrap().contains("empty"));
    }
}
