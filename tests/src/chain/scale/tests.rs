//! The fleet measurement's table tests: [`super::verdict`] on each bound
//! missed or count not trusted, its lines, and the operator's upgrade limit
//! read from its pod.

use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).expect("valid")
}

/// 100 Apps as measured on this machine: within every bound.
fn observed() -> Observed {
    Observed {
        apps: 100,
        limit: 4,
        jobs_at_once: 4,
        jobs_at_max: (0..4).map(|i| format!("app-{i:03}-db-7-10-1-1")).collect(),
        jobs_seen: 100,
        job_watch_errors: 0,
        first_job_watch_error: None,
        to_last_ready: Some(163.0),
        last_ready: Some(at(163)),
        gate_opened: Some(at(163)),
        gate_seen_early: Vec::new(),
        sessions_peak: 30,
        max_connections: 100,
        session_samples: SessionSamples {
            taken: 900,
            failed: 0,
            first_error: None,
        },
        goal: GOAL,
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Met,
    Missed,
    Inconclusive,
}

#[test]
fn a_fleet_upgrade_misses_on_each_bound_and_is_inconclusive_on_a_failed_count() {
    type Change = fn(&mut Observed);
    let cases: [(&str, Change, Expect, &str); 18] = [
        ("as measured", |_| {}, Expect::Met, ""),
        (
            "five Jobs at once",
            |o| o.jobs_at_once = 5,
            Expect::Missed,
            "5 upgrade Jobs ran at once (app-000-db-7-10-1-1, app-001-db-7-10-1-1, app-002-db-7-10-1-1, app-003-db-7-10-1-1), over the operator's limit of 4",
        ),
        (
            "the watch failed, four at once",
            |o| {
                o.job_watch_errors = 2;
                o.first_job_watch_error = Some("connection reset".into());
            },
            Expect::Inconclusive,
            "the Job watch failed (2 times, first: connection reset): Jobs may have started and finished unseen, so \"at most 4 at once\" is a lower bound, not a count",
        ),
        (
            "the watch failed, five at once: a miss all the same",
            |o| {
                o.job_watch_errors = 1;
                o.jobs_at_once = 5;
            },
            Expect::Missed,
            "over the operator's limit of 4",
        ),
        (
            "the watch saw fewer Jobs than Apps",
            |o| o.jobs_seen = 98,
            Expect::Inconclusive,
            "the Job watch saw 98 upgrade Jobs for 100 Apps",
        ),
        (
            "the last App Ready after the goal",
            |o| {
                o.to_last_ready = Some(181.4);
                o.last_ready = Some(at(181));
                o.gate_opened = Some(at(182));
            },
            Expect::Missed,
            "the last App was Ready 181 s after 7.10.1's operator started: over the goal of 180 s",
        ),
        (
            "the last App Ready at the goal",
            |o| o.to_last_ready = Some(180.0),
            Expect::Met,
            "",
        ),
        (
            "no Ready time",
            |o| {
                o.to_last_ready = None;
                o.last_ready = None;
            },
            Expect::Inconclusive,
            "when the last App turned Ready cannot be read",
        ),
        (
            "the gate open a second before the last App Ready",
            |o| o.gate_opened = Some(at(162)),
            Expect::Missed,
            "the gate opened before the last App was Ready: Upgradeable=True at 2023-11-14T22:16:02Z, the last App Ready at 2023-11-14T22:16:03Z",
        ),
        (
            "the gate open in the same second",
            |o| o.gate_opened = o.last_ready,
            Expect::Met,
            "",
        ),
        (
            "the gate seen open by the poll early",
            |o| {
                o.gate_seen_early
                    .push("Upgradeable=True seen with 97/100 Apps at 7.10.1: all verified".into());
            },
            Expect::Missed,
            "the gate opened before the last App was Ready: Upgradeable=True seen with 97/100 Apps",
        ),
        (
            "the gate's time not readable",
            |o| o.gate_opened = None,
            Expect::Inconclusive,
            "the gate opened at (no time), the last App Ready at 2023-11-14T22:16:03Z",
        ),
        (
            "PostgreSQL's sessions at its limit",
            |o| o.sessions_peak = 100,
            Expect::Missed,
            "100 PostgreSQL sessions at once reached max_connections 100",
        ),
        (
            "every session sample failed: peak 0 is no count",
            |o| {
                o.sessions_peak = 0;
                o.session_samples.failed = 900;
                o.session_samples.first_error =
                    Some("db error: FATAL: too many connections".into());
            },
            Expect::Inconclusive,
            "PostgreSQL's sessions were never counted: 900 of 900 samples failed (first: db error: FATAL: too many connections), so a peak of 0 says nothing of max_connections",
        ),
        (
            "no session sample taken",
            |o| {
                o.sessions_peak = 0;
                o.session_samples.taken = 0;
            },
            Expect::Inconclusive,
            "0 of 0 samples failed (first: none taken)",
        ),
        (
            "some session samples failed: the others counted",
            |o| o.session_samples.failed = 899,
            Expect::Met,
            "",
        ),
        (
            "a miss and a failed count: missed, the doubt said",
            |o| {
                o.to_last_ready = Some(200.0);
                o.jobs_seen = 99;
            },
            Expect::Missed,
            "and inconclusive: the Job watch saw 99 upgrade Jobs for 100 Apps",
        ),
        (
            "every bound missed at once",
            |o| {
                o.jobs_at_once = 6;
                o.to_last_ready = Some(240.0);
                o.gate_opened = Some(at(100));
                o.sessions_peak = 101;
            },
            Expect::Missed,
            "",
        ),
    ];
    for (case, change, expected, needle) in cases {
        let mut seen = observed();
        change(&mut seen);
        let outcome = verdict(&seen);
        let (kind, reasons) = match &outcome {
            Outcome::Met => (Expect::Met, Vec::new()),
            Outcome::NotMet(reasons) => (Expect::Missed, reasons.clone()),
            Outcome::Inconclusive(reasons) => (Expect::Inconclusive, reasons.clone()),
        };
        assert_eq!(kind, expected, "{case}: {reasons:#?}");
        assert!(
            needle.is_empty() || reasons.iter().any(|reason| reason.contains(needle)),
            "{case}: {needle:?} not in {reasons:#?}"
        );
        assert_eq!(kind == Expect::Met, reasons.is_empty(), "{case}");
    }
    let mut all = observed();
    all.jobs_at_once = 6;
    all.to_last_ready = Some(240.0);
    all.gate_opened = Some(at(100));
    all.sessions_peak = 101;
    assert!(
        matches!(verdict(&all), Outcome::NotMet(reasons) if reasons.len() == 4),
        "each miss said once"
    );
}

#[test]
fn the_verdict_is_said_after_the_figures_a_reason_a_line() {
    assert_eq!(verdict_lines(&Outcome::Met).len(), 1);
    assert_eq!(
        verdict_lines(&Outcome::NotMet(vec!["one".into(), "two".into()])),
        ["bench-scale: MISSED:", "  - one", "  - two"]
    );
    assert_eq!(
        verdict_lines(&Outcome::Inconclusive(vec!["why".into()]))[0],
        "bench-scale: INCONCLUSIVE (a figure cannot be trusted):"
    );
}

fn operator_pod(args: &[&str], env: Option<&str>) -> Pod {
    let env: Vec<Value> = env
        .map(|value| json!({"name": "UPGRADE_GATE_MAX_CONCURRENT_UPGRADES", "value": value}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "app-operator-x"},
        "spec": {"containers": [
            {"name": "upgrade-gate", "args": ["hold", "--max-concurrent-upgrades", "9"]},
            {"name": "app-operator", "command": ["app-operator"], "args": args, "env": env}
        ]}
    }))
    .expect("a pod")
}

#[test]
fn the_limit_is_the_operators_flag_else_its_environment_else_the_default() {
    let default = usize::from(app::operator::queue::DEFAULT_MAX_CONCURRENT_UPGRADES);
    let cases = [
        (vec!["--log-format", "json", "run"], None, Some(default)),
        (vec!["run"], Some("2"), Some(2)),
        (
            vec!["run", "--max-concurrent-upgrades", "8"],
            Some("2"),
            Some(8),
        ),
        (vec!["run", "--max-concurrent-upgrades=6"], None, Some(6)),
        (vec!["run"], Some("many"), None),
    ];
    for (args, env, expected) in cases {
        assert_eq!(
            upgrade_limit(&operator_pod(&args, env)),
            expected,
            "{args:?} {env:?}"
        );
    }
    let no_operator: Pod = serde_json::from_value(json!({
        "metadata": {"name": "other"},
        "spec": {"containers": [{"name": "other"}]}
    }))
    .expect("a pod");
    assert_eq!(upgrade_limit(&no_operator), None);
}
