//! The client's tests: which failed update may have been applied, how a
//! failure is classified, the retries' pace and pauses, and (against a
//! mocked API server) retries cut by the deadline, permanent failures and
//! hanging requests.

use super::*;
use kube::core::Status;

#[test]
fn only_an_update_without_a_refusal_may_have_been_applied() {
    let text = || "x".to_owned();
    let cases = [
        (Obstacle::NotFound(text()), false),
        (Obstacle::Forbidden(text()), false),
        (Obstacle::Conflict(text()), false),
        (Obstacle::TooManyRequests(text()), false),
        (
            Obstacle::Rejected {
                code: 422,
                message: text(),
            },
            false,
        ),
        (
            Obstacle::ServerError {
                code: 504,
                message: text(),
            },
            true,
        ),
        (Obstacle::Unreachable(text()), true),
        (Obstacle::Timeout, true),
        (Obstacle::Unexpected(text()), true),
    ];
    for (obstacle, applied) in cases {
        assert_eq!(obstacle.may_have_been_applied(), applied, "{obstacle}");
    }
}

#[test]
fn a_try_cut_by_the_deadline_reports_the_obstacle_before_it() {
    let not_found = || Obstacle::NotFound("gone".into());
    let cases = [
        // (previous, last, cut by the deadline) -> reported
        (Some(not_found()), Obstacle::Timeout, true, not_found()),
        (
            Some(not_found()),
            Obstacle::Timeout,
            false,
            Obstacle::Timeout,
        ),
        (None, Obstacle::Timeout, true, Obstacle::Timeout),
        (
            Some(Obstacle::Timeout),
            Obstacle::Forbidden("no".into()),
            false,
            Obstacle::Forbidden("no".into()),
        ),
    ];
    for (previous, last, cut, reported) in cases {
        assert_eq!(
            reported_obstacle(previous.clone(), last.clone(), cut),
            reported,
            "{previous:?} {last:?} {cut}"
        );
    }
}

fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(Status::failure("boom", "Reason").with_code(code).boxed())
}

#[test]
fn classification_table() {
    let cases = [
        (404, "NotFound", true),
        (403, "Forbidden", true),
        (409, "Conflict", true),
        (429, "TooManyRequests", true),
        (500, "ServerError", true),
        (503, "ServerError", true),
        (400, "Rejected", false),
        (401, "Rejected", false),
        (422, "Rejected", false),
    ];
    for (code, kind, transient) in cases {
        let obstacle = Obstacle::of(&api_error(code));
        assert!(
            format!("{obstacle:?}").starts_with(kind),
            "{code}: {obstacle:?}"
        );
        assert_eq!(obstacle.is_transient(), transient, "{code}");
    }
    let unreadable = serde_json::from_str::<u8>("x").expect_err("not a number");
    let obstacle = Obstacle::of(&kube::Error::SerdeError(unreadable));
    assert!(matches!(obstacle, Obstacle::Unexpected(_)));
    assert!(!obstacle.is_transient());
    assert!(Obstacle::Timeout.is_transient());
    assert!(Obstacle::Unreachable("refused".into()).is_transient());
}

#[test]
fn retry_pace_table() {
    let conflict = Obstacle::Conflict("changed".into());
    let cases = [
        (conflict.clone(), 0, RetryPace::AtOnce),
        (conflict.clone(), 2, RetryPace::AtOnce),
        (conflict.clone(), 3, RetryPace::Short),
        (Obstacle::NotFound("gone".into()), 0, RetryPace::Short),
        (Obstacle::Forbidden("no".into()), 5, RetryPace::Short),
        (Obstacle::TooManyRequests("slow".into()), 0, RetryPace::Long),
        (
            Obstacle::ServerError {
                code: 503,
                message: "down".into(),
            },
            0,
            RetryPace::Long,
        ),
        (Obstacle::Unreachable("refused".into()), 0, RetryPace::Long),
        (Obstacle::Timeout, 0, RetryPace::Long),
    ];
    for (obstacle, conflicts, pace) in cases {
        assert_eq!(
            RetryPace::after(&obstacle, conflicts),
            pace,
            "{obstacle:?} after {conflicts} conflicts"
        );
    }
}

#[test]
fn pauses_follow_the_pace_and_a_non_conflict_resets_the_conflict_count() {
    let mut pauses = Pauses::new();
    let conflict = Obstacle::Conflict("changed".into());
    let not_found = Obstacle::NotFound("gone".into());
    for _ in 0..CONFLICTS_AT_ONCE {
        assert_eq!(pauses.after(&conflict), Duration::ZERO);
    }
    assert!(pauses.after(&conflict) > Duration::ZERO, "then it waits");
    for _ in 0..10 {
        let pause = pauses.after(&not_found);
        assert!(pause <= Duration::from_millis(1400), "{pause:?}");
    }
    assert_eq!(pauses.after(&conflict), Duration::ZERO, "count reset");
    let mut long = Vec::new();
    for _ in 0..10 {
        long.push(pauses.after(&Obstacle::Timeout));
    }
    assert!(
        long[9] >= Duration::from_secs(5),
        "backs off to 5 s: {long:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_before_the_deadline_with_the_last_obstacle() {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(30);
    let mut tries = 0;
    let result: Result<(), Error> = with_retries(deadline, "testing", || {
        tries += 1;
        async { Err(Obstacle::NotFound("gone".into())) }
    })
    .await;
    assert!(matches!(
        result,
        Err(Error::DeadlineReached {
            last: Obstacle::NotFound(_),
            ..
        })
    ));
    assert!(Instant::now() < deadline);
    assert!(
        Instant::now() > start + Duration::from_secs(20),
        "retried for most of the time"
    );
    assert!(tries > 5, "retried with backoff, tries: {tries}");
}

#[tokio::test(start_paused = true)]
async fn a_request_cut_by_the_deadline_leaves_the_obstacle_before_it() {
    // 404 until the next try, which is still waiting for an answer when
    // the deadline comes: the API server never failed to answer.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tries = 0;
    let result: Result<(), Error> = with_retries(deadline, "testing", || {
        tries += 1;
        let first = tries == 1;
        async move {
            if first {
                Err(Obstacle::NotFound("gone".into()))
            } else {
                std::future::pending().await
            }
        }
    })
    .await;
    assert!(
        matches!(
            result,
            Err(Error::DeadlineReached {
                last: Obstacle::NotFound(_),
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(tries, 2);
}

#[tokio::test(start_paused = true)]
async fn permanent_failures_are_not_retried() {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tries = 0;
    let result: Result<(), Error> = with_retries(deadline, "testing", || {
        tries += 1;
        async {
            Err(Obstacle::Rejected {
                code: 422,
                message: "invalid".into(),
            })
        }
    })
    .await;
    assert!(matches!(result, Err(Error::Failed { .. })));
    assert_eq!(tries, 1);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_request_times_out_and_is_retried() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tries = 0;
    let result = with_retries(deadline, "testing", || {
        tries += 1;
        let hang = tries == 1;
        async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(tries)
        }
    })
    .await;
    assert_eq!(result.ok(), Some(2));
}
