//! The cluster's certificates and keys, generated in Rust with rcgen: a CA,
//! the API server's serving certificate, client certificates for the admin,
//! the node and the API server's calls to the kubelet, serving certificates
//! for the kubelet and the components with a health endpoint, OLM v1's
//! serving certificates (catalogd, operator-controller, the registry: what
//! cert-manager issues for its release manifest) and the service-account
//! signing key pair. Also the kubeconfig files that use them.
//!
//! It only writes files into the directory it is given.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::layout::REGISTRY_NAME;
use crate::olm_v1_names as olm_v1;

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("generating {what}: {source}")]
    Generate { what: String, source: rcgen::Error },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("encoding the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: serde_yaml::Error,
    },
}

/// Who a certificate is for; `file` names its `<file>.crt`/`<file>.key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub file: &'static str,
    pub common_name: String,
    pub organization: Option<&'static str>,
    pub usage: Usage,
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Client,
    Server,
}

/// What a cluster's certificates must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkiSubjects {
    pub node_name: String,
    pub node_ip: Ipv4Addr,
    pub api_service_ip: Ipv4Addr,
}

impl PkiSubjects {
    /// Every certificate the cluster needs, besides the CA.
    pub fn identities(&self) -> Vec<Identity> {
        let node_ip = IpAddr::V4(self.node_ip);
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        vec![
            Identity {
                file: "apiserver",
                common_name: "kube-apiserver".into(),
                organization: None,
                usage: Usage::Server,
                dns_names: [
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                    "localhost",
                ]
                .map(String::from)
                .to_vec(),
                ips: vec![node_ip, loopback, IpAddr::V4(self.api_service_ip)],
            },
            Identity {
                file: "admin",
                common_name: "upgrade-gate-admin".into(),
                organization: Some("system:masters"),
                usage: Usage::Client,
                dns_names: vec![],
                ips: vec![],
            },
            Identity {
                file: "apiserver-kubelet-client",
                common_name: "kube-apiserver-kubelet-client".into(),
                organization: Some("system:masters"),
                usage: Usage::Client,
                dns_names: vec![],
                ips: vec![],
            },
            Identity {
                file: "node",
                common_name: format!("system:node:{}", self.node_name),
                organization: Some("system:nodes"),
                usage: Usage::Client,
                dns_names: vec![],
                ips: vec![],
            },
            Identity {
                file: "kubelet-serving",
                common_name: self.node_name.clone(),
                organization: None,
                usage: Usage::Server,
                dns_names: vec![self.node_name.clone()],
                ips: vec![node_ip],
            },
            Identity {
                file: "components-serving",
                common_name: "upgrade-gate-components".into(),
                organization: None,
                usage: Usage::Server,
                dns_names: vec!["localhost".into()],
                ips: vec![node_ip, loopback],
            },
            // The names cert-manager's Certificates give them in OLM v1's
            // release manifest (`catalogd-service-cert`, `olmv1-cert`).
            Identity {
                file: olm_v1::CATALOGD_CERT,
                common_name: olm_v1::service_dns_names(olm_v1::CATALOGD_SERVICE)[0].clone(),
                organization: None,
                usage: Usage::Server,
                dns_names: std::iter::once("localhost".to_owned())
                    .chain(olm_v1::service_dns_names(olm_v1::CATALOGD_SERVICE))
                    .collect(),
                ips: vec![],
            },
            Identity {
                file: olm_v1::OPERATOR_CONTROLLER_CERT,
                common_name: olm_v1::service_dns_names(olm_v1::OPERATOR_CONTROLLER_SERVICE)[0]
                    .clone(),
                organization: None,
                usage: Usage::Server,
                dns_names: olm_v1::service_dns_names(olm_v1::OPERATOR_CONTROLLER_SERVICE),
                ips: vec![],
            },
            // Pods pull by name, the host pushes to the node IP.
            Identity {
                file: olm_v1::REGISTRY_CERT,
                common_name: REGISTRY_NAME.into(),
                organization: None,
                usage: Usage::Server,
                dns_names: vec![REGISTRY_NAME.into()],
                ips: vec![node_ip],
            },
        ]
    }
}

/// Paths of the generated files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn cert(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{file}.crt"))
    }

    pub fn key(&self, file: &str) -> PathBuf {
        self.dir.join(format!("{file}.key"))
    }

    pub fn ca(&self) -> PathBuf {
        self.cert("ca")
    }

    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }

    pub fn service_account_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// Generates the CA, every identity and the service-account key pair.
    pub fn generate(dir: &Path, subjects: &PkiSubjects) -> Result<Self, PkiError> {
        let pki = Self {
            dir: dir.to_path_buf(),
        };
        let ca_key = new_key("the CA key")?;
        let mut ca_params = base_params("upgrade-gate-ca", None);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|source| PkiError::Generate {
                what: "the CA".into(),
                source,
            })?;
        write(&pki.ca(), ca_cert.pem().as_bytes(), 0o644)?;
        write(&pki.key("ca"), ca_key.serialize_pem().as_bytes(), 0o600)?;
        let issuer = Issuer::new(ca_params, ca_key);

        for identity in subjects.identities() {
            let key = new_key(identity.file)?;
            let cert = identity_params(&identity)
                .signed_by(&key, &issuer)
                .map_err(|source| PkiError::Generate {
                    what: identity.file.into(),
                    source,
                })?;
            write(&pki.cert(identity.file), cert.pem().as_bytes(), 0o644)?;
            write(
                &pki.key(identity.file),
                key.serialize_pem().as_bytes(),
                0o600,
            )?;
        }

        let sa_key = new_key("the service-account key")?;
        write(
            &pki.service_account_key(),
            sa_key.serialize_pem().as_bytes(),
            0o600,
        )?;
        write(
            &pki.service_account_pub(),
            sa_key.public_key_pem().as_bytes(),
            0o644,
        )?;
        Ok(pki)
    }

    /// Writes a kubeconfig for `identity` (a file name of [`PkiSubjects::identities`]).
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        server: &str,
        identity: &str,
    ) -> Result<(), PkiError> {
        let user = AuthInfo {
            client_certificate: Some(self.cert(identity).display().to_string()),
            client_key: Some(self.key(identity).display().to_string()),
            ..AuthInfo::default()
        };
        let cluster = Cluster {
            server: Some(server.into()),
            certificate_authority: Some(self.ca().display().to_string()),
            ..Cluster::default()
        };
        write_kubeconfig(path, cluster, identity, user)
    }
}

/// Writes a single-context kubeconfig for `user` against `cluster` (its
/// server and CA, as a path or inline data).
pub fn write_kubeconfig(
    path: &Path,
    cluster: Cluster,
    user_name: &str,
    user: AuthInfo,
) -> Result<(), PkiError> {
    let config = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "upgrade-gate".into(),
            cluster: Some(cluster),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user_name.into(),
            auth_info: Some(user),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: user_name.into(),
            context: Some(Context {
                cluster: "upgrade-gate".into(),
                user: Some(user_name.into()),
                ..Context::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(user_name.into()),
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        ..Kubeconfig::default()
    };
    let text = serde_yaml::to_string(&config).map_err(|source| PkiError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })?;
    write(path, text.as_bytes(), 0o600)
}

fn new_key(what: &str) -> Result<KeyPair, PkiError> {
    KeyPair::generate().map_err(|source| PkiError::Generate {
        what: what.into(),
        source,
    })
}

fn base_params(common_name: &str, organization: Option<&str>) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    if let Some(organization) = organization {
        name.push(DnType::OrganizationName, organization);
    }
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(365);
    params
}

fn identity_params(identity: &Identity) -> CertificateParams {
    let mut params = base_params(&identity.common_name, identity.organization);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![match identity.usage {
        Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
    }];
    params.use_authority_key_identifier_extension = true;
    let dns = identity
        .dns_names
        .iter()
        .filter_map(|name| name.clone().try_into().ok().map(SanType::DnsName));
    let ips = identity.ips.iter().copied().map(SanType::IpAddress);
    params.subject_alt_names = dns.chain(ips).collect();
    params
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), PkiError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |source| PkiError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subjects() -> PkiSubjects {
        PkiSubjects {
            node_name: "ug-dev".into(),
            node_ip: Ipv4Addr::new(10, 231, 1, 2),
            api_service_ip: Ipv4Addr::new(10, 233, 1, 1),
        }
    }

    #[test]
    fn the_api_server_certificate_names_every_address_clients_use() {
        let identities = subjects().identities();
        let apiserver = identities
            .iter()
            .find(|identity| identity.file == "apiserver")
            .expect("apiserver identity");
        for ip in ["10.231.1.2", "127.0.0.1", "10.233.1.1"] {
            assert!(
                apiserver.ips.contains(&ip.parse().expect("ip")),
                "missing {ip}"
            );
        }
        assert!(
            apiserver
                .dns_names
                .contains(&"kubernetes.default.svc".to_owned())
        );
        assert_eq!(apiserver.usage, Usage::Server);
    }

    #[test]
    fn olm_v1_certificates_name_what_its_clients_dial() {
        let identities = subjects().identities();
        let find = |file: &str| {
            identities
                .iter()
                .find(|identity| identity.file == file)
                .cloned()
                .expect("identity")
        };
        let catalogd = find(olm_v1::CATALOGD_CERT);
        for name in [
            "localhost",
            "catalogd-service.olmv1-system.svc",
            "catalogd-service.olmv1-system.svc.cluster.local",
        ] {
            assert!(catalogd.dns_names.contains(&name.to_owned()), "{name}");
        }
        assert_eq!(
            find(olm_v1::OPERATOR_CONTROLLER_CERT).dns_names,
            [
                "operator-controller-service.olmv1-system.svc",
                "operator-controller-service.olmv1-system.svc.cluster.local"
            ]
        );
        let registry = find(olm_v1::REGISTRY_CERT);
        assert_eq!(registry.dns_names, ["registry.upgrade-gate.test"]);
        assert_eq!(registry.ips, [IpAddr::V4(Ipv4Addr::new(10, 231, 1, 2))]);
    }

    #[test]
    fn client_identities_carry_the_groups_rbac_and_node_authorization_need() {
        let identities = subjects().identities();
        let find = |file: &str| {
            identities
                .iter()
                .find(|identity| identity.file == file)
                .cloned()
                .expect("identity")
        };
        assert_eq!(find("admin").organization, Some("system:masters"));
        let node = find("node");
        assert_eq!(node.common_name, "system:node:ug-dev");
        assert_eq!(node.organization, Some("system:nodes"));
        assert_eq!(node.usage, Usage::Client);
    }

    #[test]
    fn generated_files_are_pem_and_keys_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let pki = Pki::generate(dir.path(), &subjects()).expect("generate");
        let ca = std::fs::read_to_string(pki.ca()).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        let sa = std::fs::read_to_string(pki.service_account_pub()).expect("sa.pub");
        assert!(sa.starts_with("-----BEGIN PUBLIC KEY-----"));
        let mode = std::fs::metadata(pki.key("admin"))
            .expect("admin key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let kubeconfig = dir.path().join("admin.kubeconfig");
        pki.write_kubeconfig(&kubeconfig, "https://10.231.1.2:6443", "admin")
            .expect("kubeconfig");
        let parsed = Kubeconfig::read_from(&kubeconfig).expect("parse kubeconfig");
        assert_eq!(parsed.current_context.as_deref(), Some("admin"));
    }
}
