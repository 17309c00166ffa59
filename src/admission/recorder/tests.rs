//! The recorder's tests: the wake-ups it allows per release, the start
//! written by `hold --record`, its retry pauses, and what reaches the
//! keeper from the verdict and the record.

use super::*;
use crate::admission::{
    AfterRecord, COMPLETION_REFUSED_REASON, Handover, after_record, open_after_recorded,
};
use crate::operator_condition::{Reason, UpgradeableEntry};

fn open() -> UpgradeableEntry {
    UpgradeableEntry::open(Reason::new("UpgradeComplete").unwrap(), "done").unwrap()
}

fn closed(why: &str) -> UpgradeableEntry {
    UpgradeableEntry::closed(Reason::new("UpgradeInProgress").unwrap(), why).unwrap()
}

/// Waits (paused time) until `kept` holds `expected`.
async fn until(
    kept: &mut watch::Receiver<Option<AfterRecord<UpgradeableEntry>>>,
    expected: &UpgradeableEntry,
) {
    tokio::time::timeout(
        Duration::from_secs(5),
        kept.wait_for(|v| v.as_ref().map(Verdict::entry) == Some(expected)),
    )
    .await
    .expect("the keeper's input reaches the verdict")
    .expect("the forwarder runs");
}

#[test]
fn the_service_account_is_woken_a_few_times_per_release() {
    let sent = |release: &str, n: u32| Some((release.to_owned(), n));
    let table = [
        (None, Some(1)),
        (sent("7.10.0", 1), Some(2)),
        (sent("7.10.0", 2), Some(3)),
        (sent("7.10.0", WAKES), None),
        // A new release starts again.
        (sent("7.9.3", WAKES), Some(1)),
    ];
    for (woken, next) in table {
        assert_eq!(next_wake(woken.as_ref(), "7.10.0"), next, "{woken:?}");
    }
}

fn record_path(namespace: &str) -> String {
    format!("/apis/upgrade-gate.dev/v1alpha1/namespaces/{namespace}/upgraderecords/{RECORD_NAME}")
}

fn the_operators_deployment() -> serde_json::Value {
    let mut deployment = crate::testing::deployment(
        "shop",
        "app-operator",
        serde_json::json!({crate::admission::RELEASE_LABEL: "7.10.0"}),
        serde_json::json!([]),
    );
    deployment["spec"] = serde_json::json!({"selector": {}, "template": {"spec": {
        "containers": [{"name": "app-operator", "image": "app:7.10.0"}]}}});
    deployment
}

/// The init container's record where the record's CRD is not installed
/// (an OLM-only cluster): the API server does not serve the resource,
/// and `hold --record` says so and goes on, at once.
#[tokio::test]
async fn a_start_is_not_recorded_where_the_record_is_not_served() {
    let mut cluster = crate::testing::FakeCluster::new("shop", "unused");
    cluster.objects.insert(
        crate::testing::deployment_path("shop", "app-operator"),
        the_operators_deployment(),
    );
    cluster.faults.push(crate::testing::Fault::not_served(
        crate::testing::On::Path(record_path("shop")),
        usize::MAX,
    ));
    let (client, server) = cluster.start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let started = record_starting(&client, "shop", "app-operator", deadline)
        .await
        .expect("not served is no error");
    assert_eq!(started, Starting::NoRecordApi);
    drop(client);
    let (log, _) = server.await.expect("the fake ends");
    let reads = log.iter().filter(|r| r.path == record_path("shop")).count();
    assert_eq!(reads, 1, "asked once, not retried");
}

/// Where it is served, the start is recorded with what the Deployment
/// runs, and a record already naming the release is kept.
#[tokio::test]
async fn a_start_is_recorded_once_with_what_runs() {
    let mut cluster = crate::testing::FakeCluster::new("shop", "unused");
    cluster.objects.insert(
        crate::testing::deployment_path("shop", "app-operator"),
        the_operators_deployment(),
    );
    let (client, live) = cluster.start_live();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let started = record_starting(&client, "shop", "app-operator", deadline)
        .await
        .expect("recorded");
    assert_eq!(
        started,
        Starting::Recorded {
            operator: "app-operator".into(),
            release: "7.10.0".into(),
            spent: false
        }
    );
    let stored = live.stored(&record_path("shop")).expect("the record");
    let entry = &stored["spec"]["operators"]["app-operator"];
    assert_eq!(entry["state"], "InProgress", "{stored}");
    assert_eq!(
        entry["images"],
        serde_json::json!(["app-operator=app:7.10.0"])
    );
    let again = record_starting(&client, "shop", "app-operator", deadline)
        .await
        .expect("kept");
    assert!(matches!(again, Starting::Kept { .. }), "{again:?}");
}

#[test]
fn failures_in_a_row_double_the_pause_up_to_the_cap() {
    let secs = |n| retry_pause(n).as_secs();
    assert_eq!([1, 2, 3, 4, 5, 6, 40].map(secs), [1, 2, 4, 8, 16, 30, 30]);
}

#[tokio::test(start_paused = true)]
async fn the_gate_opens_only_after_the_completion_is_recorded() {
    let (verdicts, latest) = watch::channel(None);
    let (recorder, status) = watch::channel(RecorderStatus::default());
    let mut kept = open_after_recorded(latest, status, "7.10.0");

    verdicts.send_replace(Some(closed("Job running")));
    until(&mut kept, &closed("Job running")).await;

    verdicts.send_replace(Some(open()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        kept.borrow().as_ref().map(Verdict::entry),
        Some(&closed("Job running")),
        "not before the record"
    );

    recorder.send_modify(|status| {
        status.recorded = Some(UpgradeClaim::Complete {
            release: "7.9.3".into(),
        })
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        kept.borrow().as_ref().map(Verdict::entry),
        Some(&closed("Job running")),
        "another release's completion does not count"
    );

    recorder.send_modify(|status| {
        status.recorded = Some(UpgradeClaim::Complete {
            release: "7.10.0".into(),
        })
    });
    until(&mut kept, &open()).await;

    // Closing never waits for the recorder.
    verdicts.send_replace(Some(closed("a new App")));
    until(&mut kept, &closed("a new App")).await;
}

fn refused(why: &str) -> UpgradeableEntry {
    UpgradeableEntry::closed(
        Reason::new(COMPLETION_REFUSED_REASON).unwrap(),
        format!("the upgrade is done by its operator's judgement, but the admission record refused to call it complete: {why}"),
    )
    .unwrap()
}

#[test]
fn what_reaches_the_keeper_from_the_verdict_and_the_record() {
    let complete = UpgradeClaim::Complete {
        release: "7.10.0".into(),
    };
    let in_progress = |why: &str| UpgradeClaim::InProgress {
        release: "7.10.0".into(),
        why: why.into(),
    };
    let status = |recorded: Option<UpgradeClaim>, held_back: Option<&str>| RecorderStatus {
        recorded,
        held_back: held_back.map(str::to_owned),
        ..RecorderStatus::default()
    };
    let gone = "release 7.10.0's upgrade was in progress with 1 object(s) to judge, and its operator now judges none";
    use Handover::{AwaitRecord, Hand, NoVerdict};
    let judged = |entry| Hand(AfterRecord::Judged(entry));
    // (verdict, recorder shows, what reaches the keeper)
    let table: [(
        Option<UpgradeableEntry>,
        RecorderStatus,
        Handover<UpgradeableEntry>,
    ); 7] = [
        (None, status(None, None), NoVerdict),
        (
            Some(closed("Job running")),
            status(None, None),
            judged(closed("Job running")),
        ),
        (
            Some(closed("a new App")),
            status(Some(complete.clone()), None),
            judged(closed("a new App")),
        ),
        (
            Some(open()),
            status(Some(in_progress("Job running")), None),
            AwaitRecord,
        ),
        (
            Some(open()),
            status(Some(complete.clone()), None),
            judged(open()),
        ),
        (
            Some(open()),
            status(Some(in_progress(gone)), Some(gone)),
            Hand(AfterRecord::Refused {
                entry: refused(gone),
                judged: open(),
            }),
        ),
        (
            Some(open()),
            status(
                Some(UpgradeClaim::Complete {
                    release: "7.9.3".into(),
                }),
                None,
            ),
            AwaitRecord,
        ),
    ];
    for (verdict, shows, expected) in table {
        let reached = after_record(verdict.clone(), &shows, &complete);
        assert_eq!(reached, expected, "{verdict:?} with {shows:?}");
    }
}

#[test]
fn only_a_completion_written_in_progress_is_held_back() {
    let complete = UpgradeClaim::Complete {
        release: "7.10.0".into(),
    };
    let in_progress = UpgradeClaim::InProgress {
        release: "7.10.0".into(),
        why: "no evidence".into(),
    };
    assert_eq!(
        held_back(&complete, &in_progress).as_deref(),
        Some("no evidence")
    );
    assert_eq!(held_back(&complete, &complete), None);
    assert_eq!(held_back(&in_progress, &in_progress), None);
}

#[tokio::test(start_paused = true)]
async fn a_refused_completion_closes_the_gate_in_the_records_words() {
    let (verdicts, latest) = watch::channel(None);
    let (recorder, status) = watch::channel(RecorderStatus::default());
    let mut kept = open_after_recorded(latest, status, "7.10.0");
    verdicts.send_replace(Some(closed("shop: upgrading 7.9.3 to 7.10.0")));
    until(&mut kept, &closed("shop: upgrading 7.9.3 to 7.10.0")).await;

    // The last App deleted: the operator judges the upgrade done, the
    // record refuses it for want of evidence.
    verdicts.send_replace(Some(open()));
    recorder.send_modify(|status| {
        status.recorded = Some(UpgradeClaim::InProgress {
            release: "7.10.0".into(),
            why: "its operator now judges none".into(),
        });
        status.held_back = Some("its operator now judges none".into());
    });
    until(&mut kept, &refused("its operator now judges none")).await;

    // An App at its target again: recorded complete, the gate opens.
    recorder.send_modify(|status| {
        status.recorded = Some(UpgradeClaim::Complete {
            release: "7.10.0".into(),
        });
        status.held_back = None;
    });
    until(&mut kept, &open()).await;
}
