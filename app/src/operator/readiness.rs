//! When the operator's pod counts as ready (`/readyz`): a brake on OLM's
//! upgrades, set by `--ready-when`.
//!
//! Owns: the modes ([`ReadyWhen`]), the pure rules ([`work_ready`],
//! [`readiness`]) and the latch `/readyz` reads ([`Readiness`]). Must not
//! touch: the cluster or the HTTP serving (`http` reads it; the gate loop
//! sets it).

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use upgrade_gate::leader::Standing;

/// When the pod counts as ready. OLM v0 moves a CSV to `Succeeded` (and so
/// lets the next one replace it) only once its Deployment is Available, and
/// OLM v1's Boxcutter runtime rolls the next revision out only then:
/// readiness is a brake on upgrades, and each mode sets it differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyWhen {
    /// As soon as the endpoints serve, leader or not (what
    /// controller-runtime's health probes do; no brake).
    Started,
    /// After this pod won the Lease, reconciled every App once and the
    /// object shows its gate decision.
    Reconciled,
    /// As `reconciled`, and every App is verified at this release's target
    /// (the gate is open): the strongest brake, at OLM v0's cost of failing
    /// a CSV that stays Installing for 5 minutes.
    Verified,
}

/// How far the leader's work has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkDone {
    /// Every App present at the start was reconciled once.
    pub first_pass: bool,
    /// The OperatorCondition shows the gate decision (or there is none to keep).
    pub gate_applied: bool,
    /// The decision is `Upgradeable=True`.
    pub upgradeable: bool,
}

/// Whether the leader's work has reached what `mode` waits for.
pub fn work_ready(mode: ReadyWhen, done: WorkDone) -> bool {
    match mode {
        ReadyWhen::Started => true,
        ReadyWhen::Reconciled => done.first_pass && done.gate_applied,
        ReadyWhen::Verified => done.first_pass && done.gate_applied && done.upgradeable,
    }
}

/// The readiness verdict: `Err` says why not. A follower whose leader was
/// seen renewing is ready as a standby, so that a Deployment with two
/// replicas can be Available (Recreate needs every replica ready); one that
/// has not yet seen the holder renew (a dead predecessor's Lease) is not.
pub fn readiness(mode: ReadyWhen, standing: &Standing, work_done: bool) -> Result<(), String> {
    match (mode, standing) {
        (ReadyWhen::Started, _) => Ok(()),
        (_, Standing::Leading) if work_done => Ok(()),
        (ReadyWhen::Reconciled, Standing::Leading) => {
            Err("leading; first reconcile pass or gate decision pending".to_owned())
        }
        (ReadyWhen::Verified, Standing::Leading) => {
            Err("leading; not every App is verified at this release's target yet".to_owned())
        }
        (_, Standing::Following { alive: true, .. }) => Ok(()),
        (
            _,
            Standing::Following {
                holder,
                alive: false,
                ..
            },
        ) => Err(format!(
            "waiting for the leader Lease held by {holder} (not seen renewing)"
        )),
        (_, Standing::Unknown) => Err("the leader Lease has not been read yet".to_owned()),
    }
}

/// Readiness as `/readyz` serves it.
pub struct Readiness {
    mode: ReadyWhen,
    standing: watch::Receiver<Standing>,
    work_done: AtomicBool,
}

impl Readiness {
    /// Readiness in `mode`, following the election's `standing`.
    pub fn new(mode: ReadyWhen, standing: watch::Receiver<Standing>) -> Self {
        Readiness {
            mode,
            standing,
            work_done: AtomicBool::new(false),
        }
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        readiness(
            self.mode,
            &self.standing.borrow(),
            self.work_done.load(Ordering::Acquire),
        )
    }

    pub(crate) fn mode(&self) -> ReadyWhen {
        self.mode
    }

    /// Latches: once the work was ready, the pod stays ready (an App added
    /// later closes the gate, not the pod).
    pub(crate) fn set_work_done(&self) {
        self.work_done.store(true, Ordering::Release);
    }

    pub(crate) fn work_done(&self) -> bool {
        self.work_done.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_ready_table() {
        use ReadyWhen::*;
        // (mode, first pass, gate applied, upgradeable) → ready
        let cases = [
            (Started, false, false, false, true),
            (Reconciled, false, true, true, false),
            (Reconciled, true, false, true, false),
            (Reconciled, true, true, false, true),
            (Verified, true, true, false, false),
            (Verified, true, false, true, false),
            (Verified, true, true, true, true),
        ];
        for (mode, first_pass, gate_applied, upgradeable, ready) in cases {
            let done = WorkDone {
                first_pass,
                gate_applied,
                upgradeable,
            };
            assert_eq!(work_ready(mode, done), ready, "{mode:?} {done:?}");
        }
    }

    #[test]
    fn readiness_table() {
        use ReadyWhen::*;
        let following = |alive| Standing::Following {
            holder: "other".into(),
            alive,
            own_release: false,
        };
        let cases = [
            (Started, Standing::Unknown, false, true),
            (Started, following(false), false, true),
            (Reconciled, Standing::Unknown, false, false),
            (Reconciled, following(false), false, false),
            (Reconciled, following(true), false, true),
            (Reconciled, Standing::Leading, false, false),
            (Reconciled, Standing::Leading, true, true),
            (Verified, following(true), false, true),
            (Verified, Standing::Leading, false, false),
            (Verified, Standing::Leading, true, true),
        ];
        for (mode, standing, work_done, ready) in cases {
            let verdict = readiness(mode, &standing, work_done);
            assert_eq!(
                verdict.is_ok(),
                ready,
                "{mode:?} {standing:?} {work_done}: {verdict:?}"
            );
        }
        assert!(
            readiness(Verified, &Standing::Leading, false)
                .is_err_and(|why| why.contains("verified at this release's target"))
        );
    }
}
