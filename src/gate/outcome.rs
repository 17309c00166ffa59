//! How a gate command ended, and the process exit code for each ending.
//!
//! Owns: the exit-code table (one documented code per outcome, also printed
//! by `--help`) and the pure mapping to it. Must not touch: I/O.

use crate::locate::{self, InvalidTarget, OutsideOlm, SetupError};
use crate::operator_condition::{Confirmed, Error as ConditionError, Obstacle};
use crate::shutdown::StopSignal;

use super::report::StatusReport;

/// A successful ending.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// `hold`: OLM confirmed `Upgradeable=False`.
    Held {
        /// The `OperatorCondition` it closed.
        name: String,
        /// OLM's confirmation (its verdict says whether an override wins).
        confirmed: Confirmed,
        /// False when spec already said False (its reason and message were kept).
        wrote: bool,
    },
    /// `release`: spec says `Upgradeable=True`.
    Released {
        /// The `OperatorCondition` it opened.
        name: String,
        /// False when spec already said True.
        wrote: bool,
        /// OLM's confirmation, with `--wait`.
        confirmed: Option<Confirmed>,
    },
    /// `status`: what OLM will decide.
    Reported(Box<StatusReport>),
    /// `record`: the admission policy's state says it.
    Recorded {
        /// Where the policy reads it (and the ConfigMap the previous
        /// policy read).
        recorded_in: String,
        /// What it says now.
        record: crate::admission::UpgradeClaim,
        /// False when it already said so.
        wrote: bool,
    },
    /// Nothing to do: OLM is not in play.
    OutsideOlm(OutsideOlm),
}

/// An unsuccessful ending.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Flags, environment or the namespace file are unusable.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// No kubeconfig and no in-cluster configuration.
    #[error("no cluster configuration: {0}")]
    NoClusterConfig(String),
    /// Talking to the API server or waiting for OLM failed.
    #[error(transparent)]
    Condition(#[from] ConditionError),
    /// The set-up leaves the gate no OperatorCondition to act on safely.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// `hold` closed the gate and OLM confirmed it, but an admin's
    /// `spec.overrides` entry `Upgradeable=True` makes OLM ignore it.
    #[error(
        "the gate is closed in status, but spec.overrides of OperatorCondition {name} sets Upgradeable=True ({message:?}), so OLM upgrades anyway: remove the override to let the gate work, or pass --allow-override to start regardless"
    )]
    Overridden {
        /// The `OperatorCondition`.
        name: String,
        /// The override's message.
        message: String,
    },
    /// SIGTERM or SIGINT came before the command finished.
    #[error(
        "stopped by {0} before the command finished: the gate was not confirmed (an entry may already be written to spec)"
    )]
    Stopped(StopSignal),
}

impl From<InvalidTarget> for GateError {
    fn from(InvalidTarget(why): InvalidTarget) -> GateError {
        GateError::InvalidInput(why)
    }
}

impl From<locate::Error> for GateError {
    fn from(error: locate::Error) -> GateError {
        match error {
            locate::Error::Api(error) => GateError::Condition(error),
            locate::Error::Setup(error) => GateError::Setup(error),
        }
    }
}

/// The exit codes, documented once: used by [`exit_code`], `--help` and
/// docs/gate.md.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "done: hold confirmed by OLM, release written (and confirmed with --wait), status printed, record written, or no OperatorCondition guards this operator (no OLM, OLM v1, a Deployment OLM did not install)",
    ),
    (
        2,
        "invalid input: a flag, environment variable or the namespace file is unusable (clap's usage errors are 2 as well)",
    ),
    (
        3,
        "API server unreachable until --timeout (connection refused, DNS, TLS, timeouts); fails closed",
    ),
    (
        4,
        "forbidden until --timeout: RBAC does not allow get/update on the OperatorCondition (record: get/patch on the UpgradeRecord and the ConfigMap upgrade-gate-state, create while one is missing, the verb record on upgraderecords named after the Deployment)",
    ),
    (
        5,
        "not found until --timeout: the OperatorCondition never appeared",
    ),
    (
        6,
        "deadline reached: OLM did not copy the written Upgradeable into status at the current generation (check that every Deployment in spec.deployments exists and carries olm.managed)",
    ),
    (
        7,
        "the API server kept failing until --timeout (409 conflicts, 429, 5xx)",
    ),
    (
        8,
        "the API server rejected a request (another 4xx) or answered something unreadable",
    ),
    (
        9,
        "superseded: someone else changed spec's Upgradeable entry while waiting for OLM",
    ),
    (
        10,
        "no cluster configuration: neither in-cluster service account nor kubeconfig",
    ),
    (
        11,
        "stopped by SIGTERM or SIGINT before the command finished: the gate was not confirmed (an entry may already be in spec)",
    ),
    (
        12,
        "overridden: hold closed the gate, but spec.overrides sets Upgradeable=True, so OLM ignores it (--allow-override starts regardless)",
    ),
    (
        13,
        "set-up: OLM v0 is installed but the OperatorCondition name is unknown: set OPERATOR_CONDITION_NAME on the init container in the CSV",
    ),
    (
        14,
        "set-up: the configured name is not the CSV that owns this pod's Deployment",
    ),
];

/// The process exit code for a command's result (see [`EXIT_CODES`]).
pub fn exit_code(result: &Result<Outcome, GateError>) -> u8 {
    let Err(error) = result else { return 0 };
    match error {
        GateError::InvalidInput(_) => 2,
        GateError::NoClusterConfig(_) => 10,
        GateError::Stopped(_) => 11,
        GateError::Overridden { .. } => 12,
        GateError::Setup(SetupError::NameUnknown { .. }) => 13,
        GateError::Setup(SetupError::NameMismatch { .. }) => 14,
        GateError::Condition(error) => match error {
            ConditionError::DeadlineReached { last, .. } => match last {
                Obstacle::Unreachable(_) | Obstacle::Timeout => 3,
                Obstacle::Forbidden(_) => 4,
                Obstacle::NotFound(_) => 5,
                Obstacle::Conflict(_)
                | Obstacle::TooManyRequests(_)
                | Obstacle::ServerError { .. } => 7,
                Obstacle::Rejected { .. } | Obstacle::Unexpected(_) => 8,
            },
            ConditionError::NotConfirmed { .. } => 6,
            ConditionError::Failed { obstacle, .. } => match obstacle {
                // Refusals a caller chose not to wait out (a list by a person).
                Obstacle::Forbidden(_) => 4,
                Obstacle::NotFound(_) => 5,
                _ => 8,
            },
            ConditionError::Superseded { .. } => 9,
        },
    }
}

/// The exit-code table as text, for `--help`.
pub fn exit_code_table() -> String {
    exit_table(EXIT_CODES.iter().map(|(code, meaning)| (*code, *meaning)))
}

/// `--help`'s closing section for a binary whose every failure says why
/// in one line on stderr: that heading and the table of `codes`
/// ([`exit_table`]). The one wording of `upgrade-gate`, `app-operator` and
/// `app-server`.
pub fn exit_codes_help(codes: &[(u8, &str)]) -> String {
    format!(
        "Exit codes (one line on stderr says why):\n{}",
        exit_table(codes.iter().copied())
    )
}

/// The width exit tables are wrapped to for `--help`. clap wraps again
/// only a line longer than the terminal (100 columns where it cannot
/// tell), and would then indent its continuation by the line's own leading
/// spaces: a table wrapped here keeps its hanging indent in any terminal
/// this wide or wider.
pub const HELP_TABLE_WIDTH: usize = 80;

/// Rows `  CODE  MEANING`, each meaning wrapped to [`HELP_TABLE_WIDTH`]
/// columns with its continuation lines indented under the meaning.
pub fn exit_table<'a>(rows: impl IntoIterator<Item = (u8, &'a str)>) -> String {
    const INDENT: usize = 7;
    let mut lines = Vec::new();
    for (code, meaning) in rows {
        let mut line = format!("  {code:>3}  ");
        let mut empty = true;
        for word in meaning.split_whitespace() {
            if !empty && line.len() + 1 + word.len() > HELP_TABLE_WIDTH {
                lines.push(std::mem::replace(&mut line, " ".repeat(INDENT)));
                empty = true;
            }
            if !empty {
                line.push(' ');
            }
            line.push_str(word);
            empty = false;
        }
        lines.push(line);
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::{CopyState, GateState};

    fn deadline(last: Obstacle) -> Result<Outcome, GateError> {
        Err(GateError::Condition(ConditionError::DeadlineReached {
            action: "testing",
            last,
        }))
    }

    #[test]
    fn exit_tables_wrap_under_the_meaning() {
        let long = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen";
        let table = exit_table([(0, "done"), (13, long), (2, "x")]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "    0  done");
        assert!(lines[1].starts_with("   13  one two"), "{table}");
        assert!(
            lines[2].starts_with("       ") && !lines[2].starts_with("        "),
            "{table}"
        );
        assert_eq!(lines.last(), Some(&"    2  x"));
        assert!(
            lines.iter().all(|line| line.len() <= HELP_TABLE_WIDTH),
            "{table}"
        );
        let rejoined: Vec<&str> = lines[1..lines.len() - 1]
            .iter()
            .flat_map(|line| line.split_whitespace())
            .skip(1)
            .collect();
        assert_eq!(rejoined.join(" "), long, "no word lost");
    }

    #[test]
    fn exit_code_table_maps_every_ending() {
        let cases: Vec<(&str, Result<Outcome, GateError>, u8)> = vec![
            ("outside OLM", Ok(Outcome::OutsideOlm(OutsideOlm::NoOlm)), 0),
            (
                "released",
                Ok(Outcome::Released {
                    name: "x.v1".into(),
                    wrote: true,
                    confirmed: None,
                }),
                0,
            ),
            ("OLM v1", Ok(Outcome::OutsideOlm(OutsideOlm::OlmV1)), 0),
            ("invalid input", Err(GateError::InvalidInput("x".into())), 2),
            (
                "unreachable",
                deadline(Obstacle::Unreachable("refused".into())),
                3,
            ),
            ("timed out", deadline(Obstacle::Timeout), 3),
            ("forbidden", deadline(Obstacle::Forbidden("no".into())), 4),
            ("not found", deadline(Obstacle::NotFound("gone".into())), 5),
            (
                "not confirmed",
                Err(GateError::Condition(ConditionError::NotConfirmed {
                    state: GateState::Closed,
                    pending: CopyState::NotCopied,
                })),
                6,
            ),
            (
                "conflicts",
                deadline(Obstacle::Conflict("changed".into())),
                7,
            ),
            ("429", deadline(Obstacle::TooManyRequests("slow".into())), 7),
            (
                "5xx",
                deadline(Obstacle::ServerError {
                    code: 503,
                    message: "down".into(),
                }),
                7,
            ),
            (
                "rejected",
                Err(GateError::Condition(ConditionError::Failed {
                    action: "testing",
                    obstacle: Obstacle::Rejected {
                        code: 422,
                        message: "invalid".into(),
                    },
                })),
                8,
            ),
            (
                "superseded",
                Err(GateError::Condition(ConditionError::Superseded {
                    wanted: GateState::Closed,
                    spec_status: Some("True".into()),
                })),
                9,
            ),
            (
                "no cluster config",
                Err(GateError::NoClusterConfig("none".into())),
                10,
            ),
            (
                "SIGTERM",
                Err(GateError::Stopped(StopSignal::Terminate)),
                11,
            ),
            ("SIGINT", Err(GateError::Stopped(StopSignal::Interrupt)), 11),
            (
                "overridden",
                Err(GateError::Overridden {
                    name: "x.v1".into(),
                    message: "admin".into(),
                }),
                12,
            ),
            (
                "name unknown",
                Err(GateError::Setup(SetupError::NameUnknown {
                    why: "w".into(),
                })),
                13,
            ),
            (
                "name mismatch",
                Err(GateError::Setup(SetupError::NameMismatch {
                    setting: crate::locate::NAME_SETTING,
                    configured: "a.v1".into(),
                    deployment: "op".into(),
                    csv: "b.v1".into(),
                })),
                14,
            ),
        ];
        for (case, result, code) in &cases {
            assert_eq!(exit_code(result), *code, "case: {case}");
            assert!(
                EXIT_CODES.iter().any(|(documented, _)| documented == code),
                "case {case}: code {code} is documented"
            );
        }
        let mut documented: Vec<u8> = EXIT_CODES.iter().map(|(code, _)| *code).collect();
        documented.dedup();
        assert_eq!(documented.len(), EXIT_CODES.len(), "codes are distinct");
        for (code, _) in EXIT_CODES {
            assert!(
                cases
                    .iter()
                    .any(|(_, result, c)| exit_code(result) == *code && c == code),
                "documented code {code} is reachable"
            );
        }
        assert!(exit_code_table().contains("  6  deadline reached"));
    }
}
