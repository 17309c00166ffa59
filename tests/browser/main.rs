//! The pictures of runs (`chain::picture`) in a real browser: Debian's
//! Chromium, headless, with its network off, opens pages written from
//! runs' JSON and gives back the DOM it rendered. From that DOM: every fact
//! of the run has its mark, the verdict is shown, and nothing is referred
//! to outside the page (its content security policy forbids loading
//! anything; no element names a source). A screenshot of each page is kept
//! in `target/picture/` for a person to look at.
//!
//! The browser comes from `tools/browser.sh` (`UPGRADE_GATE_BROWSER`,
//! `just test-browser`); without it the test fails, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use upgrade_gate_tests::chain::picture;

/// A real run: `just demo` through OLM v0, gate on (held, nothing lost).
const HELD: &str = include_str!("../fixtures/demo-held-olm.json");

fn browser() -> PathBuf {
    let path = std::env::var_os("UPGRADE_GATE_BROWSER").unwrap_or_else(|| {
        panic!("UPGRADE_GATE_BROWSER is not set: run through `just test-browser` (tools/browser.sh installs Chromium)")
    });
    PathBuf::from(path)
}

fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/picture");
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
    dir
}

/// Chromium, headless, its network switched off (every host resolves to
/// nothing; no background fetches), a profile of its own.
fn chromium(profile: &Path) -> Command {
    let mut command = Command::new(browser());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1500,1400",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// The DOM Chromium rendered from `page`, and a screenshot of it at `png`.
fn render(page: &Path, png: &Path) -> String {
    let profile = tempfile::tempdir().expect("a profile directory");
    let url = format!("file://{}", page.display());
    let dom = chromium(profile.path())
        .args(["--dump-dom", &url])
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", browser().display()));
    assert!(
        dom.status.success(),
        "chromium --dump-dom {url}: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let shot = chromium(profile.path())
        .arg(format!("--screenshot={}", png.display()))
        .arg(&url)
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", browser().display()));
    assert!(
        shot.status.success(),
        "chromium --screenshot {url}: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    String::from_utf8(dom.stdout).expect("the DOM is UTF-8")
}

/// Checks a rendered page of `arm`: a mark per fact of each run, each
/// run's verdict, nothing from outside.
fn check(dom: &str, arm: &Value) {
    assert!(
        dom.contains("Content-Security-Policy") && dom.contains("default-src 'none'"),
        "the page forbids loading anything"
    );
    for reference in [
        "src=", "href=", "url(", "@import", "<script", "<iframe", "<link",
    ] {
        assert!(
            !dom.contains(reference),
            "the rendered page refers to {reference}"
        );
    }
    let runs = arm["runs"].as_array().expect("runs");
    assert!(!runs.is_empty());
    for (index, run) in runs.iter().enumerate() {
        let section = dom
            .split(&format!("id=\"run-{index}\""))
            .nth(1)
            .and_then(|rest| rest.split("</section>").next())
            .unwrap_or_else(|| panic!("run {index}'s section is rendered"));
        let events = run["timeline"].as_array().expect("timeline").len();
        assert!(events > 10, "a real run has facts");
        for event in 0..events {
            assert_eq!(
                section.matches(&format!("data-event=\"{event}\"")).count(),
                1,
                "run {index}: fact {event} ({}) has one mark",
                run["timeline"][event]["text"]
            );
        }
        let verdict = run["verdict"].as_str().expect("verdict");
        assert!(
            section.contains(&format!("data-verdict=\"{verdict}\"")),
            "run {index}: the verdict {verdict} is shown"
        );
        for line in run["evidence"].as_array().into_iter().flatten() {
            // As a browser serialises a text node: only &, < and > escaped.
            let line = line
                .as_str()
                .unwrap_or_default()
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            assert!(section.contains(&line), "run {index}: the evidence {line}");
        }
    }
}

#[test]
fn a_held_run_shows_every_fact_and_its_verdict_in_a_real_browser() {
    let arm: Value = serde_json::from_str(HELD).expect("the fixture parses");
    let dir = out_dir();
    let page = dir.join("demo-held-olm.html");
    std::fs::write(&page, picture::arm_page(&arm)).expect("writing the page");
    let png = dir.join("demo-held-olm.png");
    let dom = render(&page, &png);
    check(&dom, &arm);
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or_default();
    assert!(size > 20_000, "a screenshot of the page: {} bytes", size);
    println!("page: {}\nscreenshot: {}", page.display(), png.display());
}

#[test]
fn the_matrix_page_has_a_row_per_arm_in_a_real_browser() {
    let held: Value = serde_json::from_str(HELD).expect("the fixture parses");
    let mut raced = held.clone();
    raced["arm"] = Value::from("gate-off-slow-naive");
    raced["held"] = Value::from(0);
    raced["raced"] = Value::from(1);
    let dir = out_dir();
    let page = dir.join("matrix.html");
    std::fs::write(&page, picture::matrix_page("olm", &[held, raced])).expect("writing the page");
    let dom = render(&page, &dir.join("matrix.png"));
    assert_eq!(dom.matches("class=\"arm\"").count(), 2, "{dom}");
    assert!(dom.contains("data-arm=\"gate-off-slow-naive\""));
    for reference in ["src=", "href=", "url(", "<script"] {
        assert!(
            !dom.contains(reference),
            "the rendered page refers to {reference}"
        );
    }
}
