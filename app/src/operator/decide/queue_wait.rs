//! Why an App waits for an upgrade slot, as the decision reads it: its
//! place and what holds the slots (the queue, `operator::queue`, computes
//! it under its mutex; the decision table only reads it).
//!
//! Owns: the value, its wording, and the place an App joining the queue
//! takes ([`QueueWait::joins_at`], pure). Must not touch: the queue's
//! state.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Why an App waits: its place and what holds the slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueWait {
    /// 1 = next.
    pub position: usize,
    /// Apps waiting, this one included.
    pub waiting: usize,
    /// The limit.
    pub limit: usize,
    /// The Apps holding a slot (`namespace/name`), sorted.
    pub busy: Vec<String>,
    /// The newest place (`status.queue.since`) among the other Apps
    /// waiting: an App that joins goes behind it.
    pub last_in_line: Option<Timestamp>,
}

impl QueueWait {
    /// When an App not queued yet begins waiting, as its status keeps it
    /// (whole seconds): `now`, but at least a second after the newest App
    /// already waiting. The queue places a newcomer behind every App
    /// waiting; the time it keeps must say the same at the next look,
    /// whichever replica's clock wrote the others' (a leader ten minutes
    /// ahead, then one ten minutes behind, would otherwise put an App that
    /// asked later ahead of the ones that asked before it).
    pub fn joins_at(&self, now: Timestamp) -> Timestamp {
        let behind = self
            .last_in_line
            .and_then(|last| last.checked_add(SignedDuration::from_secs(1)).ok());
        match behind {
            Some(behind) if behind > now => behind,
            _ => now,
        }
    }

    /// "4 of 4 upgrade slots busy: ns/a, ns/b, ns/c, ns/d".
    pub fn why(&self) -> String {
        const NAMED: usize = 5;
        let mut names: Vec<String> = self.busy.iter().take(NAMED).cloned().collect();
        let more = self.busy.len().saturating_sub(NAMED);
        if let (true, Some(last)) = (more > 0, names.last_mut()) {
            last.push_str(&format!(" and {more} more"));
        }
        if self.busy.len() >= self.limit {
            format!(
                "{} of {} upgrade slots busy: {}",
                self.busy.len(),
                self.limit,
                names.join(", ")
            )
        } else {
            format!(
                "{} of {} upgrade slots busy ({}); the free ones go to Apps waiting longer",
                self.busy.len(),
                self.limit,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    #[test]
    fn a_newcomer_joins_behind_the_newest_app_waiting() {
        let wait = |last: Option<&str>| QueueWait {
            position: 2,
            waiting: 2,
            limit: 1,
            busy: vec!["ns/x".to_owned()],
            last_in_line: last.map(at),
        };
        let cases = [
            // Nobody else waits: now.
            (None, "2026-12-04T12:00:00.5Z", "2026-12-04T12:00:00.5Z"),
            // The newest waiter asked well before: now.
            (
                Some("2026-12-04T11:59:00Z"),
                "2026-12-04T12:00:00.5Z",
                "2026-12-04T12:00:00.5Z",
            ),
            // In the same second: the next second, not a tie broken by name.
            (
                Some("2026-12-04T12:00:00Z"),
                "2026-12-04T12:00:00.5Z",
                "2026-12-04T12:00:01Z",
            ),
            // Its place written by a clock ten minutes ahead of this one:
            // still behind it.
            (
                Some("2026-12-04T12:10:00Z"),
                "2026-12-04T12:00:00.5Z",
                "2026-12-04T12:10:01Z",
            ),
        ];
        for (last, now, expected) in cases {
            assert_eq!(
                wait(last).joins_at(at(now)),
                at(expected),
                "last in line {last:?}, now {now}"
            );
        }
    }
}
