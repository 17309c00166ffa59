//! Unit tests of `postgres`: kept apart from the code they test so that
//! the module reads in one sitting.

use super::*;

#[test]
fn the_template_key_follows_the_binaries_not_their_place() {
    let dir = tempfile::tempdir().expect("dir");
    let installation = |root: &Path| Installation {
        root: root.to_owned(),
        bin: PathBuf::from("bin"),
    };
    let write = |root: &Path, tool: &str, text: &str| {
        std::fs::create_dir_all(root.join("bin")).expect("bin");
        std::fs::write(root.join("bin").join(tool), text).expect("write");
    };
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for root in [&one, &two] {
        write(root, "initdb", "initdb 18.1");
        write(root, "postgres", "postgres 18.1");
    }
    let key = |root: &Path| template_key(&installation(root)).expect("key");
    let first = key(&one);
    assert_eq!(key(&one), first, "the same installation, the same key");
    assert_eq!(key(&two), first, "the same build in another place");
    write(&one, "postgres", "postgres 18.2");
    assert_ne!(key(&one), first, "another postgres of the same size");
    write(&two, "initdb", "initdb 18.10");
    assert_ne!(key(&two), first, "another initdb");
    assert!(
        template_key(&installation(&dir.path().join("none"))).is_err(),
        "no binaries, no key"
    );
}

#[test]
fn an_installation_under_a_closed_home_is_not_reachable() {
    let user = User::from_name("postgres").ok().flatten();
    let Some(user) = user else {
        panic!("no user postgres: apt-get install postgresql-15");
    };
    let closed = tempfile::tempdir().expect("dir");
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let inside = closed.path().join("pg");
    std::fs::create_dir(&inside).expect("mkdir");
    assert!(!reachable_by(&inside, &user));
    assert!(reachable_by(Path::new("/usr/lib"), &user));

    std::fs::write(inside.join("file"), "x").expect("file");
    std::fs::create_dir(inside.join("sub")).expect("sub");
    std::os::unix::fs::symlink("file", inside.join("sub/link")).expect("symlink");
    let staged = tempfile::tempdir().expect("staging");
    link_tree(&inside, &staged.path().join("copy")).expect("link");
    assert_eq!(
        std::fs::read_link(staged.path().join("copy/sub/link")).expect("link"),
        PathBuf::from("file")
    );
    assert_eq!(
        std::fs::read_to_string(staged.path().join("copy/file")).expect("linked"),
        "x"
    );
}

#[tokio::test]
async fn starts_accepts_sql_and_leaves_nothing_behind() {
    let pg = TempPostgres::builder()
        .setting("fsync", "off")
        .start()
        .await
        .expect("throwaway PostgreSQL (needs root and postgresql-15)");
    let dir = pg.dir().to_owned();
    let pid = pg.record.as_ref().map(|r| r.pid).expect("record");
    let url = pg
        .create_database("fixture_check")
        .expect("create database");
    assert!(url.ends_with("/fixture_check"), "{url}");
    assert_eq!(
        pg.psql("fixture_check", "SELECT 40 + 2")
            .expect("psql")
            .trim(),
        "42"
    );
    assert!(dir.join("data").is_dir());
    drop(pg);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists()
            || crate::process::read_stat(pid).is_none_or(|s| s.state == 'Z'),
        "postmaster {pid} still running"
    );
}

#[tokio::test]
async fn a_stopped_or_killed_server_starts_again_on_its_data() {
    let mut pg = TempPostgres::builder()
        .start()
        .await
        .expect("throwaway PostgreSQL (needs root and postgresql-15)");
    pg.psql(
        "postgres",
        "CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)",
    )
    .expect("write");
    assert!(
        matches!(pg.start_again().await, Err(PostgresError::StillRunning)),
        "a running server is not started twice"
    );
    assert_eq!(pg.shut_down_server(), Stopped::OnSignal);
    pg.start_again().await.expect("start after a fast shutdown");
    pg.psql("postgres", "INSERT INTO kept VALUES (2)")
        .expect("write");
    let data = pg.data_dir();
    assert!(
        server_processes(&data).len() > 1,
        "a running postmaster and its auxiliary processes work in its data directory"
    );
    assert_eq!(pg.kill_postmaster(), Stopped::Killed);
    pg.start_again().await.expect("start after a crash");
    assert_eq!(
        pg.psql(
            "postgres",
            "SELECT string_agg(n::text, ',' ORDER BY n) FROM kept"
        )
        .expect("read")
        .trim(),
        "1,2",
        "every committed row survives both"
    );
    let dir = pg.dir().to_owned();
    drop(pg);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert_eq!(
        server_processes(&data),
        Vec::<i32>::new(),
        "no process left"
    );
}

#[test]
fn invalid_database_names_are_refused_before_sql() {
    let pg = TempPostgres {
        dir: None,
        record: None,
        spec: None,
        address: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port: 1,
        password: "pw".into(),
        bin_dir: PathBuf::from("/nonexistent"),
        log_path: PathBuf::new(),
    };
    for name in ["", "a\"b", "x; DROP", "a-b"] {
        assert!(matches!(
            pg.create_database(name),
            Err(PostgresError::InvalidDatabaseName(_))
        ));
    }
}

#[test]
fn urls_bracket_ipv6() {
    let pg = TempPostgres {
        dir: None,
        record: None,
        spec: None,
        address: "::1".parse().expect("v6"),
        port: 5433,
        password: "pw".into(),
        bin_dir: PathBuf::new(),
        log_path: PathBuf::new(),
    };
    assert_eq!(pg.url_for("db"), "postgres://postgres:pw@[::1]:5433/db");
}
