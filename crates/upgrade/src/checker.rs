//! The running image's side of the check ([`crate::check`]), the same
//! for the server and the proxy: the file the process runs from (what
//! SIGUSR2 runs, [`note_exe`]), opened and run with `--upgrade-check` on
//! a thread of its own while the process serves on ([`Checking`]), its
//! outcome polled by the process's loop, and the refusal's log line
//! (`upgrade refused: PATH: WHY`, [`refused`]).
//!
//! What differs between the programs is a [`Program`]: their names in
//! the log lines, the thread's name, what a refusal does besides its log
//! line (the server counts it), and the log itself (each program writes
//! the lines as its own, under its own target).

use std::ffi::OsString;
use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::OnceLock;

use crate::check::{run_check, CheckAnswer, CHECK_TIMEOUT};

/// The file this process runs from: what SIGUSR2 runs.
static EXE_PATH: OnceLock<PathBuf> = OnceLock::new();

/// What differs between the programs that upgrade.
#[derive(Debug)]
pub struct Program {
    /// What runs, in "the file this {what} runs from is not known"
    /// (`server`, `proxy`).
    pub what: &'static str,
    /// The program's name before its version in "passed the check
    /// ({name} VERSION, ...)" (`osmium`, `osmium-proxy`).
    pub name: &'static str,
    /// The check thread's name.
    pub thread: &'static str,
    /// Called with why, before the log line, on each refusal.
    pub on_refused: fn(&str),
    /// Writes a log line (a warning) as the program's own.
    pub warn: fn(fmt::Arguments<'_>),
}

/// Notes the file this image runs from, by the path it was started from
/// (after an upgrade that failed, the running file may have been
/// replaced: its link then ends in " (deleted)").
pub fn note_exe() {
    if let Ok(path) = std::env::current_exe() {
        let text = path.as_os_str().to_string_lossy();
        let path = match text.strip_suffix(" (deleted)") {
            Some(stripped) => PathBuf::from(stripped),
            None => path,
        };
        let _ = EXE_PATH.set(path);
    }
}

/// A refused upgrade: `program`'s own step, then the log line.
pub fn refused(program: &Program, path: &Path, why: &str) {
    (program.on_refused)(why);
    (program.warn)(format_args!("upgrade refused: {}: {why}", path.display()));
}

/// A new binary that passed its check: the fd it is run through.
#[derive(Debug)]
pub struct Checked {
    /// Its path.
    pub path: PathBuf,
    /// An `O_PATH` fd on it (the file checked is the file run).
    pub image: OwnedFd,
    /// What it answered.
    pub answer: CheckAnswer,
}

/// The check of a new binary, running on a thread of its own while the
/// process serves on.
#[derive(Debug)]
pub struct Checking {
    program: &'static Program,
    path: PathBuf,
    done: mpsc::Receiver<Result<(OwnedFd, CheckAnswer), String>>,
}

impl Checking {
    /// Opens the file this process runs from ([`note_exe`]) and starts
    /// its check: the thread runs `hold` first and `wake` once it has
    /// the answer (to wake the loop that polls [`Checking::outcome`]).
    /// None (after a refusal) if the file is not known or cannot be
    /// opened.
    pub fn begin(
        program: &'static Program,
        hold: impl FnOnce() + Send + 'static,
        wake: impl FnOnce() + Send + 'static,
    ) -> Option<Checking> {
        let Some(path) = EXE_PATH.get().cloned() else {
            let why = format!("the file this {} runs from is not known", program.what);
            (program.on_refused)(&why);
            (program.warn)(format_args!("upgrade refused: {why}"));
            return None;
        };
        Checking::begin_at(program, path, hold, wake)
    }

    /// [`Checking::begin`] for the file at `path`.
    fn begin_at(
        program: &'static Program,
        path: PathBuf,
        hold: impl FnOnce() + Send + 'static,
        wake: impl FnOnce() + Send + 'static,
    ) -> Option<Checking> {
        (program.warn)(format_args!(
            "upgrade requested: checking {}",
            path.display()
        ));
        let image = match crate::open_image(&path) {
            Ok(fd) => fd,
            Err(e) => {
                refused(program, &path, &e.to_string());
                return None;
            }
        };
        let expanded: Vec<OsString> = std::env::args_os().collect();
        let (tell, done) = mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name(program.thread.into())
            .spawn(move || {
                hold();
                let answer = run_check(image.as_fd(), &expanded, CHECK_TIMEOUT);
                let _ = tell.send(answer.map(|a| (image, a)));
                wake();
            });
        match spawned {
            Ok(_) => Some(Checking {
                program,
                path,
                done,
            }),
            Err(e) => {
                refused(program, &path, &format!("cannot start the check: {e}"));
                None
            }
        }
    }

    /// None while the check runs; then Some: the binary that passed it
    /// and what `accept` made of its answer (the program's own
    /// conditions, asked before the pass is logged), or None after the
    /// refusal (the check's or `accept`'s why) was logged.
    pub fn outcome<T>(
        &self,
        accept: impl FnOnce(&CheckAnswer) -> Result<T, String>,
    ) -> Option<Option<(Checked, T)>> {
        let answer = match self.done.try_recv() {
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err("the check ended without an answer".into())
            }
            Ok(answer) => answer,
        };
        let passed = answer.and_then(|(image, answer)| {
            let accepted = accept(&answer)?;
            Ok((image, answer, accepted))
        });
        Some(match passed {
            Ok((image, answer, accepted)) => {
                (self.program.warn)(format_args!(
                    "upgrade: {} passed the check ({} {}, reads state formats {}-{})",
                    self.path.display(),
                    self.program.name,
                    answer.version,
                    answer.reads.start(),
                    answer.reads.end()
                ));
                let checked = Checked {
                    path: self.path.clone(),
                    image,
                    answer,
                };
                Some((checked, accepted))
            }
            Err(why) => {
                refused(self.program, &self.path, &why);
                None
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{scratch_file, ExecLock};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static REFUSALS: AtomicUsize = AtomicUsize::new(0);

    static TEST: Program = Program {
        what: "test",
        name: "osmium-test",
        thread: "osmium-test-check",
        on_refused: |_| {
            REFUSALS.fetch_add(1, Ordering::Relaxed);
        },
        warn: |_| {},
    };

    /// The outcome of checking a script that prints `line`, `accept`
    /// asked; the refusals counted meanwhile.
    fn check(line: &str, accept: fn(&CheckAnswer) -> Result<u8, String>) -> (Option<u8>, usize) {
        let _lock = ExecLock::take();
        let path = scratch_file("checker", &format!("#!/bin/sh\necho '{line}'\n"), 0o755);
        let before = REFUSALS.load(Ordering::Relaxed);
        let (woken, wait) = mpsc::channel();
        let checking = Checking::begin_at(
            &TEST,
            path.clone(),
            || {},
            move || {
                let _ = woken.send(());
            },
        )
        .expect("the check starts");
        wait.recv().expect("woken once the check answered");
        let got = checking.outcome(accept).expect("the check has ended");
        let _ = std::fs::remove_file(&path);
        if let Some((checked, _)) = &got {
            assert_eq!(checked.path, path);
            assert_eq!(checked.answer.version, "9.9.9");
        }
        (
            got.map(|(_, accepted)| accepted),
            REFUSALS.load(Ordering::Relaxed) - before,
        )
    }

    const OK: &str = "osmium-upgrade-check ok version=9.9.9 reads=1-1 exe=1:2 takes=conns";

    #[test]
    fn a_binary_that_passes_the_check_and_the_programs_conditions_is_checked() {
        assert_eq!(check(OK, |_| Ok(7)), (Some(7), 0));
    }

    #[test]
    fn the_programs_conditions_refuse_a_binary_that_passed_the_check() {
        let refuse = |a: &CheckAnswer| {
            if a.takes(crate::TAKES_PROXY) {
                Ok(1)
            } else {
                Err("not a proxy".to_string())
            }
        };
        assert_eq!(check(OK, refuse), (None, 1));
    }

    #[test]
    fn a_binary_that_refuses_the_command_line_is_refused() {
        let line = "osmium-upgrade-check refused no such option";
        assert_eq!(check(line, |_| Ok(0)), (None, 1));
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_refused_before_any_thread() {
        let _lock = ExecLock::take();
        let before = REFUSALS.load(Ordering::Relaxed);
        let missing = std::env::temp_dir().join("osmium-checker-no-such-file");
        assert!(Checking::begin_at(&TEST, missing, || {}, || {}).is_none());
        assert_eq!(REFUSALS.load(Ordering::Relaxed) - before, 1);
    }
}
