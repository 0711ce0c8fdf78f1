//! memcached's `ssl_ciphers` (an OpenSSL cipher list) as a rustls
//! provider: the list picks TLS 1.2 suites by their OpenSSL names (`!`/`-`
//! removes; `ALL`, `DEFAULT`, `HIGH` and the like take every suite); TLS
//! 1.3 suites stay, as OpenSSL's cipher list does not touch them.

use rustls::crypto::aws_lc_rs;
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuite, SupportedCipherSuite};

/// The aws-lc-rs provider with `list` applied (none: every suite). Err:
/// memcached's message when the list picks no TLS 1.2 suite.
pub fn provider(list: Option<&str>) -> Result<CryptoProvider, String> {
    let mut p = aws_lc_rs::default_provider();
    let Some(list) = list else {
        return Ok(p);
    };
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    let tls12: Vec<SupportedCipherSuite> = p
        .cipher_suites
        .iter()
        .copied()
        .filter(|s| s.version() == &rustls::version::TLS12)
        .collect();
    for token in list.split([':', ',', ' ']).filter(|t| !t.is_empty()) {
        let (remove, name) = match token.strip_prefix(['!', '-']) {
            Some(n) => (true, n),
            None => (false, token.trim_start_matches('+')),
        };
        let matching: Vec<SupportedCipherSuite> = tls12
            .iter()
            .copied()
            .filter(|s| openssl_matches(name, s.suite()))
            .collect();
        if remove {
            chosen.retain(|s| !matching.contains(s));
        } else {
            for s in matching {
                if !chosen.contains(&s) {
                    chosen.push(s);
                }
            }
        }
    }
    if chosen.is_empty() {
        return Err(format!("Error setting the provided cipher(s): {list}"));
    }
    p.cipher_suites
        .retain(|s| s.version() != &rustls::version::TLS12 || chosen.contains(s));
    Ok(p)
}

/// Whether an OpenSSL cipher-list word names this TLS 1.2 suite.
fn openssl_matches(word: &str, suite: CipherSuite) -> bool {
    let name = match suite {
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => {
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        }
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return false,
    };
    match word {
        "ALL" | "DEFAULT" | "HIGH" | "ECDHE" | "EECDH" | "kECDHE" | "AEAD" | "TLSv1.2" => true,
        "aRSA" | "RSA" | "ECDHE-RSA" => name.contains("-RSA-"),
        "aECDSA" | "ECDSA" => name.contains("ECDSA"),
        "AESGCM" => name.contains("GCM"),
        "AES128" => name.contains("AES128"),
        "AES256" | "AES" => name.contains("AES"),
        "CHACHA20" => name.contains("CHACHA20"),
        w => w == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls12(list: &str) -> Vec<CipherSuite> {
        provider(Some(list))
            .unwrap()
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| s.suite())
            .collect()
    }

    #[test]
    fn a_list_picks_tls12_suites_and_keeps_tls13() {
        assert_eq!(
            tls12("ECDHE-RSA-AES128-GCM-SHA256"),
            [CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
        );
        let all = tls12("ALL");
        assert!(all.len() >= 6, "{all:?}");
        assert!(!tls12("ALL:!CHACHA20")
            .iter()
            .any(|s| format!("{s:?}").contains("CHACHA20")));
        let p = provider(Some("ECDHE-ECDSA-AES256-GCM-SHA384")).unwrap();
        assert!(p
            .cipher_suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS13));
        let e = provider(Some("RC4-MD5")).unwrap_err();
        assert_eq!(e, "Error setting the provided cipher(s): RC4-MD5");
        assert_eq!(
            provider(None).unwrap().cipher_suites.len(),
            aws_lc_rs::default_provider().cipher_suites.len()
        );
    }
}
