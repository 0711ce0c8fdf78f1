//! `-o hotkeys_top=N` and `-o hotkeys_sample=adaptive|1/N` (osmium's
//! own): how many hot keys `stats hotkeys` reports (0: hot keys off, no
//! work on any request) and which requests are counted (see
//! `crate::hotkeys`): adaptive by default, or a fixed 1 in N.

use crate::hotkeys::{Sampling, DEFAULT_TOP, MAX_INTERVAL};

/// The most keys `-o hotkeys_top` takes.
pub(crate) const MAX_TOP: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HotkeysSettings {
    /// Keys reported; 0 is off.
    pub top: usize,
    /// Which requests are counted.
    pub sample: Sampling,
}

impl Default for HotkeysSettings {
    fn default() -> Self {
        HotkeysSettings {
            top: DEFAULT_TOP,
            sample: Sampling::default(),
        }
    }
}

impl HotkeysSettings {
    /// Takes `-o name=value` if it is a hot-key option (false if not).
    pub(crate) fn option(&mut self, name: &str, value: Option<&str>) -> Result<bool, String> {
        match name {
            "hotkeys_top" => {
                self.top = value
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|&n| n <= MAX_TOP)
                    .ok_or_else(|| format!("-o hotkeys_top: a number of keys, 0 to {MAX_TOP}"))?;
            }
            "hotkeys_sample" => {
                // `adaptive`, `1/N`, or just `N`.
                if value == Some("adaptive") {
                    self.sample = Sampling::default();
                    return Ok(true);
                }
                let n = value.map(|v| v.strip_prefix("1/").unwrap_or(v));
                self.sample = n
                    .and_then(|v| v.parse::<u32>().ok())
                    .filter(|n| (1..=MAX_INTERVAL).contains(n))
                    .map(Sampling::Fixed)
                    .ok_or_else(|| {
                        format!(
                            "-o hotkeys_sample: adaptive, or 1/N (one request in N, N from 1 to {MAX_INTERVAL})"
                        )
                    })?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_options() {
        let mut h = HotkeysSettings::default();
        assert_eq!(h.option("hotkeys_top", Some("0")), Ok(true));
        assert_eq!(h.option("hotkeys_sample", Some("1/100")), Ok(true));
        assert_eq!(
            h,
            HotkeysSettings {
                top: 0,
                sample: Sampling::Fixed(100)
            }
        );
        assert_eq!(h.option("hotkeys_sample", Some("3")), Ok(true));
        assert_eq!(h.sample, Sampling::Fixed(3));
        assert_eq!(h.option("hotkeys_sample", Some("adaptive")), Ok(true));
        assert_eq!(h.sample, Sampling::default());
        assert_eq!(HotkeysSettings::default().sample, Sampling::default());
        assert!(h.option("hotkeys_sample", Some("1/2000000")).is_err());
        assert!(h.option("hotkeys_sample", Some("Adaptive")).is_err());
        assert!(h.option("hotkeys_sample", Some("1/0")).is_err());
        assert!(h.option("hotkeys_sample", None).is_err());
        assert!(h.option("hotkeys_top", Some("x")).is_err());
        assert!(h.option("hotkeys_top", Some("5000")).is_err());
        assert_eq!(h.option("other", None), Ok(false));
    }
}
