//! TLS to PostgreSQL (`sslmode=`, `sslrootcert=` in the fleet URL), with rustls and its `ring`
//! provider, as libpq reads the same parameters:
//!
//! * `disable`: no TLS;
//! * `prefer` (the default, as libpq's): TLS when the server offers it, else plain; the
//!   certificate is not verified;
//! * `require`: TLS or no connection; the certificate is not verified, unless `sslrootcert=`
//!   names a file (then as `verify-ca`, as libpq does);
//! * `verify-ca`: TLS, the certificate chain verified against the roots (not the host name);
//! * `verify-full`: TLS, the chain and the host name verified.
//!
//! The roots are the PEM file `sslrootcert=FILE`, else (or with `sslrootcert=system`)
//! Mozilla's, compiled in (`webpki-roots`). Channel binding (SCRAM-SHA-256-PLUS) is not
//! offered: the password exchange is SCRAM-SHA-256 inside the TLS session.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The URL's `sslmode=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// `disable`: plain connections only.
    Disable,
    /// `prefer`: TLS when the server offers it (not verified), else plain.
    #[default]
    Prefer,
    /// `require`: TLS, not verified (verified as `verify-ca` when `sslrootcert=` names a file).
    Require,
    /// `verify-ca`: TLS, the chain verified, not the host name.
    VerifyCa,
    /// `verify-full`: TLS, the chain and the host name verified.
    VerifyFull,
}

impl SslMode {
    /// Parses the URL's value, as libpq spells it.
    pub fn parse(v: &str) -> Option<SslMode> {
        Some(match v {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The name as written in the URL.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What the `postgres` crate is told: whether to ask for TLS, and whether to insist.
    pub(super) fn postgres(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => postgres::config::SslMode::Require,
        }
    }
}

/// How a server certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// Makes the TLS connector of `sslmode`/`sslrootcert` (`root`: a PEM file, or `None` for
/// Mozilla's roots). Errors name the file and what was wrong with it.
pub(super) fn connector(mode: SslMode, root: Option<&Path>) -> Result<MakeRustls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match mode {
        SslMode::Disable | SslMode::Prefer => Check::Nothing,
        SslMode::Require if root.is_none() => Check::Nothing,
        SslMode::Require | SslMode::VerifyCa => Check::Chain,
        SslMode::VerifyFull => Check::ChainAndName,
    };
    let verifier: Arc<dyn ServerCertVerifier> = if check == Check::Nothing {
        Arc::new(Unverified(provider.clone()))
    } else {
        let roots = Arc::new(roots(root)?);
        let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("TLS roots: {e}"))?;
        Arc::new(Verified { webpki, name: check == Check::ChainAndName })
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustls { config: Arc::new(config), mode, root: root.map(Path::to_path_buf) })
}

/// The roots: the certificates of PEM file `root`, else Mozilla's.
fn roots(root: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let Some(path) = root else {
        return Ok(rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() });
    };
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("sslrootcert={shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("sslrootcert={shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("sslrootcert={shown}: expected PEM certificates, found none"));
    }
    let mut store = rustls::RootCertStore::empty();
    for c in certs {
        store.add(c).map_err(|e| format!("sslrootcert={shown}: a certificate rustls refuses: {e}"))?;
    }
    Ok(store)
}

/// `verify-ca` and `verify-full`: webpki's verification of the chain against the roots; for
/// `verify-ca`, a name mismatch alone is accepted (webpki checks the name after the chain, so
/// a name error means the chain was good).
#[derive(Debug)]
struct Verified {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    name: bool,
}

impl ServerCertVerifier for Verified {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.name => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` and `require` without roots: the session is encrypted, the certificate is not
/// checked (libpq's behaviour; it protects against a passive listener only). The handshake's
/// signatures are still verified (the server holds the key of the certificate it sent).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
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
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The `postgres` crate's TLS hook over rustls: one per store, cloned per connection.
#[derive(Clone)]
pub(super) struct MakeRustls {
    config: Arc<rustls::ClientConfig>,
    /// For messages.
    pub(super) mode: SslMode,
    pub(super) root: Option<PathBuf>,
}

impl MakeTlsConnect<postgres::Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, Self::Error> {
        let name = ServerName::try_from(domain.to_string())?;
        Ok(RustlsConnect { config: self.config.clone(), name })
    }
}

/// One connection's handshake.
pub(super) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnect<postgres::Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: postgres::Socket) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move { connector.connect(self.name, stream).await.map(RustlsStream) })
    }
}

/// An encrypted connection.
pub(super) struct RustlsStream(tokio_rustls::client::TlsStream<postgres::Socket>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
