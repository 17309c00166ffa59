//! The judge's table tests: runs written as facts, each verdict, hole and
//! damage asserted with the evidence that says it.

use super::*;
use crate::chain::digest::TableDigest;
use crate::chain::timeline::{JobChange, PodChange};
use crate::chain::write_failures::WriteFailures;
use crate::chain::writer::Damage as WriteDamage;

fn at(tenths: i64) -> Timestamp {
    Timestamp::from_millisecond(1_700_000_000_000 + tenths * 100).expect("valid")
}

fn chain() -> Chain {
    Chain {
        from: "7.9.3".into(),
        middle: Some("7.10.0".into()),
        next: "7.10.1".into(),
        last: "7.10.1".into(),
        middle_schema: Some("7.10.0".into()),
        last_schema: "7.10.1".into(),
        migrations: (1..=5).map(|v| (v, format!("m{v}"))).collect(),
        deployer: Deployer::Olm,
    }
}

fn digest() -> DataDigest {
    let table = |rows| TableDigest {
        rows,
        digest: "abc".into(),
    };
    DataDigest {
        connections: table(40),
        integrations: table(500),
        executions: table(1000),
        last_execution: 1000,
    }
}

fn history() -> Vec<HistoryRow> {
    (1..=5)
        .map(|version| HistoryRow {
            version,
            name: format!("m{version}"),
            applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
        })
        .collect()
}

fn checks() -> EndChecks {
    EndChecks {
        data_before: digest(),
        data_after: digest(),
        writer: WriterVerdict {
            inserts_acknowledged: 100,
            updates_acknowledged: 90,
            failed: WriteFailures {
                refused: 20,
                ..WriteFailures::default()
            },
            rows_checked: 100,
            acknowledged_in: [
                (ExecutionsLayout::JsonReport, 120),
                (ExecutionsLayout::TypedColumns, 70),
            ]
            .into(),
            ..WriterVerdict::default()
        },
        history: history(),
        schema: Ok("V5 at target".into()),
        layouts: vec![ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns],
        answered: Vec::new(),
    }
}

fn pod(name: &str, release: &str, change: PodChange) -> Fact {
    Fact::Pod {
        pod: name.into(),
        kind: PodKind::Operator,
        release: release.into(),
        change,
    }
}

fn job(release: &str, change: JobChange) -> Fact {
    Fact::Job {
        job: format!("shop-db-{}-1", release.replace('.', "-")),
        release: release.into(),
        change,
    }
}

fn phase(release: &str, phase: &str, reason: &str) -> Fact {
    Fact::CsvPhase {
        release: release.into(),
        phase: phase.into(),
        reason: reason.into(),
        message: String::new(),
    }
}

fn app(release: &str, ready: bool) -> Fact {
    Fact::AppStatus {
        app: "shop".into(),
        phase: if ready { "Ready" } else { "Upgrading" }.into(),
        database_release: Some(release.into()),
        ready,
        upgrade: None,
        upgrade_phase: None,
    }
}

fn migration(version: i64) -> Fact {
    Fact::MigrationApplied {
        version,
        name: format!("m{version}"),
        applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
    }
}

fn gate_status(release: &str, status: &str, generation: i64) -> Fact {
    Fact::ConditionStatus {
        release: release.into(),
        status: Some(status.into()),
        reason: Some(VERIFIED_REASON.into()),
        observed_generation: Some(generation),
        generation,
    }
}

fn gate_true(release: &str) -> Fact {
    Fact::ConditionStatus {
        release: release.into(),
        status: Some("True".into()),
        reason: Some(VERIFIED_REASON.into()),
        observed_generation: Some(3),
        generation: 3,
    }
}

fn events(facts: Vec<(i64, Fact)>) -> Vec<Event> {
    let mut events: Vec<Event> = facts
        .into_iter()
        .map(|(tenths, fact)| Event {
            at: at(tenths),
            fact,
        })
        .collect();
    events.sort_by_key(|event| event.at);
    events
}

/// The chain the gate makes: 7.10.1 held Pending until 7.10.0's Job
/// succeeded and was verified.
fn gated() -> Vec<(i64, Fact)> {
    vec![
        (-100, migration(1)),
        (-100, migration(2)),
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (20, pod("op-a", "7.9.3", PodChange::Stopping)),
        (25, pod("op-b", "7.10.0", PodChange::Created)),
        (40, job("7.10.0", JobChange::Created)),
        (57, phase("7.10.0", "Succeeded", "InstallSucceeded")),
        (
            84,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (
            85,
            phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
        ),
        (300, migration(3)),
        (300, migration(4)),
        (416, job("7.10.0", JobChange::Succeeded)),
        (418, app("7.10.0", true)),
        (419, gate_status("7.10.0", "True", 5)),
        (420, phase("7.10.1", "InstallReady", "")),
        (421, pod("op-b", "7.10.0", PodChange::Stopping)),
        (430, pod("op-c", "7.10.1", PodChange::Created)),
        (454, phase("7.10.1", "Succeeded", "InstallSucceeded")),
        (500, migration(5)),
        (518, app("7.10.1", true)),
        (523, gate_true("7.10.1")),
    ]
}

#[test]
fn a_gated_chain_is_neither_raced_nor_damaged() {
    let verdict = judge(&events(gated()), &chain(), &checks());
    assert!(!verdict.raced, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    assert!(verdict.inconclusive.is_empty());
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(1.0)
    );
    // A True copied and closed again long before (a release, restored)
    // is not what OLM acted on.
    let mut facts = gated();
    facts.extend([
        (100, gate_status("7.10.0", "True", 3)),
        (101, gate_status("7.10.0", "False", 4)),
    ]);
    let verdict = judge(&events(facts), &chain(), &checks());
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(1.0)
    );
    assert_eq!(
        verdict.pending_seconds.map(|s| (s * 10.0).round()),
        Some(335.0)
    );
    assert_eq!(
        verdict.load_margin_seconds.map(|s| (s * 10.0).round()),
        Some(332.0)
    );
    assert_eq!(verdict.load_ok, Some(true));
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("not raced: 7.10.0's operator stopped for good")),
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn an_install_plan_run_again_after_olms_lost_crd_race_is_shown_and_counts_as_nothing_else() {
    let race = "error updating CRD \"apps.upgrade-gate.dev\": Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"apps.upgrade-gate.dev\": the object has been modified; please apply your changes to the latest version and try again";
    let plan = |run_again| Fact::InstallPlanFailed {
        plan: "install-nq8dd".into(),
        csvs: vec!["upgrade-gate.v7.10.1".into()],
        message: race.into(),
        run_again,
    };
    let without = judge(&events(gated()), &chain(), &checks());
    for run_again in [Some(1), None] {
        let mut facts = gated();
        facts.push((150, plan(run_again)));
        let with = judge(&events(facts), &chain(), &checks());
        let line = format!("+15.0 s: {}", plan(run_again));
        assert!(with.evidence.contains(&line), "{:#?}", with.evidence);
        let mut shown = with.clone();
        shown.evidence.retain(|other| *other != line);
        assert_eq!(shown, without, "the plan's failure counted as something");
    }
}

/// The admission policy's refusal, as the API server words it.
const POLICY_REFUSAL: &str = "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev-ns' denied request: upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose upgrade has not completed";

fn deployed(release: &str, accepted: bool) -> Fact {
    Fact::Deployed {
        release: release.into(),
        accepted,
        message: if accepted {
            String::new()
        } else {
            POLICY_REFUSAL.into()
        },
    }
}

/// An apply that failed for another cause than the policy.
fn failed(release: &str, message: &str) -> Fact {
    Fact::Deployed {
        release: release.into(),
        accepted: false,
        message: message.into(),
    }
}

fn helm_chain() -> Chain {
    Chain {
        deployer: Deployer::Helm,
        ..chain()
    }
}

/// Helm pushing 7.10.0 then 7.10.1 at once, the policy refusing 7.10.1
/// until 7.10.0's upgrade completed.
fn pushed() -> Vec<(i64, Fact)> {
    vec![
        (-100, migration(1)),
        (-100, migration(2)),
        (0, deployed("7.10.0", true)),
        (10, deployed("7.10.1", false)),
        (20, pod("op-a", "7.9.3", PodChange::Stopping)),
        (25, pod("op-b", "7.10.0", PodChange::Created)),
        (30, pod("op-b", "7.10.0", PodChange::Started)),
        (40, job("7.10.0", JobChange::Created)),
        (300, migration(3)),
        (300, migration(4)),
        (400, deployed("7.10.1", false)),
        (416, job("7.10.0", JobChange::Succeeded)),
        (418, app("7.10.0", true)),
        (428, deployed("7.10.1", true)),
        (429, pod("op-b", "7.10.0", PodChange::Stopping)),
        (430, pod("op-c", "7.10.1", PodChange::Created)),
        (440, pod("op-c", "7.10.1", PodChange::Started)),
        (500, migration(5)),
        (518, app("7.10.1", true)),
    ]
}

#[test]
fn a_chain_pushed_by_a_deployer_and_refused_until_complete_is_held() {
    let verdict = judge(&events(pushed()), &helm_chain(), &checks());
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    // Refused from the first push (+1.0 s) to the accepted one (+42.8 s).
    assert_eq!(
        verdict.pending_seconds.map(|s| (s * 10.0).round()),
        Some(418.0)
    );
    // The Job succeeded 40.6 s after the first push of 7.10.1.
    assert_eq!(
        verdict.load_margin_seconds.map(|s| (s * 10.0).round()),
        Some(406.0)
    );
    // Accepted 1.0 s after 7.10.0's upgrade completed (+41.8 s).
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(10.0)
    );
    // Under OLM the same facts do not end: no CSV, no gate.
    let verdict = judge(&events(pushed()), &chain(), &checks());
    assert!(verdict.damaged, "{:#?}", verdict.evidence);
}

#[test]
fn olm_v1_refusing_the_next_release_until_complete_is_judged_as_a_deployer() {
    // Time zero is the ClusterExtension's switch to the next channel;
    // then OLM v1's revisions are the applies.
    let mut facts = pushed();
    facts.insert(
        0,
        (
            -5,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
    );
    let v1 = Chain {
        deployer: Deployer::OlmV1,
        ..chain()
    };
    let verdict = judge(&events(facts), &v1, &checks());
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.contains("after OLM v1 first applied 7.10.1")),
        "{:#?}",
        verdict.evidence
    );
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(10.0)
    );
}

#[test]
fn a_deployer_let_through_before_completion_races_and_a_missing_end_damages() {
    // No policy: 7.10.1 accepted at once, its pod before 7.10.0 completed.
    let mut facts: Vec<(i64, Fact)> = pushed()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::Deployed { release, .. } if release == "7.10.1"))
        .collect();
    facts.push((10, deployed("7.10.1", true)));
    facts.push((35, pod("op-d", "7.10.1", PodChange::Created)));
    let verdict = judge(&events(facts), &helm_chain(), &checks());
    assert!(verdict.raced, "{:#?}", verdict.evidence);
    // The last release never applied: the chain did not end.
    let facts: Vec<(i64, Fact)> = pushed()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == "7.10.1"))
        .collect();
    let verdict = judge(&events(facts), &helm_chain(), &checks());
    assert!(verdict.damaged, "{:#?}", verdict.evidence);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.contains("release 7.10.1 applied by the deployer")),
        "{:#?}",
        verdict.evidence
    );
    // Applied, but its operator pod never seen: a hole.
    let facts: Vec<(i64, Fact)> = pushed()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::Pod { release, .. } if release == "7.10.1"))
        .collect();
    let verdict = judge(&events(facts), &helm_chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
}

/// A pipeline pushing 7.10.1 at once may replace 7.10.0 before its
/// Deployment made a pod: no pod of it ever existed, and the run raced
/// (not a hole in the record).
#[test]
fn a_release_replaced_before_its_pod_existed_raced() {
    let facts = vec![
        (-100, migration(1)),
        (-100, migration(2)),
        (0, deployed("7.10.0", true)),
        (11, deployed("7.10.1", true)),
        (12, pod("op-a", "7.9.3", PodChange::Stopping)),
        (16, pod("op-c", "7.10.1", PodChange::Created)),
        (28, pod("op-c", "7.10.1", PodChange::Started)),
        (190, job("7.10.1", JobChange::Created)),
        (290, migration(5)),
    ];
    let verdict = judge(&events(facts.clone()), &helm_chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Raced,
        "{:#?}",
        verdict.evidence
    );
    // The last release with no pod at all is still a hole.
    let facts: Vec<(i64, Fact)> = facts
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::Pod { release, .. } if release == "7.10.1"))
        .collect();
    let verdict = judge(&events(facts), &helm_chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn the_feature_requests_race_is_judged_raced_not_necessarily_damaged() {
    // Gate off: 7.10.0 never reconciled (waiting for a lease), 7.10.1
    // replaced it and upgraded the schema on its own.
    let raced = vec![
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (25, pod("op-b", "7.10.0", PodChange::Created)),
        (40, phase("7.10.0", "Succeeded", "InstallSucceeded")),
        (
            75,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (76, phase("7.10.1", "Pending", "")),
        (78, phase("7.10.1", "InstallReady", "")),
        (80, pod("op-b", "7.10.0", PodChange::Stopping)),
        (90, pod("op-c", "7.10.1", PodChange::Created)),
        (250, job("7.10.1", JobChange::Created)),
        (500, migration(3)),
        (500, migration(4)),
        (500, migration(5)),
        (510, phase("7.10.1", "Succeeded", "")),
        (518, app("7.10.1", true)),
        (523, gate_true("7.10.1")),
    ];
    let verdict = judge(&events(raced), &chain(), &checks());
    assert!(verdict.raced);
    assert_eq!(
        verdict.verdict,
        RunVerdict::Raced,
        "{:#?}",
        verdict.evidence
    );
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.contains("never created an upgrade Job"))
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("RACED"))
    );
    assert_eq!(verdict.load_ok, None);
}

#[test]
fn a_restarted_operator_pod_of_the_same_release_is_no_race() {
    let mut facts = gated();
    facts.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
    facts.push((210, pod("op-b2", "7.10.0", PodChange::Created)));
    facts.push((421, pod("op-b2", "7.10.0", PodChange::Stopping)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(!verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn an_operator_stopped_before_verification_raced_even_after_its_job() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
        .collect();
    facts.push((440, app("7.10.0", true)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn a_gate_opened_by_someone_else_is_not_a_verification() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
        .collect();
    facts.push((
        200,
        Fact::ConditionSpec {
            release: "7.10.0".into(),
            status: Some("True".into()),
            // What `upgrade-gate release` writes by default.
            reason: Some(VERIFIED_REASON.into()),
            message: Some("upgrade-gate release".into()),
            generation: 4,
        },
    ));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn a_small_load_is_said_never_silently() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| {
            !matches!(
                fact,
                Fact::Job {
                    change: JobChange::Succeeded,
                    ..
                }
            )
        })
        .collect();
    facts.push((130, job("7.10.0", JobChange::Succeeded)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert_eq!(verdict.load_ok, Some(false));
    // Held only with the load check passed (the old report counted
    // this run as not raced).
    assert!(!verdict.raced);
    assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("LOAD TOO SMALL"))
    );
}

#[test]
fn each_kind_of_damage_is_found_and_named() {
    type Damage = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
    let cases: [(&str, Damage); 9] = [
        ("schema not at target", |_, checks| {
            checks.schema = Err("V5 pending".into());
        }),
        ("cut off", |_, checks| {
            checks.history.pop();
        }),
        ("applied twice (history)", |facts, _| {
            facts.push((
                510,
                Fact::MigrationApplied {
                    version: 4,
                    name: "m4".into(),
                    applied_on: "2023-11-14T22:14:00Z".into(),
                },
            ));
        }),
        ("applied twice (jobs)", |facts, _| {
            for pod in ["a", "b"] {
                facts.push((
                    450,
                    Fact::PodExited {
                        pod: pod.into(),
                        kind: PodKind::Job,
                        release: "7.10.0".into(),
                        container: "app-db-upgrade".into(),
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: r#"{"applied": [{"version": 4}]}"#.into(),
                    },
                ));
            }
        }),
        ("out of order", |facts, _| {
            facts.retain(|(_, fact)| *fact != migration(3));
            facts.push((301, migration(3)));
        }),
        ("rolled back", |facts, _| {
            facts.push((305, Fact::MigrationRemoved { version: 4 }));
        }),
        ("not at the end", |facts, _| {
            facts.retain(|(_, fact)| *fact != gate_true("7.10.1"));
        }),
        ("data changed", |_, checks| {
            checks.data_after.executions.digest = "other".into();
        }),
        ("write lost", |_, checks| {
            checks.writer.lost.push(WriteDamage {
                id: 1001,
                acknowledged_at: at(300),
                found: None,
            });
        }),
    ];
    for (case, damage) in cases {
        let mut facts = gated();
        let mut end = checks();
        damage(&mut facts, &mut end);
        let verdict = judge(&events(facts), &chain(), &end);
        assert!(verdict.damaged, "{case}: {:#?}", verdict.evidence);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("DAMAGED")),
            "{case}"
        );
        assert!(!verdict.raced, "{case}");
    }
}

#[test]
fn a_jump_over_the_middle_release_is_no_race() {
    let jump = Chain {
        middle: None,
        middle_schema: None,
        ..chain()
    };
    let facts = vec![
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (
            30,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (40, phase("7.10.1", "Pending", "")),
        (42, phase("7.10.1", "InstallReady", "")),
        (45, pod("op-c", "7.10.1", PodChange::Created)),
        (200, migration(3)),
        (200, migration(4)),
        (200, migration(5)),
        (210, phase("7.10.1", "Succeeded", "")),
        (218, app("7.10.1", true)),
        (223, gate_true("7.10.1")),
    ];
    let verdict = judge(&events(facts.clone()), &jump, &checks());
    assert!(!verdict.raced);
    // Judged by what it shows: it jumped; nothing was there to hold.
    assert_eq!(
        verdict.verdict,
        RunVerdict::Jumped,
        "{:#?}",
        verdict.evidence
    );
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert!(verdict.evidence[0].contains("went straight to 7.10.1"));
    // A release installed between all the same: not judged, inconclusive.
    let mut through = facts.clone();
    through.push((
        20,
        Fact::CsvCreated {
            release: "7.10.0".into(),
        },
    ));
    let verdict = judge(&events(through), &jump, &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
    assert!(
        verdict.inconclusive[0].contains("installed 7.10.0"),
        "{:?}",
        verdict.inconclusive
    );
    // Its last release never past Pending: stuck, whatever "no holes" says.
    let pending: Vec<(i64, Fact)> = facts.into_iter().filter(|(at, _)| *at < 42).collect();
    let verdict = judge(&events(pending), &jump, &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Stuck,
        "{:#?}",
        verdict.evidence
    );
}

/// A pushed run whose next release the policy refused to the end is not
/// held: its own verdict, stuck, in the JSON and the picture alike.
#[test]
fn a_pushed_run_whose_next_release_was_never_accepted_is_stuck_not_held() {
    let facts: Vec<(i64, Fact)> = pushed()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == "7.10.1"))
        .filter(|(_, fact)| !matches!(fact, Fact::Pod { release, .. } if release == "7.10.1"))
        .chain([(440, deployed("7.10.1", false)), (460, deployed("7.10.1", false))])
        .collect();
    for deployer in [Deployer::Helm, Deployer::Kubectl, Deployer::OlmV1] {
        let chain = Chain {
            deployer,
            ..chain()
        };
        let verdict = judge(&events(facts.clone()), &chain, &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Stuck,
            "{deployer:?}: {:#?}",
            verdict.evidence
        );
        assert!(
            verdict.damaged,
            "the chain did not end: {:#?}",
            verdict.evidence
        );
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("STUCK: 7.10.1 never moved on")),
            "{:#?}",
            verdict.evidence
        );
        assert!(
            verdict.evidence.iter().any(|line| line.contains(
                "refused by the admission policy 4 times from +1.0 s on; never accepted"
            )),
            "{:#?}",
            verdict.evidence
        );
    }
    // Under OLM v0: 7.10.1's CSV never past Pending.
    let pending: Vec<(i64, Fact)> = gated().into_iter().filter(|(at, _)| *at < 420).collect();
    let verdict = judge(&events(pending), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Stuck,
        "{:#?}",
        verdict.evidence
    );
}

/// A failed apply is the policy's refusal only in the policy's words:
/// other failures are counted apart, by cause, and one that starts the
/// load clock (the first apply of the next release) makes the run
/// inconclusive.
#[test]
fn a_pushed_runs_applies_that_failed_for_another_cause_are_no_refusals() {
    const UNREACHABLE: &str = "error: unable to recognize \"m.yaml\": Get \"https://10.88.0.2:6443/api\": dial tcp 10.88.0.2:6443: connect: connection refused";
    const RENDER: &str =
        "Error: UPGRADE FAILED: template: upgrade-gate/templates/deployment.yaml:12:3: nil pointer";
    // The first apply of 7.10.1 never reached the policy; the later ones
    // were refused by it, as in a held run.
    let mut first_failed = pushed();
    first_failed.retain(|(at, _)| *at != 10);
    first_failed.push((10, failed("7.10.1", UNREACHABLE)));
    for deployer in [Deployer::Helm, Deployer::Kubectl] {
        let chain = Chain {
            deployer,
            ..chain()
        };
        let verdict = judge(&events(first_failed.clone()), &chain, &checks());
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{deployer:?}: {:#?}",
            verdict.evidence
        );
        assert!(
            verdict.inconclusive[0].contains("first apply of 7.10.1 at +1.0 s failed for another cause than the admission policy (the API server not reached"),
            "{:?}",
            verdict.inconclusive
        );
        // Refused once by the policy (+40.0 s), not twice.
        assert!(
            verdict.evidence.iter().any(|line| line.contains(
                "refused by the admission policy 1 times from +40.0 s on; accepted at +42.8 s"
            )),
            "{:#?}",
            verdict.evidence
        );
        assert_eq!(verdict.load_ok, None);
    }
    // Nothing reached the policy: every apply of 7.10.1 failed otherwise
    // until one went through after completion. Once judged held.
    let mut nothing_reached = pushed();
    nothing_reached.retain(|(at, _)| *at != 10 && *at != 400);
    nothing_reached.extend([
        (10, failed("7.10.1", RENDER)),
        (400, failed("7.10.1", RENDER)),
    ]);
    let verdict = judge(&events(nothing_reached), &helm_chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
    assert!(
        verdict.evidence.iter().any(|line| line.contains("failed for another cause than the admission policy (not its refusals): the manifests not rendered ×2 (first at +1.0 s")),
        "{:#?}",
        verdict.evidence
    );
    assert!(
        verdict.evidence.iter().any(|line| line
            .contains("accepted at +42.8 s with no refusal by the admission policy before it")),
        "{:#?}",
        verdict.evidence
    );
    // A failure after the policy's first refusal starts no clock: held,
    // the failure counted apart.
    let mut later = pushed();
    later.push((200, failed("7.10.1", UNREACHABLE)));
    let verdict = judge(&events(later), &helm_chain(), &checks());
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.contains("the API server not reached ×1 (first at +20.0 s")),
        "{:#?}",
        verdict.evidence
    );
    assert_eq!(
        verdict.pending_seconds.map(|s| (s * 10.0).round()),
        Some(418.0)
    );
}

/// Every hole in a run's record makes it inconclusive, whether it
/// looked held or raced; none is passed silently.
#[test]
fn every_hole_in_the_record_makes_the_run_inconclusive() {
    type Hole = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
    let holes: [(&str, Hole); 9] = [
        ("a failed watch", |facts, _| {
            facts.push((
                100,
                Fact::WatchError {
                    watch: "pods".into(),
                    error: "connection reset".into(),
                },
            ));
        }),
        ("a relisted watch", |facts, _| {
            facts.push((
                100,
                Fact::WatchRelisted {
                    watch: "CSVs".into(),
                },
            ));
        }),
        ("a failed history read", |facts, _| {
            facts.push((
                100,
                Fact::HistoryReadFailed {
                    error: "connecting: timed out".into(),
                },
            ));
        }),
        ("an unreadable Job outcome", |facts, _| {
            facts.push((
                417,
                Fact::PodExited {
                    pod: "shop-db-7-10-0-1-x".into(),
                    kind: PodKind::Job,
                    release: "7.10.0".into(),
                    container: "app-db-upgrade".into(),
                    exit_code: 0,
                    reason: "Completed".into(),
                    message: "{\"applied\": [{\"versio".into(),
                },
            ));
        }),
        ("the last release's pod never seen", |facts, _| {
            facts.retain(|(_, fact)| *fact != pod("op-c", "7.10.1", PodChange::Created));
        }),
        ("no write acknowledged after the rewrite", |_, checks| {
            checks
                .writer
                .acknowledged_in
                .remove(&ExecutionsLayout::TypedColumns);
        }),
        (
            "an error of an unexpected kind met by the writer",
            |_, checks| {
                checks.writer.failed.unexpected = 1;
                checks
                    .writer
                    .unexpected
                    .push((at(300), "unexpected message from server".into()));
            },
        ),
        ("the load check not passed", |facts, _| {
            for (at, fact) in facts.iter_mut() {
                if *fact == job("7.10.0", JobChange::Succeeded) {
                    *at = 90;
                }
            }
            facts.sort_by_key(|(at, _)| *at);
        }),
        ("the load not measurable", |facts, _| {
            facts.retain(|(_, fact)| !matches!(fact, Fact::CsvCreated { .. }));
        }),
    ];
    for (hole, make) in holes {
        let mut facts = gated();
        let mut end = checks();
        make(&mut facts, &mut end);
        let verdict = judge(&events(facts), &chain(), &end);
        assert_eq!(
            verdict.verdict,
            RunVerdict::Inconclusive,
            "{hole}: {:#?}",
            verdict.evidence
        );
        assert!(!verdict.inconclusive.is_empty(), "{hole}");
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("INCONCLUSIVE")),
            "{hole}"
        );
    }
    // A race seen through a hole is not a clean race either.
    let mut raced: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| *fact != pod("op-b", "7.10.0", PodChange::Stopping))
        .collect();
    raced.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
    let verdict = judge(&events(raced.clone()), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Raced,
        "{:#?}",
        verdict.evidence
    );
    raced.push((
        100,
        Fact::WatchRelisted {
            watch: "pods".into(),
        },
    ));
    let verdict = judge(&events(raced), &chain(), &checks());
    assert!(verdict.raced);
    assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
}

#[test]
fn the_writers_failures_are_told_by_cause_and_only_the_unexpected_is_a_hole() {
    let mut end = checks();
    end.writer.failed = WriteFailures {
        refused: 20,
        sql_errors: [("42703".to_owned(), 1)].into(),
        connections_lost: 2,
        unexpected: 0,
    };
    end.writer.unknown = 1;
    let verdict = judge(&events(gated()), &chain(), &end);
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged);
    let told = verdict
        .evidence
        .iter()
        .find(|line| line.starts_with("writer:"))
        .expect("the writer's line");
    assert!(
        told.contains(
            "failed: 20 refused, 1 other SQL error (42703 ×1), 2 lost connections; 1 of unknown outcome"
        ),
        "{told}"
    );

    end.writer.failed.unexpected = 1;
    end.writer
        .unexpected
        .push((at(300), "no integrations to write executions of".into()));
    let verdict = judge(&events(gated()), &chain(), &end);
    assert_eq!(verdict.verdict, RunVerdict::Inconclusive);
    assert_eq!(
        verdict.inconclusive,
        [
            "+30.0 s: the writer met an error of an unexpected kind (no integrations to write executions of): neither refused, an SQL error nor a lost connection, so its counts by cause are not whole"
        ]
    );
}

#[test]
fn a_watch_healed_before_time_zero_is_no_hole_and_one_still_broken_is() {
    let error = |at: i64| {
        (
            at,
            Fact::WatchError {
                watch: "Apps".into(),
                error: "too old resource version: 848 (887): Expired".into(),
            },
        )
    };
    let relisted = |at: i64, watch: &str| {
        (
            at,
            Fact::WatchRelisted {
                watch: watch.into(),
            },
        )
    };
    // Lost and listed again during the set-up: held, as without it.
    let mut healed = gated();
    healed.extend([error(-50), relisted(-49, "Apps")]);
    let verdict = judge(&events(healed), &chain(), &checks());
    assert_eq!(verdict.verdict, RunVerdict::Held, "{:#?}", verdict.evidence);
    // Lost before zero, listed again only after it: a hole.
    let mut late = gated();
    late.extend([error(-50), relisted(5, "Apps")]);
    let verdict = judge(&events(late), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
    // Another watch's relist heals nothing.
    let mut other = gated();
    other.extend([error(-50), relisted(-49, "pods")]);
    let verdict = judge(&events(other), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn a_watch_gap_the_run_answered_for_is_no_hole_and_one_outside_its_span_is() {
    let mut restarted = gated();
    restarted.extend([
        (
            5,
            Fact::WatchError {
                watch: "pods".into(),
                error: "connection refused".into(),
            },
        ),
        (
            8,
            Fact::WatchRelisted {
                watch: "pods".into(),
            },
        ),
    ]);
    let answered = |from: i64, until: i64| EndChecks {
        answered: vec![AnsweredGap {
            from: at(from),
            until: at(until),
            evidence: vec!["7.10.1 never left Pending".into()],
        }],
        ..checks()
    };
    let unanswered = judge(&events(restarted.clone()), &chain(), &checks());
    assert_eq!(
        unanswered.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        unanswered.evidence
    );
    let whole = judge(&events(restarted.clone()), &chain(), &answered(4, 9));
    assert_eq!(whole.verdict, RunVerdict::Held, "{:#?}", whole.evidence);
    assert!(
        whole
            .evidence
            .iter()
            .any(|line| line.contains("answers for the span: 7.10.1 never left Pending")),
        "{:#?}",
        whole.evidence
    );
    // Listed again after the span: that relist is still a hole.
    let short = judge(&events(restarted), &chain(), &answered(4, 7));
    assert_eq!(
        short.verdict,
        RunVerdict::Inconclusive,
        "{:#?}",
        short.evidence
    );
}

#[test]
fn a_chain_waiting_for_a_person_at_its_last_release_has_stopped() {
    let gave_up = |phase: &str| Fact::AppStatus {
        app: "shop".into(),
        phase: "Degraded".into(),
        database_release: Some("7.10.1".into()),
        ready: false,
        upgrade: Some("7.9.3 -> 7.10.1 shop-db-7-10-1-1 (GaveUp)".into()),
        upgrade_phase: Some(phase.into()),
    };
    let mut facts = vec![
        (10, phase("7.10.1", "Succeeded", "InstallSucceeded")),
        (20, gave_up("Verifying")),
    ];
    assert_eq!(chain_stopped(&events(facts.clone()), &chain()), None);
    for waiting in ["GaveUp", "Refused"] {
        let mut stopped = facts.clone();
        stopped.push((30, gave_up(waiting)));
        let why = chain_stopped(&events(stopped), &chain())
            .unwrap_or_else(|| panic!("{waiting}: not stopped"));
        assert!(why.contains("waits for a person"), "{why}");
    }
    // Not while the last release is not the one running.
    facts.push((30, gave_up("GaveUp")));
    facts[0] = (
        10,
        phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
    );
    assert_eq!(chain_stopped(&events(facts), &chain()), None);
}

/// Under the deployers the policy holds, the last release is in place
/// once it was applied (there is no CSV).
#[test]
fn a_pushed_chain_waiting_for_a_person_has_stopped_once_its_last_release_was_applied() {
    let gave_up = Fact::AppStatus {
        app: "shop".into(),
        phase: "Degraded".into(),
        database_release: Some("7.9.3".into()),
        ready: false,
        upgrade: Some("7.9.3 -> 7.10.1 shop-db-7-10-1-1 (GaveUp)".into()),
        upgrade_phase: Some("GaveUp".into()),
    };
    let applied = |accepted: bool| Fact::Deployed {
        release: "7.10.1".into(),
        accepted,
        message: String::new(),
    };
    for deployer in [Deployer::Helm, Deployer::OlmV1, Deployer::Kubectl] {
        let chain = Chain {
            deployer,
            ..chain()
        };
        let refused = events(vec![(10, applied(false)), (20, gave_up.clone())]);
        assert_eq!(chain_stopped(&refused, &chain), None, "{deployer:?}");
        let accepted = events(vec![(10, applied(true)), (20, gave_up.clone())]);
        let why =
            chain_stopped(&accepted, &chain).unwrap_or_else(|| panic!("{deployer:?}: not stopped"));
        assert!(why.contains("waits for a person"), "{why}");
    }
}

/// After a fault the operator repaired, OLM may let the next release
/// through only before, or within its reaction bound after, its status
/// held the restored answer (the old check accepted any time before
/// the gate was released again).
#[test]
fn a_pass_through_after_the_restored_status_counts_only_within_the_bound() {
    let copied = at(100);
    // (through, released, expected)
    let cases = [
        (None, None, AfterRestore::Held),
        (None, Some(at(400)), AfterRestore::Held),
        // After the operator released it: the normal end, held.
        (Some(at(410)), Some(at(400)), AfterRestore::Held),
        (
            Some(at(95)),
            None,
            AfterRestore::ThroughWithinBound { after: -0.5 },
        ),
        (
            Some(at(140)),
            Some(at(400)),
            AfterRestore::ThroughWithinBound { after: 4.0 },
        ),
        (
            Some(at(150)),
            Some(at(400)),
            AfterRestore::ThroughWithinBound { after: 5.0 },
        ),
        (
            Some(at(151)),
            Some(at(400)),
            AfterRestore::ThroughLate { after: 5.1 },
        ),
        (
            Some(at(300)),
            None,
            AfterRestore::ThroughLate { after: 20.0 },
        ),
    ];
    for (through, released, expected) in cases {
        let judged = match after_restore(copied, through, released, 5.0) {
            AfterRestore::ThroughWithinBound { after } => AfterRestore::ThroughWithinBound {
                after: (after * 10.0).round() / 10.0,
            },
            AfterRestore::ThroughLate { after } => AfterRestore::ThroughLate {
                after: (after * 10.0).round() / 10.0,
            },
            held => held,
        };
        assert_eq!(
            judged, expected,
            "through {through:?}, released {released:?}"
        );
    }
}
