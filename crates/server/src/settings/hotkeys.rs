//! `-o hotkeys_top=N` and `-o hotkeys_sample=1/N` (osmium's own): how
//! many hot keys `stats hotkeys` reports (0: hot keys off, no work on any
//! request) and which share of requests is sampled (see `crate::hotkeys`).

use crate::hotkeys::{DEFAULT_SAMPLE, DEFAULT_TOP};

/// The most keys `-o hotkeys_top` takes.
pub const MAX_TOP: usize = 1024;
/// The sparsest sampling `-o hotkeys_sample` takes (1 in this many).
pub const MAX_SAMPLE: u32 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotkeysSettings {
    /// Keys reported; 0 is off.
    pub top: usize,
    /// 1 request in `sample` is counted.
    pub sample: u32,
}

impl Default for HotkeysSettings {
    fn default() -> Self {
        HotkeysSettings {
            top: DEFAULT_TOP,
            sample: DEFAULT_SAMPLE,
        }
    }
}

impl HotkeysSettings {
    /// Takes `-o name=value` if it is a hot-key option (false if not).
    pub fn option(&mut self, name: &str, value: Option<&str>) -> Result<bool, String> {
        match name {
            "hotkeys_top" => {
                self.top = value
                    .and_then(|v| v.parse::<usize>().ok())
                    .filter(|&n| n <= MAX_TOP)
                    .ok_or_else(|| format!("-o hotkeys_top: a number of keys, 0 to {MAX_TOP}"))?;
            }
            "hotkeys_sample" => {
                // `1/N`, or just `N`.
                let n = value.map(|v| v.strip_prefix("1/").unwrap_or(v));
                self.sample = n
                    .and_then(|v| v.parse::<u32>().ok())
                    .filter(|n| (1..=MAX_SAMPLE).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "-o hotkeys_sample: 1/N, one request in N, N from 1 to {MAX_SAMPLE}"
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
                sample: 100
            }
        );
        assert_eq!(h.option("hotkeys_sample", Some("3")), Ok(true));
        assert_eq!(h.sample, 3);
        assert!(h.option("hotkeys_sample", Some("1/0")).is_err());
        assert!(h.option("hotkeys_sample", None).is_err());
        assert!(h.option("hotkeys_top", Some("x")).is_err());
        assert!(h.option("hotkeys_top", Some("5000")).is_err());
        assert_eq!(h.option("other", None), Ok(false));
    }
}
