//! Every measured figure says how it was measured (issue 52, item 2): a
//! paragraph of README.md or docs/*.md that reports a measurement (a
//! number with a unit of time or memory, beside "measured", "took",
//! "median" or "peak") names, in itself or in its section, the command
//! that measured it (in backticks) and the date. Tables are
//! `doc_table_inventory`'s; fenced blocks are not prose.
//!
//! Owns: finding measured figures in prose and the check. Must not touch:
//! the files (it only reads them).

use crate::doc_table_inventory::{documents, names_command_and_date, read};

/// A paragraph that reports a measurement without naming its command
/// and date in itself or its section: (its first line, its text).
fn undated_figures(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut headings = Vec::new();
    let mut fenced = false;
    for (at, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            headings.push(at);
        }
    }
    let section_of = |at: usize| {
        let from = headings
            .iter()
            .rev()
            .find(|&&h| h <= at)
            .copied()
            .unwrap_or(0);
        let to = headings
            .iter()
            .find(|&&h| h > at)
            .copied()
            .unwrap_or(lines.len());
        lines[from..to].join("\n")
    };
    let mut found = Vec::new();
    let mut paragraph: Vec<&str> = Vec::new();
    let mut start = 0;
    let mut fenced = false;
    for (at, line) in lines.iter().chain(std::iter::once(&"")).enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            paragraph.clear();
            continue;
        }
        if fenced {
            continue;
        }
        if trimmed.is_empty() || line.starts_with('#') || trimmed.starts_with('|') {
            let text = paragraph.join(" ");
            if reports_a_measurement(&text)
                && !names_command_and_date(&text)
                && !names_command_and_date(&section_of(start))
            {
                found.push((start + 1, text));
            }
            paragraph.clear();
            continue;
        }
        if paragraph.is_empty() {
            start = at;
        }
        paragraph.push(trimmed);
    }
    found
}

/// Whether `text` reports a measured figure: a measuring word and a number
/// with a unit of time or memory (and not "not measured").
fn reports_a_measurement(text: &str) -> bool {
    let lower = text.to_lowercase();
    if lower.contains("not measured") {
        return false;
    }
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && !matches!(c, '.' | '\'' | '’'))
        .filter(|word| !word.is_empty())
        .collect();
    let measuring = words
        .iter()
        .any(|word| ["measured", "took", "median", "peak"].contains(word));
    let figure = words.windows(2).any(|pair| {
        let number = pair[0].trim_end_matches('.');
        !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit() || c == '.')
            && ["s", "ms", "min", "mib", "gib", "mb"].contains(&pair[1])
    }) || words.iter().any(|word| {
        let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        let unit = &word[digits.len()..];
        !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
            && ["ms", "mib", "gib", "mb"].contains(&unit)
    });
    measuring && figure
}

#[test]
fn a_measured_figure_without_command_or_date_is_found() {
    let doc = "# A\n\nThe run took 42 s on this machine.\n\n## B\n\nMeasured with `just race` on 2026-12-06: a median of 1.1 s.\n\n## C\n\nThe chain took 3 min (`just demo`).\n\n## D\n\nA timeout of 5 s, not measured.\n\n```\ntook 9 s\n```\n";
    let found: Vec<usize> = undated_figures(doc).into_iter().map(|(at, _)| at).collect();
    assert_eq!(found, [3, 11]);
    assert!(reports_a_measurement("peak 3081 MiB"));
    assert!(reports_a_measurement("the median was 0.9 s"));
    assert!(!reports_a_measurement("waits 5 s between tries"));
    assert!(!reports_a_measurement("measured: 7.10.0's rights stay"));
}

#[test]
fn every_measured_figure_names_its_command_and_date() {
    let mut missing = Vec::new();
    for doc in documents(&crate::repository_root()) {
        for (at, text) in undated_figures(&read(&doc)) {
            missing.push(format!("{doc}:{at}: {text}"));
        }
    }
    assert!(
        missing.is_empty(),
        "measured figures that name no command (`just …`, `cargo …`) or no date (2026-12-06) in their paragraph or section — add both, or remove the figure:\n{}",
        missing.join("\n")
    );
}
