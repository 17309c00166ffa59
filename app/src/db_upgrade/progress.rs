//! Where a running `app-db-upgrade` is, in a form that fits PostgreSQL's
//! `application_name`: the Job publishes it on a database session of its own
//! and the operator reads it from `pg_stat_activity` of the App's database,
//! so watching an upgrade needs no Kubernetes rights for the Job and no new
//! channel for the operator.
//!
//! Owns: the [`Progress`] value (step, how far, ETA), its `application_name`
//! encoding ([`Progress::to_application_name`]) and decoding
//! ([`parse_application_name`]), the ETA arithmetic ([`eta`]) and the query a
//! reader runs ([`PUBLISHED_PROGRESS_SQL`]). Pure: must not touch a database,
//! a terminal or the clock.
//!
//! The encoding, one line of printable ASCII of at most
//! [`APPLICATION_NAME_MAX_BYTES`] bytes, space-separated and positional:
//!
//! ```text
//! app-db-upgrade <step> <amount> <eta> [<migration name>]
//!   step:   lock | backup | verify | V<version>
//!   amount: <done>/<total><unit> | <done><unit> | -      (unit: B or rows)
//!   eta:    eta<seconds>s | -
//! ```
//!
//! e.g. `app-db-upgrade V4 800000/2000000rows eta12s reshape_executions`.
//! The amount and the ETA are always present (`-` when unknown), so any cut
//! of the line that ends inside a number or a unit leaves it unparsable
//! rather than wrong; only the migration name, last, can be shortened, and a
//! reader gets a prefix of it. The encoder keeps the line within
//! PostgreSQL's limit itself (dropping the name's tail, then the ETA, then
//! the amount), so PostgreSQL never truncates it.

use std::fmt;
use std::time::Duration;

/// PostgreSQL keeps `NAMEDATALEN - 1` = 63 bytes of `application_name`.
pub const APPLICATION_NAME_MAX_BYTES: usize = 63;

/// The first word of every line the Job publishes; also the name of its
/// sessions that publish nothing (`super::APPLICATION_NAME`).
pub const PREFIX: &str = "app-db-upgrade";

/// What a reader runs on the App's database (any role may read its own
/// database's `application_name`s): one row per upgrade session, its
/// `application_name` first. Parse each with [`parse_application_name`];
/// sessions that publish no progress parse to `None`.
pub const PUBLISHED_PROGRESS_SQL: &str = "SELECT application_name FROM pg_stat_activity \
     WHERE datname = current_database() AND application_name LIKE 'app-db-upgrade %'";

/// The step the upgrade is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Waiting for another upgrade's lock.
    WaitingForLock,
    /// `pg_dump` is writing the backup.
    Backup,
    /// The archive is being read back and checksummed.
    VerifyingBackup,
    /// A migration's SQL is running. `name` may be a prefix of the real
    /// name when the line had no room for all of it.
    Migration { version: u32, name: String },
}

/// What `done` and `total` count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Rows,
}

/// How far the step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    pub done: u64,
    /// `None` when there is no honest estimate of the whole.
    pub total: Option<u64>,
    pub unit: Unit,
}

/// One observation of a running upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: Step,
    /// `None` when the step has no measure (e.g. a statement PostgreSQL has
    /// no progress view for).
    pub amount: Option<Amount>,
    /// Whole seconds left in this step, when `amount` has a total and a rate.
    pub eta_seconds: Option<u64>,
}

impl Step {
    fn token(&self) -> String {
        match self {
            Step::WaitingForLock => "lock".to_owned(),
            Step::Backup => "backup".to_owned(),
            Step::VerifyingBackup => "verify".to_owned(),
            Step::Migration { version, .. } => format!("V{version}"),
        }
    }
}

impl Unit {
    fn suffix(self) -> &'static str {
        match self {
            Unit::Bytes => "B",
            Unit::Rows => "rows",
        }
    }
}

impl Amount {
    fn token(&self) -> String {
        match self.total {
            Some(total) => format!("{}/{}{}", self.done, total, self.unit.suffix()),
            None => format!("{}{}", self.done, self.unit.suffix()),
        }
    }

    /// `done / total` in `0.0..=1.0` (done beyond an estimated total reads
    /// as 1.0); `None` without a total.
    pub fn fraction(&self) -> Option<f64> {
        let total = self.total?;
        if total == 0 {
            return Some(1.0);
        }
        Some((self.done as f64 / total as f64).min(1.0))
    }
}

fn eta_token(eta_seconds: Option<u64>) -> String {
    eta_seconds.map_or_else(|| "-".to_owned(), |s| format!("eta{s}s"))
}

/// The characters a migration name keeps on the line: PostgreSQL shows only
/// printable ASCII, and a space would end the name.
fn name_char(c: char) -> char {
    if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
        c
    } else {
        '_'
    }
}

impl Progress {
    /// The line to publish as `application_name`: at most
    /// [`APPLICATION_NAME_MAX_BYTES`] bytes of printable ASCII. When the
    /// whole does not fit, the migration name is shortened first, then the
    /// ETA and then the amount are replaced by `-`; the step always fits.
    pub fn to_application_name(&self) -> String {
        let step = self.step.token();
        let amount = self
            .amount
            .as_ref()
            .map_or_else(|| "-".to_owned(), Amount::token);
        let eta = eta_token(self.eta_seconds);
        let name: String = match &self.step {
            Step::Migration { name, .. } => name.chars().map(name_char).collect(),
            _ => String::new(),
        };
        for (amount, eta) in [(amount.as_str(), eta.as_str()), (&amount, "-"), ("-", "-")] {
            let line = format!("{PREFIX} {step} {amount} {eta}");
            // A name needs its separator and at least one character.
            let room = APPLICATION_NAME_MAX_BYTES.saturating_sub(line.len() + 1);
            if line.len() <= APPLICATION_NAME_MAX_BYTES {
                return if name.is_empty() || room == 0 {
                    line
                } else {
                    // ASCII only, so any byte count is a char boundary.
                    format!("{line} {}", &name[..name.len().min(room)])
                };
            }
        }
        // The step token is at most "V4294967295": the prefix and it fit.
        format!("{PREFIX} {step} - -")
    }

    /// What the encoding keeps of this progress: the value a reader gets
    /// back from [`Progress::to_application_name`].
    pub fn as_published(&self) -> Progress {
        parse_application_name(&self.to_application_name())
            .expect("the encoder's own line always parses")
    }
}

/// Reads a line [`Progress::to_application_name`] wrote. `None` for any
/// other `application_name`, including a line cut anywhere before the end of
/// its ETA; a line cut inside the migration name gives a prefix of it.
pub fn parse_application_name(line: &str) -> Option<Progress> {
    let mut tokens = line.splitn(6, ' ');
    if tokens.next()? != PREFIX {
        return None;
    }
    let step_token = tokens.next()?;
    let amount = parse_amount(tokens.next()?)?;
    let eta_seconds = parse_eta(tokens.next()?)?;
    let name = tokens.next();
    if tokens.next().is_some() {
        return None;
    }
    let step = match (step_token, name) {
        ("lock", None) => Step::WaitingForLock,
        ("backup", None) => Step::Backup,
        ("verify", None) => Step::VerifyingBackup,
        (token, name) => {
            let version = parse_digits(token.strip_prefix('V')?)?;
            let version = u32::try_from(version).ok()?;
            let name = name.unwrap_or_default();
            if name.chars().any(|c| name_char(c) != c) {
                return None;
            }
            Step::Migration {
                version,
                name: name.to_owned(),
            }
        }
    };
    Some(Progress {
        step,
        amount,
        eta_seconds,
    })
}

/// Digits only: no sign, no spaces, not empty.
fn parse_digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `Some(None)` for `-`, `None` for anything that is not an amount.
fn parse_amount(token: &str) -> Option<Option<Amount>> {
    if token == "-" {
        return Some(None);
    }
    let (numbers, unit) = if let Some(numbers) = token.strip_suffix("rows") {
        (numbers, Unit::Rows)
    } else {
        (token.strip_suffix('B')?, Unit::Bytes)
    };
    let (done, total) = match numbers.split_once('/') {
        Some((done, total)) => (parse_digits(done)?, Some(parse_digits(total)?)),
        None => (parse_digits(numbers)?, None),
    };
    Some(Some(Amount { done, total, unit }))
}

fn parse_eta(token: &str) -> Option<Option<u64>> {
    if token == "-" {
        return Some(None);
    }
    Some(Some(parse_digits(
        token.strip_prefix("eta")?.strip_suffix('s')?,
    )?))
}

/// Seconds left at the rate so far: `(total - done) * elapsed / done`,
/// rounded up. `None` before anything is done (no rate yet), without a
/// total, or when `done` has passed an estimated total (the estimate was
/// wrong; no honest ETA).
pub fn eta(done: u64, total: Option<u64>, elapsed: Duration) -> Option<u64> {
    let total = total?;
    if done == 0 || done > total {
        return None;
    }
    let left = u128::from(total - done) * elapsed.as_millis();
    let millis = left.div_ceil(u128::from(done));
    u64::try_from(millis.div_ceil(1000)).ok()
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::WaitingForLock => f.write_str("waiting for the upgrade lock"),
            Step::Backup => f.write_str("backup"),
            Step::VerifyingBackup => f.write_str("verifying the backup"),
            Step::Migration { version, name } if name.is_empty() => {
                write!(f, "migration V{version}")
            }
            Step::Migration { version, name } => write!(f, "migration V{version} {name}"),
        }
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.unit {
            Unit::Bytes => "bytes",
            Unit::Rows => "rows",
        };
        match (self.total, self.fraction()) {
            (Some(total), Some(fraction)) => {
                write!(f, "{}/{total} {unit} ({:.0}%)", self.done, fraction * 100.0)
            }
            _ => write!(f, "{} {unit}", self.done),
        }
    }
}

/// One line for people, e.g. `migration V4 reshape_executions: 800000/2000000
/// rows (40%), ETA 12s` (the operator's status message uses it).
impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.step)?;
        if let Some(amount) = &self.amount {
            write!(f, ": {amount}")?;
        }
        if let Some(eta) = self.eta_seconds {
            write!(f, ", ETA {eta}s")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(version: u32, name: &str) -> Step {
        Step::Migration {
            version,
            name: name.into(),
        }
    }

    fn amount(done: u64, total: Option<u64>, unit: Unit) -> Option<Amount> {
        Some(Amount { done, total, unit })
    }

    fn progress(step: Step, amount: Option<Amount>, eta_seconds: Option<u64>) -> Progress {
        Progress {
            step,
            amount,
            eta_seconds,
        }
    }

    #[test]
    fn lines_and_round_trips() {
        let cases = [
            (
                progress(Step::WaitingForLock, None, None),
                "app-db-upgrade lock - -",
            ),
            (
                progress(
                    Step::Backup,
                    amount(1_200_000, Some(2_000_000), Unit::Rows),
                    Some(35),
                ),
                "app-db-upgrade backup 1200000/2000000rows eta35s",
            ),
            (
                progress(
                    Step::VerifyingBackup,
                    amount(4096, Some(1 << 30), Unit::Bytes),
                    Some(0),
                ),
                "app-db-upgrade verify 4096/1073741824B eta0s",
            ),
            (
                progress(Step::Backup, amount(77, None, Unit::Bytes), None),
                "app-db-upgrade backup 77B -",
            ),
            (
                progress(
                    migration(4, "reshape_executions"),
                    amount(800_000, Some(2_000_000), Unit::Rows),
                    Some(12),
                ),
                "app-db-upgrade V4 800000/2000000rows eta12s reshape_executions",
            ),
            (
                progress(
                    migration(3, "split_integration_flows_into_steps"),
                    None,
                    None,
                ),
                "app-db-upgrade V3 - - split_integration_flows_into_steps",
            ),
            (
                progress(migration(7, ""), None, Some(9)),
                "app-db-upgrade V7 - eta9s",
            ),
        ];
        for (progress, line) in cases {
            assert_eq!(progress.to_application_name(), line);
            assert!(line.len() <= APPLICATION_NAME_MAX_BYTES, "{line}");
            assert_eq!(parse_application_name(line), Some(progress), "{line}");
        }
    }

    #[test]
    fn what_does_not_fit_is_given_up_name_first_then_eta_then_amount() {
        let long_name = "x".repeat(80);
        let cases = [
            (
                progress(
                    migration(4, &long_name),
                    amount(800_000, Some(2_000_000), Unit::Rows),
                    Some(12),
                ),
                progress(
                    migration(
                        4,
                        &"x".repeat(63 - "app-db-upgrade V4 800000/2000000rows eta12s ".len()),
                    ),
                    amount(800_000, Some(2_000_000), Unit::Rows),
                    Some(12),
                ),
            ),
            (
                progress(
                    Step::Backup,
                    amount(u64::MAX - 1, Some(u64::MAX), Unit::Bytes),
                    Some(u64::MAX),
                ),
                progress(Step::Backup, None, None),
            ),
            (
                progress(
                    migration(u32::MAX, "name"),
                    amount(12_345_678_901_234, Some(12_345_678_901_234), Unit::Rows),
                    Some(u64::MAX),
                ),
                progress(
                    migration(u32::MAX, ""),
                    amount(12_345_678_901_234, Some(12_345_678_901_234), Unit::Rows),
                    None,
                ),
            ),
            (
                progress(migration(9, "with space/and:ü"), None, None),
                progress(migration(9, "with_space_and__"), None, None),
            ),
        ];
        for (given, published) in cases {
            let line = given.to_application_name();
            assert!(line.len() <= APPLICATION_NAME_MAX_BYTES, "{line}");
            assert!(line.bytes().all(|b| (32..127).contains(&b)), "{line}");
            assert_eq!(given.as_published(), published, "{line}");
        }
    }

    #[test]
    fn a_cut_line_parses_to_nothing_or_to_the_truth_with_a_shorter_name() {
        let originals = [
            progress(
                migration(12, "reshape_executions"),
                amount(1_234_567, Some(9_876_543), Unit::Rows),
                Some(456),
            ),
            progress(
                Step::Backup,
                amount(123_456, Some(654_321), Unit::Bytes),
                Some(78),
            ),
            progress(Step::VerifyingBackup, amount(5, None, Unit::Bytes), None),
            progress(Step::WaitingForLock, None, None),
        ];
        for original in originals {
            let line = original.to_application_name();
            for cut in 0..=line.len() {
                let Some(parsed) = parse_application_name(&line[..cut]) else {
                    continue;
                };
                assert_eq!(parsed.amount, original.amount, "{:?}", &line[..cut]);
                assert_eq!(
                    parsed.eta_seconds,
                    original.eta_seconds,
                    "{:?}",
                    &line[..cut]
                );
                match (&parsed.step, &original.step) {
                    (
                        Step::Migration { version, name },
                        Step::Migration {
                            version: v,
                            name: n,
                        },
                    ) => {
                        assert_eq!(version, v);
                        assert!(n.starts_with(name.as_str()), "{name} {n}");
                    }
                    (parsed, original) => assert_eq!(parsed, original),
                }
            }
        }
    }

    #[test]
    fn other_application_names_are_not_progress() {
        for line in [
            "",
            "app-db-upgrade",
            "app-db-upgrade ",
            "app-db-upgrade pg_dump",
            "app-db-upgrade backup",
            "app-db-upgrade backup 12rows",
            "app-db-upgrade backup 12rows eta",
            "app-db-upgrade backup 12rows eta5",
            "app-db-upgrade backup 12rows 5s",
            "app-db-upgrade backup 12 -",
            "app-db-upgrade backup 12/rows -",
            "app-db-upgrade backup /12rows -",
            "app-db-upgrade backup -12rows -",
            "app-db-upgrade backup 12kB -",
            "app-db-upgrade backup - - name",
            "app-db-upgrade V - -",
            "app-db-upgrade V4x - -",
            "app-db-upgrade V99999999999 - -",
            "app-db-upgrade V4 - - two words",
            "app-db-upgrade V4 - - ü",
            "app-db-upgrade restore - -",
            "app-db-upgrade  backup - -",
            "psql",
            "app-db-upgrade-x backup - -",
        ] {
            assert_eq!(parse_application_name(line), None, "{line:?}");
        }
    }

    #[test]
    fn eta_at_the_rate_so_far() {
        let s = Duration::from_secs;
        let cases = [
            (0, Some(100), s(10), None),
            (10, None, s(10), None),
            (10, Some(100), s(10), Some(90)),
            (50, Some(100), s(10), Some(10)),
            (100, Some(100), s(10), Some(0)),
            (101, Some(100), s(10), None),
            (3, Some(10), Duration::from_millis(1000), Some(3)),
            (1, Some(u64::MAX), s(1), Some(u64::MAX - 1)),
        ];
        for (done, total, elapsed, expected) in cases {
            assert_eq!(
                eta(done, total, elapsed),
                expected,
                "{done} {total:?} {elapsed:?}"
            );
        }
    }

    #[test]
    fn people_read_it_as_one_line() {
        let cases = [
            (
                progress(
                    migration(4, "reshape_executions"),
                    amount(800_000, Some(2_000_000), Unit::Rows),
                    Some(12),
                ),
                "migration V4 reshape_executions: 800000/2000000 rows (40%), ETA 12s",
            ),
            (
                progress(Step::Backup, amount(77, None, Unit::Bytes), None),
                "backup: 77 bytes",
            ),
            (
                progress(Step::WaitingForLock, None, None),
                "waiting for the upgrade lock",
            ),
            (progress(migration(5, ""), None, None), "migration V5"),
        ];
        for (progress, text) in cases {
            assert_eq!(progress.to_string(), text);
        }
    }
}
