//! Where the dictionary table is kept across restarts: a region of a file
//! written with `pwrite` and read back with `pread` at a start, never
//! mapped. With a memory file (`-e FILE`) it is a file beside it,
//! `FILE.dicts` (like `FILE.flash`, it outlives a reset of `FILE`: flash
//! records may name its dictionaries); with item memory in a memfd it is
//! the memfd's bytes past the mapping (`Layout::total`), written through
//! the store's own fd on it, so it goes with the memfd a binary upgrade
//! hands over, and a new memfd has none.
//!
//! ```text
//!  offset 0        64               64 + 64 × 32      4 KiB                 4 KiB + slot × DICT_MAX
//!        +--------+-----------------+----------------+---------------------+-------------------
//!        | header | entries (32 B per slot)          | pad | dictionary bytes, one DICT_MAX area per slot
//!        +--------+-----------------+----------------+-----+-----------------------------------
//!  header:  magic "osmiumDT" u64, format u32
//!  entry:   codec u8 (0: none, the generation is then the slot's next), class u8,
//!           current u8, 0 u8, generation u32,
//!           len u32, 0 u32, checksum u64 (xxh3 of codec, class,
//!           generation, len and the bytes), 0 u64
//! ```
//!
//! A dictionary's bytes are written before its entry, and an entry is
//! one write of 32 bytes: an entry whose checksum does not match (a write
//! cut short) is not loaded, so the items naming it are dropped by the
//! recovery as any item naming an unknown dictionary is. A removed
//! dictionary's entry is zeroed. The `current` byte (the dictionary its
//! class packs with) is outside the checksum: it is a hint to the
//! trainer, not to readers.

use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{Dict, DICT_MAX, SLOTS};

const MAGIC: u64 = u64::from_le_bytes(*b"osmiumDT");
const FORMAT: u32 = 1;
const ENTRIES: u64 = 64;
const ENTRY: usize = 32;
const DATA: u64 = 4096;

const _: () = assert!(ENTRIES as usize + SLOTS * ENTRY <= DATA as usize);

/// A dictionary the region held.
#[derive(Debug)]
pub(crate) struct Stored {
    /// Its codec byte (slot and generation mod 4).
    pub(crate) codec: u8,
    /// The size class it was trained for.
    pub(crate) class: u8,
    /// Its slot's generation.
    pub(crate) generation: u32,
    /// Whether its class packed with it.
    pub(crate) current: bool,
    /// The dictionary.
    pub(crate) bytes: Vec<u8>,
}

/// The region of a file that keeps the table (see the module comment).
#[derive(Debug)]
pub struct DictFile {
    file: Region,
    base: u64,
    /// Written through to the disk (`FILE.dicts`; a memfd has none).
    sync: bool,
    /// Made by this start (there was no table in the region).
    made: bool,
}

/// The file under a region.
#[derive(Debug)]
enum Region {
    /// `FILE.dicts`, ours.
    Own(File),
    /// The memfd of the store's item memory, the store's (`Backing`):
    /// never closed here, so that the process holds one fd on it (a binary
    /// upgrade hands that one over).
    Memfd(ManuallyDrop<File>),
}

impl std::ops::Deref for Region {
    type Target = File;

    fn deref(&self) -> &File {
        match self {
            Region::Own(f) => f,
            Region::Memfd(f) => f,
        }
    }
}

impl DictFile {
    /// `FILE.dicts` beside the memory file `memory_file`, opened or made.
    pub fn beside(memory_file: &Path) -> io::Result<DictFile> {
        let name = DictFile::path_beside(memory_file);
        let file = crate::memfile::open_or_make(&name)?;
        DictFile::prepare(Region::Own(file), 0, true)
    }

    /// The bytes of the memfd `fd` from `base` on (past its mapping).
    ///
    /// # Safety
    ///
    /// `fd` stays open as long as the `DictFile` is used (it is the memfd
    /// of the store's item memory, closed when the store drops, after its
    /// last use of the table's file).
    pub(crate) unsafe fn in_memfd(fd: RawFd, base: u64) -> io::Result<DictFile> {
        // SAFETY: the caller keeps `fd` open while this is used; the File
        // is never dropped, so it never closes the store's fd.
        let file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
        DictFile::prepare(Region::Memfd(file), base, false)
    }

    /// The path `beside` uses for `memory_file`.
    pub fn path_beside(memory_file: &Path) -> std::path::PathBuf {
        let mut name = memory_file.as_os_str().to_owned();
        name.push(".dicts");
        name.into()
    }

    /// A region without this format's header gets one and no entries.
    fn prepare(file: Region, base: u64, sync: bool) -> io::Result<DictFile> {
        let mut f = DictFile {
            file,
            base,
            sync,
            made: false,
        };
        let mut head = [0u8; 12];
        let ok = f.file.read_exact_at(&mut head, base).is_ok()
            && u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) == MAGIC
            && u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) == FORMAT;
        if !ok {
            let mut page = vec![0u8; DATA as usize];
            page[..8].copy_from_slice(&MAGIC.to_le_bytes());
            page[8..12].copy_from_slice(&FORMAT.to_le_bytes());
            f.file.write_all_at(&page, base)?;
            f.flush()?;
            f.made = true;
        }
        Ok(f)
    }

    /// Whether this start made the table (the region held none).
    pub fn is_new(&self) -> bool {
        self.made
    }

    fn flush(&self) -> io::Result<()> {
        if self.sync {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }

    fn entry_at(&self, slot: usize) -> u64 {
        self.base + ENTRIES + (slot * ENTRY) as u64
    }

    fn data_at(&self, slot: usize) -> u64 {
        self.base + DATA + (slot * DICT_MAX) as u64
    }

    /// Every sound entry's dictionary (a damaged one is left out), and
    /// per slot the generation its next dictionary gets (kept by `clear`).
    pub(crate) fn load(&self) -> (Vec<Stored>, [u32; SLOTS]) {
        let mut out = Vec::new();
        let mut next = [0u32; SLOTS];
        for (slot, next) in next.iter_mut().enumerate().skip(1) {
            let mut e = [0u8; ENTRY];
            if self
                .file
                .read_exact_at(&mut e, self.entry_at(slot))
                .is_err()
            {
                continue;
            }
            let codec = e[0];
            let generation = u32::from_le_bytes(e[4..8].try_into().expect("4 bytes"));
            *next = generation;
            let len = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes")) as usize;
            if codec == 0 || usize::from(codec & 63) != slot || len == 0 || len > DICT_MAX {
                continue;
            }
            let mut bytes = vec![0u8; len];
            if self
                .file
                .read_exact_at(&mut bytes, self.data_at(slot))
                .is_err()
            {
                continue;
            }
            let sum = u64::from_le_bytes(e[16..24].try_into().expect("8 bytes"));
            if sum != checksum(codec, e[1], generation, &bytes) {
                continue;
            }
            out.push(Stored {
                codec,
                class: e[1],
                generation,
                current: e[2] == 1,
                bytes,
            });
        }
        (out, next)
    }

    /// Writes `d` into `slot`: its bytes, then its entry.
    pub(crate) fn store(&self, slot: usize, d: &Dict, current: bool) -> io::Result<()> {
        let bytes = d.bytes();
        self.file.write_all_at(bytes, self.data_at(slot))?;
        let mut e = [0u8; ENTRY];
        e[0] = d.codec();
        e[1] = d.class();
        e[2] = u8::from(current);
        e[4..8].copy_from_slice(&d.generation().to_le_bytes());
        e[8..12].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
        e[16..24]
            .copy_from_slice(&checksum(d.codec(), d.class(), d.generation(), bytes).to_le_bytes());
        self.flush()?;
        self.file.write_all_at(&e, self.entry_at(slot))?;
        self.flush()
    }

    /// Marks `slot`'s dictionary current for its class or not (a hint:
    /// errors are ignored).
    pub(crate) fn set_current(&self, slot: usize, current: bool) {
        let _ = self
            .file
            .write_all_at(&[u8::from(current)], self.entry_at(slot) + 2);
    }

    /// Empties `slot`'s entry (its dictionary was removed), keeping the
    /// generation the slot's next dictionary gets. An error is ignored: no
    /// item names the dictionary.
    pub(crate) fn clear(&self, slot: usize, next_generation: u32) {
        let mut e = [0u8; ENTRY];
        e[4..8].copy_from_slice(&next_generation.to_le_bytes());
        let _ = self.file.write_all_at(&e, self.entry_at(slot));
        let _ = self.flush();
    }
}

fn checksum(codec: u8, class: u8, generation: u32, bytes: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&[codec, class]);
    h.update(&generation.to_le_bytes());
    h.update(&(bytes.len() as u32).to_le_bytes());
    h.update(bytes);
    h.digest()
}
