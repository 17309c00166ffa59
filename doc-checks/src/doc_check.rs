//! Docs checked against the code: a markdown table of flags compared with
//! a binary's clap definition (`clap::CommandFactory::command()`), and a
//! table of exit codes compared with the code's. Each mismatch is one line
//! naming the doc, the row and what the code says, so a unit test that
//! asserts there is none fails saying what to fix.
//!
//! Owns: reading those markdown tables and the comparisons. Used by the
//! binaries' unit tests (the clap definitions live in the binaries),
//! through the `doc-checks` crate, a dev-dependency: no part of the
//! library. Must not touch: the files (callers read them and pass the
//! text).

use std::collections::BTreeMap;

/// Why a table cannot be read at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// The heading the table should follow is not in the document.
    #[error("{doc} has no heading {heading:?}")]
    NoHeading {
        /// The document.
        doc: String,
        /// The heading looked for, with its `#`s.
        heading: String,
    },
    /// The section under the heading holds no table.
    #[error("{doc}: no table under {heading:?}")]
    NoTable {
        /// The document.
        doc: String,
        /// The heading.
        heading: String,
    },
}

/// The body rows of the first table under `heading` (up to the next
/// heading of any level), each as its cells, trimmed; `\|` inside a cell
/// stays a `|`.
pub fn table_rows(doc: &str, text: &str, heading: &str) -> Result<Vec<Vec<String>>, TableError> {
    if !text.lines().any(|line| line.trim_end() == heading) {
        return Err(TableError::NoHeading {
            doc: doc.to_owned(),
            heading: heading.to_owned(),
        });
    }
    let section = text
        .lines()
        .skip_while(|line| line.trim_end() != heading)
        .skip(1)
        .take_while(|line| !line.starts_with('#'));
    let mut in_table = false;
    let mut rows = Vec::new();
    for line in section.map(str::trim) {
        let is_row = line.starts_with('|');
        let is_rule = line.starts_with("| ---") || line.starts_with("|---");
        match (in_table, is_row) {
            (false, false) => continue,
            (true, false) => break,
            // The header row.
            (false, true) => in_table = true,
            (true, true) if is_rule => {}
            (true, true) => rows.push(
                line.trim_matches('|')
                    .replace("\\|", "\u{0}")
                    .split('|')
                    .map(|cell| cell.trim().replace('\u{0}', "|"))
                    .collect(),
            ),
        }
    }
    if !in_table {
        return Err(TableError::NoTable {
            doc: doc.to_owned(),
            heading: heading.to_owned(),
        });
    }
    Ok(rows)
}

/// One long flag of a binary, as clap defines it in one (sub)command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// `--timeout`.
    pub long: String,
    /// The environment variable clap reads it from.
    pub env: Option<String>,
    /// clap's default, values joined by `,`.
    pub default: Option<String>,
    /// The command path it belongs to: `upgrade-gate hold`.
    pub command: String,
    /// Its help line, if any.
    pub help: Option<String>,
}

/// Every visible long flag of `command` and its subcommands (not `--help`
/// and `--version`), a global flag once, in the command that defines it.
pub fn flags(command: &clap::Command) -> Vec<Flag> {
    let mut found = Vec::new();
    collect(command, command.get_name(), &mut found);
    found
}

fn collect(command: &clap::Command, path: &str, found: &mut Vec<Flag>) {
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let builtin = matches!(long, "help" | "version");
        let inherited =
            arg.is_global_set() && found.iter().any(|f: &Flag| f.long == format!("--{long}"));
        if builtin || arg.is_hide_set() || inherited {
            continue;
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|value| value.to_string_lossy().into_owned())
            .collect();
        found.push(Flag {
            long: format!("--{long}"),
            env: arg.get_env().map(|env| env.to_string_lossy().into_owned()),
            default: (!defaults.is_empty()).then(|| defaults.join(",")),
            command: path.to_owned(),
            help: arg.get_help().map(ToString::to_string),
        });
    }
    for sub in command.get_subcommands() {
        collect(sub, &format!("{path} {}", sub.get_name()), found);
    }
}

/// What `--help` lacks in `command` and its subcommands: a visible flag
/// without a help line, a (sub)command whose `--help` does not list the
/// exit codes (`Exit codes` in its text).
pub fn help_gaps(command: &clap::Command) -> Vec<String> {
    let mut gaps: Vec<String> = flags(command)
        .into_iter()
        .filter(|flag| flag.help.as_deref().is_none_or(str::is_empty))
        .map(|flag| format!("{}: {} has no help line", flag.command, flag.long))
        .collect();
    let mut command = command.clone();
    command.build();
    let name = command.get_name().to_owned();
    exit_code_gaps(&mut command, name, &mut gaps);
    gaps
}

fn exit_code_gaps(command: &mut clap::Command, path: String, gaps: &mut Vec<String>) {
    // clap's own `help` subcommand prints the others' help.
    if command.get_name() == "help" {
        return;
    }
    if !command
        .render_long_help()
        .to_string()
        .contains("Exit codes")
    {
        gaps.push(format!("{path}: --help does not list the exit codes"));
    }
    for sub in command.get_subcommands_mut() {
        let path = format!("{path} {}", sub.get_name());
        exit_code_gaps(sub, path, gaps);
    }
}

/// The first `--flag` in a cell: "`--ready-when started\|…`" → `--ready-when`.
fn long_in(cell: &str) -> Option<String> {
    let at = cell.find("--")?;
    let name: String = cell[at + 2..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then(|| format!("--{name}"))
}

/// The backticked words of a cell.
fn quoted(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// How the doc may write clap's default: booleans as `off`/`on`.
fn default_written(default: &str, cell: &str) -> bool {
    let quoted = quoted(cell);
    match default {
        "false" => cell.starts_with("off") || quoted.contains(&"false"),
        "" => true,
        _ => quoted.contains(&default),
    }
}

/// A flags table (columns `flag`, `env`, `default`, …) under `heading` in
/// `doc` against `command`'s flags: a row whose flag clap does not have,
/// an env other than clap's, a default clap does not have or does not
/// show, and a flag clap has with no row.
pub fn flag_table_mismatches(
    doc: &str,
    text: &str,
    heading: &str,
    command: &clap::Command,
) -> Result<Vec<String>, TableError> {
    let rows = table_rows(doc, text, heading)?;
    let code = flags(command);
    let binary = command.get_name();
    let mut wrong = Vec::new();
    let mut documented = Vec::new();
    for row in &rows {
        let [flag_cell, env_cell, default_cell, ..] = row.as_slice() else {
            wrong.push(format!(
                "{doc}, {heading}: a row without flag, env and default: {row:?}"
            ));
            continue;
        };
        let Some(long) = long_in(flag_cell) else {
            continue;
        };
        documented.push(long.clone());
        let defined: Vec<&Flag> = code.iter().filter(|flag| flag.long == long).collect();
        if defined.is_empty() {
            wrong.push(format!("{doc}, row {long}: {binary} has no flag {long}"));
            continue;
        }
        let env = quoted(env_cell).first().map(|env| (*env).to_owned());
        for flag in &defined {
            if flag.env != env {
                wrong.push(format!(
                    "{doc}, row {long}, env:\n  the doc says:  {}\n  the code says: {} ({})",
                    env.as_deref().unwrap_or("none"),
                    flag.env.as_deref().unwrap_or("none"),
                    flag.command
                ));
            }
            match &flag.default {
                Some(default) if !default_written(default, default_cell) => wrong.push(format!(
                    "{doc}, row {long}, default:\n  the doc says:  {default_cell}\n  the code says: `{default}` ({})",
                    flag.command
                )),
                _ => {}
            }
        }
        let any_default = defined.iter().any(|flag| flag.default.is_some());
        if !any_default && default_cell.starts_with('`') {
            wrong.push(format!(
                "{doc}, row {long}, default:\n  the doc says:  {default_cell}\n  the code says: no default"
            ));
        }
    }
    for flag in &code {
        if !documented.contains(&flag.long) {
            wrong.push(format!(
                "{doc}, {heading}: no row for {} ({}), which the code has",
                flag.long, flag.command
            ));
        }
    }
    wrong.dedup();
    Ok(wrong)
}

/// An environment table (columns `variable`, `flag`, `meaning`) under
/// `heading` against `command`'s flags: a row whose flag clap does not
/// have or reads from another variable, a default clap has that the
/// meaning does not show (backticked), and a flag read from a variable
/// with no row. Rows without a flag (`–`) are the doc's own.
pub fn env_table_mismatches(
    doc: &str,
    text: &str,
    heading: &str,
    command: &clap::Command,
) -> Result<Vec<String>, TableError> {
    let rows = table_rows(doc, text, heading)?;
    let code = flags(command);
    let binary = command.get_name();
    let mut wrong = Vec::new();
    let mut documented = Vec::new();
    for row in &rows {
        let [env_cell, flag_cell, meaning, ..] = row.as_slice() else {
            wrong.push(format!(
                "{doc}, {heading}: a row without variable, flag and meaning: {row:?}"
            ));
            continue;
        };
        let Some(long) = long_in(flag_cell) else {
            continue;
        };
        documented.push(long.clone());
        let defined: Vec<&Flag> = code.iter().filter(|flag| flag.long == long).collect();
        if defined.is_empty() {
            wrong.push(format!("{doc}, row {long}: {binary} has no flag {long}"));
        }
        let env = quoted(env_cell).first().map(|env| (*env).to_owned());
        for flag in defined {
            if flag.env != env {
                wrong.push(format!(
                    "{doc}, row {long}, variable:\n  the doc says:  {}\n  the code says: {} ({})",
                    env.as_deref().unwrap_or("none"),
                    flag.env.as_deref().unwrap_or("none"),
                    flag.command
                ));
            }
            if let Some(default) = &flag.default
                && !default_written(default, meaning)
            {
                wrong.push(format!(
                    "{doc}, row {long}, default:\n  the doc says:  {meaning}\n  the code says: `{default}` ({})",
                    flag.command
                ));
            }
        }
    }
    for flag in code.iter().filter(|flag| flag.env.is_some()) {
        if !documented.contains(&flag.long) {
            wrong.push(format!(
                "{doc}, {heading}: no row for {} ({}, {}), which the code reads",
                flag.env.as_deref().unwrap_or_default(),
                flag.long,
                flag.command
            ));
        }
    }
    wrong.dedup();
    Ok(wrong)
}

/// An exit-code table (`| code | meaning |`, or any table whose first
/// cell is the code) under `heading` against `codes`: a code the doc
/// lacks, has in addition, or describes otherwise (backticks ignored).
pub fn exit_table_mismatches(
    doc: &str,
    text: &str,
    heading: &str,
    codes: &[(u8, &str)],
) -> Result<Vec<String>, TableError> {
    let documented: BTreeMap<u8, String> = table_rows(doc, text, heading)?
        .into_iter()
        .filter_map(|row| {
            let code = row.first()?.parse::<u8>().ok()?;
            Some((code, row.get(1)?.replace('`', "")))
        })
        .collect();
    let mut wrong = Vec::new();
    for (code, meaning) in codes {
        match documented.get(code) {
            None => wrong.push(format!(
                "{doc}, {heading}: no row for exit code {code} ({meaning})"
            )),
            Some(row) if row != meaning => wrong.push(format!(
                "{doc}, exit code {code}:\n  the doc says:  {row}\n  the code says: {meaning}"
            )),
            Some(_) => {}
        }
    }
    for code in documented.keys() {
        if !codes.iter().any(|(known, _)| known == code) {
            wrong.push(format!(
                "{doc} documents exit code {code}, which the code does not have"
            ));
        }
    }
    Ok(wrong)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction, Command};

    const DOC: &str = "\
# Tool

## Flags

| flag | env | default | meaning |
| --- | --- | --- | --- |
| `--timeout` (run) | `TOOL_TIMEOUT` | `30s` | give up |
| `--mode a\\|b` | — | `a` | which |
| `--wait` | — | off | wait |

## Exit codes

| code | meaning |
| --- | --- |
| 0 | done: `run` ok |
| 3 | unreachable |
";

    fn tool(timeout: &'static str, env: &'static str) -> Command {
        Command::new("tool")
            .arg(Arg::new("mode").long("mode").default_value("a"))
            .subcommand(
                Command::new("run")
                    .arg(
                        Arg::new("timeout")
                            .long("timeout")
                            .env(env)
                            .default_value(timeout),
                    )
                    .arg(Arg::new("wait").long("wait").action(ArgAction::SetTrue))
                    .arg(Arg::new("secret").long("secret").hide(true)),
            )
    }

    fn mismatches(command: &Command) -> Vec<String> {
        flag_table_mismatches("t.md", DOC, "## Flags", command).unwrap()
    }

    #[test]
    fn a_table_is_read_as_its_cells() {
        let rows = table_rows("t.md", DOC, "## Flags").unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1][0], "`--mode a|b`");
        assert_eq!(
            table_rows("t.md", DOC, "## Missing"),
            Err(TableError::NoHeading {
                doc: "t.md".into(),
                heading: "## Missing".into()
            })
        );
        assert!(matches!(
            table_rows("t.md", "## Empty\n\ntext\n", "## Empty"),
            Err(TableError::NoTable { .. })
        ));
    }

    #[test]
    fn flags_are_listed_per_command_without_hidden_ones() {
        let found = flags(&tool("30s", "TOOL_TIMEOUT"));
        let names: Vec<(&str, &str)> = found
            .iter()
            .map(|flag| (flag.long.as_str(), flag.command.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("--mode", "tool"),
                ("--timeout", "tool run"),
                ("--wait", "tool run")
            ]
        );
    }

    #[test]
    fn a_table_that_says_what_clap_says_has_no_mismatch() {
        assert_eq!(
            mismatches(&tool("30s", "TOOL_TIMEOUT")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_kind_of_drift_is_named() {
        let cases: [(Command, &str); 4] = [
            (tool("2m", "TOOL_TIMEOUT"), "t.md, row --timeout, default:"),
            (tool("30s", "TOOL_DEADLINE"), "t.md, row --timeout, env:"),
            (
                tool("30s", "TOOL_TIMEOUT").arg(Arg::new("new").long("new")),
                "t.md, ## Flags: no row for --new (tool)",
            ),
            (
                Command::new("tool").arg(Arg::new("mode").long("mode").default_value("a")),
                "t.md, row --timeout: tool has no flag --timeout",
            ),
        ];
        for (command, expected) in cases {
            let found = mismatches(&command);
            assert!(
                found.iter().any(|line| line.starts_with(expected)),
                "expected {expected:?} in {found:#?}"
            );
        }
    }

    #[test]
    fn help_gaps_name_flags_without_help_and_commands_without_exit_codes() {
        let with_help = |command: Command| command.after_help("Exit codes:\n  0  done");
        let good = with_help(Command::new("tool"))
            .arg(
                Arg::new("wait")
                    .long("wait")
                    .help("Wait.")
                    .action(ArgAction::SetTrue),
            )
            .subcommand(with_help(Command::new("run")));
        assert_eq!(help_gaps(&good), Vec::<String>::new());
        let bad = with_help(Command::new("tool"))
            .arg(Arg::new("wait").long("wait").action(ArgAction::SetTrue))
            .subcommand(Command::new("run"));
        assert_eq!(
            help_gaps(&bad),
            [
                "tool: --wait has no help line",
                "tool run: --help does not list the exit codes"
            ]
        );
    }

    #[test]
    fn an_environment_table_is_compared_with_the_flags_read_from_variables() {
        let doc = "## Environment\n\n| variable | flag | meaning |\n| --- | --- | --- |\n| `TOOL_TIMEOUT` | `--timeout` | give up (default `30s`) |\n| `PGHOST` | – | libpq's |\n";
        let check = |command: &Command| {
            env_table_mismatches("t.md", doc, "## Environment", command).unwrap()
        };
        assert_eq!(check(&tool("30s", "TOOL_TIMEOUT")), Vec::<String>::new());
        let wrong =
            check(&tool("2m", "TOOL_DEADLINE").arg(Arg::new("dir").long("dir").env("TOOL_DIR")));
        assert_eq!(wrong.len(), 3, "{wrong:#?}");
        assert!(wrong[0].starts_with("t.md, row --timeout, variable:"));
        assert!(wrong[1].starts_with("t.md, row --timeout, default:"));
        assert!(wrong[2].starts_with("t.md, ## Environment: no row for TOOL_DIR (--dir, tool)"));
    }

    #[test]
    fn exit_codes_are_compared_row_by_row() {
        let check = |codes: &[(u8, &str)]| {
            exit_table_mismatches("t.md", DOC, "## Exit codes", codes).unwrap()
        };
        assert!(check(&[(0, "done: run ok"), (3, "unreachable")]).is_empty());
        let wrong = check(&[(0, "done: run ok"), (3, "refused"), (4, "forbidden")]);
        assert_eq!(wrong.len(), 2, "{wrong:#?}");
        assert!(
            wrong[0]
                .contains("exit code 3:\n  the doc says:  unreachable\n  the code says: refused")
        );
        assert!(wrong[1].contains("no row for exit code 4 (forbidden)"));
        assert_eq!(
            check(&[(0, "done: run ok")]),
            ["t.md documents exit code 3, which the code does not have"]
        );
    }
}
