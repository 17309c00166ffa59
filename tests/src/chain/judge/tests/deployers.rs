//! The judge's table tests of the deployers the admission policy holds
//! (Helm, kubectl, OLM v1, Flux): applies refused in the policy's words,
//! accepted, failed for another cause; held, raced, stuck or stopped.

use super::*;

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
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
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
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
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
        RunFinding::Inconclusive,
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
        RunFinding::Raced,
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
        RunFinding::Inconclusive,
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
            RunFinding::Stuck,
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
        RunFinding::Stuck,
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
            RunFinding::Inconclusive,
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
        RunFinding::Inconclusive,
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
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
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
