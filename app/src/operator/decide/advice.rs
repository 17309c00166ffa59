//! What a person does about a refused upgrade, per reason.
//!
//! Owns: that advice. Must not touch: the decision (`super`).

use super::*;

/// What a person does about a refusal.
pub(super) fn refusal_advice(reason: ConditionReason) -> &'static str {
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
