//! The webhooks' self-managed CA and serving certificate.
//!
//! The CA (ECDSA P-256, ten years) is kept in a Secret of the controller's namespace
//! (`antrea-mc-webhook-ca`) and shared by every instance and restart, so that a rollout does not
//! change what the API server trusts. The serving certificate
//! is issued by it at every start (one year) and re-issued in the running process when fewer
//! than 90 days are left. The CA is published in ConfigMap `antrea-mc-ca` and in the `caBundle`
//! of the webhook configurations labelled for this controller.

use std::{
    sync::{Arc, RwLock},
    time::Duration,
};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::{
    crypto::ring::sign::any_supported_type,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use time::OffsetDateTime;

const CA_LIFETIME: time::Duration = time::Duration::days(3650);
const CERT_LIFETIME: time::Duration = time::Duration::days(365);
/// A serving certificate with less than this left is re-issued.
pub const RENEW_BEFORE: time::Duration = time::Duration::days(90);

/// The CA, loaded from or saved to the certificate directory.
pub struct Authority {
    params: CertificateParams,
    key: KeyPair,
    pub pem: String,
    /// End of validity, Unix seconds.
    pub not_after: i64,
}

fn ca_params(namespace: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("strait-mc-ca@{namespace}"));
    dn.push(DnType::OrganizationName, "Strait");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p
}

impl Authority {
    /// A new CA.
    pub fn generate(namespace: &str) -> anyhow::Result<Self> {
        let now = OffsetDateTime::now_utc();
        let key = KeyPair::generate().context("generating the CA key")?;
        let mut params = ca_params(namespace);
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + CA_LIFETIME;
        let cert = params.self_signed(&key).context("signing the CA")?;
        Ok(Self {
            params: ca_params(namespace),
            key,
            pem: cert.pem(),
            not_after: params.not_after.unix_timestamp(),
        })
    }

    /// The CA kept earlier (its certificate, key and end of validity as written by
    /// `generate`); None when it is unreadable or has less than a year left.
    pub fn load(namespace: &str, cert_pem: &str, key_pem: &str, not_after: i64) -> Option<Self> {
        let left = OffsetDateTime::from_unix_timestamp(not_after).ok()? - OffsetDateTime::now_utc();
        if left < time::Duration::days(365) {
            return None;
        }
        Some(Self {
            params: ca_params(namespace),
            key: KeyPair::from_pem(key_pem).ok()?,
            pem: cert_pem.to_owned(),
            not_after,
        })
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A serving certificate for `hosts` (DNS names or IP addresses).
    pub fn issue(&self, hosts: &[String]) -> anyhow::Result<Serving> {
        let now = OffsetDateTime::now_utc();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            hosts.first().cloned().unwrap_or_default(),
        );
        p.distinguished_name = dn;
        p.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) if dns_name(h) => Ok(SanType::DnsName(h.clone().try_into()?)),
                Err(_) => Err(rcgen::Error::InvalidAsn1String(
                    rcgen::InvalidAsn1String::Ia5String(h.clone()),
                )),
            })
            .collect::<Result<_, rcgen::Error>>()
            .context("a webhook host is neither an IP address nor a DNS name")?;
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.not_before = now - time::Duration::hours(1);
        p.not_after = now + CERT_LIFETIME;
        let key = KeyPair::generate().context("generating the serving key")?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = p
            .signed_by(&key, &issuer)
            .context("signing the serving certificate")?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signer = any_supported_type(&der).context("loading the serving key")?;
        Ok(Serving {
            key: Arc::new(CertifiedKey::new(vec![cert.der().clone()], signer)),
            not_after: p.not_after,
            pem: cert.pem(),
        })
    }
}

fn dns_name(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

pub struct Serving {
    pub key: Arc<CertifiedKey>,
    pub not_after: OffsetDateTime,
    pub pem: String,
}

/// The serving certificate, replaceable while the server runs.
#[derive(Debug)]
pub struct Resolver(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().expect("certificate").clone())
    }
}

impl Resolver {
    pub fn new(first: &Serving) -> Arc<Self> {
        Arc::new(Self(RwLock::new(first.key.clone())))
    }

    pub fn replace(&self, next: &Serving) {
        *self.0.write().expect("certificate") = next.key.clone();
    }
}

pub fn server_config(resolver: Arc<Resolver>) -> anyhow::Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS versions")?
    .with_no_client_auth()
    .with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Re-issues the serving certificate when it nears its end; checks twice a day.
pub async fn renew(
    authority: Arc<Authority>,
    hosts: Vec<String>,
    resolver: Arc<Resolver>,
    mut not_after: OffsetDateTime,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(12 * 3600)).await;
        if not_after - OffsetDateTime::now_utc() > RENEW_BEFORE {
            continue;
        }
        match authority.issue(&hosts) {
            Ok(next) => {
                resolver.replace(&next);
                not_after = next.not_after;
                tracing::info!("renewed the webhook serving certificate");
            }
            Err(e) => tracing::warn!(error = %e, "renewing the webhook serving certificate failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_reloads_and_issues_for_names_and_addresses() {
        let a = Authority::generate("ns").unwrap();
        let b = Authority::load("ns", &a.pem, &a.key_pem(), a.not_after).expect("reloads");
        assert_eq!(a.pem, b.pem);
        assert!(Authority::load("ns", &a.pem, "not a key", a.not_after).is_none());
        let soon = OffsetDateTime::now_utc().unix_timestamp() + 100 * 86400;
        assert!(
            Authority::load("ns", &a.pem, &a.key_pem(), soon).is_none(),
            "renewed a year ahead"
        );
        let s = b
            .issue(&["svc.ns.svc".into(), "198.18.0.1".into()])
            .unwrap();
        assert!(s.not_after - OffsetDateTime::now_utc() > RENEW_BEFORE);
        assert!(b.issue(&["not a name!".into()]).is_err());
    }
}
