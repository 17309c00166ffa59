//! What a person does about a refused upgrade, or an upgrade Job that
//! cannot start, per reason (a blocked database's is `Blocker::advice`).
//!
//! Owns: that advice, which the App's messages and the gate's message
//! quote. Must not touch: the decision (`super`).

use crate::crd::ConditionReason;

/// What a person does about a refusal.
pub fn refusal_advice(reason: ConditionReason) -> &'static str {
    match reason {
        ConditionReason::DatabaseNewerThanRelease => {
            "install the operator release that matches the database, or restore a backup taken by an older release"
        }
        ConditionReason::SchemaHistoryDiverged => {
            "the database was changed outside this operator; restore a backup (app-db-upgrade restore) or repair the history by hand"
        }
        ConditionReason::UpgradeConfigurationInvalid => {
            "fix what the message names (the App's Secret or the operator's settings)"
        }
        _ => "fix what the message names",
    }
}

/// What a person does about an upgrade Job that cannot start or whose name
/// is taken; the operator goes on by itself once it is fixed.
pub fn stalled_advice(reason: ConditionReason) -> &'static str {
    match reason {
        ConditionReason::UpgradeJobNameTaken => {
            "delete or rename the Job that holds the upgrade Job's name"
        }
        _ => {
            "fix what keeps the Job's pod from starting (kubectl describe job); the Job goes on by itself"
        }
    }
}
