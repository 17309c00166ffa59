//! [`decide`]: the gate's entry from what every watched resource shows —
//! open only when each was read completely and every object in it shows
//! the running release's upgrade done.
//!
//! Owns: that rule and the words of the entry's message. Must not touch:
//! reading the objects ([`super::keep()`]) or the rule's evaluation
//! ([`super::Rule`]); pure.

use std::collections::BTreeMap;

use crate::operator_condition::{Reason, UpgradeableEntry};

use super::rule::Shown;

/// The reason while objects do not show the upgrade done.
pub const IN_PROGRESS: &str = "UpgradeInProgress";
/// The reason while a resource has not been read completely.
pub const NOT_READ: &str = "ResourcesNotRead";
/// The reason once every object shows the upgrade done.
pub const UPGRADE_COMPLETE: &str = "UpgradeComplete";
/// How many objects a message names before it says "and N more".
pub const NAMED_AT_MOST: usize = 5;

/// What one watch (a resource, in one namespace or in all) shows now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// The resource as a person names it: `widgets.demo.example.com`,
    /// with ` in <namespace>` when one namespace is watched.
    pub label: String,
    /// Whether the objects below are a complete list (the watch's list
    /// since its last start or restart has ended).
    pub listed: bool,
    /// The last failure since the last success (discovery, list, watch),
    /// as one line.
    pub problem: Option<String>,
    /// What the rule says about each object (`<namespace>/<name>`; an
    /// object being deleted is [`Shown::BeingDeleted`] until it is gone).
    pub objects: BTreeMap<String, Shown>,
}

impl Watched {
    /// The resource alone, without the namespace the label may name (an
    /// object's name says its namespace).
    pub fn resource(&self) -> &str {
        self.label.split(" in ").next().unwrap_or_default()
    }
}

/// The entry to keep for `release`, given what every watch shows.
pub fn decide(release: &str, watched: &[Watched]) -> UpgradeableEntry {
    let unread: Vec<String> = watched
        .iter()
        .filter(|watch| !watch.listed)
        .map(|watch| match &watch.problem {
            Some(problem) => format!("{}: {problem}", watch.label),
            None => format!("{}: being listed", watch.label),
        })
        .collect();
    if !unread.is_empty() {
        return closed(
            NOT_READ,
            format!(
                "release {release}: upgrade-gate keep has not read every resource it judges the upgrade by, so it keeps the gate closed ({})",
                unread.join("; ")
            ),
        );
    }
    let total: usize = watched.iter().map(|watch| watch.objects.len()).sum();
    let waiting: Vec<String> = watched
        .iter()
        .flat_map(|watch| {
            watch
                .objects
                .iter()
                .filter(|(_, shown)| **shown != Shown::Done)
                .map(move |(name, shown)| match shown {
                    Shown::Unreadable(why) => format!("{} {name} ({why})", watch.resource()),
                    Shown::BeingDeleted => format!(
                        "{} {name} (being deleted: its finalizers may still be at work)",
                        watch.resource()
                    ),
                    _ => format!("{} {name}", watch.resource()),
                })
        })
        .collect();
    if waiting.is_empty() {
        let counts: Vec<String> = watched
            .iter()
            .map(|watch| format!("{} {}", watch.objects.len(), watch.label))
            .collect();
        let message = if total == 0 {
            format!(
                "release {release}: no object to upgrade ({}); upgrade-gate keep opens the gate",
                counts.join(", ")
            )
        } else {
            format!(
                "release {release}: every object shows its upgrade done ({})",
                counts.join(", ")
            )
        };
        return open(message);
    }
    let named: Vec<&str> = waiting
        .iter()
        .take(NAMED_AT_MOST)
        .map(String::as_str)
        .collect();
    let more = match waiting.len().saturating_sub(NAMED_AT_MOST) {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    closed(
        IN_PROGRESS,
        format!(
            "release {release}: {} of {total} objects do not show their upgrade done yet: {}{more}; upgrade-gate keep opens the gate when every one does",
            waiting.len(),
            named.join(", ")
        ),
    )
}

fn closed(reason: &'static str, message: String) -> UpgradeableEntry {
    UpgradeableEntry::closed(valid(reason), clipped(message)).expect("a message within the limit")
}

fn open(message: String) -> UpgradeableEntry {
    UpgradeableEntry::open(valid(UPGRADE_COMPLETE), clipped(message))
        .expect("a message within the limit")
}

fn valid(reason: &'static str) -> Reason {
    Reason::new(reason).expect("the reasons here are CamelCase")
}

/// The message cut to 1 KiB (at a character boundary): the entry stays
/// readable in `kubectl get` and far below the API's limit.
fn clipped(mut message: String) -> String {
    const AT_MOST: usize = 1024;
    if message.len() > AT_MOST {
        let mut end = AT_MOST - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::GateState;

    fn watch(label: &str, listed: bool, objects: &[(&str, Shown)]) -> Watched {
        Watched {
            label: label.to_owned(),
            listed,
            problem: None,
            objects: objects
                .iter()
                .map(|(name, shown)| ((*name).to_owned(), shown.clone()))
                .collect(),
        }
    }

    const WIDGETS: &str = "widgets.demo.example.com";
    const GADGETS: &str = "gadgets.demo.example.com";

    #[test]
    fn the_gate_opens_only_when_every_watch_is_listed_and_every_object_is_done() {
        let done = Shown::Done;
        let cases: Vec<(&str, Vec<Watched>, GateState, &str)> = vec![
            (
                "every object done",
                vec![
                    watch(WIDGETS, true, &[("shop/a", done.clone())]),
                    watch(GADGETS, true, &[("shop/b", done.clone())]),
                ],
                GateState::Open,
                UPGRADE_COMPLETE,
            ),
            (
                "no object at all",
                vec![watch(WIDGETS, true, &[])],
                GateState::Open,
                UPGRADE_COMPLETE,
            ),
            (
                "one object not done",
                vec![
                    watch(WIDGETS, true, &[("shop/a", done.clone())]),
                    watch(GADGETS, true, &[("shop/b", Shown::NotDone)]),
                ],
                GateState::Closed,
                IN_PROGRESS,
            ),
            (
                "one object unreadable",
                vec![watch(
                    WIDGETS,
                    true,
                    &[("shop/a", Shown::Unreadable("no status".into()))],
                )],
                GateState::Closed,
                IN_PROGRESS,
            ),
            (
                "the only other object being deleted (its finalizer may still migrate)",
                vec![watch(
                    WIDGETS,
                    true,
                    &[("shop/a", done.clone()), ("shop/b", Shown::BeingDeleted)],
                )],
                GateState::Closed,
                IN_PROGRESS,
            ),
            (
                "one watch not listed, though every object it has is done",
                vec![
                    watch(WIDGETS, true, &[("shop/a", done.clone())]),
                    watch(GADGETS, false, &[("shop/b", done.clone())]),
                ],
                GateState::Closed,
                NOT_READ,
            ),
            (
                "no watch listed and no object seen",
                vec![watch(WIDGETS, false, &[])],
                GateState::Closed,
                NOT_READ,
            ),
        ];
        for (case, watched, state, reason) in cases {
            let entry = decide("0.2.0", &watched);
            assert_eq!(entry.state(), state, "{case}: {entry:?}");
            assert_eq!(entry.reason().as_str(), reason, "{case}");
            assert!(entry.message().contains("release 0.2.0"), "{case}");
        }
    }

    #[test]
    fn the_message_names_what_is_not_done_and_why() {
        let mut widgets = watch(
            WIDGETS,
            true,
            &[
                ("shop/a", Shown::Done),
                ("shop/b", Shown::NotDone),
                (
                    "shop/c",
                    Shown::Unreadable("it has no field \"status\"".into()),
                ),
            ],
        );
        let entry = decide("0.2.0", std::slice::from_ref(&widgets));
        assert!(
            entry.message().contains("2 of 3 objects"),
            "{}",
            entry.message()
        );
        assert!(entry.message().contains("widgets.demo.example.com shop/b"));
        assert!(
            entry
                .message()
                .contains("shop/c (it has no field \"status\")")
        );
        assert!(!entry.message().contains("shop/a"));
        let mut in_shop = widgets.clone();
        in_shop.label = format!("{WIDGETS} in shop");
        let entry = decide("0.2.0", &[in_shop]);
        assert!(
            entry.message().contains("widgets.demo.example.com shop/b"),
            "the namespace once: {}",
            entry.message()
        );

        widgets.objects = (0..12)
            .map(|n| (format!("shop/w{n:02}"), Shown::NotDone))
            .collect();
        let entry = decide("0.2.0", std::slice::from_ref(&widgets));
        assert!(
            entry.message().contains("and 7 more"),
            "{}",
            entry.message()
        );

        let mut unlisted = watch(GADGETS, false, &[]);
        unlisted.problem = Some("403 Forbidden: cannot list".into());
        let entry = decide("0.2.0", &[unlisted]);
        assert!(
            entry
                .message()
                .contains("gadgets.demo.example.com: 403 Forbidden"),
            "{}",
            entry.message()
        );
    }

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary() {
        let long = "é".repeat(2000);
        let watched = watch(WIDGETS, true, &[(&long, Shown::NotDone)]);
        let entry = decide("0.2.0", &[watched]);
        assert!(entry.message().len() <= 1024);
        assert!(entry.message().ends_with("..."));
    }
}
