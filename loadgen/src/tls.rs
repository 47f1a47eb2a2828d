//! HTTPS endpoints: the rustls client configuration every connection of a run shares, built
//! once at start-up. The server's certificate is checked against `--ca FILE` (PEM, e.g. azq's
//! `DIR/__azq__/cert.pem` of `--cert auto`), else the system's trusted roots; `--insecure`
//! checks nothing but the handshake's signatures (a test server whose certificate is at hand
//! nowhere). The sessions run on `azq::runtime::tls_stream`, the server's own code.

use std::path::Path;
use std::sync::Arc;

use azq::tls::AnyCertificate;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// How a run checks the server's certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsArguments {
    /// `--ca FILE`: the certificates to trust, in PEM.
    pub ca: Option<String>,
    /// `--insecure`: trust any certificate.
    pub insecure: bool,
}

/// What every HTTPS connection of a run needs: the configuration and the name to verify.
#[derive(Clone, Debug)]
pub struct TlsClient {
    /// Shared by every connection (TLS 1.2 and 1.3, ALPN http/1.1, session resumption).
    pub config: Arc<ClientConfig>,
    /// The endpoint's host, which the certificate must name.
    pub server_name: ServerName<'static>,
}

impl TlsClient {
    /// The client for an endpoint on `host`, verifying as `arguments` say.
    pub fn new(host: &str, arguments: &TlsArguments) -> Result<TlsClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|error| format!("cannot configure TLS: {error}"))?;
        let mut config = if arguments.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(arguments.ca.as_deref())?)
                .with_no_client_auth()
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let server_name = ServerName::try_from(host.to_string())
            .map_err(|_| format!("{host} is not a name a certificate can hold"))?;
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
        })
    }
}

/// The roots to verify against: `ca`'s certificates, else the system's.
fn roots(ca: Option<&str>) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    let certificates: Vec<CertificateDer<'static>> = match ca {
        Some(path) => CertificateDer::pem_file_iter(Path::new(path))
            .and_then(|certificates| certificates.collect())
            .map_err(|error| format!("--ca {path}: {error}"))?,
        None => rustls_native_certs::load_native_certs().certs,
    };
    let (added, _ignored) = roots.add_parsable_certificates(certificates);
    if added == 0 {
        return Err(match ca {
            Some(path) => format!("--ca {path}: no certificate in it"),
            None => "no trusted root certificates on this system: pass --ca FILE or --insecure"
                .to_string(),
        });
    }
    Ok(roots)
}
