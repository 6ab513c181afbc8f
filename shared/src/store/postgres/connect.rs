//! From a `postgres://` URL to a pool of connections: the URL as written
//! (host, port, database, user, `sslmode`, `sslrootcert`), TLS through
//! rustls with libpq's meaning of each `sslmode`.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::{Host, SslMode};

use crate::error::{Error, ErrorKind};

/// libpq's `sslmode` values, each with libpq's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TlsMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, certificate not verified.
    Prefer,
    /// TLS always, certificate not verified.
    Require,
    /// TLS always, certificate chain verified, host name not.
    VerifyCa,
    /// TLS always, certificate chain and host name verified.
    VerifyFull,
}

impl TlsMode {
    fn parse(value: &str) -> Option<TlsMode> {
        Some(match value {
            "disable" => TlsMode::Disable,
            // `allow` tries without TLS first; tokio-postgres has no such
            // order, so it is served as `prefer` (TLS when offered).
            "allow" | "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => return None,
        })
    }
}

/// A parsed URL: the driver's configuration, how to do TLS, and a label for
/// messages (host, port, database and user; never the password).
pub(super) struct Target {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: TlsMode,
    pub(super) root_cert: Option<String>,
    pub(super) label: String,
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidConfig, message)
}

/// Parse a `postgres://` or `postgresql://` URL. `sslmode` and
/// `sslrootcert` are read here (the driver knows neither `verify-ca`,
/// `verify-full` nor `sslrootcert`); everything else goes to the driver.
pub(super) fn parse(url: &str) -> Result<Target, Error> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid(
            "a PostgreSQL store URL starts with postgres:// or postgresql:// \
             (postgres://user:password@host:5432/database?sslmode=require)"
                .to_owned(),
        ));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut tls = TlsMode::Prefer;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| invalid(format!("the PostgreSQL URL's `{key}` is not UTF-8")))?;
        match key {
            "sslmode" => {
                tls = TlsMode::parse(&value).ok_or_else(|| {
                    invalid(format!(
                        "the PostgreSQL URL's sslmode `{value}` is not one of disable, allow, \
                         prefer, require, verify-ca, verify-full"
                    ))
                })?
            }
            "sslrootcert" => root_cert = Some(value.into_owned()),
            _ => kept.push(pair),
        }
    }
    let driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config: tokio_postgres::Config = driver_url.parse().map_err(|err| {
        // The driver's message names the option at fault, never a value.
        invalid(format!("the PostgreSQL URL is not valid: {err}"))
    })?;
    config.ssl_mode(match tls {
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
    });
    if config.get_application_name().is_none() {
        config.application_name("lambda-idempotency");
    }
    let label = label(&config);
    Ok(Target {
        config,
        tls,
        root_cert,
        label,
    })
}

/// `host:port/database as user`, for messages.
fn label(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or("(default user)");
    let database = config.get_dbname().unwrap_or(user);
    format!("{host}:{port}/{database} as {user}")
}

/// The TLS connector for `target`'s `sslmode`.
pub(super) fn tls_connector(
    target: &Target,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, Error> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match target.tls {
        // libpq encrypts without verifying under these modes.
        TlsMode::Disable | TlsMode::Prefer | TlsMode::Require => Arc::new(LibpqVerifier {
            provider: provider.clone(),
            chain: None,
        }),
        TlsMode::VerifyCa | TlsMode::VerifyFull => {
            let roots = Arc::new(roots(target.root_cert.as_deref())?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|err| {
                    invalid(format!("the PostgreSQL TLS roots are not usable: {err}"))
                })?;
            if target.tls == TlsMode::VerifyCa {
                Arc::new(LibpqVerifier {
                    provider: provider.clone(),
                    chain: Some(webpki),
                })
            } else {
                webpki
            }
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| invalid(format!("TLS for PostgreSQL: {err}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The roots certificates are verified against: the URL's `sslrootcert`
/// (PEM; RDS and Aurora need their CA bundle here), else the system's.
fn roots(root_cert: Option<&str>) -> Result<RootCertStore, Error> {
    let mut roots = RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|err| {
                    invalid(format!(
                        "the PostgreSQL URL's sslrootcert `{path}` cannot be read as PEM \
                         certificates: {err}"
                    ))
                })?;
            roots.add_parsable_certificates(certs);
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    if roots.is_empty() {
        return Err(invalid(
            "no root certificate to verify the PostgreSQL server against: give the CA \
             bundle as sslrootcert=/path/ca.pem in the URL"
                .to_owned(),
        ));
    }
    Ok(roots)
}

/// The certificate check for `sslmode=prefer` / `require` / `verify-ca`,
/// each with libpq's meaning (`verify-full` is rustls' WebPKI verifier as
/// it is). Handshake signatures are checked in every mode, with the
/// provider's algorithms (those the WebPKI verifier is built with), so the
/// session is with the holder of the certificate presented.
#[derive(Debug)]
struct LibpqVerifier {
    provider: Arc<CryptoProvider>,
    /// `verify-ca`: the chain must lead to a trusted root; the host name is
    /// not compared. `None` for `prefer` / `require`: the channel is
    /// encrypted and the certificate is taken as it is.
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for LibpqVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // WebPKI checks the name last, after the chain: a name error means
        // the chain itself was verified.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
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
    fn the_url_is_honoured_as_written_and_the_password_never_shown() {
        let target = parse(
            "postgresql://app:s3cret@db.example:6543/orders?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(target.tls, TlsMode::VerifyFull);
        assert_eq!(target.root_cert.as_deref(), Some("/tmp/ca.pem"));
        assert_eq!(target.config.get_dbname(), Some("orders"));
        assert_eq!(target.config.get_user(), Some("app"));
        assert_eq!(target.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(target.config.get_application_name(), Some("x"));
        assert_eq!(target.label, "db.example:6543/orders as app");
        assert!(!target.label.contains("s3cret"));

        let plain = parse("postgres://u@localhost/db?sslmode=disable").unwrap();
        assert_eq!(plain.config.get_ssl_mode(), SslMode::Disable);
        // Set when the store opens: the store's limit
        // (IDEMPOTENCY_STORE_TIMEOUT_MS) unless the URL sets one.
        assert_eq!(plain.config.get_connect_timeout(), None);
        let slow = parse("postgres://u@localhost/db?connect_timeout=3").unwrap();
        assert_eq!(
            slow.config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(3))
        );
        assert_eq!(
            parse("postgres://u@h/db").unwrap().tls,
            TlsMode::Prefer,
            "libpq's default"
        );
    }

    #[test]
    fn encrypt_only_takes_any_certificate_and_keeps_the_signature_algorithms() {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = LibpqVerifier {
            provider: provider.clone(),
            chain: None,
        };
        let cert = CertificateDer::from(b"not a certificate".to_vec());
        let name = ServerName::try_from("db.example").unwrap();
        assert!(verifier
            .verify_server_cert(&cert, &[], &name, &[], UnixTime::now())
            .is_ok());
        // Signatures are checked with the same algorithms as under WebPKI.
        assert_eq!(
            verifier.supported_verify_schemes(),
            provider
                .signature_verification_algorithms
                .supported_schemes()
        );
    }

    #[test]
    fn a_bad_url_is_refused_with_what_is_wrong() {
        for (url, says) in [
            ("redis://h", "postgres://"),
            (
                "postgres://u:pw@h/db?sslmode=sometimes",
                "sslmode `sometimes`",
            ),
            ("postgres://u:pw@h/db?nonsense=1", "not valid"),
        ] {
            let err = parse(url).err().expect(url);
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.to_string().contains(says), "{url}: {err}");
            assert!(!err.to_string().contains("pw"), "{url}: {err}");
        }
    }
}
