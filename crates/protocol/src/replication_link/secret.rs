//! The replication secret: its file's rules, what a secret must be to be
//! accepted, the Noise pre-shared key made from it, and making a good one.
//!
//! A secret file (the server's `--replication-secret FILE`, the proxy's
//! `replication_secret: FILE`) is read whole, one trailing newline
//! dropped, and refused when unreadable, not a regular file, open to
//! group or others (as ssh refuses a private key), or empty. Its content
//! must then look like at least 128 random bits ([`check_strength`]):
//!
//! ```text
//!   only hex digits                     at least 32 of them, 6 or more different
//!   only base64 (A-Z a-z 0-9 + / - _ =) at least 22 characters (padding not counted), 8 or more different
//!   anything else (raw bytes)           at least 16 bytes, 8 or more different
//! ```
//!
//! The counts of different symbols refuse what a person types (`aaaa...`,
//! `abababab...`); a random secret of those lengths has fewer than that
//! with a chance under 10^-12. No rule can tell a random secret from a
//! long phrase: make one with `osmium --gen-secret FILE`
//! ([`write_new_secret`]: 64 hex digits, 256 bits, mode 0600) or
//! `openssl rand -hex 32`.
//!
//! The PSK is HKDF-SHA256 of the content (salt: the protocol's name and
//! version), so every accepted form gives a 32-byte key.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use ring::hkdf;
use ring::rand::{SecureRandom, SystemRandom};

/// The HKDF salt of the PSK.
const PSK_SALT: &[u8] = b"osmium replication link v1";
/// The HKDF info of the PSK.
const PSK_INFO: &[u8] = b"noise psk0";
/// Bytes of random in a secret [`write_new_secret`] makes.
const GENERATED_BYTES: usize = 32;

/// What a secret looks like, and how long it must be.
const HEX_DIGITS_MIN: usize = 32;
const HEX_DISTINCT_MIN: usize = 6;
const BASE64_CHARS_MIN: usize = 22;
const RAW_BYTES_MIN: usize = 16;
const DISTINCT_MIN: usize = 8;

/// How to make a secret, for the refusals.
pub const HOW_TO_MAKE: &str = "make one with `osmium --gen-secret FILE` \
     (or `openssl rand -hex 32 > FILE; chmod 600 FILE`)";

/// The shared secret as the Noise PSK (never printed, never sent).
pub struct Secret {
    psk: [u8; 32],
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from its content; Err says why it is refused
    /// ([`check_strength`]).
    pub fn new(content: &[u8]) -> Result<Secret, String> {
        check_strength(content)?;
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, PSK_SALT);
        let prk = salt.extract(content);
        let mut psk = [0u8; 32];
        prk.expand(&[PSK_INFO], hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut psk))
            .map_err(|_| "cannot derive the key".to_string())?;
        Ok(Secret { psk })
    }

    /// Reads a secret file (`setting` names it in the error): its file
    /// rules and its strength (the module comment).
    pub fn load(path: &str, setting: &str) -> Result<Secret, String> {
        let content = read_owner_only(path, setting, "a replication secret")?;
        Secret::new(&content).map_err(|e| format!("{setting} {path}: {e}"))
    }

    /// The Noise pre-shared key.
    pub(crate) fn psk(&self) -> &[u8; 32] {
        &self.psk
    }
}

/// Whether `content` looks like at least 128 random bits (the module
/// comment's table); Err says what is wrong and how to make a good one.
pub fn check_strength(content: &[u8]) -> Result<(), String> {
    let distinct = |bytes: &[u8]| {
        let mut seen = [false; 256];
        bytes.iter().for_each(|&b| seen[usize::from(b)] = true);
        seen.iter().filter(|&&s| s).count()
    };
    let refuse = |what: String| {
        Err(format!(
            "{what}; a secret must hold at least 128 random bits: {HOW_TO_MAKE}"
        ))
    };
    if content.iter().all(u8::is_ascii_hexdigit) {
        let lower: Vec<u8> = content.iter().map(u8::to_ascii_lowercase).collect();
        if content.len() < HEX_DIGITS_MIN {
            return refuse(format!(
                "the secret is {} hex digits, fewer than {HEX_DIGITS_MIN}",
                content.len()
            ));
        }
        if distinct(&lower) < HEX_DISTINCT_MIN {
            return refuse(format!(
                "the secret uses fewer than {HEX_DISTINCT_MIN} different hex digits"
            ));
        }
        return Ok(());
    }
    let base64 = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_');
    let unpadded = content
        .iter()
        .rposition(|&b| b != b'=')
        .map_or(&content[..0], |end| &content[..=end]);
    if content.len() - unpadded.len() <= 2 && unpadded.iter().all(base64) {
        if unpadded.len() < BASE64_CHARS_MIN {
            return refuse(format!(
                "the secret is {} base64 characters, fewer than {BASE64_CHARS_MIN}",
                unpadded.len()
            ));
        }
        if distinct(unpadded) < DISTINCT_MIN {
            return refuse(format!(
                "the secret uses fewer than {DISTINCT_MIN} different characters"
            ));
        }
        return Ok(());
    }
    if content.len() < RAW_BYTES_MIN {
        return refuse(format!(
            "the secret is {} bytes, fewer than {RAW_BYTES_MIN}",
            content.len()
        ));
    }
    if distinct(content) < DISTINCT_MIN {
        return refuse(format!(
            "the secret uses fewer than {DISTINCT_MIN} different byte values"
        ));
    }
    Ok(())
}

/// Writes a new secret to `path`: 64 hex digits (256 random bits) and a
/// newline, mode 0600; refuses a path that exists (it never overwrites).
pub fn write_new_secret(path: &str) -> Result<(), String> {
    let mut bytes = [0u8; GENERATED_BYTES];
    random(&mut bytes).map_err(|e| format!("{path}: {e}"))?;
    let mut text = to_hex(&bytes);
    text.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                format!("{path} exists: a secret is never overwritten (remove it first)")
            }
            _ => format!("cannot create {path}: {e}"),
        })?;
    // The mode given to open is masked by the umask: made owner-only
    // whatever it is.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {path}: {e}"))
}

/// Fills `out` from the system's random source.
pub(crate) fn random(out: &mut [u8]) -> std::io::Result<()> {
    SystemRandom::new()
        .fill(out)
        .map_err(|_| std::io::Error::other("no random bytes"))
}

/// The content of a file only its owner may read (a secret or a token;
/// `setting` and `what` name them in the error), one trailing newline
/// dropped; refused when unreadable, not a regular file, open to group
/// or others (as ssh refuses a private key), or empty.
pub fn read_owner_only(
    path: impl AsRef<std::path::Path>,
    setting: &str,
    what: &str,
) -> Result<Vec<u8>, String> {
    let path = path.as_ref();
    let why = |e: String| format!("{setting} {}: {e}", path.display());
    let mut file = std::fs::File::open(path).map_err(|e| why(format!("cannot read it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| why(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(why("not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(why(format!(
            "the file is open to group or others (mode {mode:03o}); \
             {what} must be readable by its owner only (chmod 600)"
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| why(format!("cannot read it: {e}")))?;
    let content = trim_newline(&bytes);
    if content.is_empty() {
        return Err(why("the file is empty".into()));
    }
    Ok(content.to_vec())
}

/// Drops one trailing `\n` (and a `\r` before it).
pub(crate) fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Hex digits (either case) as bytes; None for an odd count or a
/// non-digit.
pub(crate) fn from_hex(hex: &[u8]) -> Option<Vec<u8>> {
    let pairs = hex.chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    pairs
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// One answer line, without its `\r\n`, read byte by byte (nothing
/// after it is taken from the stream); at most `max` bytes.
pub fn read_line<S: Read>(stream: &mut S, max: usize) -> std::io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.len() < max {
        match stream.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => {
                let text = trim_newline(&line);
                return Ok(String::from_utf8_lossy(text).into_owned());
            }
            Ok(1) => line.push(byte[0]),
            Ok(_) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "answer line too long",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_input() {
        let bytes: Vec<u8> = (0..=255).collect();
        let hex = to_hex(&bytes);
        assert_eq!(&hex[..8], "00010203");
        assert_eq!(from_hex(hex.as_bytes()).unwrap(), bytes);
        assert_eq!(from_hex(b"ABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(from_hex(b"abc"), None);
        assert_eq!(from_hex(b"abcg"), None);
        assert_eq!(from_hex(b"+f"), None);
    }

    #[test]
    fn trims_one_trailing_newline() {
        assert_eq!(trim_newline(b"s3cret\n"), b"s3cret");
        assert_eq!(trim_newline(b"s3cret\r\n"), b"s3cret");
        assert_eq!(trim_newline(b"s3cret\n\n"), b"s3cret\n");
        assert_eq!(trim_newline(b"s3cret"), b"s3cret");
    }

    #[test]
    fn weak_secrets_are_refused_and_random_ones_accepted() {
        for weak in [
            &b"winter2024"[..],
            b"0123456789abcdef0123456789abcde",
            b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            b"abababababababababababababababababab",
            b"c2hvcnQ=",
            b"short secret",
            b"\x01\x02\x01\x02\x01\x02\x01\x02\x01\x02\x01\x02\x01\x02\x01\x02\x01",
        ] {
            let e = check_strength(weak).unwrap_err();
            assert!(e.contains("osmium --gen-secret"), "{e}");
        }
        for good in [
            &b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4b"[..],
            b"3F9A0C7BE21D4E5F8A6B9C0D1E2F3A4B5C6D7E8F90112233",
            b"q2VzdGEgc2VjcmV0YSBkZWwg",
            b"q2VzdGEgc2VjcmV0YSBkZWwgcmVwbGljYQ==",
            b"q2VzdGEtc2VjcmV0YV9kZWwg",
            b"\x8f\x13\xa0\x55\x01\xfe\x77\x3c\x90\x2b\xd4\x6e\x19\xc8\x42\x0a",
        ] {
            check_strength(good).unwrap();
        }
        let mut random_bytes = [0u8; 16];
        for _ in 0..100 {
            random(&mut random_bytes).unwrap();
            check_strength(&random_bytes).unwrap();
            check_strength(to_hex(&random_bytes).as_bytes()).unwrap();
        }
    }

    #[test]
    fn the_key_depends_on_every_byte_of_the_secret() {
        let a = Secret::new(b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4b").unwrap();
        let b = Secret::new(b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4c").unwrap();
        let a2 = Secret::new(b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4b").unwrap();
        assert_eq!(a.psk(), a2.psk());
        assert_ne!(a.psk(), b.psk());
        assert_eq!(format!("{a:?}"), "Secret(..)");
    }

    #[test]
    fn secret_files_are_checked_and_made() {
        let dir = std::env::temp_dir().join(format!("osmium-secret-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let p = path.to_str().unwrap();
        let write = |text: &[u8], mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4b\n", 0o600);
        Secret::load(p, "replication_secret:").unwrap();
        write(b"winter2024\n", 0o600);
        let e = Secret::load(p, "replication_secret:").unwrap_err();
        assert!(e.starts_with("replication_secret: "), "{e}");
        assert!(e.contains("10 base64 characters"), "{e}");
        write(b"3f9a0c7be21d4e5f8a6b9c0d1e2f3a4b\n", 0o640);
        let e = Secret::load(p, "replication_secret:").unwrap_err();
        assert!(e.contains("open to group or others (mode 640)"), "{e}");
        write(b"\n", 0o600);
        assert!(Secret::load(p, "x").unwrap_err().contains("empty"));
        let e = Secret::load(dir.to_str().unwrap(), "x").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");

        let made = dir.join("made");
        let m = made.to_str().unwrap();
        write_new_secret(m).unwrap();
        let meta = std::fs::metadata(&made).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&made).unwrap();
        assert_eq!(text.len(), 65, "{text}");
        Secret::load(m, "x").unwrap();
        let e = write_new_secret(m).unwrap_err();
        assert!(e.contains("never overwritten"), "{e}");
        assert_eq!(std::fs::read_to_string(&made).unwrap(), text);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(Secret::load("/nonexistent/s", "x")
            .unwrap_err()
            .contains("cannot read it"));
    }
}
