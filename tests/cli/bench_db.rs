//! `tools/bench-db.sh --judge REPORT`: the verdict of `just bench-db` on
//! a written report, as the run ends with it — its exit code and what it
//! says missed. No server: the reports are made up.

use std::process::Command;

use serde_json::{Value, json};
use upgrade_gate_tests::repository_root;

/// A report as `tools/bench-db.sh` writes it (the fields the verdict reads).
fn report(ratio: Value, role: &str, runs: usize) -> Value {
    json!({
        "ours_s": 20.2,
        "by_hand_s": 19.9,
        "ratio": ratio,
        "goal_ratio": 0.8,
        "rows": 2_000_000,
        "role_statement_timeout_5s": {"result": role, "total_s": 12.1},
        "runs": vec![json!({"run": 1}); runs],
    })
}

fn judge(report: Option<&Value>) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("bench-db.json");
    if let Some(report) = report {
        std::fs::write(&path, report.to_string()).expect("the report written");
    }
    let output = Command::new(repository_root().join("tools/bench-db.sh"))
        .arg("--judge")
        .arg(&path)
        .output()
        .expect("tools/bench-db.sh runs");
    (
        output.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

#[test]
fn bench_db_exits_non_zero_when_its_ratio_misses_the_goal() {
    let cases = [
        (
            "within the goal",
            Some(report(json!(0.75), "succeeded", 3)),
            0,
            "bench-db: met: ratio 0.75 within the goal of 0.8",
        ),
        (
            "at the goal",
            Some(report(json!(0.8), "succeeded", 3)),
            0,
            "met",
        ),
        (
            "today's ratio",
            Some(report(json!(1.02), "succeeded", 2)),
            1,
            "ours took 20.2 s against 19.9 s by hand (pg_dump -Fc, pg_restore --list, psql -1): ratio 1.02 (median of 2 pairs), over the goal of 0.8",
        ),
        (
            "the role's upgrade failed",
            Some(report(
                json!(0.7),
                "FAILED: error: canceling statement due to statement timeout",
                3,
            )),
            1,
            "the upgrade as a role with statement_timeout = 5s FAILED: error: canceling statement",
        ),
        (
            "a miss beside a doubt",
            Some(report(json!(0.9), "succeeded", 0)),
            1,
            "and inconclusive: no paired runs in the report",
        ),
        (
            "no runs",
            Some(report(json!(0.7), "succeeded", 0)),
            6,
            "no paired runs in the report: nothing was measured",
        ),
        (
            "no ratio",
            Some(report(Value::Null, "succeeded", 3)),
            6,
            "no ratio in the report (None)",
        ),
        (
            "no report",
            None,
            6,
            "bench-db: INCONCLUSIVE: cannot read the report",
        ),
    ];
    for (case, report, code, needle) in cases {
        let (exit, said) = judge(report.as_ref());
        assert_eq!(exit, Some(code), "{case}: {said}");
        assert!(said.contains(needle), "{case}: {needle:?} not in {said}");
    }
}

#[test]
fn bench_db_judge_without_a_report_is_a_usage_error() {
    let output = Command::new(repository_root().join("tools/bench-db.sh"))
        .arg("--judge")
        .output()
        .expect("tools/bench-db.sh runs");
    assert_eq!(output.status.code(), Some(2));
}
