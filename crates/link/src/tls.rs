//! rustls configurations from PEM files: the server's certificate and key,
//! optionally a CA that client certificates must chain to; the agent's trust
//! anchor, optionally its own certificate.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("read certificates from {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parse certificates in {}", path.display()))?;
    if certs.is_empty() {
        return Err(anyhow!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).with_context(|| format!("read a PEM private key from {}", path.display()))
}

fn roots(ca: &Path) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c).with_context(|| format!("{}: not a usable CA certificate", ca.display()))?;
    }
    Ok(roots)
}

/// The ingest listener's TLS: `cert` (chain) and `key`; with `client_ca`,
/// every agent must present a certificate issued by it.
pub fn server_config(
    cert: &Path,
    key_path: &Path,
    client_ca: Option<&Path>,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .context("client certificate verifier")?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let cfg = builder.with_single_cert(certs(cert)?, key(key_path)?).with_context(|| {
        format!("{} and {} do not make a certificate and its key", cert.display(), key_path.display())
    })?;
    Ok(Arc::new(cfg))
}

/// The agent's TLS: trusts `ca`; presents `client` (cert, key) when given.
pub fn client_config(ca: &Path, client: Option<(&Path, &Path)>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots(ca)?);
    let cfg = match client {
        Some((cert, key_path)) => builder
            .with_client_auth_cert(certs(cert)?, key(key_path)?)
            .with_context(|| format!("{} and {}: not a certificate and its key", cert.display(), key_path.display()))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}
