//! The check run against real programs: `#!/bin/sh` scripts that answer
//! it, exit 1, hang, refuse; a missing and a non-executable file; and
//! the answering side's parse of its stdin.

use super::*;
use crate::testing::{scratch_file, ExecLock};
use std::os::fd::AsFd;

fn check_script(body: &str, timeout: Duration) -> Result<CheckAnswer, String> {
    let _lock = ExecLock::take();
    let path = scratch_file("check", &format!("#!/bin/sh\n{body}\n"), 0o755);
    let image = crate::open_image(&path).expect("open the script");
    let args: Vec<OsString> = ["osmium", "-m", "64", "-o", "a b"]
        .iter()
        .map(OsString::from)
        .collect();
    let got = run_check(image.as_fd(), &args, timeout);
    let _ = std::fs::remove_file(&path);
    got
}

#[test]
fn a_binary_that_answers_ok_passes() {
    let got = check_script(
        "cat >/dev/null\necho 'osmium-upgrade-check ok version=9.9.9 reads=1-2 exe=3:4 later=x takes=memory,y'",
        CHECK_TIMEOUT,
    );
    assert_eq!(
        got,
        Ok(CheckAnswer {
            version: "9.9.9".into(),
            reads: 1..=2,
            exe: (3, 4),
            takes: vec!["memory".into(), "y".into()],
        })
    );
}

#[test]
fn the_command_line_arrives_nul_separated_after_the_flag() {
    // The script refuses with what it was given: its $1 and its stdin.
    let got = check_script(
        "echo \"osmium-upgrade-check refused $1 $(tr '\\000' '|')\"",
        CHECK_TIMEOUT,
    );
    assert_eq!(
        got,
        Err("the new binary refuses the command line: --upgrade-check osmium|-m|64|-o|a b|".into())
    );
}

#[test]
fn a_binary_that_exits_1_fails_the_check() {
    let got = check_script("exit 1", CHECK_TIMEOUT).unwrap_err();
    assert!(
        got.contains("did not answer the check") && got.contains("1"),
        "{got}"
    );
}

#[test]
fn an_answer_with_a_bad_status_fails_the_check() {
    let got = check_script(
        "echo 'osmium-upgrade-check ok version=1 reads=1-1 exe=1:1'; exit 3",
        CHECK_TIMEOUT,
    )
    .unwrap_err();
    assert!(got.contains("did not answer the check"), "{got}");
}

#[test]
fn a_binary_that_hangs_is_killed_after_the_timeout() {
    let got = check_script("exec sleep 60", Duration::from_millis(200)).unwrap_err();
    assert!(got.contains("did not answer the check in"), "{got}");
}

#[test]
fn a_binary_that_reads_other_formats_fails_the_check() {
    let got = check_script(
        "echo 'osmium-upgrade-check ok version=9 reads=99-99 exe=1:1'",
        CHECK_TIMEOUT,
    )
    .unwrap_err();
    assert_eq!(
        got,
        "the new binary reads state formats 99-99, this server writes 1"
    );
}

#[test]
fn a_binary_without_the_check_fails_it() {
    let got = check_script("echo 'osmium 0.0.1'", CHECK_TIMEOUT).unwrap_err();
    assert!(got.contains("not an answer"), "{got}");
}

#[test]
fn a_missing_file_cannot_be_opened() {
    let e = crate::open_image(std::path::Path::new("/nonexistent/osmium")).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
}

#[test]
fn a_file_that_is_not_executable_fails_the_check() {
    let _lock = ExecLock::take();
    let path = scratch_file("noexec", "#!/bin/sh\nexit 0\n", 0o644);
    let image = crate::open_image(&path).unwrap();
    let got = run_check(image.as_fd(), &["osmium".into()], CHECK_TIMEOUT).unwrap_err();
    let _ = std::fs::remove_file(&path);
    assert!(got.contains("Permission denied"), "{got}");
}

#[test]
fn the_answering_side_parses_its_stdin() {
    let mut seen = Vec::new();
    let (line, code) = answer(b"osmium\0-m\x0064\0", "1.2.3", &["memory"], |args| {
        seen = args;
        Ok(())
    });
    assert_eq!(code, 0);
    assert_eq!(seen, ["osmium", "-m", "64"]);
    let parsed = parse_line(&line).unwrap();
    assert!(parsed.takes(TAKES_MEMORY) && !parsed.takes("other"));
    assert_eq!((parsed.version.as_str(), parsed.reads), ("1.2.3", READS));

    let (line, code) = answer(b"osmium\0-m\0", "1", &[], |_| {
        Err("bad -m\nsecond line".into())
    });
    assert_eq!(code, 1);
    assert_eq!(line, "osmium-upgrade-check refused bad -m second line");

    let (line, code) = answer(b"osmium", "1", &[], |_| Ok(()));
    assert_eq!(code, 1);
    assert!(line.contains("refused"), "{line}");
}

#[test]
fn an_answer_line_round_trips() {
    let answer = CheckAnswer {
        version: "0.1.0".into(),
        reads: 1..=3,
        exe: (2049, 77),
        takes: Vec::new(),
    };
    let ok = Ok(answer.clone());
    assert_eq!(parse_line(&check_line(&ok)), ok);
    // An answer without `takes` (an older build's) takes nothing.
    assert!(!check_line(&ok).contains("takes"));
    let taking = Ok(CheckAnswer {
        takes: vec![TAKES_MEMORY.into()],
        ..answer.clone()
    });
    assert_eq!(parse_line(&check_line(&taking)), taking);
    // osmium-proxy's answer: its clients and a proxy's state, no memory.
    let proxy = CheckAnswer {
        takes: vec![TAKES_CONNS.into(), TAKES_PROXY.into()],
        ..answer
    };
    let line = check_line(&Ok(proxy.clone()));
    assert!(line.ends_with(" takes=conns,proxy"), "{line}");
    let parsed = parse_line(&line).unwrap();
    assert!(parsed.takes(TAKES_PROXY) && parsed.takes(TAKES_CONNS) && !parsed.takes(TAKES_MEMORY));
    assert_eq!(parsed, proxy);
}
