//! What a Job's conditions say about it: one rule, used by the operator's
//! observation and its upgrade queue, and by the tests that count Jobs.
//!
//! Owns: reading a Job's `status.conditions`. Must not touch: anything
//! else (pure functions).

use k8s_openapi::api::batch::v1::Job;

/// Whether condition `type_` of the Job is True.
pub fn condition_holds(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == type_ && c.status == "True")
        })
}

/// Its `Complete` or `Failed` condition is True (a pending `FailureTarget`
/// is not terminal yet).
pub fn is_finished(job: &Job) -> bool {
    condition_holds(job, "Complete") || condition_holds(job, "Failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn job(conditions: &[(&str, &str)]) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(type_, status)| JobCondition {
                            type_: (*type_).to_owned(),
                            status: (*status).to_owned(),
                            ..JobCondition::default()
                        })
                        .collect(),
                ),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn finished_is_complete_or_failed_true_and_nothing_else() {
        let cases: [(&[(&str, &str)], bool); 6] = [
            (&[], false),
            (&[("Complete", "True")], true),
            (&[("Failed", "True")], true),
            (&[("Complete", "False")], false),
            (&[("FailureTarget", "True")], false),
            (
                &[("SuccessCriteriaMet", "True"), ("Complete", "True")],
                true,
            ),
        ];
        for (conditions, finished) in cases {
            assert_eq!(is_finished(&job(conditions)), finished, "{conditions:?}");
        }
        assert!(!is_finished(&Job::default()));
    }
}
