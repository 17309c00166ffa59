//! A run under Helm or kubectl: the first release applied as the
//! deployer's pipeline applies it, time zero its first apply of the middle
//! release, each later release pushed until the admission policy lets it
//! through; every apply a [`Fact::Deployed`]. No catalog is served.
//!
//! Owns: the pushes and how an apply's answer reads as a fact. Must not
//! touch: the chart or the commands (`chain::pipeline` runs them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{SetUp, bundle_examples, middle_release};
use crate::chain::cluster::{BackupClaim, OlmCluster};
use crate::chain::judge::Chain;
use crate::chain::pipeline::{Pipeline, Pushed};
use crate::chain::timeline::{Fact, Timeline};

/// Applies the first release as the deployer would, then creates the App
/// of its bundle's `alm-examples` and waits until it is Ready.
pub(super) async fn install_first_release(
    mut set_up: SetUp<'_, impl OlmCluster>,
    pipeline: &Arc<Pipeline>,
    from: &str,
) -> (String, BackupClaim) {
    let client = set_up.namespace.client();
    let ns = &set_up.namespace.name;
    crate::operator_install::install_app_crd(&client).await;
    set_up.watch_apps().await;
    let installed = Instant::now();
    let ran = pipeline_push(pipeline, from).await;
    let command = pipeline.command();
    assert!(ran.accepted, "{command} of {from}:\n{}", ran.output);
    set_up.timeline.push(Fact::Injected {
        what: format!("{command} installed {from}"),
    });
    let created = set_up.create_app_ready(&bundle_examples(from), from).await;
    println!(
        "{ns}: {from} installed by {command}, its App Ready, {:.1} s after",
        installed.elapsed().as_secs_f64()
    );
    created
}

/// Time zero: the first apply of the middle release (the first release
/// may not have recorded completion yet: tried again as [`push`] does).
pub(super) async fn start_upgrade(pipeline: &Arc<Pipeline>, timeline: &Timeline, chain: &Chain) {
    let middle = middle_release(chain);
    push(
        pipeline,
        timeline,
        &middle,
        PUSH_RETRY,
        Duration::from_secs(120),
    )
    .await;
}

/// How often at most [`start_upgrade`] applies the middle release until
/// it is accepted.
const PUSH_RETRY: Duration = Duration::from_secs(1);

/// Applies `release` until accepted (each apply a fact): after a refusal,
/// waits until the record says the running release's upgrade Complete
/// (`kubectl wait`), then tries again, at most once a `retry`; panics
/// after `timeout`.
pub(super) async fn push(
    pipeline: &Arc<Pipeline>,
    timeline: &Timeline,
    release: &str,
    retry: Duration,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        // Stamped when the command returned: the API server decided somewhere
        // within the command, and the deployer knows the answer from then.
        let ran = pipeline_push(pipeline, release).await;
        timeline.push(deployed(release, &ran));
        if ran.accepted {
            return;
        }
        let refused_at = tokio::time::Instant::now();
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{} of {release} still refused after {timeout:?}:\n{}",
            pipeline.command(),
            ran.output
        );
        // As docs/deploy-helm.md's pipeline: wait for the record to say
        // Complete, then try again, at most once a `retry` (a refusal the
        // record's Complete does not lift would otherwise loop at once).
        pipeline_wait(pipeline, left.min(WAIT_AT_MOST)).await;
        tokio::time::sleep_until(refused_at + retry).await;
    }
}

/// The longest one `kubectl wait` of the pipeline lasts before it tries
/// again anyway.
const WAIT_AT_MOST: Duration = Duration::from_secs(60);

/// One wait for the record's Complete, off the async threads.
async fn pipeline_wait(pipeline: &Arc<Pipeline>, timeout: Duration) {
    let waiting = Arc::clone(pipeline);
    let waited = tokio::task::spawn_blocking(move || waiting.wait_for_complete(timeout))
        .await
        .unwrap_or_else(|error| panic!("waiting on the record: {error}"));
    if let Err(said) = waited {
        println!(
            "{}: the pipeline's kubectl wait for the record's Complete ended without it ({said}); trying again",
            pipeline.namespace()
        );
    }
}

/// One push of `release`, off the async threads.
async fn pipeline_push(pipeline: &Arc<Pipeline>, release: &str) -> Pushed {
    let pipeline = Arc::clone(pipeline);
    let release = release.to_owned();
    tokio::task::spawn_blocking(move || pipeline.push(&release))
        .await
        .unwrap_or_else(|error| panic!("running the pipeline: {error}"))
}

/// What an apply said, as a fact: the API server's message whole when it
/// carries the admission policy's words (the judge counts a refusal as the
/// policy's only by them, `chain::refusal`), else the output's line that
/// says it was denied, else its last line.
fn deployed(release: &str, ran: &Pushed) -> Fact {
    Fact::Deployed {
        release: release.to_owned(),
        accepted: ran.accepted,
        message: if ran.accepted {
            String::new()
        } else {
            failure_message(&ran.output)
        },
    }
}

/// The line of a failed apply's output that says why.
fn failure_message(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    lines
        .iter()
        .rfind(|line| crate::policy_in_force::is_policy_refusal(line))
        .or_else(|| lines.iter().rfind(|line| line.contains("denied request")))
        .or_else(|| lines.last())
        .map_or_else(String::new, |line| (*line).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_applys_fact_keeps_the_policys_words() {
        let refused = "configmap/app-operator serverside-applied\nError from server (Forbidden): error when applying patch:\n{...}\nto:\nResource: \"apps/v1, Resource=deployments\"\nfor: \"m.yaml\": deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev-ns' denied request: upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose upgrade has not completed\n";
        let fact = deployed(
            "7.10.1",
            &Pushed {
                accepted: false,
                output: refused.to_owned(),
            },
        );
        let Fact::Deployed { message, .. } = &fact else {
            panic!("{fact:?}")
        };
        assert!(
            message.starts_with("for: \"m.yaml\": deployments.apps")
                && crate::policy_in_force::is_policy_refusal(message),
            "{message}"
        );
        let unreachable = "error: unable to recognize \"m.yaml\": Get \"https://10.88.0.2:6443/api\": dial tcp 10.88.0.2:6443: connect: connection refused\n";
        let fact = deployed(
            "7.10.1",
            &Pushed {
                accepted: false,
                output: unreachable.to_owned(),
            },
        );
        assert_eq!(
            fact,
            Fact::Deployed {
                release: "7.10.1".into(),
                accepted: false,
                message: unreachable.trim().to_owned()
            }
        );
    }
}
