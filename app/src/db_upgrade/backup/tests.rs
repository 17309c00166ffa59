//! Unit tests of `backup`: kept apart from the code they test so that
//! the module reads in one sitting.

use super::housekeeping::{checksum_line, is_leftover, parse_checksum_line, sha256_of};
use super::restore::restore_prelude;
use super::*;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::db_config::ConnectionSettings;
use crate::schema::MigrationRef;

fn at(version: i64, release: &str) -> MigrationRef {
    MigrationRef {
        version,
        name: "x".into(),
        release: Some(release.into()),
    }
}

#[test]
fn names_round_trip() {
    for (database, current) in [
        ("app", Some(at(2, "7.9.3"))),
        ("my--app-db", Some(at(3, "7.10.0"))),
        ("fresh", None),
    ] {
        let name = BackupName::now(database, current.as_ref());
        let file = name.file_name();
        let parsed = BackupName::parse(&file).expect(&file);
        assert_eq!(parsed.database, database);
        assert_eq!(parsed.release, name.release);
        assert_eq!(parsed.migration, name.migration);
        assert_eq!(
            parsed.taken_at.as_millisecond(),
            name.taken_at.as_millisecond()
        );
    }
}

#[test]
fn name_shape() {
    let name = BackupName {
        database: "app".into(),
        release: "7.9.3".into(),
        migration: 2,
        taken_at: "2025-03-04T05:06:07.089Z".parse().expect("time"),
    };
    assert_eq!(
        name.file_name(),
        "app--7.9.3--v2--20250304T050607.089Z.dump"
    );
}

#[test]
fn foreign_files_are_not_backups() {
    for file in [
        "notes.txt",
        "app.dump",
        "--7.9.3--v2--20250304T050607.089Z.dump",
        "app--7.9.3--2--20250304T050607.089Z.dump",
        "app--7.9.3--v2--yesterday.dump",
        ".app--7.9.3--v2--20250304T050607.089Z.dump.partial",
    ] {
        assert_eq!(BackupName::parse(file), None, "{file}");
    }
}

fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("backup-{test}-"))
        .tempdir()
        .expect("scratch dir")
}

#[test]
fn listing_is_ordered_per_app_and_skips_foreign_files() {
    let root = scratch("list");
    let app = AppIdentity::parse("team-a/app").expect("app");
    let other = AppIdentity::parse("team-b/app").expect("app");
    for (dir, file, size) in [
        (
            app.directory(root.path()),
            "app--7.10.0--v4--20250304T050607.089Z.dump",
            10,
        ),
        (
            app.directory(root.path()),
            "app--7.9.3--v2--20250101T000000.000Z.dump",
            3,
        ),
        (app.directory(root.path()), "README", 1),
        (
            other.directory(root.path()),
            "app--7.9.3--v2--20250201T000000.000Z.dump",
            5,
        ),
        (
            root.path().to_owned(),
            "app--7.9.3--v1--20240101T000000.000Z.dump",
            7,
        ),
    ] {
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join(file), vec![0u8; size]).expect("write");
    }
    std::fs::write(
        app.directory(root.path())
            .join("app--7.9.3--v2--20250101T000000.000Z.dump.sha256"),
        "x",
    )
    .expect("checksum");
    let listed = list_backups(root.path(), Some(&app)).expect("list");
    let summary: Vec<(&str, i64, u64, bool)> = listed
        .iter()
        .map(|e| (e.release.as_str(), e.migration, e.size_bytes, e.checksummed))
        .collect();
    assert_eq!(summary, [("7.9.3", 2, 3, true), ("7.10.0", 4, 10, false)]);
    let everything = list_backups(root.path(), None).expect("list all");
    let apps: Vec<(&str, u64)> = everything
        .iter()
        .map(|e| (e.app.as_str(), e.size_bytes))
        .collect();
    assert_eq!(
        apps,
        [
            ("", 7),
            ("team-a/app", 3),
            ("team-b/app", 5),
            ("team-a/app", 10)
        ]
    );
}

#[test]
fn app_identities() {
    for good in ["ns/app", "app", "a.b_c-d@e", "a/b/c/d"] {
        assert_eq!(AppIdentity::parse(good).expect(good).as_str(), good);
    }
    for bad in [
        "",
        "/abs",
        "a//b",
        "a/../b",
        "..",
        ".",
        "a b",
        "a/b/c/d/e",
        "ä",
        "a/",
    ] {
        assert!(AppIdentity::parse(bad).is_err(), "{bad:?}");
    }
    let settings = |host: &str, dbname: &str| ConnectionSettings {
        host: host.into(),
        port: 5433,
        user: "u".into(),
        password: None,
        dbname: dbname.into(),
        sslmode: crate::db_config::SslMode::Disable,
        sslrootcert: None,
        connect_timeout: Duration::from_secs(1),
    };
    for (host, dbname, expected) in [
        ("db.example", "app", "app@db.example-5433"),
        ("/tmp/pg socket", "app", "app@_tmp_pg_socket-5433"),
        ("::1", "../x", "_x@__1-5433"),
    ] {
        let identity = AppIdentity::of_database(&settings(host, dbname));
        assert_eq!(identity.as_str(), expected);
        assert!(AppIdentity::parse(identity.as_str()).is_ok(), "{identity}");
    }
}

#[test]
fn leftovers_are_partials_of_our_names_and_orphaned_checksums() {
    let archive = "app--7.9.3--v2--20250304T050607.089Z.dump";
    let other = "app--7.9.3--v2--20250101T000000.000Z.dump";
    let present = |name: &str| name == archive;
    let cases = [
        (format!(".{archive}.partial"), true),
        (format!(".{archive}.sha256.partial"), true),
        (format!("{other}.sha256"), true),
        (format!("{archive}.sha256"), false),
        (archive.to_owned(), false),
        (".notes.partial".to_owned(), false),
        ("notes.sha256".to_owned(), false),
        (format!("{archive}.partial"), false),
    ];
    for (file, leftover) in cases {
        assert_eq!(is_leftover(&file, present), leftover, "{file}");
    }

    let dir = scratch("leftovers");
    for file in [
        format!(".{archive}.partial"),
        format!(".{archive}.sha256.partial"),
        format!("{other}.sha256"),
        archive.to_owned(),
        format!("{archive}.sha256"),
        "notes".to_owned(),
    ] {
        std::fs::write(dir.path().join(file), "x").expect("write");
    }
    let removed = remove_leftovers(dir.path()).expect("remove");
    assert_eq!(removed.len(), 3, "{removed:?}");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            archive.to_owned(),
            format!("{archive}.sha256"),
            "notes".to_owned()
        ]
    );
    assert_eq!(
        remove_leftovers(&dir.path().join("absent")).expect("absent dir"),
        Vec::<PathBuf>::new()
    );
}

#[test]
fn retention_keeps_the_newest_with_their_checksums() {
    let dir = scratch("retention");
    let names = [
        "app--7.9.3--v2--20250101T000000.000Z.dump",
        "app--7.9.3--v2--20250102T000000.000Z.dump",
        "app--7.10.0--v4--20250103T000000.000Z.dump",
        "app--7.10.1--v5--20250104T000000.000Z.dump",
    ];
    for name in names {
        std::fs::write(dir.path().join(name), "x").expect("archive");
        std::fs::write(dir.path().join(format!("{name}.sha256")), "x").expect("checksum");
    }
    std::fs::write(dir.path().join("notes"), "x").expect("foreign");
    let removed = apply_retention(dir.path(), 3).expect("retention");
    assert_eq!(removed, [dir.path().join(names[0])]);
    assert!(!dir.path().join(format!("{}.sha256", names[0])).exists());
    assert_eq!(
        apply_retention(dir.path(), 3).expect("again"),
        Vec::<PathBuf>::new()
    );
    assert_eq!(apply_retention(dir.path(), 0).expect("keeps one").len(), 2);
    assert!(dir.path().join(names[3]).exists());
    assert!(dir.path().join("notes").exists());
}

#[test]
fn checksum_lines_are_sha256sums() {
    let hash = "ab".repeat(32);
    let line = checksum_line(&hash, "x.dump");
    assert_eq!(line, format!("{hash}  x.dump\n"));
    assert_eq!(parse_checksum_line(&line, "x.dump"), Some(hash.clone()));
    assert_eq!(parse_checksum_line(&line, "y.dump"), None);
    assert_eq!(parse_checksum_line("abc  x.dump", "x.dump"), None);
    assert_eq!(parse_checksum_line("", "x.dump"), None);
    assert_eq!(
        checksum_path(Path::new("/b/x.dump")),
        PathBuf::from("/b/x.dump.sha256")
    );
}

#[tokio::test]
async fn sha256_of_a_file_and_its_progress() {
    let dir = scratch("sha");
    let path = dir.path().join("f");
    std::fs::write(&path, b"abc").expect("write");
    let read = Arc::new(AtomicU64::new(0));
    assert_eq!(
        sha256_of(&path, read.clone()).await.expect("hash"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(read.load(Ordering::Relaxed), 3);
}

#[test]
fn free_space_check_names_need_and_room() {
    let dir = scratch("space");
    assert!(check_free_space(dir.path(), 1).is_ok());
    let error = check_free_space(dir.path(), u64::MAX).expect_err("no disk is that large");
    assert!(
        error.to_string().starts_with("not enough free space in "),
        "{error}"
    );
}

#[test]
fn the_restore_prelude_begins_before_it_drops() {
    let prelude = restore_prelude(RestoreMode::ReplacePublicSchema, Duration::from_secs(30));
    let begin = prelude.find("BEGIN;").expect("BEGIN");
    let drop = prelude.find("DROP SCHEMA public CASCADE").expect("DROP");
    assert!(begin < drop);
    assert!(prelude.contains("SET lock_timeout = 30000;"));
    assert!(prelude.contains("SET statement_timeout = 0;"));
    assert!(!restore_prelude(RestoreMode::IntoEmpty, Duration::from_secs(1)).contains("DROP"));
}
