//! One certificate issued as cert-manager issues it: the Certificate's spec read (`commonName`, `dnsNames`,
//! `ipAddresses`, `isCA`, `duration`, `usages`, `privateKey`), a new key pair made, and the certificate signed by
//! itself (a `selfSigned` Issuer) or by the key pair of a `ca` Issuer's Secret. No I/O: the caller reads the
//! objects and writes the Secret.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SignatureAlgorithm,
};
use serde_json::Value;
use time::OffsetDateTime;

/// cert-manager's default `duration` (90 days) when the Certificate names none.
pub const DURATION_DEFAULT: Duration = Duration::from_secs(90 * 24 * 3600);

/// Why a Certificate could not be issued: its message goes to the Certificate's Ready condition.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IssueError {
    #[error("spec.secretName: Required value")]
    SecretNameMissing,
    #[error("spec.duration: invalid value {value:?}: {reason}")]
    Duration { value: String, reason: String },
    #[error("spec.privateKey: {0}")]
    PrivateKey(String),
    #[error("spec.usages: unsupported value {0:?}")]
    Usage(String),
    #[error("spec.{field}: invalid value {value:?}: {reason}")]
    Name { field: &'static str, value: String, reason: String },
    #[error("the issuer's CA key pair cannot be read: {0}")]
    CaKeyPair(String),
    #[error("cannot sign the certificate: {0}")]
    Signing(String),
}

/// What signs a certificate.
pub enum Signer<'a> {
    /// The certificate's own new key (a `selfSigned` Issuer).
    SelfSigned,
    /// A CA's certificate and key, PEM (a `ca` Issuer's Secret's `tls.crt` and `tls.key`).
    Ca { cert_pem: &'a str, key_pem: &'a str },
}

/// An issued certificate: the Secret's `tls.crt`, `tls.key` and `ca.crt` (PEM), and its validity.
#[derive(Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
}

/// Issues the certificate `spec` asks for, signed by `signer`, valid from `now`.
pub fn issue(spec: &Value, signer: &Signer<'_>, now: SystemTime) -> Result<Issued, IssueError> {
    let algorithm = key_algorithm(spec.get("privateKey"))?;
    let key = KeyPair::generate_for(algorithm).map_err(|error| IssueError::PrivateKey(error.to_string()))?;
    let mut params = params(spec, now)?;
    let (certificate, ca_pem) = match signer {
        Signer::SelfSigned => {
            let certificate = params.self_signed(&key).map_err(signing)?;
            let pem = certificate.pem();
            (certificate, pem)
        }
        Signer::Ca { cert_pem, key_pem } => {
            let ca_key = KeyPair::from_pem(key_pem).map_err(|error| IssueError::CaKeyPair(error.to_string()))?;
            let issuer =
                Issuer::from_ca_cert_pem(cert_pem, ca_key).map_err(|error| IssueError::CaKeyPair(error.to_string()))?;
            params.use_authority_key_identifier_extension = true;
            (params.signed_by(&key, &issuer).map_err(signing)?, (*cert_pem).to_owned())
        }
    };
    Ok(Issued {
        cert_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
        ca_pem,
        not_before: params.not_before,
        not_after: params.not_after,
    })
}

fn signing(error: rcgen::Error) -> IssueError {
    IssueError::Signing(error.to_string())
}

/// The certificate's fields from the spec: subject, names, CA or not, usages, validity.
fn params(spec: &Value, now: SystemTime) -> Result<CertificateParams, IssueError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    if let Some(common_name) = spec.get("commonName").and_then(Value::as_str) {
        params.distinguished_name.push(DnType::CommonName, common_name);
    }
    params.subject_alt_names = subject_alt_names(spec)?;
    let is_ca = spec.get("isCA").and_then(Value::as_bool).unwrap_or(false);
    if is_ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    let (key_usages, extended) = usages(spec.get("usages"), is_ca)?;
    params.key_usages = key_usages;
    params.extended_key_usages = extended;
    let since_epoch = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let not_before = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(since_epoch.as_secs() as i64);
    params.not_before = not_before;
    params.not_after = not_before + time::Duration::seconds(duration(spec)?.as_secs() as i64);
    Ok(params)
}

/// `spec.duration` as Go writes durations (`2160h`, `1h30m`), or cert-manager's default.
pub fn duration(spec: &Value) -> Result<Duration, IssueError> {
    match spec.get("duration").and_then(Value::as_str) {
        None => Ok(DURATION_DEFAULT),
        Some(value) => humantime::parse_duration(value)
            .map_err(|error| IssueError::Duration { value: value.to_owned(), reason: error.to_string() }),
    }
}

/// `dnsNames`, `ipAddresses` and `uris` as subject alternative names.
fn subject_alt_names(spec: &Value) -> Result<Vec<SanType>, IssueError> {
    let strings = |field: &str| -> Vec<String> {
        let values = spec.get(field).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        values.iter().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let invalid =
        |field: &'static str, value: &str, reason: String| IssueError::Name { field, value: value.to_owned(), reason };
    let mut names = Vec::new();
    for name in strings("dnsNames") {
        let dns =
            name.clone().try_into().map_err(|error: rcgen::Error| invalid("dnsNames", &name, error.to_string()))?;
        names.push(SanType::DnsName(dns));
    }
    for address in strings("ipAddresses") {
        let ip = address
            .parse()
            .map_err(|error: std::net::AddrParseError| invalid("ipAddresses", &address, error.to_string()))?;
        names.push(SanType::IpAddress(ip));
    }
    for uri in strings("uris") {
        let value = uri.clone().try_into().map_err(|error: rcgen::Error| invalid("uris", &uri, error.to_string()))?;
        names.push(SanType::URI(value));
    }
    Ok(names)
}

/// cert-manager's key usages by name (`spec.usages`), default `digital signature` and `key encipherment`; a CA
/// also gets `cert sign` (as cert-manager adds it).
fn usages(
    usages: Option<&Value>,
    is_ca: bool,
) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), IssueError> {
    let names: Vec<&str> = match usages.and_then(Value::as_array) {
        Some(values) => values.iter().filter_map(Value::as_str).collect(),
        None => vec!["digital signature", "key encipherment"],
    };
    let mut key = Vec::new();
    let mut extended = Vec::new();
    for name in names {
        match name {
            "digital signature" => key.push(KeyUsagePurpose::DigitalSignature),
            "content commitment" => key.push(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => key.push(KeyUsagePurpose::KeyEncipherment),
            "data encipherment" => key.push(KeyUsagePurpose::DataEncipherment),
            "key agreement" => key.push(KeyUsagePurpose::KeyAgreement),
            "cert sign" => key.push(KeyUsagePurpose::KeyCertSign),
            "crl sign" => key.push(KeyUsagePurpose::CrlSign),
            "encipher only" => key.push(KeyUsagePurpose::EncipherOnly),
            "decipher only" => key.push(KeyUsagePurpose::DecipherOnly),
            "any" => extended.push(ExtendedKeyUsagePurpose::Any),
            "server auth" => extended.push(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => extended.push(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => extended.push(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" => extended.push(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => extended.push(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => extended.push(ExtendedKeyUsagePurpose::OcspSigning),
            other => return Err(IssueError::Usage(other.to_owned())),
        }
    }
    if is_ca && !key.contains(&KeyUsagePurpose::KeyCertSign) {
        key.push(KeyUsagePurpose::KeyCertSign);
    }
    Ok((key, extended))
}

/// The key algorithm `spec.privateKey` asks for: ECDSA (256 or 384 bits) or Ed25519. RSA, cert-manager's default,
/// cannot be generated here (ring makes no RSA keys): a Certificate that names it is refused, one that names no
/// algorithm gets ECDSA P-256.
fn key_algorithm(private_key: Option<&Value>) -> Result<&'static SignatureAlgorithm, IssueError> {
    let algorithm = private_key.and_then(|key| key.get("algorithm")).and_then(Value::as_str).unwrap_or("ECDSA");
    let size = private_key.and_then(|key| key.get("size")).and_then(Value::as_i64);
    match (algorithm, size) {
        ("ECDSA", None | Some(256)) => Ok(&rcgen::PKCS_ECDSA_P256_SHA256),
        ("ECDSA", Some(384)) => Ok(&rcgen::PKCS_ECDSA_P384_SHA384),
        ("ECDSA", Some(size)) => {
            Err(IssueError::PrivateKey(format!("size {size} is not served for ECDSA keys: 256 or 384")))
        }
        ("Ed25519", _) => Ok(&rcgen::PKCS_ED25519),
        ("RSA", _) => Err(IssueError::PrivateKey(
            "algorithm RSA is not served by the twin's cert-manager: ECDSA or Ed25519".to_owned(),
        )),
        (other, _) => Err(IssueError::PrivateKey(format!("unsupported algorithm {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_ca_signs_a_leaf_whose_names_and_validity_are_the_specs() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let ca_spec = json!({"isCA": true, "commonName": "gpuclaim-ca", "secretName": "ca", "duration": "87600h",
            "privateKey": {"algorithm": "ECDSA", "size": 256}});
        let ca = issue(&ca_spec, &Signer::SelfSigned, now).unwrap();
        assert_eq!(ca.cert_pem, ca.ca_pem, "a self-signed certificate is its own CA");
        assert_eq!(ca.not_after - ca.not_before, time::Duration::hours(87_600));
        let leaf_spec = json!({"secretName": "leaf", "duration": "2160h", "dnsNames": ["svc.ns.svc"],
            "usages": ["server auth", "digital signature"]});
        let signer = Signer::Ca { cert_pem: &ca.cert_pem, key_pem: &ca.key_pem };
        let leaf = issue(&leaf_spec, &signer, now).unwrap();
        assert_eq!(leaf.ca_pem, ca.cert_pem);
        assert_ne!(leaf.cert_pem, ca.cert_pem);
        assert_eq!(leaf.not_after - leaf.not_before, time::Duration::hours(2160));
    }

    #[test]
    fn what_cannot_be_issued_is_named() {
        let now = SystemTime::UNIX_EPOCH;
        let rsa = json!({"secretName": "s", "privateKey": {"algorithm": "RSA"}});
        assert_eq!(
            issue(&rsa, &Signer::SelfSigned, now).unwrap_err().to_string(),
            "spec.privateKey: algorithm RSA is not served by the twin's cert-manager: ECDSA or Ed25519"
        );
        let usage = json!({"secretName": "s", "usages": ["teleport"]});
        assert_eq!(
            issue(&usage, &Signer::SelfSigned, now).unwrap_err().to_string(),
            "spec.usages: unsupported value \"teleport\""
        );
        let duration = json!({"secretName": "s", "duration": "soon"});
        assert!(matches!(issue(&duration, &Signer::SelfSigned, now), Err(IssueError::Duration { .. })));
        let signer = Signer::Ca { cert_pem: "not a certificate", key_pem: "not a key" };
        assert!(matches!(issue(&json!({}), &signer, now), Err(IssueError::CaKeyPair(_))));
    }
}
