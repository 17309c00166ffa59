//! How the application's database is reached: connection settings from a URL,
//! the libpq environment variables or files mounted from a Secret, TLS, and
//! opening a `tokio_postgres` client.
//!
//! Owns: [`ConnectionArgs`] (the command-line/environment surface),
//! [`ConnectionSettings`] (resolved, password redacted in every `Debug`/`Display`),
//! the TLS set-up and [`ConnectionSettings::connect`]. Must not touch: schema
//! or data (that is `schema`/`db_upgrade`).
//!
//! Precedence, lowest first: defaults (localhost:5432, user `postgres`,
//! sslmode `prefer`), the libpq variables `PGHOST PGPORT PGUSER PGPASSWORD
//! PGDATABASE PGSSLMODE PGSSLROOTCERT PGCONNECT_TIMEOUT`, then exactly one of
//! `--database-url`, `--database-url-file`, `--database-secret-dir`. A setting
//! a layer does not give keeps the lower layer's value (as libpq does).
//!
//! The password never appears in logs or errors: it lives in [`Password`],
//! whose `Debug` is redacted, no error here carries input text, and child
//! processes (`pg_dump`) get it through `PGPASSWORD` in their environment
//! ([`ConnectionSettings::libpq_env`]), never in argv.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// Where the database is, as flags or environment variables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnectionArgs {
    /// PostgreSQL URL, e.g. postgres://app@db:5432/app?sslmode=require.
    /// Settings it omits come from the PG* variables.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<String>,
    /// A file holding the PostgreSQL URL (e.g. a mounted Secret key).
    #[arg(long, env = "DATABASE_URL_FILE", global = true)]
    pub database_url_file: Option<PathBuf>,
    /// A directory mounted from a Secret: either a key `url`, or keys
    /// `host`, `port`, `dbname`, `user`, `password`, `sslmode` (each optional)
    /// and `ca.crt` (the CA for sslmode=verify-full).
    #[arg(long, env = "DATABASE_SECRET_DIR", global = true)]
    pub database_secret_dir: Option<PathBuf>,
}

/// libpq's sslmode, as far as this tool supports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, without certificate verification.
    Prefer,
    /// TLS, without certificate verification (libpq's meaning).
    Require,
    /// TLS, certificate checked against `sslrootcert` and the host name.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, DbConfigError> {
        match value {
            "disable" => Ok(SslMode::Disable),
            "prefer" | "allow" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-full" => Ok(SslMode::VerifyFull),
            "verify-ca" => Err(DbConfigError::VerifyCaUnsupported),
            other => Err(DbConfigError::InvalidValue {
                setting: "sslmode",
                value: other.to_owned(),
            }),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// A database password. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Resolved connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// A host name, an IP address, or a Unix socket directory (`/...`).
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<Password>,
    pub dbname: String,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub connect_timeout: Duration,
}

/// The connection settings cannot be resolved. No variant carries a URL or a
/// password.
#[derive(Debug, thiserror::Error)]
pub enum DbConfigError {
    #[error("the database URL is not valid: {0}")]
    InvalidUrl(url::ParseError),
    #[error("the database URL has scheme {0:?}; expected postgres:// or postgresql://")]
    UnsupportedScheme(String),
    #[error("the database URL has an unsupported parameter {0:?}")]
    UnsupportedParameter(String),
    #[error("invalid {setting} {value:?}")]
    InvalidValue {
        setting: &'static str,
        value: String,
    },
    #[error("give only one of --database-url, --database-url-file, --database-secret-dir")]
    ConflictingSources,
    #[error("cannot read {path}")]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sslmode=verify-ca is not supported; use verify-full")]
    VerifyCaUnsupported,
    #[error(
        "sslmode=verify-full needs a CA certificate (sslrootcert, PGSSLROOTCERT or ca.crt in the secret directory)"
    )]
    MissingRootCert,
    #[error("cannot use the CA certificate {path}: {reason}")]
    InvalidRootCert { path: PathBuf, reason: String },
}

/// Opening a connection failed. The message names the target without the
/// password.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Config(#[from] DbConfigError),
    #[error("cannot connect to {target}")]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

impl ConnectionSettings {
    /// Resolves the settings from arguments and an environment lookup
    /// (`std::env::var` in production, a map in tests).
    pub fn resolve(
        args: &ConnectionArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, DbConfigError> {
        let sources = [
            args.database_url.is_some(),
            args.database_url_file.is_some(),
            args.database_secret_dir.is_some(),
        ];
        if sources.iter().filter(|given| **given).count() > 1 {
            return Err(DbConfigError::ConflictingSources);
        }
        let mut settings = Self::from_libpq_env(env)?;
        if let Some(url) = &args.database_url {
            settings.apply_url(url)?;
        } else if let Some(path) = &args.database_url_file {
            settings.apply_url(read_secret_file(path)?.trim())?;
        } else if let Some(dir) = &args.database_secret_dir {
            settings.apply_secret_dir(dir)?;
        }
        Ok(settings)
    }

    fn from_libpq_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, DbConfigError> {
        let user = env("PGUSER").unwrap_or_else(|| "postgres".to_owned());
        Ok(ConnectionSettings {
            host: env("PGHOST").unwrap_or_else(|| "localhost".to_owned()),
            port: env("PGPORT")
                .map(|p| parse_port(&p))
                .transpose()?
                .unwrap_or(5432),
            dbname: env("PGDATABASE").unwrap_or_else(|| user.clone()),
            user,
            password: env("PGPASSWORD").map(Password),
            sslmode: env("PGSSLMODE")
                .map(|m| SslMode::parse(&m))
                .transpose()?
                .unwrap_or(SslMode::Prefer),
            sslrootcert: env("PGSSLROOTCERT").map(PathBuf::from),
            connect_timeout: env("PGCONNECT_TIMEOUT")
                .map(|t| parse_timeout(&t))
                .transpose()?
                .unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        })
    }

    fn apply_url(&mut self, text: &str) -> Result<(), DbConfigError> {
        let url = url::Url::parse(text).map_err(DbConfigError::InvalidUrl)?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(DbConfigError::UnsupportedScheme(url.scheme().to_owned()));
        }
        if let Some(host) = url.host_str().filter(|h| !h.is_empty()) {
            self.host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
        }
        if let Some(port) = url.port() {
            self.port = port;
        }
        if !url.username().is_empty() {
            self.user = decode(url.username());
        }
        if let Some(password) = url.password() {
            self.password = Some(Password(decode(password)));
        }
        let path = url.path().trim_start_matches('/');
        if !path.is_empty() {
            self.dbname = decode(path);
        }
        for (key, value) in url.query_pairs() {
            let value = value.into_owned();
            match key.as_ref() {
                "sslmode" => self.sslmode = SslMode::parse(&value)?,
                "sslrootcert" => self.sslrootcert = Some(PathBuf::from(value)),
                "host" => self.host = value,
                "port" => self.port = parse_port(&value)?,
                "user" => self.user = value,
                "password" => self.password = Some(Password(value)),
                "dbname" => self.dbname = value,
                "connect_timeout" => self.connect_timeout = parse_timeout(&value)?,
                "application_name" => {}
                other => return Err(DbConfigError::UnsupportedParameter(other.to_owned())),
            }
        }
        Ok(())
    }

    fn apply_secret_dir(&mut self, dir: &Path) -> Result<(), DbConfigError> {
        let key = |name: &str| -> Result<Option<String>, DbConfigError> {
            let path = dir.join(name);
            if path.exists() {
                read_secret_file(&path).map(|v| Some(v.trim_end_matches(['\r', '\n']).to_owned()))
            } else {
                Ok(None)
            }
        };
        if let Some(url) = key("url")? {
            self.apply_url(url.trim())?;
        } else {
            if let Some(host) = key("host")? {
                self.host = host.trim().to_owned();
            }
            if let Some(port) = key("port")? {
                self.port = parse_port(&port)?;
            }
            if let Some(dbname) = key("dbname")?.or(key("database")?) {
                self.dbname = dbname.trim().to_owned();
            }
            if let Some(user) = key("user")?.or(key("username")?) {
                self.user = user.trim().to_owned();
            }
            if let Some(password) = key("password")? {
                self.password = Some(Password(password));
            }
            if let Some(mode) = key("sslmode")? {
                self.sslmode = SslMode::parse(mode.trim())?;
            }
        }
        let ca = dir.join("ca.crt");
        if ca.exists() {
            self.sslrootcert = Some(ca);
        }
        Ok(())
    }

    /// The environment for a libpq child process (`pg_dump`, `pg_restore`):
    /// the password travels here, never in argv.
    pub fn libpq_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("PGHOST", self.host.clone()),
            ("PGPORT", self.port.to_string()),
            ("PGUSER", self.user.clone()),
            ("PGDATABASE", self.dbname.clone()),
            ("PGSSLMODE", self.sslmode.as_str().to_owned()),
            (
                "PGCONNECT_TIMEOUT",
                self.connect_timeout.as_secs().max(1).to_string(),
            ),
        ];
        if let Some(Password(password)) = &self.password {
            env.push(("PGPASSWORD", password.clone()));
        }
        if let Some(cert) = &self.sslrootcert {
            env.push(("PGSSLROOTCERT", cert.display().to_string()));
        }
        env
    }

    fn pg_config(&self, application_name: &str) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(application_name)
            .connect_timeout(self.connect_timeout)
            // A silent network is noticed within about a minute (30 s idle,
            // then 3 probes 10 s apart) instead of the kernel's two hours.
            .keepalives(true)
            .keepalives_idle(KEEPALIVE_IDLE)
            .keepalives_interval(KEEPALIVE_INTERVAL)
            .keepalives_retries(KEEPALIVE_RETRIES)
            .ssl_mode(match self.sslmode {
                SslMode::Disable => tokio_postgres::config::SslMode::Disable,
                SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
                SslMode::Require | SslMode::VerifyFull => tokio_postgres::config::SslMode::Require,
            });
        if let Some(Password(password)) = &self.password {
            config.password(password);
        }
        config
    }

    fn tls(&self) -> Result<MakeRustlsConnect, DbConfigError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| DbConfigError::InvalidRootCert {
                path: PathBuf::new(),
                reason: e.to_string(),
            })?;
        let config = match self.sslmode {
            SslMode::VerifyFull => {
                let path = self
                    .sslrootcert
                    .as_ref()
                    .ok_or(DbConfigError::MissingRootCert)?;
                let invalid = |reason: String| DbConfigError::InvalidRootCert {
                    path: path.clone(),
                    reason,
                };
                let mut roots = rustls::RootCertStore::empty();
                for cert in
                    CertificateDer::pem_file_iter(path).map_err(|e| invalid(e.to_string()))?
                {
                    roots
                        .add(cert.map_err(|e| invalid(e.to_string()))?)
                        .map_err(|e| invalid(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(invalid("no certificate in the file".to_owned()));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(EncryptionOnly {
                    algorithms: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    /// Opens a client; the connection task runs on the current tokio runtime
    /// and ends when the client is dropped.
    pub async fn connect(
        &self,
        application_name: &str,
    ) -> Result<tokio_postgres::Client, ConnectError> {
        let tls = self.tls()?;
        let (client, connection) = self
            .pg_config(application_name)
            .connect(tls)
            .await
            .map_err(|source| ConnectError::Connect {
                target: self.to_string(),
                source,
            })?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(error = %error, "database connection ended");
            }
        });
        Ok(client)
    }
}

impl fmt::Display for ConnectionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host={} port={} dbname={} user={} sslmode={}",
            self.host,
            self.port,
            self.dbname,
            self.user,
            self.sslmode.as_str()
        )
    }
}

/// libpq's `require`/`prefer`: encrypt, but do not authenticate the server.
/// Handshake signatures are still checked, so the session is with whoever
/// holds the presented certificate's key.
#[derive(Debug)]
struct EncryptionOnly {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for EncryptionOnly {
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
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

fn read_secret_file(path: &Path) -> Result<String, DbConfigError> {
    std::fs::read_to_string(path).map_err(|source| DbConfigError::ReadFile {
        path: path.to_owned(),
        source,
    })
}

fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

fn parse_port(text: &str) -> Result<u16, DbConfigError> {
    text.trim()
        .parse()
        .map_err(|_| DbConfigError::InvalidValue {
            setting: "port",
            value: text.to_owned(),
        })
}

fn parse_timeout(text: &str) -> Result<Duration, DbConfigError> {
    text.trim()
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| DbConfigError::InvalidValue {
            setting: "connect_timeout",
            value: text.to_owned(),
        })
}

#[cfg(test)]
mod tests;
