//! The tests' world: a target, the database, Job and phase observations the
//! table is read over, and the knobs beside them.

use crate::crd::ConditionType;
use crate::crd::{AppCondition, AppStatus, DatabaseSchemaStatus, UpgradeStatus};
use crate::db_upgrade::outcome::FailureKind;
use crate::db_upgrade::progress::{self, Progress};
use crate::db_upgrade::progress::{Amount, Unit};
use crate::operator::decide::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub(super) const TARGET_RELEASE: &str = "7.10.1";

pub(super) fn target() -> SchemaTarget {
    SchemaTarget {
        release: TARGET_RELEASE.to_owned(),
        schema: DatabaseSchemaStatus {
            release: Some("7.10.1".to_owned()),
            migration: Some("V5__index_executions_for_activity_page".to_owned()),
        },
    }
}

fn behind() -> DatabaseSchemaStatus {
    DatabaseSchemaStatus {
        release: Some("7.9.3".to_owned()),
        migration: Some("V2__create_executions".to_owned()),
    }
}

pub(super) fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid timestamp")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Db {
    Unreachable,
    Newer,
    Behind,
    AtTarget,
}

pub(super) const DBS: [Db; 4] = [Db::Unreachable, Db::Newer, Db::Behind, Db::AtTarget];

pub(super) fn database(db: Db) -> DatabaseObservation {
    match db {
        Db::Unreachable => DatabaseObservation::Blocked {
            blocker: Blocker::DatabaseUnreachable,
            detail: "cannot connect to host=db port=5432".to_owned(),
        },
        Db::Newer => DatabaseObservation::Blocked {
            blocker: Blocker::DatabaseNewerThanRelease,
            detail: "the database is newer than release 7.10.1".to_owned(),
        },
        Db::Behind => DatabaseObservation::Behind { current: behind() },
        Db::AtTarget => DatabaseObservation::AtTarget,
    }
}

fn transient_failure() -> JobFailure {
    JobFailure {
        condition: "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned(),
        exit_code: Some(5),
        error: Some("another upgrade holds the lock".to_owned()),
        kind: Some(FailureKind::UpgradeLockTimeout),
    }
}

fn permanent_failure() -> JobFailure {
    JobFailure {
        condition: "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned(),
        exit_code: Some(7),
        error: Some("refusing to touch the database: migration V2 checksum differs".to_owned()),
        kind: Some(FailureKind::HistoryDiverged),
    }
}

fn unschedulable() -> StartFailure {
    StartFailure {
        kind: StartFailureKind::Unschedulable,
        detail:
            "pod shop-db-7-10-1-1-x is unschedulable: persistentvolumeclaim \"backups\" not found"
                .to_owned(),
    }
}

/// Every Job observation, by index in the table below.
pub(super) const JOBS: [fn() -> JobObservation; 9] = [
    || JobObservation::Absent,
    || JobObservation::NotOurs {
        owner: "it has no controlling owner".to_owned(),
    },
    || JobObservation::Stale {
        uid: "stale-uid".to_owned(),
        finished: false,
    },
    || JobObservation::Stale {
        uid: "stale-uid".to_owned(),
        finished: true,
    },
    || JobObservation::Active {
        start_failure: None,
    },
    || JobObservation::Active {
        start_failure: Some(unschedulable()),
    },
    || JobObservation::Succeeded {
        backup_location: Some("pvc/backups/shop/shop--7.9.3--v2.dump".to_owned()),
    },
    || JobObservation::Failed(transient_failure()),
    || JobObservation::Failed(permanent_failure()),
];

pub(super) const PHASES: [Option<UpgradePhase>; 7] = [
    None,
    Some(UpgradePhase::Pending),
    Some(UpgradePhase::Running),
    Some(UpgradePhase::Verifying),
    Some(UpgradePhase::Failed),
    Some(UpgradePhase::GaveUp),
    Some(UpgradePhase::Refused),
];

/// The knobs beside phase, Job and database.
#[derive(Clone, Copy, Debug)]
pub(super) struct World {
    /// The server Deployment asks for one replica.
    pub(super) server_running: bool,
    /// Server pods whose containers have not ended.
    pub(super) server_pods: usize,
    /// `status.upgrade.to` is another release's.
    pub(super) foreign: bool,
    pub(super) attempts: i32,
    pub(super) retry_limit: i32,
    /// Seconds since the last failure.
    pub(super) failed_ago: i64,
    /// The spec changed since the status was written.
    pub(super) spec_changed: bool,
}

pub(super) const BASE: World = World {
    server_running: false,
    server_pods: 0,
    foreign: false,
    attempts: 1,
    retry_limit: 3,
    failed_ago: 3600,
    spec_changed: false,
};

pub(super) fn observed(
    phase: Option<UpgradePhase>,
    job: JobObservation,
    db: Db,
    world: World,
) -> Observed {
    let to = if world.foreign {
        "7.10.0"
    } else {
        TARGET_RELEASE
    };
    let upgrade = phase.map(|phase| UpgradeStatus {
        from: "7.9.3".to_owned(),
        to: to.to_owned(),
        job: job_name("shop", to, world.attempts),
        phase,
        attempts: world.attempts,
        start_time: Time(now() - SignedDuration::from_secs(7200)),
        last_failure_time: matches!(
            phase,
            UpgradePhase::Failed | UpgradePhase::GaveUp | UpgradePhase::Refused
        )
        .then(|| Time(now() - SignedDuration::from_secs(world.failed_ago))),
        last_failure: None,
        backup_location: backup_location("backups"),
        progress: None,
    });
    Observed {
        name: "shop".to_owned(),
        generation: Some(2 + i64::from(world.spec_changed)),
        status: AppStatus {
            observed_generation: Some(2),
            upgrade,
            ..AppStatus::default()
        },
        retry_limit: world.retry_limit,
        backup_volume_claim: "backups".to_owned(),
        database: database(db),
        job,
        finished_jobs: Vec::new(),
        server_replicas: Some(i32::from(world.server_running)),
        server_pods: (0..world.server_pods)
            .map(|i| format!("shop-server-{i}"))
            .collect(),
        progress: None,
        now: now(),
        slot: Slot::Granted,
    }
}

pub(super) fn step_of(
    phase: Option<UpgradePhase>,
    job: JobObservation,
    db: Db,
    world: World,
) -> Step {
    decide(&observed(phase, job, db, world), &target()).step
}

pub(super) fn condition(status: &AppStatus, type_: ConditionType) -> &AppCondition {
    status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_:?} condition in {status:#?}"))
}

pub(super) fn report(step: progress::Step, done: u64, total: u64, eta: Option<u64>) -> Progress {
    Progress {
        step,
        amount: Some(Amount {
            done,
            total: Some(total),
            unit: Unit::Rows,
        }),
        eta_seconds: eta,
    }
}

pub(super) fn migration(version: u32) -> progress::Step {
    progress::Step::Migration {
        version,
        name: "reshape_executions".to_owned(),
    }
}

pub(super) fn full_slots() -> QueueWait {
    QueueWait {
        position: 3,
        waiting: 12,
        limit: 4,
        busy: ["ns/a", "ns/b", "ns/c", "ns/d"].map(str::to_owned).to_vec(),
        last_in_line: None,
    }
}
