//! The files a start creates (the memory file, the flash files, the flash
//! metadata), removed again when the start fails: a refused start leaves
//! no file behind. Files that were there before are left as they are.

use std::path::{Path, PathBuf};

/// Paths this start created, removed when dropped unless [`NewFiles::keep`]
/// was called.
#[derive(Default)]
pub(crate) struct NewFiles {
    paths: Vec<PathBuf>,
}

impl NewFiles {
    /// Notes `path` as this start's if nothing is there yet (called
    /// before the file is created).
    pub(crate) fn note(&mut self, path: &Path) {
        if std::fs::symlink_metadata(path).is_err() {
            self.paths.push(path.to_path_buf());
        }
    }

    /// The start succeeded: the files stay.
    pub(crate) fn keep(mut self) {
        self.paths.clear();
    }
}

impl Drop for NewFiles {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_a_failed_start_made_go() {
        let dir = std::env::temp_dir().join(format!("osmium-new-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (old, new) = (dir.join("old"), dir.join("new"));
        std::fs::write(&old, b"x").unwrap();
        let mut files = NewFiles::default();
        files.note(&old);
        files.note(&new);
        std::fs::write(&new, b"y").unwrap();
        drop(files);
        assert!(old.exists() && !new.exists());
        let mut files = NewFiles::default();
        files.note(&new);
        std::fs::write(&new, b"y").unwrap();
        files.keep();
        assert!(new.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
