//! Unit tests of `db_config`: connection settings from URLs, libpq variables
//! and Secret files, TLS modes and parse errors.

use super::*;
use std::collections::HashMap;

const SECRET: &str = "s3cr3t-Pa55";

fn resolve(
    args: ConnectionArgs,
    env: &[(&str, &str)],
) -> Result<ConnectionSettings, DbConfigError> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ConnectionSettings::resolve(&args, &|k| env.get(k).cloned())
}

fn url_args(url: &str) -> ConnectionArgs {
    ConnectionArgs {
        database_url: Some(url.to_owned()),
        ..ConnectionArgs::default()
    }
}

#[test]
fn defaults_without_anything() {
    let s = resolve(ConnectionArgs::default(), &[]).expect("defaults");
    assert_eq!(
        (
            s.host.as_str(),
            s.port,
            s.user.as_str(),
            s.dbname.as_str(),
            s.sslmode
        ),
        ("localhost", 5432, "postgres", "postgres", SslMode::Prefer)
    );
    assert_eq!(s.password, None);
}

#[test]
fn libpq_variables() {
    let s = resolve(
        ConnectionArgs::default(),
        &[
            ("PGHOST", "db.example"),
            ("PGPORT", "6432"),
            ("PGUSER", "app"),
            ("PGPASSWORD", SECRET),
            ("PGSSLMODE", "require"),
        ],
    )
    .expect("env");
    assert_eq!(
        (
            s.host.as_str(),
            s.port,
            s.user.as_str(),
            s.dbname.as_str(),
            s.sslmode
        ),
        ("db.example", 6432, "app", "app", SslMode::Require)
    );
    assert_eq!(s.password, Some(Password::new(SECRET)));
}

#[test]
fn url_overrides_environment_and_keeps_what_it_omits() {
    let s = resolve(
        url_args("postgres://app:p%40ss@10.0.0.5:5433/appdb?sslmode=disable"),
        &[("PGHOST", "ignored"), ("PGCONNECT_TIMEOUT", "3")],
    )
    .expect("url");
    assert_eq!(
        (
            s.host.as_str(),
            s.port,
            s.user.as_str(),
            s.dbname.as_str(),
            s.sslmode
        ),
        ("10.0.0.5", 5433, "app", "appdb", SslMode::Disable)
    );
    assert_eq!(s.password, Some(Password::new("p@ss")));
    assert_eq!(s.connect_timeout, Duration::from_secs(3));

    let s = resolve(
        url_args("postgresql://app@db/appdb"),
        &[("PGPASSWORD", SECRET)],
    )
    .expect("password from env");
    assert_eq!(s.password, Some(Password::new(SECRET)));
}

#[test]
fn ipv6_and_socket_hosts() {
    let s = resolve(url_args("postgres://app@[::1]:5432/db"), &[]).expect("v6");
    assert_eq!(s.host, "::1");
    let s = resolve(url_args("postgres:///db?host=/run/postgresql"), &[]).expect("socket");
    assert_eq!(
        (s.host.as_str(), s.dbname.as_str()),
        ("/run/postgresql", "db")
    );
}

#[test]
fn bad_urls_are_refused_without_echoing_them() {
    let cases = [
        format!("postgres://app:{SECRET}@db:notaport/x"),
        format!("mysql://app:{SECRET}@db/x"),
        format!("postgres://app:{SECRET}@db/x?sslmode=sometimes"),
        format!("postgres://app:{SECRET}@db/x?options=-cfoo%3Dbar"),
        format!("postgres://app:{SECRET}@db/x?sslmode=verify-ca"),
        format!("app:{SECRET}@db"),
    ];
    for url in cases {
        let error = resolve(url_args(&url), &[]).expect_err(&url);
        let message = error.to_string();
        assert!(!message.contains(SECRET), "{message}");
        assert!(!message.contains("app:"), "{message}");
    }
}

#[test]
fn only_one_source() {
    let args = ConnectionArgs {
        database_url: Some("postgres://db/x".into()),
        database_secret_dir: Some(PathBuf::from("/nonexistent")),
        ..ConnectionArgs::default()
    };
    assert!(matches!(
        resolve(args, &[]),
        Err(DbConfigError::ConflictingSources)
    ));
}

#[test]
fn secret_directory_with_keys_or_url() {
    let dir = std::env::temp_dir().join(format!("db-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (key, value) in [
        ("host", "pg.svc\n"),
        ("port", "5544"),
        ("dbname", "app"),
        ("username", "app_user"),
        ("password", "pw with space\n"),
        ("sslmode", "verify-full"),
        ("ca.crt", "not read here"),
    ] {
        std::fs::write(dir.join(key), value).expect("write key");
    }
    let args = ConnectionArgs {
        database_secret_dir: Some(dir.clone()),
        ..ConnectionArgs::default()
    };
    let s = resolve(args.clone(), &[]).expect("secret dir");
    assert_eq!(
        (
            s.host.as_str(),
            s.port,
            s.user.as_str(),
            s.dbname.as_str(),
            s.sslmode
        ),
        ("pg.svc", 5544, "app_user", "app", SslMode::VerifyFull)
    );
    assert_eq!(s.password, Some(Password::new("pw with space")));
    assert_eq!(s.sslrootcert, Some(dir.join("ca.crt")));

    std::fs::write(dir.join("url"), "postgres://other@h2/db2\n").expect("url key");
    let s = resolve(args, &[]).expect("secret url");
    assert_eq!(
        (s.host.as_str(), s.user.as_str(), s.dbname.as_str()),
        ("h2", "other", "db2")
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn password_is_never_displayed_or_debugged() {
    let s = resolve(url_args(&format!("postgres://app:{SECRET}@db/x")), &[]).expect("url");
    assert!(!s.to_string().contains(SECRET));
    assert!(!format!("{s:?}").contains(SECRET));
    assert!(!format!("{:?}", s.pg_config("t")).contains(SECRET));
}

#[test]
fn libpq_env_carries_everything_for_pg_dump() {
    let s = resolve(
        url_args(&format!(
            "postgres://app:{SECRET}@db:5433/x?sslmode=require"
        )),
        &[],
    )
    .expect("url");
    let env: HashMap<_, _> = s.libpq_env().into_iter().collect();
    assert_eq!(env.get("PGPASSWORD").map(String::as_str), Some(SECRET));
    assert_eq!(env.get("PGHOST").map(String::as_str), Some("db"));
    assert_eq!(env.get("PGPORT").map(String::as_str), Some("5433"));
    assert_eq!(env.get("PGSSLMODE").map(String::as_str), Some("require"));
}

#[test]
fn verify_full_needs_a_root_certificate() {
    let s = resolve(url_args("postgres://db/x?sslmode=verify-full"), &[]).expect("url");
    assert!(matches!(s.tls(), Err(DbConfigError::MissingRootCert)));
}
