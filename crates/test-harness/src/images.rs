//! Binaries a test installs for a binary upgrade (SIGUSR2): a directory of
//! the test's own, removed when dropped, where the program under test is
//! copied and replaced by new inodes as a package manager replaces it, and
//! the images that refuse an upgrade.
//!
//! Every file is written by a child process and renamed into place: no
//! write fd on it is ever open in the test process, where a child that
//! another test forks meanwhile could inherit it for a moment (an exec of
//! a file open for writing fails with ETXTBSY).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A directory of the test's own, removed at its end, that holds the
/// images an upgrade runs.
pub struct Images(PathBuf);

impl Images {
    /// A fresh directory under the temporary directory, named after
    /// `name` and this process.
    pub fn new(name: &str) -> Images {
        let path =
            std::env::temp_dir().join(format!("osmium-images-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("make the test's directory");
        Images(path)
    }

    /// `name` in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes `bytes` at a temporary name, with `mode`, then renames it
    /// to `name` (a new inode); its inode.
    pub fn install(&self, name: &str, bytes: &[u8], mode: u32) -> u64 {
        let tmp = self.path(&format!("{name}.tmp"));
        let _ = std::fs::remove_file(&tmp);
        let mut writer = Command::new("sh")
            .args(["-c", "cat > \"$1\"", "sh"])
            .arg(&tmp)
            .stdin(Stdio::piped())
            .spawn()
            .expect("run sh");
        writer
            .stdin
            .take()
            .expect("its stdin")
            .write_all(bytes)
            .expect("write the file");
        assert!(writer.wait().expect("wait for sh").success());
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).unwrap();
        let final_path = self.path(name);
        std::fs::rename(&tmp, &final_path).expect("rename it over");
        std::fs::metadata(&final_path).unwrap().ino()
    }

    /// The program at `program` copied to `name` (a new inode); its inode.
    pub fn install_program(&self, name: &str, program: &Path) -> u64 {
        let bytes =
            std::fs::read(program).unwrap_or_else(|e| panic!("read {}: {e}", program.display()));
        self.install(name, &bytes, 0o755)
    }

    /// A `#!/bin/sh` script at `name`; its inode.
    pub fn install_script(&self, name: &str, body: &str) -> u64 {
        self.install(name, format!("#!/bin/sh\n{body}\n").as_bytes(), 0o755)
    }

    /// At `name`, an image that passes the upgrade's check (`program`,
    /// copied to `NAME.real`) and then refuses the state it is handed
    /// (`OSMIUM_UPGRADE_REFUSE`): the upgrade falls back to the old image.
    pub fn install_refusing_image(&self, name: &str, program: &Path) {
        let real = self.path(&format!("{name}.real"));
        self.install_program(&format!("{name}.real"), program);
        let real = real.display();
        self.install_script(
            name,
            &format!(
                "case \"$1\" in --upgrade-check) exec {real} \"$@\";; esac\n\
                 OSMIUM_UPGRADE_REFUSE=1 exec {real} \"$@\""
            ),
        );
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The inode process `pid` runs (its file may have been replaced since).
pub fn exe_inode(pid: u32) -> u64 {
    std::fs::metadata(format!("/proc/{pid}/exe"))
        .expect("stat /proc/PID/exe")
        .ino()
}
