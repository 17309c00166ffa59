//! The gate loop's exact request sequences against `upgrade_gate::testing`'s
//! fake API server (OLM's OperatorCondition with the API server's 409 on a
//! stale resourceVersion, changed by the test while the loop runs): the
//! first write, quiet polls, a deletion (404, then OLM's empty
//! recreation), a foreign `True` (also one landing between the round's
//! read and its write), a rewrite that drops our entry, a decision
//! that went stale while it was being written, and a restore whose answer
//! came after the write budget (also when the object changed again before
//! the next read).
//!
//! Owns: these scenarios of `keep_gate`. Must not touch: the fake itself
//! (the gate crate owns it) or a real cluster.

use ::http::Method;
use serde_json::{Value, json};
use upgrade_gate::operator_condition::OperatorConditionClient;
use upgrade_gate::testing::{
    FakeCluster, Fault, Live, On, condition, operator_condition, sequence,
};

use super::*;
use crate::operator::gate_writer::POLL_INTERVAL;

const NAMESPACE: &str = "ops";
const NAME: &str = "upgrade-gate.v7.10.1";
const OBJECT: &str =
    "/apis/operators.coreos.com/v2/namespaces/ops/operatorconditions/upgrade-gate.v7.10.1";

/// The OperatorCondition as OLM (re)creates it: object `uid`, these spec
/// conditions.
fn created(uid: &str, conditions: Vec<Value>) -> Value {
    let mut object = operator_condition(NAMESPACE, NAME, 1, conditions, vec![]);
    object["metadata"]["uid"] = json!(uid);
    object
}

fn entry(status: &str, reason: &str, message: &str) -> Value {
    condition("Upgradeable", status, reason, message)
}

fn foreign() -> Value {
    condition("Vendor", "True", "Theirs", "kept")
}

fn closed() -> GateDecision {
    GateDecision {
        upgradeable: false,
        reason: "UpgradeInProgress",
        message: "1 of 1 App(s) not at release 7.10.1's database schema".to_owned(),
    }
}

fn open() -> GateDecision {
    GateDecision {
        upgradeable: true,
        reason: "UpgradeComplete",
        message: "all 1 App(s) are at release 7.10.1's database schema".to_owned(),
    }
}

struct Harness {
    live: Live,
    condition: OperatorConditionClient,
    memory: GateMemory,
    metrics: Metrics,
}

impl Harness {
    fn new() -> Self {
        let mut cluster = FakeCluster::new(NAMESPACE, NAME);
        cluster.object = Some(created(
            "uid-1",
            vec![
                foreign(),
                entry("False", "UpgradeInProgress", "held by the init container"),
            ],
        ));
        let (client, live) = cluster.start_live();
        let condition = OperatorConditionClient::new(client, NAMESPACE, NAME);
        Harness {
            live,
            condition,
            memory: GateMemory::default(),
            metrics: Metrics::default(),
        }
    }

    /// One round one poll interval later; the methods it sent.
    async fn round(&mut self, decision: &GateDecision, current: bool) -> (GateRound, Vec<Method>) {
        tokio::time::sleep(POLL_INTERVAL).await;
        let round = keep_gate(
            &self.condition,
            decision,
            || current,
            &mut self.memory,
            &self.metrics,
        )
        .await;
        (round, self.methods())
    }

    /// The methods sent since the last call, all for the OperatorCondition.
    fn methods(&self) -> Vec<Method> {
        let log = self.live.take_log();
        assert!(
            log.iter().all(|request| request.path == OBJECT),
            "only the OperatorCondition is asked: {:?}",
            sequence(&log)
        );
        log.into_iter().map(|request| request.method).collect()
    }

    /// Another writer sets `spec.conditions`.
    fn set_conditions(&self, conditions: Value) {
        self.live.edit(|cluster| {
            cluster.change(OBJECT, |object| object["spec"]["conditions"] = conditions);
        });
    }

    fn spec_conditions(&self) -> Value {
        self.live
            .stored(OBJECT)
            .map_or(Value::Null, |o| o["spec"]["conditions"].clone())
    }

    fn upgradeable(&self) -> (String, String) {
        let conditions = self.spec_conditions();
        let ours = conditions
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == "Upgradeable"))
            .cloned()
            .unwrap_or(Value::Null);
        (
            ours["status"].as_str().unwrap_or("absent").to_owned(),
            ours["reason"].as_str().unwrap_or("").to_owned(),
        )
    }

    fn restores(&self) -> String {
        self.metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with("app_operator_gate_restores_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn applied(round: &GateRound) -> bool {
    matches!(round, GateRound::Applied)
}

#[tokio::test(start_paused = true)]
async fn the_gate_is_written_then_polled_and_restored_after_deletion_and_foreign_writes() {
    let mut h = Harness::new();

    // First round: read, then write (read + update); foreign entry kept.
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert_eq!(
        h.spec_conditions()[0],
        foreign(),
        "foreign entries stay in place"
    );
    assert_eq!(h.restores(), "", "a first write is not a restore");

    // A recheck within the poll interval asks nothing.
    let quiet = keep_gate(&h.condition, &closed(), || true, &mut h.memory, &h.metrics).await;
    assert!(applied(&quiet));
    assert!(h.methods().is_empty());

    // Each poll: one read, no write while the object shows our answer.
    for _ in 0..3 {
        let (round, methods) = h.round(&closed(), true).await;
        assert!(applied(&round));
        assert_eq!(methods, [Method::GET]);
    }

    // Deleted: 404, nothing to write to; not applied.
    h.live.edit(|cluster| cluster.object = None);
    let (round, methods) = h.round(&closed(), true).await;
    assert!(matches!(round, GateRound::Pending));
    assert_eq!(methods, [Method::GET]);

    // OLM recreates it empty (a new uid): restored at the next poll.
    h.live
        .edit(|cluster| cluster.object = Some(created("uid-2", vec![])));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert_eq!(
        h.restores(),
        r#"app_operator_gate_restores_total{found="recreated"} 1"#
    );

    // `upgrade-gate release` (a foreign True): put back at the next poll.
    h.set_conditions(json!([entry("True", "Released", "by hand")]));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert!(
        h.restores().contains(r#"{found="other_true"} 1"#),
        "{}",
        h.restores()
    );

    // A GitOps re-apply that drops our entry (keeping a foreign one).
    h.set_conditions(json!([foreign()]));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(h.spec_conditions()[0], foreign());
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert!(
        h.restores().contains(r#"{found="entry_removed"} 1"#),
        "{}",
        h.restores()
    );
}

#[tokio::test(start_paused = true)]
async fn a_decision_that_went_stale_is_not_sent() {
    let mut h = Harness::new();
    let (round, _) = h.round(&closed(), true).await;
    assert!(applied(&round));

    // The Apps changed while the True was being written: only reads go
    // out, the object keeps False, and the loop decides again.
    let changed = keep_gate(&h.condition, &open(), || false, &mut h.memory, &h.metrics).await;
    assert!(matches!(changed, GateRound::Stale));
    assert_eq!(h.methods(), [Method::GET, Method::GET], "no update sent");
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );

    // Decided again from the latest observation: written at once (the
    // decision changed, no poll wait), not counted as a restore.
    let fresh = keep_gate(&h.condition, &open(), || true, &mut h.memory, &h.metrics).await;
    assert!(applied(&fresh));
    assert_eq!(h.methods(), [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(h.upgradeable(), ("True".into(), "UpgradeComplete".into()));
    assert_eq!(h.restores(), "");
}

#[tokio::test(start_paused = true)]
async fn a_release_between_the_read_and_the_write_is_counted_as_restored() {
    let mut h = Harness::new();
    let (round, _) = h.round(&closed(), true).await;
    assert!(applied(&round));

    // The decision moves (a new message) and, right after the round's
    // read, `upgrade-gate release` writes True: the write's own read sees
    // it, and the update undoes it.
    let moved = GateDecision {
        message: "1 of 1 App(s) not at release 7.10.1's database schema: Job running".to_owned(),
        ..closed()
    };
    h.live.edit(|cluster| {
        cluster.after_next_read(OBJECT, |object| {
            object["spec"]["conditions"] = json!([entry("True", "Released", "by hand")]);
        });
    });
    let round = keep_gate(&h.condition, &moved, || true, &mut h.memory, &h.metrics).await;
    assert!(applied(&round));
    assert_eq!(h.methods(), [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert_eq!(
        h.restores(),
        r#"app_operator_gate_restores_total{found="other_true"} 1"#
    );
}

/// A restore whose answer came too late (the API server slow under load):
/// the write is given up at its budget although the update was carried
/// out; the next read finds our answer in place, and the restore is
/// counted then, once.
#[tokio::test(start_paused = true)]
async fn a_restore_answered_after_the_budget_is_counted_at_the_next_read() {
    let mut h = Harness::new();
    let (round, _) = h.round(&closed(), true).await;
    assert!(applied(&round));

    h.set_conditions(json!([entry("True", "Released", "by hand")]));
    h.live.edit(|cluster| {
        cluster.faults = vec![Fault::answered_after(
            On::Update,
            crate::operator::gate_writer::WRITE_BUDGET * 2,
            1,
        )];
    });
    let (round, methods) = h.round(&closed(), true).await;
    assert!(matches!(round, GateRound::Pending));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into()),
        "the update was carried out"
    );
    assert_eq!(h.restores(), "", "not known yet to have landed");

    for expected in [[Method::GET], [Method::GET]] {
        let (round, methods) = h.round(&closed(), true).await;
        assert!(applied(&round));
        assert_eq!(methods, expected, "nothing more to write");
        assert_eq!(
            h.restores(),
            r#"app_operator_gate_restores_total{found="other_true"} 1"#
        );
    }
}

/// As above, but the object changes again before the next read (the next
/// `upgrade-gate release` at once): both restores are counted. A write given
/// up and not carried out before another writer's change counts once.
#[tokio::test(start_paused = true)]
async fn a_restore_answered_after_the_budget_counts_when_changed_again() {
    for (carried_out, counted) in [(true, "2"), (false, "1")] {
        let mut h = Harness::new();
        let (round, _) = h.round(&closed(), true).await;
        assert!(applied(&round));

        h.set_conditions(json!([entry("True", "Released", "by hand")]));
        let fault = if carried_out {
            Fault::answered_after(
                On::Update,
                crate::operator::gate_writer::WRITE_BUDGET * 2,
                1,
            )
        } else {
            Fault::new(On::Update, 503, usize::MAX)
        };
        h.live.edit(|cluster| cluster.faults = vec![fault]);
        let (round, _) = h.round(&closed(), true).await;
        assert!(matches!(round, GateRound::Pending));
        assert_eq!(h.restores(), "", "not known yet to have landed");
        let expected = if carried_out { "False" } else { "True" };
        assert_eq!(h.upgradeable().0, expected, "carried out: {carried_out}");

        h.live.edit(|cluster| cluster.faults.clear());
        h.set_conditions(json!([entry("True", "Released", "again, by hand")]));
        let (round, _) = h.round(&closed(), true).await;
        assert!(applied(&round));
        assert_eq!(
            h.upgradeable(),
            ("False".into(), "UpgradeInProgress".into())
        );
        assert_eq!(
            h.restores(),
            format!(r#"app_operator_gate_restores_total{{found="other_true"}} {counted}"#),
            "carried out: {carried_out}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_is_given_up_after_its_budget() {
    let mut h = Harness::new();
    // Every update conflicts (another writer keeps changing the object).
    h.live
        .edit(|cluster| cluster.faults = vec![Fault::new(On::Update, 409, usize::MAX)]);
    let started = tokio::time::Instant::now();
    let round = keep_gate(&h.condition, &closed(), || true, &mut h.memory, &h.metrics).await;
    assert!(matches!(round, GateRound::Pending));
    let took = started.elapsed();
    assert!(
        took <= crate::operator::gate_writer::WRITE_BUDGET + Duration::from_secs(2),
        "the write retried for {took:?}"
    );
    assert!(
        h.metrics
            .encode()
            .contains(r#"app_operator_reconcile_errors_total{stage="gate"} 1"#)
    );
}
