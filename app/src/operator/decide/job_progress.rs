//! What a running Job's progress shows: its step, percent and time left,
//! and when a new report is worth a status write.
//!
//! Owns: that rule and its wording (pure). Must not touch: how the report
//! is read (`observe`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::UpgradeProgress;
use crate::db_upgrade::progress::{self, Progress};

/// The step as the status shows it: `backup`, `migration V4`.
pub(super) fn step_label(step: &progress::Step) -> String {
    match step {
        progress::Step::Migration { version, .. } => format!("migration V{version}"),
        other => other.to_string(),
    }
}

/// The progress to show: the Job's new report when it differs enough from
/// the one in status (another step, another percent, or an ETA moved by
/// more than 30 s and 10 % of the time left), else the one in status, so a
/// Job that reports every second does not write the App on every read.
pub fn progress_to_show(
    shown: Option<&UpgradeProgress>,
    report: Option<&Progress>,
    now: Timestamp,
) -> Option<UpgradeProgress> {
    let Some(report) = report else {
        return shown.cloned();
    };
    let step = step_label(&report.step);
    let percent = report
        .amount
        .as_ref()
        .and_then(progress::Amount::fraction)
        // A fraction in 0..=1: the cast cannot overflow.
        .map(|fraction| (fraction * 100.0).floor() as i32);
    let remaining = report.eta_seconds.map(Duration::from_secs);
    let eta = remaining
        .and_then(|left| SignedDuration::try_from(left).ok())
        .and_then(|left| now.checked_add(left).ok());
    if let Some(shown) = shown {
        let eta_moved = match (shown.eta.as_ref().map(|t| t.0), eta) {
            (Some(before), Some(after)) => {
                let moved = before.duration_until(after).abs();
                let left = now.duration_until(after).abs();
                moved > SignedDuration::from_secs(30) && moved * 10 > left
            }
            (None, None) => false,
            _ => true,
        };
        if shown.step == step && shown.percent == percent && !eta_moved {
            return Some(shown.clone());
        }
    }
    let mut summary = step.clone();
    if let Some(percent) = percent {
        summary.push_str(&format!(" {percent}%"));
    }
    if let Some(left) = remaining {
        summary.push_str(&format!(", about {} left", human_duration(left)));
    }
    Some(UpgradeProgress {
        step,
        percent,
        eta: eta.map(Time),
        summary,
        observed_time: Time(now),
    })
}

/// 45s, 12m, 2h05m.
pub(super) fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds.div_ceil(60)),
        _ => format!("{}h{:02}m", seconds / 3600, (seconds % 3600) / 60),
    }
}
