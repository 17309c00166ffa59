//! Why an App waits for an upgrade slot, as the decision reads it: its
//! place and what holds the slots (the queue, `operator::queue`, computes
//! it under its mutex; the decision table only reads it).
//!
//! Owns: the value and its wording. Must not touch: the queue's state.

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
}

impl QueueWait {
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
