//! TLS for the store's connections, with libpq's `sslmode` and `sslrootcert` taken from
//! the store URL. PostgreSQL uses TLS on TCP only: a URL whose hosts are all Unix
//! sockets connects without it, whatever `sslmode` says (libpq ignores it there too).
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | – |
//! | `allow`, `prefer` (the default) | when the server offers it and the handshake succeeds | not checked |
//! | `require` | always | checked against `sslrootcert` when that file exists, else not |
//! | `verify-ca` | always | chain checked against `sslrootcert` |
//! | `verify-full` | always | chain and host name checked |
//!
//! `sslrootcert` is a PEM file of CA certificates, `system` for the bundled Mozilla
//! roots, or by default `~/.postgresql/root.crt` (as libpq). `verify-ca` and
//! `verify-full` without a usable root file are an error, never a silent downgrade.
//! `sslcert` and `sslkey` (default: `~/.postgresql/postgresql.crt` and `.key` when both
//! exist) are the client certificate a server may log the role in by.

use agentd_proto::{AgentError, ErrorKind};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(v: &str) -> Option<SslMode> {
        Some(match v {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Where the CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCerts {
    /// `sslrootcert=system`: the bundled Mozilla roots.
    System,
    File(PathBuf),
}

/// The TLS settings of a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// `sslrootcert` as given (`None`: libpq's default file, if it exists).
    pub root: Option<RootCerts>,
    /// `sslcert` and `sslkey`: this client's certificate (chain) and key, PEM (`None`:
    /// libpq's default files, when both exist).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Splits `sslmode`, `sslrootcert`, `sslcert` and `sslkey` off a `postgres://` URL's
/// query: returns the URL
/// the driver parses (with the driver's own `sslmode`: `disable`, `prefer` or
/// `require`) and the settings. Values may be percent-encoded.
pub fn split(url: &str) -> Result<(String, TlsSettings), AgentError> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let mut mode = SslMode::Prefer;
    let mut root = None;
    let (mut cert, mut key) = (None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "sslmode" => {
                let v = percent_decode(v);
                mode = SslMode::parse(&v).ok_or_else(|| {
                    AgentError::invalid_args(format!(
                        "sslmode={v} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                    ))
                })?;
            }
            "sslrootcert" => {
                let v = percent_decode(v);
                root = Some(if v == "system" {
                    RootCerts::System
                } else {
                    RootCerts::File(PathBuf::from(v))
                });
            }
            "sslcert" => cert = Some(PathBuf::from(percent_decode(v))),
            "sslkey" => key = Some(PathBuf::from(percent_decode(v))),
            _ => kept.push(pair),
        }
    }
    let driver_mode = match mode {
        SslMode::Disable => "disable",
        SslMode::Allow | SslMode::Prefer => "prefer",
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
    };
    kept.push(match driver_mode {
        "disable" => "sslmode=disable",
        "prefer" => "sslmode=prefer",
        _ => "sslmode=require",
    });
    Ok((
        format!("{base}?{}", kept.join("&")),
        TlsSettings {
            mode,
            root,
            cert,
            key,
        },
    ))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libpq's default file `name` (`~/.postgresql/<name>`).
fn default_file(name: &str) -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".postgresql").join(name))
}

/// libpq's default root certificate file.
fn default_root_file() -> Option<PathBuf> {
    default_file("root.crt")
}

/// This client's certificate chain and key: the files named, else libpq's default pair
/// when both exist; `None` for no client certificate.
fn client_identity(
    settings: &TlsSettings,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, AgentError> {
    let (cert, key) = match (&settings.cert, &settings.key) {
        (None, None) => match (
            default_file("postgresql.crt"),
            default_file("postgresql.key"),
        ) {
            (Some(c), Some(k)) if c.is_file() && k.is_file() => (c, k),
            _ => return Ok(None),
        },
        (Some(c), Some(k)) => (c.clone(), k.clone()),
        (Some(_), None) | (None, Some(_)) => {
            return Err(tls_error(
                "sslcert and sslkey go together (a client certificate and its key)".into(),
            ))
        }
    };
    let chain = CertificateDer::pem_file_iter(&cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| tls_error(format!("sslcert {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(tls_error(format!(
            "sslcert {}: no certificate in the file",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&key)
        .map_err(|e| tls_error(format!("sslkey {}: {e}", key.display())))?;
    Ok(Some((chain, key)))
}

fn tls_error(msg: String) -> AgentError {
    AgentError::new(ErrorKind::InvalidArgs, msg)
}

fn load_roots(root: &RootCerts) -> Result<RootCertStore, AgentError> {
    let mut store = RootCertStore::empty();
    match root {
        RootCerts::System => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        RootCerts::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
                store
                    .add(cert)
                    .map_err(|e| tls_error(format!("sslrootcert {}: {e}", path.display())))?;
            }
            if store.is_empty() {
                return Err(tls_error(format!(
                    "sslrootcert {}: no certificate in the file",
                    path.display()
                )));
            }
        }
    }
    Ok(store)
}

/// The client configuration for `settings`, or `None` when no connection may use TLS.
pub fn client_config(settings: &TlsSettings) -> Result<Option<ClientConfig>, AgentError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error(format!("TLS setup: {e}")))?;
    // The root file in effect: the one named, else libpq's default when it exists.
    let root = match &settings.root {
        Some(r) => Some(r.clone()),
        None => default_root_file()
            .filter(|p| p.is_file())
            .map(RootCerts::File),
    };
    let lenient = |chain| -> Arc<dyn ServerCertVerifier> {
        Arc::new(Lenient {
            chain,
            provider: provider.clone(),
        })
    };
    let verifier: Arc<dyn ServerCertVerifier> = match settings.mode {
        SslMode::Disable => return Ok(None),
        SslMode::Allow | SslMode::Prefer => lenient(None),
        SslMode::Require => match &root {
            Some(r) => lenient(Some(webpki(r, &provider)?)),
            None => lenient(None),
        },
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let Some(r) = &root else {
                return Err(tls_error(format!(
                    "sslmode={} needs the CA certificates: set sslrootcert in the store URL (a PEM file, or `system`) or put them in {}",
                    settings.mode.as_str(),
                    default_root_file().map_or_else(|| "~/.postgresql/root.crt".into(), |p| p.display().to_string())
                )));
            };
            let v = webpki(r, &provider)?;
            if settings.mode == SslMode::VerifyCa {
                lenient(Some(v))
            } else {
                v
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    Ok(Some(match client_identity(settings)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls_error(format!("sslcert/sslkey: {e}")))?,
        None => builder.with_no_client_auth(),
    }))
}

fn webpki(
    root: &RootCerts,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, AgentError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(load_roots(root)?), provider.clone())
        .build()
        .map_err(|e| tls_error(format!("TLS setup: {e}")))
}

/// A check short of `verify-full`: the chain alone, not the name (`chain`: `verify-ca`,
/// and `require` with a root file), or nothing (`None`: encrypted but not authenticated,
/// as libpq's `prefer` and `require` without a root file). The handshake's signatures
/// are always checked.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // The chain is checked before the name, so a name error means the chain held.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_settings_are_split_off_and_the_driver_gets_its_own_mode() {
        let (u, s) = split("postgres://a@h:5432/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x").unwrap();
        assert_eq!(
            u,
            "postgres://a@h:5432/db?application_name=x&sslmode=require"
        );
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root, Some(RootCerts::File("/etc/ca.pem".into())));
        let (u, s) = split("postgres://a@h/db").unwrap();
        assert_eq!(u, "postgres://a@h/db?sslmode=prefer");
        assert_eq!((s.mode, s.root), (SslMode::Prefer, None));
        let (u, s) = split("postgres://a@h/db?sslcert=%2Fc.pem&sslkey=/k.pem").unwrap();
        assert_eq!(u, "postgres://a@h/db?sslmode=prefer");
        assert_eq!(
            (s.cert, s.key),
            (Some("/c.pem".into()), Some("/k.pem".into()))
        );
        let (u, s) = split("postgres://a@h/db?sslmode=disable&sslrootcert=system").unwrap();
        assert_eq!(u, "postgres://a@h/db?sslmode=disable");
        assert_eq!(s.root, Some(RootCerts::System));
        let e = split("postgres://a@h/db?sslmode=verify").unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgs);
    }

    #[test]
    fn verifying_modes_without_roots_are_refused_not_downgraded() {
        let missing = RootCerts::File("/nonexistent/agentd-root.crt".into());
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull, SslMode::Require] {
            let e = client_config(&TlsSettings {
                mode,
                root: Some(missing.clone()),
                cert: None,
                key: None,
            })
            .unwrap_err();
            assert!(e.message.contains("sslrootcert"), "{mode:?}: {}", e.message);
        }
        assert!(client_config(&TlsSettings {
            mode: SslMode::Disable,
            root: None,
            cert: None,
            key: None,
        })
        .unwrap()
        .is_none());
    }
}
