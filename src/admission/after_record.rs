//! What reaches the keeper when the recorder records the same verdicts:
//! [`open_after_recorded`] hands an open verdict on only once the record
//! shows it complete, and while the record refuses the completion, a closed
//! entry in the refusal's words ([`AfterRecord::Refused`]). The choice is
//! pure ([`after_record`], its cases named by [`Handover`]). Must not
//! touch: the record (the recorder writes it).

use tokio::sync::watch;

use super::claim::UpgradeClaim;
use super::recorder::RecorderStatus;
use crate::keeper::{Evidence, Verdict};
use crate::operator_condition::{GateState, Reason, UpgradeableEntry};

/// The reason of the closed entry the keeper keeps while the record
/// refuses a completion the operator judged ([`AfterRecord::Refused`]).
pub const COMPLETION_REFUSED_REASON: &str = "CompletionRefused";

/// A verdict as the keeper gets it from [`open_after_recorded`]: the
/// operator's own, or, while the record refuses the completion it judged,
/// a closed entry that says why in the refusal's words (not the last
/// closed verdict, whose words may name objects gone since).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterRecord<V> {
    /// The operator's verdict, as judged.
    Judged(V),
    /// The operator judged the upgrade complete; the record refused it.
    Refused {
        /// `Upgradeable=False`, reason [`COMPLETION_REFUSED_REASON`].
        entry: UpgradeableEntry,
        /// The verdict the record refused.
        judged: V,
    },
}

impl<V: Verdict> Verdict for AfterRecord<V> {
    fn entry(&self) -> &UpgradeableEntry {
        match self {
            AfterRecord::Judged(verdict) => verdict.entry(),
            AfterRecord::Refused { entry, .. } => entry,
        }
    }

    fn still_current(&self) -> bool {
        match self {
            AfterRecord::Judged(verdict)
            | AfterRecord::Refused {
                judged: verdict, ..
            } => verdict.still_current(),
        }
    }

    fn evidence(&self) -> Option<Evidence> {
        match self {
            AfterRecord::Judged(verdict)
            | AfterRecord::Refused {
                judged: verdict, ..
            } => verdict.evidence(),
        }
    }
}

/// What [`after_record`] gives the keeper for one verdict of the operator
/// and what the recorder shows: each case of the choice by its meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handover<V> {
    /// The operator has judged nothing (yet): the keeper is handed no
    /// verdict, and keeps the gate as it finds it.
    NoVerdict,
    /// The keeper is handed this verdict: the operator's as judged (a
    /// closed one at once, an open one once the record shows it complete),
    /// or a closed one in the words of the record that refuses it.
    Hand(AfterRecord<V>),
    /// An open verdict the record shows neither complete nor refused (or
    /// whose refusal makes no valid entry): nothing new reaches the keeper,
    /// which keeps what it was handed last.
    AwaitRecord,
}

/// What to hand the keeper for `verdict` given what the recorder shows.
/// A closed verdict passes at once; an open one once `complete` is
/// recorded, or as a closed [`AfterRecord::Refused`] while the record
/// refuses it; until then, [`Handover::AwaitRecord`].
pub fn after_record<V: Verdict>(
    verdict: Option<V>,
    status: &RecorderStatus,
    complete: &UpgradeClaim,
) -> Handover<V> {
    let Some(verdict) = verdict else {
        return Handover::NoVerdict;
    };
    if verdict.entry().state() == GateState::Closed || status.recorded.as_ref() == Some(complete) {
        return Handover::Hand(AfterRecord::Judged(verdict));
    }
    let Some(why) = status.held_back.as_deref() else {
        return Handover::AwaitRecord;
    };
    let reason = Reason::new(COMPLETION_REFUSED_REASON).expect("a valid reason");
    let message = format!(
        "the upgrade is done by its operator's judgement, but the admission record refused to call it complete: {why}"
    );
    match UpgradeableEntry::closed(reason, message) {
        Ok(entry) => Handover::Hand(AfterRecord::Refused {
            entry,
            judged: verdict,
        }),
        Err(_) => Handover::AwaitRecord,
    }
}

/// The verdicts to hand the keeper when a [`Recorder`](super::Recorder) records the same
/// ones ([`after_record`]): a closed verdict at once, an open one only
/// once the recorder shows it recorded as [`UpgradeClaim::Complete`] for
/// `release`, or closed in the record's words while the record refuses it.
///
/// Why the order: an open OperatorCondition lets OLM v0 roll the Deployment
/// to the next release within a fraction of a second, and OLM gives up on
/// a CSV for good when the admission policy refuses that update
/// (`InstallComponentFailedNoRetry`). So the policy's state must say
/// "complete" before the OperatorCondition does.
pub fn open_after_recorded<V: Verdict>(
    verdicts: watch::Receiver<Option<V>>,
    recorder: watch::Receiver<RecorderStatus>,
    release: &str,
) -> watch::Receiver<Option<AfterRecord<V>>> {
    let (out, kept) = watch::channel(None);
    let complete = UpgradeClaim::Complete {
        release: release.to_owned(),
    };
    tokio::spawn(forward_after_record(verdicts, recorder, out, complete));
    kept
}

async fn forward_after_record<V: Verdict>(
    mut verdicts: watch::Receiver<Option<V>>,
    mut recorder: watch::Receiver<RecorderStatus>,
    out: watch::Sender<Option<AfterRecord<V>>>,
    complete: UpgradeClaim,
) {
    loop {
        let verdict = verdicts.borrow_and_update().clone();
        match after_record(verdict, &recorder.borrow_and_update(), &complete) {
            Handover::NoVerdict => {
                out.send_replace(None);
            }
            Handover::Hand(verdict) => {
                out.send_replace(Some(verdict));
            }
            Handover::AwaitRecord => {}
        }
        tokio::select! {
            changed = verdicts.changed() => if changed.is_err() { return },
            changed = recorder.changed() => if changed.is_err() { return },
            () = out.closed() => return,
        }
    }
}
