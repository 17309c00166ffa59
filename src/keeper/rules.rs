//! The keeper's pure rules: where the process stands ([`Role`]) and so
//! what the keeper keeps ([`Keeps`]), what the object shows, what to write
//! next, what a write restored, whether a write given up without an answer
//! was carried out, and how the object's watch paces the reads.
//!
//! Owns: these decisions, table-tested. Must not touch: the cluster (the
//! reads, writes and the watch are `super`'s).

use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::watcher;

use crate::leader::Standing;
use crate::operator_condition::{OperatorCondition, UpgradeableEntry};

/// How often the object is read to notice a deletion or a foreign write
/// while its watch is not (yet) working.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// How often it is read while the watch works: a safety net for a watch
/// that stalls without an error.
pub const WATCHED_POLL_INTERVAL: Duration = Duration::from_secs(10);

/// Where the process stands, as the keeper acts on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// This process leads (or was started without a leadership input).
    Leading,
    /// A replica of this process's release leads: its keeper keeps the
    /// gate, and this one writes nothing (it would fight an open gate).
    StandBy,
    /// No replica of this release leads: another release holds the Lease
    /// (the one this release replaces, waited out), or one that stopped
    /// renewing it. Nobody else keeps this release's gate: keep it closed.
    Waiting,
    /// Not known yet, or leadership ended: write nothing.
    Idle,
}

/// The role of a keeper that follows the election's `standing`, given its
/// role before. A failed read of the Lease (`Unknown`) says nothing new,
/// and `Leading` keeps the role it had: that keeper is stopped before the
/// leader's own keeper writes (`Keeper::wait_to_lead`).
pub(crate) fn role_after(previous: Role, standing: &Standing) -> Role {
    match standing {
        Standing::Following {
            own_release: true, ..
        } => Role::StandBy,
        Standing::Following {
            own_release: false, ..
        } => Role::Waiting,
        Standing::Unknown | Standing::Leading => previous,
    }
}

/// What the keeper keeps in the object now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Keeps {
    /// Nothing: not leading, a replica of this release leads, or there is
    /// no verdict yet and nothing to keep closed.
    #[default]
    Nothing,
    /// `Upgradeable=False`: while this release waits to lead, and as its
    /// leader until its first verdict. Any `False` in the object will do
    /// (the init container's, a leader's); anything else is replaced by the
    /// keeper's own closed entry.
    Closed,
    /// The operator's verdict, as the leader.
    Verdict,
}

/// What to keep: the verdict while leading, `Upgradeable=False` while
/// waiting (and while leading before the first verdict) when the keeper
/// has a closed entry, nothing otherwise. Only a leader ever writes a
/// verdict, so only a leader opens the gate.
pub(crate) fn keeps(role: Role, has_verdict: bool, has_closed: bool) -> Keeps {
    match role {
        Role::Leading if has_verdict => Keeps::Verdict,
        Role::Leading | Role::Waiting if has_closed => Keeps::Closed,
        Role::Leading | Role::Waiting | Role::StandBy | Role::Idle => Keeps::Nothing,
    }
}

/// What one round keeps, with its entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Goal<'a> {
    /// The verdict, exactly.
    Verdict(&'a UpgradeableEntry),
    /// Any `Upgradeable=False`; this entry when the object shows another.
    Closed(&'a UpgradeableEntry),
}

impl Goal<'_> {
    pub(crate) fn entry(&self) -> &UpgradeableEntry {
        match self {
            Goal::Verdict(entry) | Goal::Closed(entry) => entry,
        }
    }

    pub(crate) fn keeps(&self) -> Keeps {
        match self {
            Goal::Verdict(_) => Keeps::Verdict,
            Goal::Closed(_) => Keeps::Closed,
        }
    }
}

/// Our `Upgradeable` entry as the object shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    /// The object does not exist (deleted: OLM recreates it).
    NoObject,
    /// The object (`uid`) has no `Upgradeable` entry in `spec.conditions`.
    NoEntry { uid: String },
    /// spec's `Upgradeable` entry of the object `uid`.
    Entry {
        uid: String,
        status: String,
        reason: String,
        message: String,
    },
}

impl Shown {
    /// What `object` shows (`None`: it does not exist).
    pub(crate) fn of(object: Option<&OperatorCondition>) -> Shown {
        let Some(object) = object else {
            return Shown::NoObject;
        };
        let uid = object.uid().unwrap_or_default();
        match object.upgradeable_in_spec() {
            None => Shown::NoEntry { uid },
            Some(entry) => Shown::Entry {
                uid,
                status: entry.status().to_owned(),
                reason: entry.reason().to_owned(),
                message: entry.message().to_owned(),
            },
        }
    }

    fn says(&self, verdict: &UpgradeableEntry) -> bool {
        matches!(self, Shown::Entry { status, reason, message, .. }
            if status == verdict.state().condition_status()
                && reason == verdict.reason().as_str()
                && message == verdict.message())
    }

    fn uid(&self) -> Option<&str> {
        match self {
            Shown::NoObject => None,
            Shown::NoEntry { uid } | Shown::Entry { uid, .. } => Some(uid),
        }
    }
}

/// Which version of the object a read found: its `uid` and
/// `metadata.generation`, which the API server bumps on every change of
/// spec (not on OLM's status copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Revision {
    pub(crate) uid: String,
    pub(crate) generation: i64,
}

impl Revision {
    pub(crate) fn of(object: &OperatorCondition) -> Revision {
        Revision {
            uid: object.uid().unwrap_or_default(),
            generation: object.generation(),
        }
    }
}

/// Whether a write given up without an answer was carried out, told by a
/// later read that does not show our verdict. The write was sent to
/// replace `base` (the round's read); carried out it made the generation
/// `base + 1`, so a change of the same object after it makes it at least
/// `base + 2`. At `base + 1` another writer's change took its place, at
/// `base` nothing changed spec (the write was not carried out), and a new
/// object (another uid) cannot tell. Two changes by others within the round
/// would look the same as ours and one other: the only way this errs.
pub(crate) fn unanswered_write_landed(base: &Revision, now: Option<&Revision>) -> bool {
    now.is_some_and(|now| now.uid == base.uid && now.generation >= base.generation + 2)
}

/// What someone else did to our entry since the keeper last wrote or saw
/// it: the label of a restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The object was deleted and recreated (a new uid), empty or not.
    Recreated,
    /// Our entry was dropped from `spec.conditions` (a rewrite).
    EntryRemoved,
    /// Another status: `True` written by another writer, `upgrade-gate
    /// release`, a person.
    OtherStatus(String),
    /// Same status, another reason or message.
    OtherText,
}

impl Found {
    /// A metric label: `recreated`, `entry_removed`, `other_true`,
    /// `other_false`, `other_status` or `other_text`.
    pub fn label(&self) -> &'static str {
        match self {
            Found::Recreated => "recreated",
            Found::EntryRemoved => "entry_removed",
            Found::OtherStatus(status) if status == "True" => "other_true",
            Found::OtherStatus(status) if status == "False" => "other_false",
            Found::OtherStatus(_) => "other_status",
            Found::OtherText => "other_text",
        }
    }
}

/// What to do after reading the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NextWrite {
    /// The object shows our verdict.
    Nothing,
    /// The object is gone; OLM recreates it, then we write.
    AwaitObject,
    /// Write our verdict: the first time, because it changed, or (with
    /// `Some`) to restore it after someone else's change.
    Write { restore: Option<Found> },
}

/// The rule: given our verdict, what the object shows, and what it showed
/// after our last write (or read that matched), what to write.
pub(crate) fn next_write(
    verdict: &UpgradeableEntry,
    shown: &Shown,
    last: Option<&Shown>,
) -> NextWrite {
    if *shown == Shown::NoObject {
        return NextWrite::AwaitObject;
    }
    if shown.says(verdict) {
        return NextWrite::Nothing;
    }
    let restore = match last {
        // Nothing of ours there yet: our first write.
        None => None,
        Some(last) if last.uid() != shown.uid() => Some(Found::Recreated),
        // The object still shows what we last saw: our verdict moved.
        Some(last) if last == shown => None,
        Some(last) => Some(match (shown, last) {
            (Shown::NoObject | Shown::NoEntry { .. }, _) => Found::EntryRemoved,
            (
                Shown::Entry { status, .. },
                Shown::Entry {
                    status: last_status,
                    ..
                },
            ) if status == last_status => Found::OtherText,
            (Shown::Entry { status, .. }, _) => Found::OtherStatus(status.clone()),
        }),
    };
    NextWrite::Write { restore }
}

/// The rule for either goal. Keeping the gate closed, any `False` will
/// do, and every write is a restore: the object showed something else
/// (named from what was last seen when it tells more, else from what is
/// shown).
pub(crate) fn next_write_for(goal: Goal<'_>, shown: &Shown, last: Option<&Shown>) -> NextWrite {
    let closed = match goal {
        Goal::Verdict(verdict) => return next_write(verdict, shown, last),
        Goal::Closed(closed) => closed,
    };
    match shown {
        Shown::NoObject => NextWrite::AwaitObject,
        Shown::Entry { status, .. } if status == "False" => NextWrite::Nothing,
        Shown::NoEntry { .. } | Shown::Entry { .. } => {
            let seen = match next_write(closed, shown, last) {
                NextWrite::Write { restore } => restore,
                NextWrite::Nothing | NextWrite::AwaitObject => None,
            };
            let found = seen.unwrap_or_else(|| match shown {
                Shown::Entry { status, .. } => Found::OtherStatus(status.clone()),
                Shown::NoObject | Shown::NoEntry { .. } => Found::EntryRemoved,
            });
            NextWrite::Write {
                restore: Some(found),
            }
        }
    }
}

/// What a write restored: judged on the object its update replaced, which
/// may be newer than the round's read (another writer's `True` landing
/// between that read and the write is undone by the write all the same).
pub(crate) fn restored(goal: Goal<'_>, replaced: &Shown, last: Option<&Shown>) -> Option<Found> {
    match next_write_for(goal, replaced, last) {
        NextWrite::Write { restore } => restore,
        NextWrite::Nothing | NextWrite::AwaitObject => None,
    }
}

/// Whether the object's watch tells the keeper of every change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WatchState {
    /// Not listed yet since the start.
    #[default]
    Starting,
    /// Listed, and no error since.
    Live,
    /// The last item was an error (the watcher relists after a backoff).
    Down,
}

impl WatchState {
    /// The state after one item of the watch.
    pub(crate) fn after<K>(self, item: &Result<watcher::Event<K>, watcher::Error>) -> WatchState {
        match item {
            Err(_) => WatchState::Down,
            Ok(watcher::Event::InitDone) => WatchState::Live,
            Ok(_) => self,
        }
    }
}

/// How often the object is read when nothing wakes the keeper.
pub(crate) fn poll_interval(watch: WatchState) -> Duration {
    match watch {
        WatchState::Live => WATCHED_POLL_INTERVAL,
        WatchState::Starting | WatchState::Down => POLL_INTERVAL,
    }
}

/// Whether a watch item calls for reading the object now: a change, or
/// the end of a (re)list, which may follow changes the watch missed. The
/// objects of a list in progress wait for its end.
pub(crate) fn wakes<K>(item: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(
        item,
        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::Reason;

    fn verdict(upgradeable: bool) -> UpgradeableEntry {
        let built = if upgradeable {
            UpgradeableEntry::open(Reason::new("UpgradeComplete").expect("valid"), "done")
        } else {
            UpgradeableEntry::closed(Reason::new("UpgradeInProgress").expect("valid"), "running")
        };
        built.expect("valid entry")
    }

    fn entry(uid: &str, status: &str, reason: &str, message: &str) -> Shown {
        Shown::Entry {
            uid: uid.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn ours(uid: &str, upgradeable: bool) -> Shown {
        let v = verdict(upgradeable);
        entry(
            uid,
            v.state().condition_status(),
            v.reason().as_str(),
            v.message(),
        )
    }

    #[test]
    fn next_write_table() {
        let closed = verdict(false);
        let open = verdict(true);
        let write = |restore: Option<Found>| NextWrite::Write { restore };
        let no_entry = |uid: &str| Shown::NoEntry { uid: uid.into() };
        let cases: Vec<(&str, &UpgradeableEntry, Shown, Option<Shown>, NextWrite)> = vec![
            (
                "object gone",
                &closed,
                Shown::NoObject,
                Some(ours("u1", false)),
                NextWrite::AwaitObject,
            ),
            (
                "object gone, nothing written yet",
                &closed,
                Shown::NoObject,
                None,
                NextWrite::AwaitObject,
            ),
            (
                "shows our verdict",
                &closed,
                ours("u1", false),
                Some(ours("u1", false)),
                NextWrite::Nothing,
            ),
            (
                "first write: the init container's entry",
                &closed,
                entry(
                    "u1",
                    "False",
                    "UpgradeInProgress",
                    "held by the init container",
                ),
                None,
                write(None),
            ),
            (
                "first write: empty object",
                &open,
                no_entry("u1"),
                None,
                write(None),
            ),
            (
                "our verdict changed",
                &open,
                ours("u1", false),
                Some(ours("u1", false)),
                write(None),
            ),
            (
                "recreated empty",
                &closed,
                no_entry("u2"),
                Some(ours("u1", false)),
                write(Some(Found::Recreated)),
            ),
            (
                "recreated with an entry",
                &closed,
                entry("u2", "True", "X", "y"),
                Some(ours("u1", false)),
                write(Some(Found::Recreated)),
            ),
            (
                "recreated, already says ours",
                &closed,
                ours("u2", false),
                Some(ours("u1", false)),
                NextWrite::Nothing,
            ),
            (
                "entry dropped by a rewrite",
                &closed,
                no_entry("u1"),
                Some(ours("u1", false)),
                write(Some(Found::EntryRemoved)),
            ),
            (
                "a foreign True",
                &closed,
                entry("u1", "True", "Released", "upgrade-gate release"),
                Some(ours("u1", false)),
                write(Some(Found::OtherStatus("True".into()))),
            ),
            (
                "a foreign False while we say True",
                &open,
                entry("u1", "False", "Held", "someone"),
                Some(ours("u1", true)),
                write(Some(Found::OtherStatus("False".into()))),
            ),
            (
                "an Unknown",
                &closed,
                entry("u1", "Unknown", "R", "m"),
                Some(ours("u1", false)),
                write(Some(Found::OtherStatus("Unknown".into()))),
            ),
            (
                "same status, foreign text",
                &closed,
                entry("u1", "False", "Manual", "held by hand"),
                Some(ours("u1", false)),
                write(Some(Found::OtherText)),
            ),
            (
                "foreign change and our change at once",
                &open,
                entry("u1", "False", "Manual", "x"),
                Some(ours("u1", false)),
                write(Some(Found::OtherText)),
            ),
        ];
        for (case, verdict, shown, last, expected) in cases {
            assert_eq!(
                next_write(verdict, &shown, last.as_ref()),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn role_after_table() {
        use Role::*;
        let following = |own_release| Standing::Following {
            holder: "other".into(),
            alive: true,
            own_release,
        };
        // (role before, standing, role after)
        let cases = [
            (Idle, Standing::Unknown, Idle),
            (Idle, following(false), Waiting),
            (Idle, following(true), StandBy),
            (Waiting, following(true), StandBy),
            (StandBy, following(false), Waiting),
            (Waiting, Standing::Unknown, Waiting),
            (StandBy, Standing::Unknown, StandBy),
            (Waiting, Standing::Leading, Waiting),
            (StandBy, Standing::Leading, StandBy),
        ];
        for (before, standing, after) in cases {
            assert_eq!(
                role_after(before, &standing),
                after,
                "{before:?} then {standing:?}"
            );
        }
    }

    #[test]
    fn keeps_table() {
        use Role::*;
        // (role, has a verdict, has a closed entry) → keeps
        let cases = [
            (Leading, true, true, Keeps::Verdict),
            (Leading, true, false, Keeps::Verdict),
            (Leading, false, true, Keeps::Closed),
            (Leading, false, false, Keeps::Nothing),
            (Waiting, false, true, Keeps::Closed),
            (Waiting, true, true, Keeps::Closed),
            (Waiting, false, false, Keeps::Nothing),
            (StandBy, true, true, Keeps::Nothing),
            (StandBy, false, true, Keeps::Nothing),
            (Idle, true, true, Keeps::Nothing),
        ];
        for (role, verdict, closed, expected) in cases {
            assert_eq!(
                keeps(role, verdict, closed),
                expected,
                "{role:?} verdict {verdict} closed {closed}"
            );
        }
    }

    #[test]
    fn next_write_for_a_closed_gate_table() {
        let waiting = UpgradeableEntry::closed(
            Reason::new("WaitingToLead").expect("valid"),
            "release 7.10.0 is waiting to lead",
        )
        .expect("valid entry");
        let goal = Goal::Closed(&waiting);
        let write = |found: Found| NextWrite::Write {
            restore: Some(found),
        };
        let hold = entry("u1", "False", "UpgradeInProgress", "upgrade-gate hold");
        let cases: Vec<(&str, Shown, Option<Shown>, NextWrite)> = vec![
            (
                "gone",
                Shown::NoObject,
                Some(hold.clone()),
                NextWrite::AwaitObject,
            ),
            (
                "the init container's False",
                hold.clone(),
                None,
                NextWrite::Nothing,
            ),
            (
                "another leader's False",
                entry("u1", "False", "DatabaseBlocked", "x"),
                Some(hold.clone()),
                NextWrite::Nothing,
            ),
            (
                "a foreign True",
                entry("u1", "True", "Released", "upgrade-gate release"),
                Some(hold.clone()),
                write(Found::OtherStatus("True".into())),
            ),
            (
                "a foreign True, first read",
                entry("u1", "True", "Released", "upgrade-gate release"),
                None,
                write(Found::OtherStatus("True".into())),
            ),
            (
                "an Unknown",
                entry("u1", "Unknown", "R", "m"),
                Some(hold.clone()),
                write(Found::OtherStatus("Unknown".into())),
            ),
            (
                "the entry dropped",
                Shown::NoEntry { uid: "u1".into() },
                Some(hold.clone()),
                write(Found::EntryRemoved),
            ),
            (
                "the entry dropped, first read",
                Shown::NoEntry { uid: "u1".into() },
                None,
                write(Found::EntryRemoved),
            ),
            (
                "deleted, recreated empty by OLM",
                Shown::NoEntry { uid: "u2".into() },
                Some(hold.clone()),
                write(Found::Recreated),
            ),
        ];
        for (case, shown, last, expected) in cases {
            assert_eq!(
                next_write_for(goal, &shown, last.as_ref()),
                expected,
                "{case}"
            );
            let restore = match &expected {
                NextWrite::Write { restore } => restore.clone(),
                NextWrite::Nothing | NextWrite::AwaitObject => None,
            };
            assert_eq!(restored(goal, &shown, last.as_ref()), restore, "{case}");
        }
        // The verdict's rule is next_write's.
        let closed = verdict(false);
        assert_eq!(
            next_write_for(Goal::Verdict(&closed), &hold, None),
            next_write(&closed, &hold, None)
        );
    }

    #[test]
    fn unanswered_write_landed_table() {
        let at = |uid: &str, generation: i64| Revision {
            uid: uid.into(),
            generation,
        };
        let base = at("u1", 4);
        let cases = [
            (
                "nothing changed spec: not carried out",
                Some(at("u1", 4)),
                false,
            ),
            (
                "one change: another writer's instead of ours",
                Some(at("u1", 5)),
                false,
            ),
            ("ours, then another writer's", Some(at("u1", 6)), true),
            ("ours, then two more", Some(at("u1", 8)), true),
            ("a new object cannot tell", Some(at("u2", 9)), false),
            ("no object", None, false),
        ];
        for (case, now, landed) in cases {
            assert_eq!(
                unanswered_write_landed(&base, now.as_ref()),
                landed,
                "{case}"
            );
        }
    }

    #[test]
    fn watch_state_table() {
        use WatchState::*;
        type Item = Result<watcher::Event<Shown>, watcher::Error>;
        let object = || Shown::NoObject;
        let error = || -> Item { Err(watcher::Error::NoResourceVersion) };
        // (state, item, state after, wakes the keeper)
        let cases: Vec<(WatchState, Item, WatchState, bool)> = vec![
            (Starting, Ok(watcher::Event::Init), Starting, false),
            (
                Starting,
                Ok(watcher::Event::InitApply(object())),
                Starting,
                false,
            ),
            (Starting, Ok(watcher::Event::InitDone), Live, true),
            (Starting, error(), Down, false),
            (Live, Ok(watcher::Event::Apply(object())), Live, true),
            (Live, Ok(watcher::Event::Delete(object())), Live, true),
            (Live, error(), Down, false),
            (Down, Ok(watcher::Event::Init), Down, false),
            (Down, Ok(watcher::Event::InitApply(object())), Down, false),
            (Down, Ok(watcher::Event::InitDone), Live, true),
        ];
        for (state, item, after, wake) in cases {
            assert_eq!(state.after(&item), after, "{state:?} after {item:?}");
            assert_eq!(wakes(&item), wake, "{item:?}");
        }
        assert_eq!(poll_interval(Live), WATCHED_POLL_INTERVAL);
        assert_eq!(poll_interval(Starting), POLL_INTERVAL);
        assert_eq!(poll_interval(Down), POLL_INTERVAL);
    }

    #[test]
    fn found_labels() {
        assert_eq!(Found::Recreated.label(), "recreated");
        assert_eq!(Found::EntryRemoved.label(), "entry_removed");
        assert_eq!(Found::OtherStatus("True".into()).label(), "other_true");
        assert_eq!(Found::OtherStatus("False".into()).label(), "other_false");
        assert_eq!(Found::OtherStatus("Maybe".into()).label(), "other_status");
        assert_eq!(Found::OtherText.label(), "other_text");
    }
}
