//! The table tests of Flux's health check (`health.rs`): a run that keeps
//! every rule, and for each rule a run that breaks it, with the words that
//! say so.

use super::*;
use crate::chain::judge::health::{
    dependent_after, flux_health, held_while_in_progress, ready_after_complete,
};

const H: &str = "app-operator-health";
const D: &str = "app-after-upgrade";

fn record(release: &str, state: &str) -> Fact {
    Fact::AdmissionRecord {
        operator: "app-operator".into(),
        release: release.into(),
        state: state.into(),
    }
}

fn ready(name: &str, status: &str, reason: &str, message: &str) -> Fact {
    Fact::KustomizationReady {
        kustomization: name.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

fn set_up() -> Fact {
    Fact::HealthCheckSetUp {
        kustomization: H.into(),
        dependent: D.into(),
    }
}

/// As on the cluster: 7.9.3 complete before zero; 7.10.0 in progress from
/// +1.1 s to +23.8 s, 7.10.1 from +24.9 s to +45.3 s; the check created at
/// +1.2 s, checking, Ready at +47.0 s; its dependent waiting, applied at
/// +50.0 s.
fn kept() -> Vec<(i64, Fact)> {
    vec![
        (-50, set_up()),
        (-40, record("7.9.3", "InProgress")),
        (-20, record("7.9.3", "Complete")),
        (
            0,
            Fact::SourceMoved {
                source: "app-operator".into(),
                release: "7.10.0".into(),
            },
        ),
        (11, record("7.10.0", "InProgress")),
        (
            13,
            ready(H, "Unknown", "Progressing", "Reconciliation in progress"),
        ),
        (
            13,
            ready(
                D,
                "False",
                "DependencyNotReady",
                "dependency 'ns/app-operator-health' is not ready",
            ),
        ),
        (
            15,
            ready(
                H,
                "Unknown",
                "Progressing",
                "Running health checks for revision app-operator-health@sha256:ab with a timeout of 10m0s",
            ),
        ),
        (238, record("7.10.0", "Complete")),
        (249, record("7.10.1", "InProgress")),
        (453, record("7.10.1", "Complete")),
        (
            470,
            ready(
                H,
                "True",
                "ReconciliationSucceeded",
                "Applied revision: app-operator-health@sha256:ab",
            ),
        ),
        (
            500,
            ready(
                D,
                "True",
                "ReconciliationSucceeded",
                "Applied revision: app-after-upgrade@sha256:cd",
            ),
        ),
    ]
}

fn zero() -> Timestamp {
    at(0)
}

#[test]
fn a_check_that_waits_for_the_upgrade_keeps_every_rule_with_its_figures() {
    let events = events(kept());
    let mut evidence = Vec::new();
    assert_eq!(
        flux_health(&events, zero(), &mut evidence),
        Vec::<String>::new()
    );
    assert_eq!(
        evidence,
        vec![
            "Flux's health check: Kustomization app-operator-health not Ready while the record said the operator's upgrade InProgress (+1.1 s to +23.8 s); at +1.5 s: Ready=Unknown (Progressing) \"Running health checks for revision app-operator-health@sha256:ab with a timeout of 10m0s\"",
            "Flux's health check: Kustomization app-operator-health Ready at +47.0 s, 23.2 s after the record said 7.10.0's upgrade Complete (+23.8 s); 1.7 s after its last Complete before then (7.10.1's, +45.3 s)",
            "Flux's health check: Kustomization app-after-upgrade (dependsOn app-operator-health) applied at +50.0 s, 3.0 s after app-operator-health turned Ready",
        ]
    );
}

#[test]
fn a_run_without_the_check_is_not_judged_by_it() {
    let without = events(kept().into_iter().skip(1).collect());
    let mut evidence = Vec::new();
    assert!(flux_health(&without, zero(), &mut evidence).is_empty());
    assert!(evidence.is_empty());
    // What a test asserts the rules with says so, rather than passing.
    assert!(crate::chain::judge::health_check_rules(&without, zero()).is_none());
    let with = events(kept());
    let rules = crate::chain::judge::health_check_rules(&with, zero()).expect("set up");
    assert!(rules.iter().all(Result::is_ok), "{rules:?}");
}

/// A rule's case: its name, the facts added to [`kept`], the words.
type Case = (&'static str, Vec<(i64, Fact)>, &'static str);

#[test]
fn rule_1_a_check_ready_while_the_record_says_in_progress_fails() {
    let cases: Vec<Case> = vec![
        (
            "Ready inside the span",
            vec![(
                100,
                ready(
                    H,
                    "True",
                    "ReconciliationSucceeded",
                    "Applied revision: app-operator-health@sha256:ab",
                ),
            )],
            "Kustomization app-operator-health turned Ready at +10.0 s while the record said the operator's upgrade InProgress (+1.1 s to +23.8 s): \"Applied revision: app-operator-health@sha256:ab\"",
        ),
        (
            "Ready on the first release's Complete, before the span",
            vec![(
                5,
                ready(H, "True", "ReconciliationSucceeded", "Applied revision: x"),
            )],
            "Kustomization app-operator-health was Ready at +0.5 s already, before the record said the operator's upgrade InProgress (+1.1 s to +23.8 s): what dependsOn it could go ahead during the upgrade",
        ),
        (
            "Ready in the second after the apply, checking again before the span",
            vec![
                (
                    5,
                    ready(H, "True", "ReconciliationSucceeded", "Applied revision: x"),
                ),
                (
                    8,
                    ready(H, "Unknown", "Progressing", "Reconciliation in progress"),
                ),
            ],
            "Kustomization app-operator-health was Ready at +0.5 s already, before the record said the operator's upgrade InProgress (+1.1 s to +23.8 s): what dependsOn it could go ahead during the upgrade",
        ),
    ];
    for (case, extra, words) in cases {
        let mut facts = kept();
        facts.extend(extra);
        assert_eq!(
            held_while_in_progress(&events(facts), zero(), H),
            Err(words.to_owned()),
            "{case}"
        );
    }
    // Never seen while the record said InProgress: not put to the test.
    let late: Vec<_> = kept()
        .into_iter()
        .filter(|(tenths, fact)| {
            !(matches!(fact, Fact::KustomizationReady { .. }) && *tenths < 100)
        })
        .collect();
    assert_eq!(
        held_while_in_progress(&events(late), zero(), H),
        Err("Kustomization app-operator-health was never seen checking while the record said the operator's upgrade InProgress (+1.1 s to +23.8 s): the check was not put to the test".to_owned())
    );
    assert!(held_while_in_progress(&events(kept()), zero(), H).is_ok());
    // Checking since before the span, no change inside it: a Ready fact
    // is a change, so the last one before the span holds through it.
    let mut early: Vec<_> = kept()
        .into_iter()
        .filter(|(tenths, fact)| {
            !(matches!(fact, Fact::KustomizationReady { kustomization, .. } if kustomization == H)
                && *tenths < 100)
        })
        .collect();
    early.push((
        8,
        ready(H, "Unknown", "Progressing", "Reconciliation in progress"),
    ));
    early.sort_by_key(|(tenths, _)| *tenths);
    assert_eq!(
        held_while_in_progress(&events(early), zero(), H),
        Ok("Kustomization app-operator-health not Ready while the record said the operator's upgrade InProgress (+1.1 s to +23.8 s); at +0.8 s, in force from before the span: Ready=Unknown (Progressing) \"Reconciliation in progress\"".to_owned())
    );
}

#[test]
fn rule_2_a_check_ready_before_complete_or_never_fails() {
    let mut early: Vec<_> = kept()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::KustomizationReady { kustomization, status, .. } if kustomization == H && status == "True"))
        .collect();
    assert_eq!(
        ready_after_complete(&events(early.clone()), zero(), H),
        Err("Kustomization app-operator-health never turned Ready, although the record said 7.10.0's upgrade Complete at +23.8 s".to_owned())
    );
    early.push((
        200,
        ready(H, "True", "ReconciliationSucceeded", "Applied revision: x"),
    ));
    assert_eq!(
        ready_after_complete(&events(early), zero(), H),
        Err("Kustomization app-operator-health turned Ready at +20.0 s, before the record said 7.10.0's upgrade Complete at +23.8 s".to_owned())
    );
    assert!(ready_after_complete(&events(kept()), zero(), H).is_ok());
}

#[test]
fn rule_3_a_dependent_applied_before_the_check_was_ready_or_never_fails() {
    let without_dependent = || {
        kept()
            .into_iter()
            .filter(|(_, fact)| !matches!(fact, Fact::KustomizationReady { kustomization, status, .. } if kustomization == D && status == "True"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        dependent_after(&events(without_dependent()), zero(), H, D),
        Err(
            "Kustomization app-after-upgrade (dependsOn app-operator-health) was never applied"
                .to_owned()
        )
    );
    let mut before = without_dependent();
    before.push((
        300,
        ready(D, "True", "ReconciliationSucceeded", "Applied revision: y"),
    ));
    assert_eq!(
        dependent_after(&events(before), zero(), H, D),
        Err("Kustomization app-after-upgrade was applied at +30.0 s, before app-operator-health, which it dependsOn, turned Ready at +47.0 s".to_owned())
    );
    assert!(dependent_after(&events(kept()), zero(), H, D).is_ok());
}

#[test]
fn a_broken_rule_fails_the_run_beside_its_verdict() {
    let mut facts = kept();
    facts.push((
        100,
        ready(H, "True", "ReconciliationSucceeded", "Applied revision: x"),
    ));
    let mut evidence = Vec::new();
    let failed = flux_health(&events(facts), zero(), &mut evidence);
    assert_eq!(failed.len(), 2, "rules 1 and 2: {failed:?}");
    assert!(failed[0].starts_with(
        "Flux's health check: Kustomization app-operator-health turned Ready at +10.0 s while"
    ));
    assert!(evidence[0].starts_with("FAILED: Flux's health check: "));
    assert!(evidence[2].starts_with("Flux's health check: Kustomization app-after-upgrade"));
}
