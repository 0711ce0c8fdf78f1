//! The memory file (`-e FILE`): item memory in a file, so that the cache
//! outlives the process. This module owns the file's header and the
//! decision, at start, whether the file's contents are taken over (a warm
//! restart, see `recover`) or the cache starts clean.
//!
//! The file has the layout of the mapping (see `backing`): a header page,
//! the segments' control blocks, the segments. Item memory in a memfd has
//! the same header (made and checked by the same code), so a binary
//! upgrade's next image takes it over as a start takes a file over
//! (`memfd`). The header, in the first
//! bytes of the file (little endian, every field an integer atomic):
//!
//! ```text
//!  offset  field              set                     meaning
//!       0  magic              when the file is made   "osmiumMF"
//!       8  format             when the file is made   FORMAT (this layout; a format 1
//!                             or taken over           file taken over becomes 2)
//!      12  control_block_size when the file is made   bytes per control block
//!      16  segment_size       when the file is made   bytes per segment
//!      24  segments           when the file is made   segments in the file
//!      32  memory_limit       when the file is made   -m in bytes
//!      40  item_size_max      when the file is made   -I in bytes
//!      48  use_cas            when the file is made   1 unless -C
//!      56  data_offset        when the file is made   where segment 0 starts
//!      64  process_started    when the file is made   unix time of relative second 0
//!      72  checksum           when the file is made   xxh3 of the fields above
//!      80  open               at each start and stop  1 while a server uses the file,
//!                                                     2 after it met a SIGBUS on it (`fault`)
//!      88  stopped_at         at a graceful stop      unix time
//!      96  clock              every second            the latest relative time seen
//!     100  flush_at[2]        at each flush_all       delayed flushes (relative times)
//!     108  flush_epoch[2]     at each flush_all       their numbers (see `Segment::flush_epoch`)
//!     120  boot               at each start           hash of the kernel's boot id
//! ```
//!
//! What survives what:
//!
//! * **A stop or a crash of the process** (SIGTERM, SIGUSR1, `shutdown`,
//!   kill -9, an abort, the OOM killer): everything. Item memory and
//!   control blocks are the file's pages; the kernel keeps every byte the
//!   process wrote, in the page cache or on persistent memory, whether or
//!   not it was written back to a disk. A write is acknowledged only after
//!   its item was written and committed (see `item::ItemPtr::commit`), so
//!   every acknowledged write is in the file.
//! * **A crash of the kernel or a power loss**: the page cache is lost. A
//!   file on tmpfs is gone; a file on a disk holds whatever pages the
//!   kernel had written back, in no particular order. So after a system
//!   restart a file that was not closed by a graceful stop (which writes
//!   every page out with `msync` and records it) is not trusted: the
//!   cache starts clean. On persistent memory mapped with DAX the pages are
//!   the memory itself and survive, but the same rule applies, since the
//!   CPU's caches may not have reached it.
//!
//! A file made with other settings (`-m`, `-I`, `-C`), in another format,
//! with a damaged header or not an osmium memory file at all is reported on
//! standard error and the cache starts clean (the file is rewritten), as
//! memcached does with its metadata file; it never makes the server fail
//! or serve what it cannot vouch for.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::backing::{Backing, Layout, HEADER_SIZE};
use crate::segment::CONTROL_BLOCK_SIZE;

const MAGIC: u64 = u64::from_le_bytes(*b"osmiumMF");
/// The layout of header, control blocks and items this build reads and
/// writes. Format 2 items may be packed (`item`, `EXT_PACKED`), which
/// format 1 readers would serve as they are stored.
pub const FORMAT: u32 = 2;
/// The oldest format this build takes over: format 1 files hold no packed
/// items, so they read the same; a file taken over is marked format 2
/// (older builds then refuse it).
pub const FORMAT_OLDEST: u32 = 1;

/// The header (see the module comment).
#[repr(C)]
pub struct Header {
    magic: AtomicU64,
    format: AtomicU32,
    control_block_size: AtomicU32,
    segment_size: AtomicU64,
    segments: AtomicU64,
    memory_limit: AtomicU64,
    item_size_max: AtomicU64,
    use_cas: AtomicU64,
    data_offset: AtomicU64,
    process_started: AtomicI64,
    checksum: AtomicU64,
    open: AtomicU64,
    stopped_at: AtomicI64,
    clock: AtomicU32,
    flush_at: [AtomicU32; 2],
    flush_epoch: [AtomicU32; 2],
    _pad: AtomicU32,
    boot: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_SIZE);

/// The settings a memory file must have been made with to be taken over.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// `-m`, in bytes.
    pub memory_limit: usize,
    /// `-I`, in bytes.
    pub item_size_max: usize,
    /// CAS uniques on (no `-C`).
    pub use_cas: bool,
}

/// What an earlier run left for this one to resume.
#[derive(Clone, Copy, Debug)]
pub struct Resume {
    /// Unix time of that run's relative second 0.
    pub process_started: i64,
    /// The latest relative time it saw.
    pub clock: u32,
    /// Its delayed flushes (time, number; time 0: none). One whose time
    /// came may have run before the stop: see `Segment::flush_epoch`.
    pub flushes: [(u32, u32); 2],
    /// Whether it ended with a graceful stop (else it crashed or was
    /// killed).
    pub graceful: bool,
}

/// An opened memory file: its mapping, and what to resume (None: the
/// cache starts clean, for the reason in `note` if there was one).
pub struct Opened {
    /// The file's mapping.
    pub backing: Backing,
    /// What the earlier run left, when its cache is taken over.
    pub resume: Option<Resume>,
    /// Why it was not taken over, when it was not.
    pub note: Option<String>,
}

impl Header {
    /// The header at the start of a memory file's mapping.
    pub fn of(backing: &Backing) -> &Header {
        debug_assert!(backing.has_header());
        // SAFETY: the header page starts the mapping (page aligned), is
        // HEADER_SIZE bytes, and holds integer atomics only (valid for any
        // bytes); it lives as long as `backing`.
        unsafe { &*(backing.header() as *const Header) }
    }

    fn fixed_checksum(&self) -> u64 {
        let fields = [
            self.magic.load(Ordering::Relaxed),
            u64::from(self.format.load(Ordering::Relaxed)),
            u64::from(self.control_block_size.load(Ordering::Relaxed)),
            self.segment_size.load(Ordering::Relaxed),
            self.segments.load(Ordering::Relaxed),
            self.memory_limit.load(Ordering::Relaxed),
            self.item_size_max.load(Ordering::Relaxed),
            self.use_cas.load(Ordering::Relaxed),
            self.data_offset.load(Ordering::Relaxed),
            self.process_started.load(Ordering::Relaxed) as u64,
        ];
        let mut bytes = [0u8; 80];
        for (chunk, v) in bytes.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        xxhash_rust::xxh3::xxh3_64(&bytes)
    }

    /// Why a file with this header cannot be taken over by a server with
    /// `settings` and `layout`, if it cannot.
    fn refusal(&self, settings: &Settings, layout: &Layout, file_len: u64) -> Option<String> {
        if self.magic.load(Ordering::Relaxed) != MAGIC {
            return Some("not an osmium memory file".into());
        }
        let format = self.format.load(Ordering::Relaxed);
        if format > FORMAT {
            return Some(format!(
                "made by a newer osmium (file format {format}, this build reads {FORMAT})"
            ));
        }
        if format < FORMAT_OLDEST {
            return Some(format!(
                "made by an older osmium (file format {format}, this build reads {FORMAT})"
            ));
        }
        if self.checksum.load(Ordering::Relaxed) != self.fixed_checksum() {
            return Some("damaged header".into());
        }
        let incompatible = |name: &str, old: u64| {
            Some(format!(
                "restart incompatible due to setting for [{name}] [old value: {old}]"
            ))
        };
        let old = self.memory_limit.load(Ordering::Relaxed);
        if old != settings.memory_limit as u64 {
            return incompatible("maxbytes", old);
        }
        let old = self.item_size_max.load(Ordering::Relaxed);
        if old != settings.item_size_max as u64 {
            return incompatible("item_size_max", old);
        }
        let old = self.use_cas.load(Ordering::Relaxed);
        if old != u64::from(settings.use_cas) {
            return incompatible("use_cas", old);
        }
        if u64::from(self.control_block_size.load(Ordering::Relaxed)) != CONTROL_BLOCK_SIZE as u64
            || self.segment_size.load(Ordering::Relaxed) != layout.segment_size as u64
            || self.segments.load(Ordering::Relaxed) != layout.segments as u64
            || self.data_offset.load(Ordering::Relaxed) != layout.data_offset as u64
        {
            return Some("its layout differs from this build's for the same settings".into());
        }
        if file_len < layout.total as u64 {
            return Some(format!(
                "truncated ({file_len} bytes, its header says {})",
                layout.total
            ));
        }
        if self.open.load(Ordering::Relaxed) == crate::fault::OPEN_IO_ERROR {
            return Some(
                "the last server that used it met an I/O error on it (SIGBUS), so its pages \
                 cannot all be read"
                    .into(),
            );
        }
        if self.open.load(Ordering::Relaxed) != 0 && self.boot.load(Ordering::Relaxed) != boot_id()
        {
            return Some(
                "the system restarted since the server that used it stopped without a graceful \
                 stop, so not all of its writes may have reached the file"
                    .into(),
            );
        }
        None
    }

    /// Writes a new file's header.
    fn make(&self, settings: &Settings, layout: &Layout, process_started: i64) {
        self.magic.store(MAGIC, Ordering::Relaxed);
        self.format.store(FORMAT, Ordering::Relaxed);
        self.control_block_size
            .store(CONTROL_BLOCK_SIZE as u32, Ordering::Relaxed);
        self.segment_size
            .store(layout.segment_size as u64, Ordering::Relaxed);
        self.segments
            .store(layout.segments as u64, Ordering::Relaxed);
        self.memory_limit
            .store(settings.memory_limit as u64, Ordering::Relaxed);
        self.item_size_max
            .store(settings.item_size_max as u64, Ordering::Relaxed);
        self.use_cas
            .store(u64::from(settings.use_cas), Ordering::Relaxed);
        self.data_offset
            .store(layout.data_offset as u64, Ordering::Relaxed);
        self.process_started
            .store(process_started, Ordering::Relaxed);
        self.checksum
            .store(self.fixed_checksum(), Ordering::Relaxed);
    }

    /// Marks a file of an older format this build takes over as this
    /// build's (the checksum covers the format), before anything is
    /// written into it.
    fn upgrade_format(&self) {
        if self.format.load(Ordering::Relaxed) != FORMAT {
            self.format.store(FORMAT, Ordering::Relaxed);
            self.checksum
                .store(self.fixed_checksum(), Ordering::Relaxed);
        }
    }

    /// Unix time of relative second 0 of the cache in the file.
    pub fn process_started(&self) -> i64 {
        self.process_started.load(Ordering::Relaxed)
    }

    /// Records the latest relative time (each clock tick).
    pub fn note_clock(&self, now: u32) {
        self.clock.store(now, Ordering::Relaxed);
    }

    /// Records the delayed flushes of a flush_all (time, number), before
    /// it is answered.
    pub fn note_flushes(&self, flushes: [(u32, u32); 2]) {
        for (i, (t, e)) in flushes.into_iter().enumerate() {
            self.flush_epoch[i].store(e, Ordering::Release);
            self.flush_at[i].store(t, Ordering::Release);
        }
    }

    /// Marks the file in use by this boot's server.
    fn mark_open(&self) {
        self.boot.store(boot_id(), Ordering::Relaxed);
        self.open.store(1, Ordering::Release);
    }

    /// After a graceful stop wrote every page out: the file is whole
    /// whatever happens to the system next.
    pub fn mark_closed(&self, stopped_at: i64) {
        self.stopped_at.store(stopped_at, Ordering::Relaxed);
        self.open.store(0, Ordering::Release);
    }
}

/// Reserves the file's `len` bytes on its file system (`fallocate`; the
/// blocks already there are kept), so that a file system too small for the
/// cache stops the start: a page of a shared mapping that the file system
/// cannot hold is a SIGBUS when it is first written, not an error a write
/// can return. A file system without `fallocate` gets a sparse file.
/// A `fresh` file (a clean start) that cannot be whole is emptied again
/// (fallocate may have allocated part of it); a file taken over is left as
/// it was, and only its holes (segments released while it ran) are
/// reserved: on tmpfs a `fallocate` over blocks already there still walks
/// every page (about 0.1 s per GB), which a restart need not pay. A file
/// whose blocks already cover `len` (every block reserved: the common case,
/// a file reserved whole at its first start) is left alone: tmpfs reports
/// reserved pages never written as holes to `SEEK_HOLE`, so looking for
/// holes would reserve them all again.
fn reserve(file: &File, len: u64, fresh: bool) -> io::Result<()> {
    let r = if fresh {
        fallocate(file, 0, len)
    } else if allocated_bytes(file)? >= len {
        Ok(())
    } else {
        reserve_holes(file, len)
    };
    let Err(e) = r else {
        return Ok(());
    };
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => file.set_len(len),
        _ => {
            if fresh {
                let _ = file.set_len(0);
            }
            Err(e)
        }
    }
}

/// Bytes of the file system's blocks the file holds (`st_blocks`, counted
/// in 512-byte units whatever the block size).
fn allocated_bytes(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.blocks().saturating_mul(512))
}

/// `fallocate` of `len` bytes from `at` (mode 0: never shrinks the file).
fn fallocate(file: &File, at: u64, len: u64) -> io::Result<()> {
    // SAFETY: fallocate on our own open descriptor; no memory is passed.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, at as libc::off_t, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reserves the holes of the file's first `len` bytes (found with
/// `SEEK_HOLE`/`SEEK_DATA`; a file system that cannot tell gets the whole
/// range reserved).
fn reserve_holes(file: &File, len: u64) -> io::Result<()> {
    let fd = file.as_raw_fd();
    let seek = |at: u64, whence: libc::c_int| -> io::Result<Option<u64>> {
        // SAFETY: lseek on our own descriptor; it only moves the offset,
        // which nothing else here uses (the mapping and pread/pwrite do
        // not).
        let r = unsafe { libc::lseek(fd, at as libc::off_t, whence) };
        if r >= 0 {
            return Ok(Some(r as u64));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // No data (or hole) at or after `at`.
            Some(libc::ENXIO) => Ok(None),
            _ => Err(e),
        }
    };
    let mut at = 0;
    while at < len {
        let hole = match seek(at, libc::SEEK_HOLE) {
            Ok(Some(h)) => h,
            // Past the end of a shorter file: the rest is a hole.
            Ok(None) => at,
            Err(_) => return fallocate(file, 0, len),
        };
        if hole >= len {
            break;
        }
        let end = match seek(hole, libc::SEEK_DATA) {
            Ok(Some(d)) => d.min(len),
            Ok(None) => len,
            Err(_) => return fallocate(file, 0, len),
        };
        fallocate(file, hole, end - hole)?;
        at = end;
    }
    Ok(())
}

/// Bytes free for us on the file system of `file`, if it says.
fn free_space(file: &File) -> Option<u64> {
    // SAFETY: statvfs is plain data (zeroed is valid), filled by fstatvfs
    // on our own descriptor.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::fstatvfs(file.as_raw_fd(), &mut st) == 0)
            .then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// The file at `path` opened for reading and writing, made (mode 0600,
/// empty) if there is none: the memory file, and the files beside it
/// (`FILE.flash`, `FILE.dicts`).
pub(crate) fn open_or_make(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// Opens (or makes) the memory file at `path` for a cache of `settings`
/// laid out as `layout`, with a clock whose relative second 0 is
/// `process_started` if the cache starts clean.
pub fn open(
    path: &Path,
    settings: &Settings,
    layout: Layout,
    process_started: i64,
) -> io::Result<Opened> {
    let file = open_or_make(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot open memory file {}: {e}", path.display()),
        )
    })?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "memory file {} is in use by another process: {e}",
                path.display()
            ),
        ));
    }
    let len = file.metadata()?.len();
    let refusal = if len == 0 {
        None
    } else {
        refusal_of(&file, settings, &layout, len)?
    };
    let (resume, note) = if len == 0 {
        (None, None)
    } else if let Some(why) = refusal {
        (
            None,
            Some(format!(
                "{}: {why}, starting with a clean cache",
                path.display()
            )),
        )
    } else {
        (Some(()), None)
    };
    if resume.is_none() {
        // Every byte from before goes: control blocks read as never used.
        file.set_len(0)?;
    }
    reserve(&file, layout.total as u64, resume.is_none()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "memory file {}: cannot reserve its {} bytes (-m {} MB and the segments' \
                 control blocks){}: {e}",
                path.display(),
                layout.total,
                settings.memory_limit >> 20,
                free_space(&file)
                    .map(|free| format!(", its file system has {free} bytes free"))
                    .unwrap_or_default(),
            ),
        )
    })?;
    let backing = Backing::file(file, layout)?;
    let resume = begin(
        &backing,
        resume.is_some(),
        settings,
        &layout,
        process_started,
    );
    let header = Header::of(&backing);
    crate::fault::watch(
        path,
        backing.header(),
        backing.layout().total,
        HEADER_SIZE,
        &header.open,
    );
    Ok(Opened {
        backing,
        resume,
        note,
    })
}

/// Starts a server's use of the header of a mapping with a header (a
/// memory file's or a memfd's): takes the cache it holds over (`take_over`:
/// its header was checked with `Header::refusal`), returning what to
/// resume, or writes a new header for a clean cache of `settings` and
/// `layout` (the mapping then reads as zeros: no segment ever used).
/// Either way the header is marked in use by this boot's server.
pub(crate) fn begin(
    backing: &Backing,
    take_over: bool,
    settings: &Settings,
    layout: &Layout,
    process_started: i64,
) -> Option<Resume> {
    let header = Header::of(backing);
    let resume = if take_over {
        header.upgrade_format();
        Some(Resume {
            process_started: header.process_started(),
            clock: header.clock.load(Ordering::Relaxed),
            flushes: [0, 1].map(|i| {
                (
                    header.flush_at[i].load(Ordering::Relaxed),
                    header.flush_epoch[i].load(Ordering::Relaxed),
                )
            }),
            graceful: header.open.load(Ordering::Relaxed) == 0,
        })
    } else {
        header.make(settings, layout, process_started);
        None
    };
    header.mark_open();
    resume
}

/// Why the header page at the start of `file` (`file_len` bytes long)
/// does not let a server with `settings` and `layout` take its cache
/// over, if it does not.
pub(crate) fn refusal_of(
    file: &File,
    settings: &Settings,
    layout: &Layout,
    file_len: u64,
) -> io::Result<Option<String>> {
    let mut page = HeaderPage([0; HEADER_SIZE / 8]);
    read_header(file, &mut page)?;
    Ok(page.header().refusal(settings, layout, file_len))
}

/// A header page read from a file (aligned for the header's atomics).
#[repr(C, align(4096))]
struct HeaderPage([u64; HEADER_SIZE / 8]);

impl HeaderPage {
    fn header(&self) -> &Header {
        // SAFETY: the page is aligned and large enough for a Header, whose
        // fields are integer atomics, valid for any bytes.
        unsafe { &*(self.0.as_ptr() as *const Header) }
    }
}

fn read_header(file: &File, page: &mut HeaderPage) -> io::Result<()> {
    // SAFETY: the page is HEADER_SIZE plain bytes we own.
    let bytes =
        unsafe { std::slice::from_raw_parts_mut(page.0.as_mut_ptr() as *mut u8, HEADER_SIZE) };
    let mut done = 0;
    while done < HEADER_SIZE {
        match file.read_at(&mut bytes[done..], done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A hash of this boot's id (`/proc/sys/kernel/random/boot_id`): a file
/// left open by a server of another boot may have lost pages. 0 where the
/// kernel does not say (every boot then looks the same).
pub fn boot_id() -> u64 {
    match std::fs::read("/proc/sys/kernel/random/boot_id") {
        Ok(id) => xxhash_rust::xxh3::xxh3_64(id.trim_ascii()) | 1,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("osmium-memfile-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("mem")
    }

    const SETTINGS: Settings = Settings {
        memory_limit: 4 << 20,
        item_size_max: 1 << 20,
        use_cas: true,
    };

    #[test]
    fn a_new_file_starts_clean_and_is_taken_over_by_the_next_start() {
        let path = temp("new");
        let layout = Layout::new(4, 1 << 20);
        let o = open(&path, &SETTINGS, layout, 1000).unwrap();
        assert!(o.resume.is_none() && o.note.is_none());
        Header::of(&o.backing).note_clock(77);
        Header::of(&o.backing).note_flushes([(5, 1), (6, 2)]);
        drop(o);
        let o = open(&path, &SETTINGS, layout, 2000).unwrap();
        let r = o.resume.expect("resumed");
        assert_eq!(r.process_started, 1000);
        assert_eq!(r.clock, 77);
        assert_eq!(r.flushes, [(5, 1), (6, 2)]);
        assert!(!r.graceful, "never closed gracefully");
        Header::of(&o.backing).mark_closed(123);
        drop(o);
        let o = open(&path, &SETTINGS, layout, 3000).unwrap();
        assert!(o.resume.expect("resumed").graceful);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_format_1_file_is_taken_over_and_marked_format_2() {
        let path = temp("format1");
        let layout = Layout::new(4, 1 << 20);
        let o = open(&path, &SETTINGS, layout, 1000).unwrap();
        // As a build of format 1 made it: its format, its checksum.
        let h = Header::of(&o.backing);
        h.format.store(1, Ordering::Relaxed);
        h.checksum.store(h.fixed_checksum(), Ordering::Relaxed);
        drop(o);
        let o = open(&path, &SETTINGS, layout, 2000).unwrap();
        assert!(o.resume.is_some() && o.note.is_none(), "{:?}", o.note);
        assert_eq!(
            Header::of(&o.backing).format.load(Ordering::Relaxed),
            FORMAT
        );
        drop(o);
        // Marked as this build's: the next start takes it over too.
        let o = open(&path, &SETTINGS, layout, 3000).unwrap();
        assert!(o.resume.is_some() && o.note.is_none(), "{:?}", o.note);
        drop(o);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_at(&0u32.to_le_bytes(), 8).unwrap();
        drop(f);
        let o = open(&path, &SETTINGS, layout, 4000).unwrap();
        assert!(o.note.unwrap().contains("older osmium"));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_file_of_other_settings_or_a_damaged_header_starts_clean_with_a_note() {
        let path = temp("refused");
        let layout = Layout::new(4, 1 << 20);
        drop(open(&path, &SETTINGS, layout, 1000).unwrap());
        let other = Settings {
            memory_limit: 8 << 20,
            ..SETTINGS
        };
        let o = open(&path, &other, Layout::new(8, 1 << 20), 1000).unwrap();
        assert!(o.resume.is_none());
        assert!(o
            .note
            .as_ref()
            .unwrap()
            .contains("[maxbytes] [old value: 4194304]"));
        drop(o);
        // The file now has the other settings; damage its header.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_at(&[0xff], 40).unwrap();
        drop(f);
        let o = open(&path, &other, Layout::new(8, 1 << 20), 1000).unwrap();
        assert!(o.resume.is_none());
        assert!(o.note.as_ref().unwrap().contains("damaged header"));
        drop(o);
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_at(&(FORMAT + 1).to_le_bytes(), 8).unwrap();
        drop(f);
        let o = open(&path, &other, Layout::new(8, 1 << 20), 1000).unwrap();
        assert!(o.note.as_ref().unwrap().contains("newer osmium"));
        drop(o);
        std::fs::write(&path, b"hello").unwrap();
        let o = open(&path, &other, Layout::new(8, 1 << 20), 1000).unwrap();
        assert!(o.note.unwrap().contains("not an osmium memory file"));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_file_taken_over_gets_its_holes_reserved_and_keeps_its_data() {
        let path = temp("holes");
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let len = 8u64 << 20;
        f.set_len(len).unwrap();
        f.write_at(b"kept", 1 << 20).unwrap();
        f.write_at(b"also", 5 << 20).unwrap();
        let blocks = |f: &File| {
            use std::os::unix::fs::MetadataExt;
            f.metadata().unwrap().blocks() * 512
        };
        assert!(blocks(&f) < len, "a sparse file to begin with");
        reserve(&f, len, false).unwrap();
        assert!(blocks(&f) >= len, "every hole reserved: {}", blocks(&f));
        let mut b = [0u8; 4];
        f.read_at(&mut b, 1 << 20).unwrap();
        assert_eq!(&b, b"kept");
        f.read_at(&mut b, 5 << 20).unwrap();
        assert_eq!(&b, b"also");
        // A whole file: nothing to do, nothing changed.
        reserve(&f, len, false).unwrap();
        assert_eq!(f.metadata().unwrap().len(), len);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn a_file_in_use_is_refused() {
        let path = temp("locked");
        let layout = Layout::new(4, 1 << 20);
        let first = open(&path, &SETTINGS, layout, 1000).unwrap();
        let e = open(&path, &SETTINGS, layout, 1000).err().expect("refused");
        assert!(e.to_string().contains("in use by another process"), "{e}");
        drop(first);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
