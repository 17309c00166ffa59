//! docs/operate.md's `upgrade-gate` and `kubectl upgrade-gate` commands,
//! parsed by the binaries' own clap definitions: a renamed subcommand or
//! flag fails here, not in front of a person following the runbook.

use clap::CommandFactory;

use super::commands::Cli;
use super::kubectl_plugin::PluginCli;

/// A command line split into words as a shell would: white space outside
/// quotes separates, '…' and "…" keep theirs.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, started) = (Some(c), true),
            (Some(open), _) if c == open => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            _ => (word.push(c), started = true).0,
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The commands of the page: each line of a code block, and each inline
/// span, that starts with `upgrade-gate ` or `kubectl upgrade-gate `.
fn commands(doc: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_block = false;
    let mut prose = String::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            found.push(line.trim().to_owned());
        } else {
            prose.push_str(line);
            prose.push(' ');
        }
    }
    found.extend(
        prose
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|span| span.split_whitespace().collect::<Vec<_>>().join(" ")),
    );
    found
        .into_iter()
        .filter(|line| {
            line.starts_with("upgrade-gate ") || line.starts_with("kubectl upgrade-gate ")
        })
        .collect()
}

/// Why clap refuses `line`, or `None` when it parses (asking for help counts).
fn refusal(line: &str) -> Option<String> {
    let words = words(line);
    let (command, args) = match words.first().map(String::as_str) {
        Some("kubectl") => (PluginCli::command(), words[1..].to_vec()),
        _ => (Cli::command(), words),
    };
    match command.try_get_matches_from(args) {
        Ok(_) => None,
        Err(error)
            if matches!(
                error.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            ) =>
        {
            None
        }
        Err(error) => Some(error.to_string()),
    }
}

#[test]
fn a_command_line_is_split_and_judged_as_clap_would() {
    assert_eq!(
        words(r#"kubectl -n x patch a -p '{"a": 1}' "b c""#),
        [
            "kubectl",
            "-n",
            "x",
            "patch",
            "a",
            "-p",
            r#"{"a": 1}"#,
            "b c"
        ]
    );
    assert_eq!(refusal("upgrade-gate hold --help"), None);
    assert_eq!(refusal("upgrade-gate status --name a --namespace b"), None);
    assert_eq!(refusal("kubectl upgrade-gate status -n b"), None);
    assert!(refusal("upgrade-gate status --csv a").is_some());
    assert!(refusal("upgrade-gate wait").is_some());
    assert!(refusal("kubectl upgrade-gate status --name a").is_some());
    let doc = "Run `upgrade-gate status\n--name a` or `kubectl get csv`.\n\n```sh\nkubectl upgrade-gate status -A\nkubectl get pods\n```\n";
    assert_eq!(
        commands(doc),
        [
            "kubectl upgrade-gate status -A",
            "upgrade-gate status --name a"
        ]
    );
}

#[test]
fn every_upgrade_gate_command_in_docs_operate_md_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operate.md");
    let doc = std::fs::read_to_string(path).expect("docs/operate.md");
    let commands = commands(&doc);
    assert!(commands.len() >= 3, "the page's commands: {commands:?}");
    let wrong: Vec<String> = commands
        .iter()
        .filter_map(|line| refusal(line).map(|why| format!("{line}\n  {why}")))
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/operate.md: commands the binary refuses:\n{}",
        wrong.join("\n")
    );
}
