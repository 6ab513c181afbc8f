//! A TLS-terminating proxy in front of DynamoDB Local, inside the bench
//! process, so the cold starts of `bench cold-tls` pay a real TLS handshake
//! as a deployed function pays one with DynamoDB, and the handshake of each
//! connection is timed on the same clock as the rest of the run.
//!
//! Written here rather than run as stunnel: stunnel logs no handshake
//! timings, and a proxy in this process hands the timings over without a
//! log to parse. It is rustls (aws-lc) with its defaults, as the SDK's own
//! client; each connection is a TLS session with the client and a plain TCP
//! connection to DynamoDB Local, opened while the handshake runs, with the
//! bytes copied both ways.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::Result;

/// One client connection as the proxy saw it.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    /// When the TCP connection was accepted.
    pub accepted: Instant,
    /// How long from then until the client's first bytes (its ClientHello)
    /// arrived: what the client does between connecting and speaking TLS
    /// (building its TLS configuration, loading its roots, when it does
    /// that at its first connection).
    pub before_hello: Duration,
    /// How long from the ClientHello until the handshake completed (the
    /// client's `Finished` received), or the reason it failed.
    pub handshake: std::result::Result<Duration, String>,
}

/// The proxy: its port on 127.0.0.1, and the connections it took so far.
pub(crate) struct TlsProxy {
    /// The port it listens on, on 127.0.0.1.
    pub port: u16,
    connections: Arc<Mutex<Vec<Connection>>>,
}

impl TlsProxy {
    /// Listen on a free port of 127.0.0.1 with the certificate chain
    /// `cert` (PEM, leaf first) and its key `key`, forwarding each
    /// connection to `upstream` (`host:port`, plain TCP).
    pub(crate) async fn start(cert: &Path, key: &Path, upstream: String) -> Result<TlsProxy> {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| format!("{}: {e}", cert.display()))?
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| format!("{}: {e}", cert.display()))?;
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{}: {e}", key.display()))?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the proxy's certificate: {e}"))?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("TLS proxy: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let connections = Arc::new(Mutex::new(Vec::new()));
        let seen = connections.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let accepted = Instant::now();
                let _ = client.set_nodelay(true);
                let (acceptor, upstream, seen) = (acceptor.clone(), upstream.clone(), seen.clone());
                tokio::spawn(async move {
                    let upstream = TcpStream::connect(&upstream);
                    let handshake = async {
                        // Wait for the first byte itself: a fresh socket
                        // may report itself readable before any arrived.
                        let _ = client.peek(&mut [0u8; 1]).await;
                        let hello = Instant::now();
                        (hello, acceptor.accept(client).await)
                    };
                    let ((hello, tls), server) = tokio::join!(handshake, upstream);
                    let handshake = tls
                        .as_ref()
                        .map(|_| hello.elapsed())
                        .map_err(|e| e.to_string());
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(Connection {
                            accepted,
                            before_hello: hello.saturating_duration_since(accepted),
                            handshake,
                        });
                    }
                    if let (Ok(mut tls), Ok(mut server)) = (tls, server) {
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                    }
                });
            }
        });
        Ok(TlsProxy { port, connections })
    }

    /// The connections taken since the last call, oldest first.
    pub(crate) fn take(&self) -> Vec<Connection> {
        self.connections
            .lock()
            .map(|mut seen| std::mem::take(&mut *seen))
            .unwrap_or_default()
    }
}
