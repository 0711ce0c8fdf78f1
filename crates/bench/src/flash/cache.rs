//! The page cache of a flash file: how much of it is resident (`mincore`
//! over a read-only mapping), and dropping it before GETs are timed, so
//! that "from flash" means from the device: `fdatasync` then
//! `posix_fadvise(POSIX_FADV_DONTNEED)` on the file, and, when pages are
//! still resident, `echo 1 > /proc/sys/vm/drop_caches` (root; the whole
//! machine's clean page cache).

use std::os::fd::AsRawFd;
use std::path::Path;

/// How to drop a flash file's page cache before a timed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DropCache {
    /// `posix_fadvise(DONTNEED)`, then `drop_caches` if pages stayed.
    Auto,
    /// `posix_fadvise(DONTNEED)` only.
    Fadvise,
    /// `echo 1 > /proc/sys/vm/drop_caches` only.
    DropCaches,
    /// Nothing: reads may come from the page cache.
    None,
}

/// What a drop did.
#[derive(Clone, Debug, Default)]
pub(crate) struct Dropped {
    /// The steps that ran and what came of them, e.g.
    /// `fadvise(ok) drop_caches(ok)`.
    pub method: String,
    /// Resident bytes of the file before and after.
    pub resident_before: u64,
    pub resident_after: u64,
    /// The file's length (memcached writes it sparsely: holes are not
    /// resident).
    pub file_len: u64,
}

/// Bytes of `path` in the page cache, and its length.
pub(crate) fn resident(path: &Path) -> Result<(u64, u64), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if len == 0 {
        return Ok((0, 0));
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    // SAFETY: a fresh read-only shared mapping of an open file; unmapped
    // below and never dereferenced (mincore only asks the kernel).
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(format!(
            "mmap of {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    let pages = len.div_ceil(page) as usize;
    let mut vec = vec![0u8; pages];
    // SAFETY: addr..addr+len is our mapping; vec has one byte per page.
    let r = unsafe { libc::mincore(addr, len as usize, vec.as_mut_ptr()) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the mapping made above, of that length.
    unsafe { libc::munmap(addr, len as usize) };
    if r != 0 {
        return Err(format!("mincore of {}: {err}", path.display()));
    }
    let resident = vec.iter().filter(|&&b| b & 1 == 1).count() as u64;
    Ok(((resident * page).min(len), len))
}

/// `fdatasync` + `posix_fadvise(DONTNEED)` over the whole file.
fn fadvise(path: &Path) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    // Dirty pages are not dropped: write them back first (fsync on a
    // read-only descriptor writes back the file's pages, whoever wrote them).
    f.sync_data()
        .map_err(|e| format!("fdatasync {}: {e}", path.display()))?;
    // SAFETY: an open descriptor; offset 0 and length 0 mean the whole file.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(format!(
            "posix_fadvise: {}",
            std::io::Error::from_raw_os_error(r)
        ));
    }
    Ok(())
}

/// `sync` then `echo 1 > /proc/sys/vm/drop_caches`.
fn drop_caches() -> Result<(), String> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", b"1")
        .map_err(|e| format!("writing /proc/sys/vm/drop_caches: {e}"))
}

/// Drops `path`'s page cache as `how` says; what it did and what stayed.
/// A step that fails is reported in `method`, not as an error.
pub(crate) fn drop_file(path: &Path, how: DropCache) -> Result<Dropped, String> {
    let (before, len) = resident(path)?;
    let mut method = Vec::new();
    let note = |r: Result<(), String>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("failed: {e}"),
    };
    if matches!(how, DropCache::Auto | DropCache::Fadvise) {
        method.push(format!("fadvise({})", note(fadvise(path))));
    }
    let (mut after, _) = resident(path)?;
    // More than 1 % (and 1 MiB) left: fadvise could not drop it.
    let stayed = after > (len / 100).max(1 << 20);
    if how == DropCache::DropCaches || (how == DropCache::Auto && stayed) {
        method.push(format!("drop_caches({})", note(drop_caches())));
        after = resident(path)?.0;
    }
    if method.is_empty() {
        method.push("none".into());
    }
    Ok(Dropped {
        method: method.join(" "),
        resident_before: before,
        resident_after: after,
        file_len: len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_is_resident_and_fadvise_drops_it() {
        let dir =
            std::env::temp_dir().join(format!("osmium-bench-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
        let (res, len) = resident(&path).unwrap();
        assert_eq!(len, 4 << 20);
        assert!(res > 0, "a file just written is in the page cache");
        let d = drop_file(&path, DropCache::Fadvise).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(d.method.starts_with("fadvise(ok)"), "{d:?}");
        // tmpfs keeps its pages whatever fadvise says.
        if !crate::flash::on_tmpfs(&std::env::temp_dir()) {
            assert_eq!(d.resident_after, 0, "{d:?}");
        }
    }
}
