//! The command lines' own tests: timeouts, the help texts' exit tables,
//! clap's consistency, and docs/gate.md's tables of flags and exit codes
//! held against the clap definitions.

use std::time::Duration;

use super::commands::Cli;
use super::kubectl_plugin::{PluginCli, plugin_exit_codes};
use super::parse_timeout;
use crate::bundle_lint::LINT_EXIT_CODES;
use crate::catalog_lint::CATALOG_LINT_EXIT_CODES;
use crate::gate;

mod tests {
    use super::*;

    #[test]
    fn timeouts_parse() {
        assert_eq!(parse_timeout("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-5s").is_err());
        assert!(parse_timeout("soon").is_err());
    }

    /// Each command's long help, rendered by clap for a terminal `width` wide.
    fn long_helps(width: usize) -> Vec<(String, String)> {
        use clap::CommandFactory;
        let mut helps = Vec::new();
        for mut command in [
            Cli::command().term_width(width),
            PluginCli::command().term_width(width),
        ] {
            command.build();
            helps.push((
                command.get_name().to_owned(),
                command.render_long_help().to_string(),
            ));
            let names: Vec<String> = command
                .get_subcommands()
                .map(|sub| sub.get_name().to_owned())
                .filter(|name| name != "help")
                .collect();
            for name in names {
                let sub = command.find_subcommand_mut(&name).expect("listed");
                helps.push((
                    format!("{} {name}", command_name(sub)),
                    sub.render_long_help().to_string(),
                ));
            }
        }
        helps
    }

    fn command_name(command: &clap::Command) -> String {
        command
            .get_bin_name()
            .unwrap_or(command.get_name())
            .to_owned()
    }

    /// The lines of the "Exit codes" section at the end of a help text.
    fn exit_table_lines(help: &str) -> Vec<&str> {
        help.lines()
            .skip_while(|line| !line.starts_with("Exit codes"))
            .skip(1)
            .filter(|line| !line.trim().is_empty())
            .collect()
    }

    #[test]
    fn exit_tables_in_help_keep_their_hanging_indent() {
        for width in [gate::HELP_TABLE_WIDTH, 100, 160] {
            for (command, help) in long_helps(width) {
                let lines = exit_table_lines(&help);
                assert!(
                    lines.len() > 2,
                    "{command} at {width} columns has an exit table: {help}"
                );
                for line in &lines {
                    let row = line.trim_start().split_once("  ").is_some_and(|(code, _)| {
                        code.parse::<u8>().is_ok()
                            && line.len() - line.trim_start().len() + code.len() == 5
                    });
                    let continuation = line.starts_with("       ") && !line.starts_with("        ");
                    assert!(
                        row || continuation,
                        "{command} at {width} columns: {line:?} is neither a row nor indented under its meaning:\n{help}"
                    );
                    assert!(line.len() <= gate::HELP_TABLE_WIDTH, "{command}: {line:?}");
                }
            }
        }
    }

    /// The long flags a command takes, with those of its subcommands.
    fn long_flags(command: &clap::Command) -> Vec<String> {
        let mut flags: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
            .collect();
        for sub in command.get_subcommands() {
            flags.extend(long_flags(sub));
        }
        flags
    }

    /// Every `--flag` an exit table names is a flag of that binary: the
    /// plugin's deadline is --request-timeout, the gate's --timeout.
    #[test]
    fn exit_tables_name_flags_that_exist() {
        use clap::CommandFactory;
        for mut command in [Cli::command(), PluginCli::command()] {
            command.build();
            let flags = long_flags(&command);
            let help = command.render_long_help().to_string();
            let table = exit_table_lines(&help).join(" ");
            let named: Vec<&str> = table
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|word| word.starts_with("--") && word.len() > 2)
                .collect();
            assert!(!named.is_empty(), "{}: {table}", command.get_name());
            for flag in named {
                assert!(
                    flags.iter().any(|known| known == flag),
                    "{}: the exit table names {flag}, which is no flag of it ({flags:?})",
                    command.get_name()
                );
            }
        }
    }

    /// `lint-bundle --help` lists every check `--accept` takes, by the name
    /// its findings carry, each with what it checks; lint-catalog's points
    /// there.
    #[test]
    fn lint_bundle_help_lists_every_check() {
        use clap::{CommandFactory, ValueEnum};
        let mut command = Cli::command();
        command.build();
        let mut help = |name: &str| {
            command
                .find_subcommand_mut(name)
                .expect("a subcommand")
                .render_long_help()
                .to_string()
        };
        let bundle = help("lint-bundle");
        for rule in crate::bundle_lint::Rule::value_variants() {
            let row = format!("- {}:", rule.name());
            assert!(bundle.contains(&row), "{row} in:\n{bundle}");
        }
        assert!(
            help("lint-catalog").contains("`upgrade-gate lint-bundle --help` lists them"),
            "lint-catalog --help says where the checks are"
        );
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        PluginCli::command().debug_assert();
    }

    /// The record is an UpgradeRecord entry; the ConfigMap's keys the
    /// previous policy read (`<deployment>.completed`, `.progress`) are an
    /// implementation detail kept for one release, never what a user sets.
    #[test]
    fn no_help_speaks_of_the_configmaps_keys() {
        for (name, help) in long_helps(100) {
            for stale in [
                ".completed",
                ".progress",
                "state's keys",
                "ConfigMap's keys",
            ] {
                assert!(
                    !help.contains(stale),
                    "`{name} --help` speaks of the ConfigMap's keys ({stale}):\n{help}"
                );
            }
        }
    }
}

/// docs/gate.md's tables of flags and exit codes, checked against the clap
/// definitions above and the code's exit codes (`doc_checks`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;

    fn gate_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/gate.md");
        std::fs::read_to_string(path).expect("docs/gate.md")
    }

    #[test]
    fn docs_gate_md_lists_every_flag_of_upgrade_gate_as_clap_defines_it() {
        let wrong = doc_checks::flag_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "## Flags and environment",
            &Cli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_lists_every_flag_of_the_kubectl_plugin_as_clap_defines_it() {
        let wrong = doc_checks::flag_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "### The plugin's flags",
            &PluginCli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_has_the_plugins_exit_codes() {
        let codes = plugin_exit_codes();
        let codes: Vec<(u8, &str)> = codes
            .iter()
            .map(|(code, meaning)| (*code, meaning.as_str()))
            .collect();
        let wrong = doc_checks::exit_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "### The plugin's exit codes",
            &codes,
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_has_the_lint_exit_codes() {
        for (heading, codes) in [
            ("### lint-bundle's exit codes", LINT_EXIT_CODES),
            ("### lint-catalog's exit codes", CATALOG_LINT_EXIT_CODES),
        ] {
            let wrong =
                doc_checks::exit_table_mismatches("docs/gate.md", &gate_md(), heading, codes)
                    .expect("the table is readable");
            assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        }
    }

    #[test]
    fn every_flag_has_a_help_line_and_every_help_the_exit_codes() {
        let mut gaps = doc_checks::help_gaps(&Cli::command());
        gaps.extend(doc_checks::help_gaps(&PluginCli::command()));
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }
}
