//! The server's certificate for HTTPS (`--cert`), as azurite-queue takes it, and the rustls
//! configuration built from it:
//!
//! - `--cert FILE --key FILE`: PEM files, the certificate chain (leaf first) and its private key
//!   (PKCS#8, PKCS#1 or SEC1);
//! - `--cert FILE --pwd PASS`: a PKCS#12 (PFX) archive holding the key and its chain;
//! - `--cert auto` (azq's own): a self-signed certificate for `localhost`, `127.0.0.1` and `::1`,
//!   made at first start and kept in the data directory (`DIR/__azq__/cert.pem` and `key.pem`) so
//!   that a client trusts it once; with `--inMemoryPersistence` nothing is written and a new one
//!   is made at every start (fetch it from `GET /_azq/cert.pem`).
//!
//! TLS 1.2 and 1.3, ALPN `http/1.1`, ring as the crypto provider. The TLS sessions themselves run
//! in `runtime::tls_stream`, over either backend's streams.
//!
//! For clients that must reach a server whose certificate they cannot know (`azq healthcheck`,
//! azq-loadgen's `--insecure`): `AnyCertificate`, which checks the handshake's signatures only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, SubjectPublicKeyInfoDer,
    UnixTime,
};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// Where the server's certificate comes from (`--cert`, `--key`, `--pwd`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CertificateSource {
    /// PEM files: the chain (leaf first) and the private key.
    Pem {
        /// The certificate chain (`--cert`).
        certificate: PathBuf,
        /// The private key (`--key`).
        key: PathBuf,
    },
    /// A PKCS#12 archive (`--cert FILE --pwd PASS`).
    Pfx {
        /// The archive (`--cert`).
        path: PathBuf,
        /// Its password (`--pwd`).
        password: String,
    },
    /// A self-signed certificate for the loopback names (`--cert auto`).
    Auto,
}

impl CertificateSource {
    /// Reads `--cert`, `--key` and `--pwd` as azurite-queue does: a key makes the certificate PEM,
    /// a password makes it PKCS#12; `auto` takes neither.
    pub fn from_flags(
        certificate: Option<String>,
        key: Option<String>,
        password: Option<String>,
    ) -> Result<Option<CertificateSource>, String> {
        match (certificate, key, password) {
            (None, None, None) => Ok(None),
            (None, _, _) => Err("--key and --pwd need --cert".to_string()),
            (Some(certificate), None, None) if certificate == "auto" => {
                Ok(Some(CertificateSource::Auto))
            }
            (Some(certificate), _, _) if certificate == "auto" => {
                Err("--cert auto takes neither --key nor --pwd".to_string())
            }
            (Some(_), Some(_), Some(_)) => {
                Err("--cert takes --key (PEM) or --pwd (PFX), not both".to_string())
            }
            (Some(certificate), Some(key), None) => Ok(Some(CertificateSource::Pem {
                certificate: certificate.into(),
                key: key.into(),
            })),
            (Some(path), None, Some(password)) => Ok(Some(CertificateSource::Pfx {
                path: path.into(),
                password,
            })),
            (Some(_), None, None) => Err(
                "--cert needs --key FILE (a PEM certificate), --pwd PASS (a PFX archive), \
                 or the value auto"
                    .to_string(),
            ),
        }
    }
}

/// The server's certificate, loaded or made.
pub struct ServerCertificate {
    /// The chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    key: PrivateKeyDer<'static>,
    /// Where an automatic certificate is kept; `None` for one given by the user or one that
    /// lives in memory only.
    pub kept_at: Option<PathBuf>,
}

impl ServerCertificate {
    /// Loads the certificate `source` names. `data_directory` is where `auto` keeps its files
    /// (`None`: in memory, a new certificate each start).
    pub fn load(
        source: &CertificateSource,
        data_directory: Option<&Path>,
    ) -> Result<ServerCertificate, String> {
        match source {
            CertificateSource::Pem { certificate, key } => load_pem(certificate, key),
            CertificateSource::Pfx { path, password } => load_pfx(path, password),
            CertificateSource::Auto => match data_directory {
                Some(directory) => auto_kept(directory),
                None => {
                    let (certificate_pem, key_pem) = generate_self_signed()?;
                    let mut made = from_pem_text(&certificate_pem, &key_pem)?;
                    made.kept_at = None;
                    Ok(made)
                }
            },
        }
    }

    /// The chain in PEM, as `GET /_azq/cert.pem` serves it and clients trust it.
    pub fn chain_pem(&self) -> String {
        self.chain
            .iter()
            .map(|certificate| pem("CERTIFICATE", certificate.as_ref()))
            .collect()
    }

    /// The SHA-256 fingerprint of the leaf, as `AB:CD:…`, as browsers and `openssl x509
    /// -fingerprint -sha256` show it.
    pub fn fingerprint_sha256(&self) -> String {
        let digest = Sha256::digest(self.chain[0].as_ref());
        digest
            .iter()
            .map(|byte| format!("{byte:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The rustls server configuration: TLS 1.2 and 1.3, ALPN `http/1.1`, no client
    /// certificates. An error names what rustls refused (a key that does not match, an
    /// algorithm it does not support).
    ///
    /// The chain is served as given: an X.509 v1 certificate (what `openssl x509 -req -signkey`
    /// makes, and Azurite's own test certificate) serves as well as a v3 one. rustls's
    /// `with_single_cert` would refuse it (`UnsupportedCertVersion`): its check that the key
    /// matches the certificate parses the leaf with webpki, which reads v3 only, although
    /// serving never parses the server's own certificate. So azq makes the same check with a
    /// parser that reads every version, and hands rustls the checked pair.
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let signing_key = provider
            .key_provider
            .load_private_key(self.key.clone_key())
            .map_err(|error| format!("the certificate and key do not serve: {error}"))?;
        let certified = CertifiedKey::new(self.chain.clone(), signing_key);
        check_key_matches_leaf(&certified)?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|error| format!("cannot configure TLS: {error}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// Fails unless the private key belongs to the chain's leaf certificate, the check
/// `with_single_cert` makes, for certificates of any X.509 version. A key whose public half
/// the provider cannot tell is let through, as rustls lets it through.
fn check_key_matches_leaf(certified: &CertifiedKey) -> Result<(), String> {
    let leaf = certified
        .end_entity_cert()
        .map_err(|error| format!("the certificate and key do not serve: {error}"))?;
    let Some(key_spki) = certified.key.public_key() else {
        return Ok(());
    };
    let leaf_spki = subject_public_key_info(leaf)
        .ok_or("the certificate and key do not serve: the certificate cannot be read")?;
    if key_spki.as_ref() != leaf_spki {
        return Err(
            "the certificate and key do not serve: the private key is not the certificate's"
                .to_string(),
        );
    }
    Ok(())
}

/// The DER of a certificate's SubjectPublicKeyInfo, for any X.509 version (webpki, which
/// rustls uses, reads v3 only); `None` when the certificate does not parse.
fn subject_public_key_info<'c>(certificate: &'c CertificateDer<'_>) -> Option<&'c [u8]> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    Some(parsed.tbs_certificate.subject_pki.raw)
}

/// A client's verifier that accepts any certificate; the handshake's signatures are still
/// checked with `provider`'s algorithms, so the session is encrypted, only not authenticated.
#[derive(Debug)]
pub struct AnyCertificate(pub Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    /// Checks the signature with the certificate's key. webpki reads v3 certificates only, so
    /// for another version (a v1 certificate azq serves) the key is taken out of the
    /// certificate with a parser that reads every version.
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &CertificateDer<'_>,
        signature: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, certificate, signature, algorithms).or_else(
            |error| match subject_public_key_info(certificate) {
                Some(spki) => rustls::crypto::verify_tls13_signature_with_raw_key(
                    message,
                    &SubjectPublicKeyInfoDer::from(spki),
                    signature,
                    algorithms,
                ),
                None => Err(error),
            },
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Loads a PEM chain and key.
fn load_pem(certificate: &Path, key: &Path) -> Result<ServerCertificate, String> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    let chain = certificates_from_pem(&read(certificate)?)
        .map_err(|why| format!("{}: {why}", certificate.display()))?;
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|error| format!("{}: no private key in PEM ({error})", key.display()))?;
    Ok(ServerCertificate {
        chain,
        key: key_der,
        kept_at: None,
    })
}

/// The certificates of a PEM text, leaf first; an error when there is none.
fn certificates_from_pem(text: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not a PEM certificate ({error})"))?;
    if chain.is_empty() {
        return Err("no CERTIFICATE block in PEM".to_string());
    }
    Ok(chain)
}

/// A certificate from PEM texts in memory.
fn from_pem_text(certificate_pem: &str, key_pem: &str) -> Result<ServerCertificate, String> {
    Ok(ServerCertificate {
        chain: certificates_from_pem(certificate_pem.as_bytes())?,
        key: PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|error| format!("no private key in PEM ({error})"))?,
        kept_at: None,
    })
}

/// Loads a PKCS#12 archive: its private key and that key's chain.
fn load_pfx(path: &Path, password: &str) -> Result<ServerCertificate, String> {
    let archive =
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let store = p12_keystore::KeyStore::from_pkcs12(
        &archive,
        password,
        p12_keystore::Pkcs12ImportPolicy::Strict,
    )
    .map_err(|error| {
        format!(
            "{}: cannot open the PKCS#12 archive (wrong --pwd?): {error}",
            path.display()
        )
    })?;
    let (_alias, chain) = store
        .private_key_chain()
        .ok_or_else(|| format!("{}: no private key with its certificate", path.display()))?;
    if chain.certs().is_empty() {
        return Err(format!(
            "{}: the private key has no certificate",
            path.display()
        ));
    }
    Ok(ServerCertificate {
        chain: chain
            .certs()
            .iter()
            .map(|certificate| CertificateDer::from(certificate.as_der().to_vec()))
            .collect(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(chain.key().as_der().to_vec())),
        kept_at: None,
    })
}

/// The file of an automatic certificate in the data directory.
pub const AUTO_CERTIFICATE_FILE_NAME: &str = "cert.pem";
/// The file of its private key (readable by the owner only).
pub const AUTO_KEY_FILE_NAME: &str = "key.pem";

/// The automatic certificate kept in `directory`: loaded when both files are there, else made
/// and written (key first, each through a temporary file and a rename, so that a crash never
/// leaves half a file).
fn auto_kept(directory: &Path) -> Result<ServerCertificate, String> {
    let certificate_path = directory.join(AUTO_CERTIFICATE_FILE_NAME);
    let key_path = directory.join(AUTO_KEY_FILE_NAME);
    let mut certificate = if certificate_path.is_file() && key_path.is_file() {
        load_pem(&certificate_path, &key_path)?
    } else {
        let (certificate_pem, key_pem) = generate_self_signed()?;
        std::fs::create_dir_all(directory)
            .map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
        write_file(&key_path, key_pem.as_bytes(), 0o600)?;
        write_file(&certificate_path, certificate_pem.as_bytes(), 0o644)?;
        from_pem_text(&certificate_pem, &key_pem)?
    };
    certificate.kept_at = Some(certificate_path);
    Ok(certificate)
}

/// Writes `bytes` to `path` with permissions `mode`, through a temporary file and a rename.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write;
    let temporary = path.with_extension("tmp");
    let written = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut file = options.open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    written.map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// The names an automatic certificate is valid for: what a client on this machine dials.
pub const AUTO_CERTIFICATE_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A new self-signed certificate (ECDSA P-256) for `AUTO_CERTIFICATE_NAMES`: its PEM and its
/// key's PEM. rcgen's validity runs to the year 4096, so a kept certificate never expires.
fn generate_self_signed() -> Result<(String, String), String> {
    let names: Vec<String> = AUTO_CERTIFICATE_NAMES
        .iter()
        .map(|name| name.to_string())
        .collect();
    let mut params = rcgen::CertificateParams::new(names)
        .map_err(|error| format!("cannot make a certificate: {error}"))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "azq development certificate");
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    // Python 3.13's strict verification wants the key identifiers even on a self-signed
    // certificate.
    params.use_authority_key_identifier_extension = true;
    let key = rcgen::KeyPair::generate()
        .map_err(|error| format!("cannot make a certificate key: {error}"))?;
    let certificate = params
        .self_signed(&key)
        .map_err(|error| format!("cannot sign the certificate: {error}"))?;
    Ok((certificate.pem(), key.serialize_pem()))
}

/// `der` as a PEM block labelled `label`, lines of 64 characters.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    let encoded = BASE64.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        // Base64 is ASCII.
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_table() {
        let some = |text: &str| Some(text.to_string());
        assert_eq!(CertificateSource::from_flags(None, None, None), Ok(None));
        assert_eq!(
            CertificateSource::from_flags(some("auto"), None, None),
            Ok(Some(CertificateSource::Auto))
        );
        assert_eq!(
            CertificateSource::from_flags(some("c.pem"), some("k.pem"), None),
            Ok(Some(CertificateSource::Pem {
                certificate: "c.pem".into(),
                key: "k.pem".into()
            }))
        );
        assert_eq!(
            CertificateSource::from_flags(some("c.pfx"), None, some("secret")),
            Ok(Some(CertificateSource::Pfx {
                path: "c.pfx".into(),
                password: "secret".to_string()
            }))
        );
        for refused in [
            (None, some("k.pem"), None),
            (None, None, some("secret")),
            (some("c.pem"), None, None),
            (some("c.pem"), some("k.pem"), some("secret")),
            (some("auto"), some("k.pem"), None),
            (some("auto"), None, some("secret")),
        ] {
            assert!(
                CertificateSource::from_flags(
                    refused.0.clone(),
                    refused.1.clone(),
                    refused.2.clone()
                )
                .is_err(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn an_automatic_certificate_is_kept_and_reused() {
        let directory = std::env::temp_dir().join(format!("azq-tls-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        let first = ServerCertificate::load(&CertificateSource::Auto, Some(&directory)).unwrap();
        let second = ServerCertificate::load(&CertificateSource::Auto, Some(&directory)).unwrap();
        assert_eq!(first.fingerprint_sha256(), second.fingerprint_sha256());
        assert_eq!(
            first.kept_at,
            Some(directory.join(AUTO_CERTIFICATE_FILE_NAME))
        );
        let kept = std::fs::read_to_string(directory.join(AUTO_CERTIFICATE_FILE_NAME)).unwrap();
        assert_eq!(kept, first.chain_pem());
        first.server_config().unwrap();
        // In memory: a new one every time, nothing written.
        let fresh = ServerCertificate::load(&CertificateSource::Auto, None).unwrap();
        assert_ne!(fresh.fingerprint_sha256(), first.fingerprint_sha256());
        assert_eq!(fresh.kept_at, None);
        std::fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn fingerprints_are_colon_separated_upper_hex() {
        let certificate = ServerCertificate::load(&CertificateSource::Auto, None).unwrap();
        let fingerprint = certificate.fingerprint_sha256();
        assert_eq!(fingerprint.len(), 32 * 3 - 1);
        assert!(fingerprint.split(':').all(|byte| byte.len() == 2
            && byte
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase())));
    }

    #[test]
    fn unreadable_inputs_are_refused_with_the_file_named() {
        let directory = std::env::temp_dir().join(format!("azq-tls-bad-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let junk = directory.join("junk.pem");
        std::fs::write(&junk, b"not a certificate").unwrap();
        let pem_source = CertificateSource::Pem {
            certificate: junk.clone(),
            key: junk.clone(),
        };
        let refused = ServerCertificate::load(&pem_source, None).err().unwrap();
        assert!(refused.contains("junk.pem"), "{refused}");
        let pfx_source = CertificateSource::Pfx {
            path: junk.clone(),
            password: "x".to_string(),
        };
        let refused = ServerCertificate::load(&pfx_source, None).err().unwrap();
        assert!(refused.contains("PKCS#12"), "{refused}");
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
