//! The picture of a run: a self-contained HTML page (no script, no font,
//! nothing loaded from anywhere: its content security policy forbids it)
//! with an SVG timeline a person reads at a glance — when each release was
//! applied or refused, when its operator ran, when each upgrade Job ran,
//! where the gate held, the writer's refusals and the migrations' commits —
//! and the verdict with its evidence beneath. Raced and held runs differ at
//! a glance: the banner's colour and word, and whether a Job of the middle
//! release is cut by the next release's operator.
//!
//! Owns: the page, drawn from a run's JSON as `RunReport::to_json` writes it
//! (the timeline of facts the judge read, and its verdict) — never from the
//! narration — and the matrix page comparing arms. Pure: text in, text out;
//! the runner writes the files.
//!
//! Every fact of the timeline gets one mark (`data-event` = its index), so
//! that a test can check the page shows all of them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::judge::RunFinding;
use super::refusal::{Failure, failure};

/// Width of the time axis, in SVG units.
const PLOT_WIDTH: f64 = 1100.0;
/// Left margin for the lane labels.
const LABEL_WIDTH: f64 = 230.0;
/// Height of a lane.
const LANE: f64 = 26.0;
/// Space above the first lane (the axis).
const TOP: f64 = 30.0;

/// `&`, `<`, `>`, `"` and `'` as entities: text from the cluster (messages,
/// names) may hold any of them.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The head every page shares: nothing may be loaded (`default-src 'none'`),
/// the inline style excepted.
fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n",
        escape(title)
    )
}

const STYLE: &str = "\
body { font-family: sans-serif; margin: 1.5em; color: #222; }
.banner { font-size: 1.6em; font-weight: bold; padding: .4em .8em; border-radius: 6px; display: inline-block; }
.verdict-held { background: #d8f3dc; color: #1b4332; border: 3px solid #2d6a4f; }
.verdict-raced { background: #ffd6d6; color: #7a0000; border: 3px solid #c00000; }
.verdict-stuck { background: #fff0c2; color: #7a4b00; border: 3px solid #e09f00; }
.verdict-jumped { background: #dde8f6; color: #123a6b; border: 3px solid #1f5fa8; }
.verdict-inconclusive { background: #eee; color: #444; border: 3px dashed #888; }
.damaged { background: #c00000; color: white; padding: .2em .6em; border-radius: 4px; margin-left: 1em; }
.intact { background: #2d6a4f; color: white; padding: .2em .6em; border-radius: 4px; margin-left: 1em; }
svg text { font-size: 11px; }
.lane-label { font-size: 12px; }
.axis { stroke: #999; stroke-width: 1; }
.zero { stroke: #000; stroke-width: 1.5; stroke-dasharray: 4 3; }
.legend span { display: inline-block; margin-right: 1.2em; }
.swatch { display: inline-block; width: 1em; height: .8em; margin-right: .3em; vertical-align: middle; }
ul.evidence li { font-family: monospace; font-size: .9em; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: .2em .6em; }
";

/// What one mark looks like.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// A dot.
    Dot,
    /// A diamond (something applied).
    Diamond,
    /// A cross (something refused, lost or failed).
    Cross,
    /// A short vertical tick.
    Tick,
}

/// A mark of one fact in a lane.
#[derive(Clone, Debug, PartialEq)]
struct Mark {
    event: usize,
    t: f64,
    lane: String,
    shape: Shape,
    colour: &'static str,
    text: String,
    fact: String,
}

/// A coloured stretch of a lane (a pod's life, a Job's run, a gate's
/// state, the writer's refusals); `end: None` runs to the end of the plot.
#[derive(Clone, Debug, PartialEq)]
struct Span {
    lane: String,
    start: f64,
    end: Option<f64>,
    colour: &'static str,
    /// Drawn in the lane's upper or lower half (`None`: whole).
    half: Option<bool>,
    title: String,
}

const GREEN: &str = "#2d6a4f";
const RED: &str = "#c00000";
const AMBER: &str = "#e09f00";
const BLUE: &str = "#1f5fa8";
const GREY: &str = "#888888";
const PURPLE: &str = "#6a3d9a";

fn text_of(entry: &Value, key: &str) -> String {
    entry[key].as_str().unwrap_or_default().to_owned()
}

/// Spans begun and not yet ended, by (lane, what): start, colour, half, title.
type Open = BTreeMap<(String, String), (f64, &'static str, Option<bool>, String)>;

/// The lanes, marks and spans of a run's timeline (pure; the lanes in the
/// order they are drawn).
fn layout(timeline: &[Value]) -> (Vec<String>, Vec<Mark>, Vec<Span>) {
    let mut lanes: Vec<String> = Vec::new();
    let mut lane = |name: String| {
        if !lanes.contains(&name) {
            lanes.push(name.clone());
        }
        name
    };
    let mut marks = Vec::new();
    let mut spans = Vec::new();
    // Open spans by key: (lane, what) -> (start, colour, half, title).
    let mut open: Open = BTreeMap::new();
    let close = |spans: &mut Vec<Span>, open: &mut Open, key: (String, String), t: f64| {
        if let Some((start, colour, half, title)) = open.remove(&key) {
            spans.push(Span {
                lane: key.0,
                start,
                end: Some(t),
                colour,
                half,
                title,
            });
        }
    };
    for (index, entry) in timeline.iter().enumerate() {
        let t = entry["t"].as_f64().unwrap_or_default();
        let fact = text_of(entry, "fact");
        let release = text_of(entry, "release");
        let text = text_of(entry, "text");
        let (lane_name, shape, colour) = match fact.as_str() {
            "channel_switched"
            | "subscribed"
            | "extension_switched"
            | "source_moved"
            | "injected"
            | "health_check_set_up" => (lane("the runner".to_owned()), Shape::Diamond, PURPLE),
            // Flux's health check: a Kustomization's Ready turned True
            // (green) or not (grey while in progress, red when False).
            "kustomization_ready" => {
                let colour = match text_of(entry, "status").as_str() {
                    "True" => GREEN,
                    "False" => RED,
                    _ => GREY,
                };
                (
                    lane(format!("Kustomization {}", text_of(entry, "kustomization"))),
                    Shape::Tick,
                    colour,
                )
            }
            // A reconcile of Flux's Kustomization requested (the wake-up).
            "reconcile_requested" => (lane("the wake-up".to_owned()), Shape::Diamond, BLUE),
            // Accepted: a green diamond; refused by the admission policy
            // (its words): a red cross; failed for another cause: grey.
            "deployed" => {
                let accepted = entry["accepted"].as_bool().unwrap_or(false);
                let name = lane(format!("release {release}"));
                if accepted {
                    (name, Shape::Diamond, GREEN)
                } else if failure(&text_of(entry, "message")) == Failure::Policy {
                    (name, Shape::Cross, RED)
                } else {
                    (name, Shape::Cross, GREY)
                }
            }
            "csv_created" => (lane(format!("release {release}")), Shape::Tick, GREY),
            "csv_deleted" => {
                let name = lane(format!("release {release}"));
                close(&mut spans, &mut open, (name.clone(), "csv".to_owned()), t);
                (name, Shape::Tick, GREY)
            }
            "csv_phase" => {
                let phase = text_of(entry, "phase");
                let name = lane(format!("release {release}"));
                let colour = match phase.as_str() {
                    "Pending" => AMBER,
                    "Succeeded" => GREEN,
                    "Failed" => RED,
                    _ => BLUE,
                };
                let key = (name.clone(), "csv".to_owned());
                close(&mut spans, &mut open, key.clone(), t);
                open.insert(key, (t, colour, Some(true), format!("CSV {phase}")));
                (name, Shape::Tick, colour)
            }
            "pod" => {
                let kind = text_of(entry, "kind");
                let change = text_of(entry, "change");
                let pod = text_of(entry, "pod");
                let name = if kind == "job" {
                    lane(format!("Job pod of {release}"))
                } else {
                    lane(format!("release {release}"))
                };
                let key = (name.clone(), format!("pod {pod}"));
                match change.as_str() {
                    "created" | "started" if !open.contains_key(&key) => {
                        open.insert(key, (t, BLUE, Some(false), format!("pod {pod} runs")));
                    }
                    "stopping" | "deleted" => close(&mut spans, &mut open, key, t),
                    _ => {}
                }
                (name, Shape::Dot, BLUE)
            }
            "pod_exited" => {
                let code = entry["exit_code"].as_i64().unwrap_or_default();
                let kind = text_of(entry, "kind");
                let name = if kind == "job" {
                    lane(format!("Job pod of {release}"))
                } else {
                    lane(format!("release {release}"))
                };
                // Its main container ended (not the gate's init container):
                // the pod no longer runs.
                if text_of(entry, "container") != "upgrade-gate" {
                    let pod = text_of(entry, "pod");
                    close(
                        &mut spans,
                        &mut open,
                        (name.clone(), format!("pod {pod}")),
                        t,
                    );
                }
                (
                    name,
                    if code == 0 { Shape::Tick } else { Shape::Cross },
                    if code == 0 { GREEN } else { RED },
                )
            }
            "job" => {
                let job = text_of(entry, "job");
                let change = text_of(entry, "change");
                let name = lane(format!("Job {job}"));
                let key = (name.clone(), "job".to_owned());
                match change.as_str() {
                    "created" if !open.contains_key(&key) => {
                        open.insert(key, (t, BLUE, None, format!("Job {job} ({release}) runs")));
                        (name, Shape::Dot, BLUE)
                    }
                    "succeeded" => {
                        close(&mut spans, &mut open, key, t);
                        (name, Shape::Diamond, GREEN)
                    }
                    "failed" | "deleted" => {
                        close(&mut spans, &mut open, key, t);
                        (name, Shape::Cross, RED)
                    }
                    _ => (name, Shape::Dot, BLUE),
                }
            }
            "condition_spec" | "condition_status" => {
                let status = entry["status"].as_str().map(str::to_owned);
                let spec = fact == "condition_spec";
                let name = lane(format!("gate of {release}"));
                let key = (name.clone(), fact.clone());
                close(&mut spans, &mut open, key.clone(), t);
                let colour = match status.as_deref() {
                    Some("False") => RED,
                    Some("True") => GREEN,
                    _ => GREY,
                };
                let who = if spec {
                    "spec (written)"
                } else {
                    "status (OLM's copy)"
                };
                open.insert(
                    key,
                    (
                        t,
                        colour,
                        Some(spec),
                        format!(
                            "{who}: Upgradeable={}",
                            status.as_deref().unwrap_or("absent")
                        ),
                    ),
                );
                (name, Shape::Tick, colour)
            }
            "admission_record" => {
                let operator = text_of(entry, "operator");
                let state = text_of(entry, "state");
                let name = lane("the admission record".to_owned());
                let key = (name.clone(), operator.clone());
                close(&mut spans, &mut open, key.clone(), t);
                // Complete lets the next release through; anything else
                // holds it.
                let colour = if state == "Complete" { GREEN } else { RED };
                open.insert(
                    key,
                    (t, colour, None, format!("{operator}: {release} {state}")),
                );
                (name, Shape::Tick, colour)
            }
            "condition_created" | "condition_override" | "condition_deleted" => {
                (lane(format!("gate of {release}")), Shape::Diamond, PURPLE)
            }
            "migration_applied" => (lane("migrations".to_owned()), Shape::Diamond, GREEN),
            "migration_removed" => (lane("migrations".to_owned()), Shape::Cross, RED),
            "writer_layout" => (lane("the writer".to_owned()), Shape::Tick, GREEN),
            "writer_refused" => {
                let name = lane("the writer".to_owned());
                open.insert(
                    (name.clone(), "refused".to_owned()),
                    (t, AMBER, None, "writes refused".to_owned()),
                );
                (name, Shape::Cross, AMBER)
            }
            "writer_resumed" => {
                let name = lane("the writer".to_owned());
                for what in ["refused", "failed"] {
                    close(&mut spans, &mut open, (name.clone(), what.to_owned()), t);
                }
                (name, Shape::Tick, GREEN)
            }
            // Writes failing for another cause than a refusal (an SQL
            // error, a lost connection): a span until they are acknowledged
            // again, red.
            "writer_failed" => {
                let name = lane("the writer".to_owned());
                open.insert(
                    (name.clone(), "failed".to_owned()),
                    (
                        t,
                        RED,
                        None,
                        format!("writes failing: {}", text_of(entry, "cause")),
                    ),
                );
                (name, Shape::Cross, RED)
            }
            "writer_missing" => (lane("the writer".to_owned()), Shape::Cross, RED),
            "app_status" => (
                lane("the App".to_owned()),
                Shape::Dot,
                if entry["ready"] == true { GREEN } else { AMBER },
            ),
            _ => (lane("the fact watches".to_owned()), Shape::Cross, GREY),
        };
        marks.push(Mark {
            event: index,
            t,
            lane: lane_name,
            shape,
            colour,
            text,
            fact,
        });
    }
    for ((lane, _), (start, colour, half, title)) in open {
        spans.push(Span {
            lane,
            start,
            end: None,
            colour,
            half,
            title,
        });
    }
    (lanes, marks, spans)
}

/// The SVG of one run's timeline.
fn svg(timeline: &[Value], id: &str) -> String {
    let (lanes, marks, spans) = layout(timeline);
    let times: Vec<f64> = marks.iter().map(|mark| mark.t).collect();
    let low = times.iter().copied().fold(0.0_f64, f64::min);
    let high = times.iter().copied().fold(1.0_f64, f64::max);
    let x = |t: f64| LABEL_WIDTH + (t - low) / (high - low) * PLOT_WIDTH;
    let row = |lane: &str| lanes.iter().position(|l| l == lane).unwrap_or_default();
    #[allow(clippy::cast_precision_loss)]
    let height = TOP + LANE * lanes.len() as f64 + 10.0;
    let width = LABEL_WIDTH + PLOT_WIDTH + 20.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg id=\"{id}\" class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">"
    );
    // Lanes and their labels.
    for (index, name) in lanes.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let y = TOP + LANE * index as f64;
        let fill = if index % 2 == 0 { "#f6f6f6" } else { "#ffffff" };
        let _ = writeln!(
            out,
            "<rect x=\"0\" y=\"{y}\" width=\"{width}\" height=\"{LANE}\" fill=\"{fill}\"/><text class=\"lane-label\" x=\"6\" y=\"{:.1}\">{}</text>",
            y + LANE * 0.65,
            escape(name)
        );
    }
    // The axis: a tick every so many seconds.
    let step = [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0]
        .into_iter()
        .find(|step| (high - low) / step <= 12.0)
        .unwrap_or(1200.0);
    let mut tick = (low / step).ceil() * step;
    while tick <= high {
        let _ = writeln!(
            out,
            "<line class=\"axis\" x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{height}\"/><text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{tick:+.0} s</text>",
            x(tick),
            TOP - 4.0,
            TOP - 8.0
        );
        tick += step;
    }
    let _ = writeln!(
        out,
        "<line class=\"zero\" x1=\"{0:.1}\" y1=\"{1}\" x2=\"{0:.1}\" y2=\"{height}\"><title>time zero: the switch to the next releases</title></line>",
        x(0.0),
        TOP - 4.0
    );
    for span in &spans {
        #[allow(clippy::cast_precision_loss)]
        let top = TOP + LANE * row(&span.lane) as f64;
        let (y, h) = match span.half {
            None => (top + 6.0, LANE - 12.0),
            Some(true) => (top + 3.0, LANE / 2.0 - 4.0),
            Some(false) => (top + LANE / 2.0 + 1.0, LANE / 2.0 - 4.0),
        };
        let start = x(span.start);
        let end = x(span.end.unwrap_or(high));
        let _ = writeln!(
            out,
            "<rect class=\"span\" x=\"{start:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\" fill-opacity=\"0.55\"><title>{}</title></rect>",
            (end - start).max(1.5),
            span.colour,
            escape(&span.title)
        );
    }
    for mark in &marks {
        #[allow(clippy::cast_precision_loss)]
        let cy = TOP + LANE * row(&mark.lane) as f64 + LANE / 2.0;
        let cx = x(mark.t);
        let shape = match mark.shape {
            Shape::Dot => format!(
                "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"3.5\" fill=\"{}\"/>",
                mark.colour
            ),
            Shape::Diamond => format!(
                "<polygon points=\"{:.1},{cy:.1} {cx:.1},{:.1} {:.1},{cy:.1} {cx:.1},{:.1}\" fill=\"{}\"/>",
                cx - 5.0,
                cy - 6.0,
                cx + 5.0,
                cy + 6.0,
                mark.colour
            ),
            Shape::Cross => format!(
                "<path d=\"M{:.1},{:.1} L{:.1},{:.1} M{:.1},{:.1} L{:.1},{:.1}\" stroke=\"{}\" stroke-width=\"2.5\"/>",
                cx - 4.5,
                cy - 4.5,
                cx + 4.5,
                cy + 4.5,
                cx - 4.5,
                cy + 4.5,
                cx + 4.5,
                cy - 4.5,
                mark.colour
            ),
            Shape::Tick => format!(
                "<line x1=\"{cx:.1}\" y1=\"{:.1}\" x2=\"{cx:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"/>",
                cy - 8.0,
                cy + 8.0,
                mark.colour
            ),
        };
        let _ = writeln!(
            out,
            "<g class=\"mark fact-{}\" data-event=\"{}\">{shape}<title>{:+.2} s: {}</title></g>",
            escape(&mark.fact),
            mark.event,
            mark.t,
            escape(&mark.text)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// The banner of a run: its verdict in one word, as the JSON names it
/// (class `verdict-<name>`), and whether data was damaged.
fn banner(run: &Value) -> String {
    let verdict = run["verdict"].as_str().unwrap_or_default();
    let class = match RunFinding::ALL.iter().find(|known| known.name() == verdict) {
        Some(known) => format!("verdict-{}", known.name()),
        None => "verdict-inconclusive".to_owned(),
    };
    let damage = if run["damaged"] == true {
        "<span class=\"damaged\">data damaged</span>"
    } else {
        "<span class=\"intact\">nothing damaged</span>"
    };
    format!(
        "<p><span class=\"banner {class}\" data-verdict=\"{}\">{}</span>{damage}</p>\n",
        escape(verdict),
        escape(&verdict.to_uppercase())
    )
}

const LEGEND: &str = "<p class=\"legend\">\
<span><i class=\"swatch\" style=\"background:#2d6a4f\"></i>applied, open, succeeded, acknowledged</span>\
<span><i class=\"swatch\" style=\"background:#c00000\"></i>refused, closed, failed, lost</span>\
<span><i class=\"swatch\" style=\"background:#e09f00\"></i>Pending, writes refused</span>\
<span><i class=\"swatch\" style=\"background:#1f5fa8\"></i>a pod or Job running</span>\
<span><i class=\"swatch\" style=\"background:#6a3d9a\"></i>the runner's acts, the gate's object</span>\
</p>\n<p>Release lanes: upper half the CSV's phase (OLM v0), lower half its operator pod's life; \
a deployer's applies refused by the admission policy are red crosses, those that failed for another cause grey crosses, its accepted ones green diamonds. \
Gate lanes (OLM v0): upper half the OperatorCondition's spec (what the gate wrote), lower half OLM's copy in status; \
the admission record's lane (the other deployers): red while the running release's upgrade is in progress, green once complete. \
Hover a mark for its fact.</p>\n";

/// One run's section: banner, timeline, verdict's evidence, writer counts.
fn run_section(run: &Value, index: usize) -> String {
    let timeline = run["timeline"].as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<section class=\"run\" id=\"run-{index}\">\n<h2>Run {} — namespace {}</h2>",
        index + 1,
        escape(run["namespace"].as_str().unwrap_or_default())
    );
    out.push_str(&banner(run));
    out.push_str(&svg(&timeline, &format!("timeline-{index}")));
    let _ = writeln!(
        out,
        "<p class=\"writer\">The writer: {}</p>",
        escape(&run["writer"].to_string())
    );
    out.push_str("<h3>Evidence</h3>\n<ul class=\"evidence\">\n");
    for line in run["evidence"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "<li>{}</li>",
            escape(line.as_str().unwrap_or_default())
        );
    }
    for line in run["inconclusive"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "<li>inconclusive: {}</li>",
            escape(line.as_str().unwrap_or_default())
        );
    }
    out.push_str("</ul>\n</section>\n");
    out
}

/// The page of an arm's report (`ArmReport::to_json`): each run's picture.
pub fn arm_page(arm: &Value) -> String {
    let name = arm["arm"].as_str().unwrap_or("run");
    let title = match arm["deployer"].as_str() {
        Some(deployer) => format!("upgrade-gate: {name}, pushed by {deployer}"),
        None => format!("upgrade-gate: {name}"),
    };
    let mut out = head(&title);
    let _ = writeln!(
        out,
        "<body>\n<h1>{}</h1>\n<p>Expected: {}. {}, damaged {} of {}.</p>",
        escape(&title),
        escape(arm["expectation"].as_str().unwrap_or_default()),
        verdict_counts(arm),
        arm["damaged"].as_u64().unwrap_or_default(),
        arm["total"].as_u64().unwrap_or_default()
    );
    out.push_str(LEGEND);
    for (index, run) in arm["runs"].as_array().into_iter().flatten().enumerate() {
        out.push_str(&run_section(run, index));
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// `held 2, raced 0, stuck 1, …`: the arm's runs under each verdict's
/// name, read from the JSON under the same names.
fn verdict_counts(arm: &Value) -> String {
    RunFinding::ALL
        .iter()
        .map(|verdict| {
            format!(
                "<span class=\"count\" data-count=\"{name}\">{name} {}</span>",
                arm[verdict.name()].as_u64().unwrap_or_default(),
                name = verdict.name()
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The colour of each verdict's bar on the matrix page.
fn verdict_colour(verdict: RunFinding) -> &'static str {
    match verdict {
        RunFinding::Held => GREEN,
        RunFinding::Raced => RED,
        RunFinding::Stuck => AMBER,
        RunFinding::Jumped => BLUE,
        RunFinding::Inconclusive => GREY,
    }
}

/// The page comparing arms (`just race-matrix`): each arm's counts as bars
/// and each run's Pending time and load margin as dots.
pub fn matrix_page(deployer: &str, arms: &[Value]) -> String {
    let title = format!("The race matrix, pushed by {}", escape(deployer));
    let mut out = head(&format!("upgrade-gate: {title}"));
    let _ = write!(out, "<body>\n<h1>{title}</h1>\n");
    out.push_str("<table class=\"matrix\">\n<tr><th>arm</th><th>expected</th><th>verdicts</th><th>damaged</th><th>Pending (s), each run</th><th>load margin (s), each run</th></tr>\n");
    let dots = |arm: &Value, key: &str| -> String {
        let values: Vec<f64> = arm["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|run| run[key].as_f64())
            .collect();
        let high = values.iter().copied().fold(1.0_f64, f64::max);
        let mut svg =
            String::from("<svg width=\"220\" height=\"20\" xmlns=\"http://www.w3.org/2000/svg\">");
        for value in &values {
            let _ = write!(
                svg,
                "<circle class=\"dot\" cx=\"{:.1}\" cy=\"10\" r=\"3\" fill=\"{BLUE}\"><title>{value:.1} s</title></circle>",
                10.0 + value.max(0.0) / high * 200.0
            );
        }
        svg.push_str("</svg>");
        svg
    };
    for arm in arms {
        let count = |key: &str| arm[key].as_u64().unwrap_or_default();
        let total = count("total").max(1);
        #[allow(clippy::cast_precision_loss)]
        let width = |n: u64| n as f64 / total as f64 * 200.0;
        let mut bars =
            String::from("<svg width=\"210\" height=\"16\" xmlns=\"http://www.w3.org/2000/svg\">");
        let mut x = 0.0;
        for verdict in RunFinding::ALL {
            let w = width(count(verdict.name()));
            let _ = write!(
                bars,
                "<rect x=\"{x:.1}\" y=\"2\" width=\"{w:.1}\" height=\"12\" fill=\"{}\"><title>{}</title></rect>",
                verdict_colour(verdict),
                verdict.name()
            );
            x += w;
        }
        bars.push_str("</svg>");
        let _ = writeln!(
            out,
            "<tr class=\"arm\" data-arm=\"{name}\"><td>{name}</td><td>{}</td><td>{bars} {}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(arm["expectation"].as_str().unwrap_or_default()),
            verdict_counts(arm),
            count("damaged"),
            dots(arm, "pending_seconds"),
            dots(arm, "load_margin_seconds"),
            name = escape(arm["arm"].as_str().unwrap_or_default()),
        );
    }
    out.push_str("</table>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A held run under OLM v0, as the runner's JSON has it (shortened).
    pub fn held_run() -> Value {
        json!({
            "verdict": "held", "raced": false, "damaged": false, "inconclusive": [],
            "namespace": "demo-abc",
            "evidence": ["held: 7.10.0's upgrade completed at +20.1 s, before 7.10.1's operator ran at +22.0 s", "a <quoted> & 'odd' message"],
            "writer": {"acknowledged": 120, "refused": 3, "lost": 0},
            "timeline": [
                {"t": -3.0, "fact": "writer_layout", "layout": "v2", "text": "the writer wrote in layout v2"},
                {"t": 0.0, "fact": "channel_switched", "channel": "7.10.x", "text": "switched to 7.10.x"},
                {"t": 0.4, "fact": "csv_created", "release": "7.10.0", "text": "CSV upgrade-gate.v7.10.0 created"},
                {"t": 0.5, "fact": "csv_phase", "release": "7.10.0", "phase": "Installing", "text": "Installing"},
                {"t": 1.0, "fact": "pod", "pod": "op-1", "kind": "operator", "release": "7.10.0", "change": "created", "text": "pod"},
                {"t": 1.2, "fact": "admission_record", "operator": "app-operator", "release": "7.10.0", "state": "InProgress", "text": "record InProgress"},
                {"t": 1.5, "fact": "condition_spec", "release": "7.10.0", "status": "False", "text": "spec False"},
                {"t": 1.8, "fact": "condition_status", "release": "7.10.0", "status": "False", "text": "status False"},
                {"t": 2.0, "fact": "csv_created", "release": "7.10.1", "text": "CSV upgrade-gate.v7.10.1 created"},
                {"t": 2.1, "fact": "csv_phase", "release": "7.10.1", "phase": "Pending", "text": "Pending <OperatorConditionNotUpgradeable>"},
                {"t": 3.0, "fact": "job", "job": "db-7-10-0", "release": "7.10.0", "change": "created", "text": "Job created"},
                {"t": 4.0, "fact": "writer_refused", "error": "57014", "text": "writes refused"},
                {"t": 9.0, "fact": "writer_resumed", "refused": 3, "text": "writes resumed"},
                {"t": 10.0, "fact": "migration_applied", "version": 3, "name": "v3", "applied_on": "x", "text": "V3 applied"},
                {"t": 19.0, "fact": "job", "job": "db-7-10-0", "release": "7.10.0", "change": "succeeded", "text": "Job succeeded"},
                {"t": 20.0, "fact": "admission_record", "operator": "app-operator", "release": "7.10.0", "state": "Complete", "text": "record Complete"},
                {"t": 20.1, "fact": "condition_spec", "release": "7.10.0", "status": "True", "text": "spec True"},
                {"t": 21.0, "fact": "csv_phase", "release": "7.10.1", "phase": "Installing", "text": "Installing"},
                {"t": 22.0, "fact": "pod", "pod": "op-2", "kind": "operator", "release": "7.10.1", "change": "started", "text": "pod"},
                {"t": 23.0, "fact": "deployed", "release": "7.10.2", "accepted": false, "message": "denied", "text": "refused"},
                {"t": 24.0, "fact": "watch_error", "watch": "pods", "error": "x", "text": "a watch failed"}
            ]
        })
    }

    #[test]
    fn every_fact_has_one_mark() {
        let run = held_run();
        let timeline = run["timeline"].as_array().unwrap().clone();
        let (_, marks, _) = layout(&timeline);
        assert_eq!(marks.len(), timeline.len());
        let page = arm_page(
            &json!({"arm": "gate-on", "deployer": "helm", "runs": [run], "held": 1, "raced": 0, "inconclusive": 0, "damaged": 0, "total": 1, "expectation": "held"}),
        );
        assert!(page.contains("<title>upgrade-gate: gate-on, pushed by helm</title>"));
        for index in 0..timeline.len() {
            assert_eq!(
                page.matches(&format!("data-event=\"{index}\"")).count(),
                1,
                "event {index}"
            );
        }
    }

    #[test]
    fn spans_open_and_close_on_the_facts_that_bound_them() {
        let run = held_run();
        let (_, _, spans) = layout(run["timeline"].as_array().unwrap());
        let job = spans
            .iter()
            .find(|span| span.lane == "Job db-7-10-0")
            .expect("the Job's run");
        assert_eq!((job.start, job.end), (3.0, Some(19.0)));
        let refused = spans
            .iter()
            .find(|span| span.title == "writes refused")
            .expect("the writer's refusals");
        assert_eq!((refused.start, refused.end), (4.0, Some(9.0)));
        let pending = spans
            .iter()
            .find(|span| span.lane == "release 7.10.1" && span.title == "CSV Pending")
            .expect("7.10.1 Pending");
        assert_eq!(
            (pending.start, pending.end, pending.colour),
            (2.1, Some(21.0), AMBER)
        );
        // The gate's spec closed until +20.1 s, then open to the end.
        let gate: Vec<_> = spans
            .iter()
            .filter(|span| span.lane == "gate of 7.10.0" && span.half == Some(true))
            .map(|span| (span.start, span.end, span.colour))
            .collect();
        assert_eq!(gate, [(1.5, Some(20.1), RED), (20.1, None, GREEN)]);
    }

    #[test]
    fn the_admission_record_holds_red_until_complete() {
        let (lanes, _, spans) = layout(held_run()["timeline"].as_array().unwrap());
        assert!(lanes.iter().any(|lane| lane == "the admission record"));
        let record: Vec<&Span> = spans
            .iter()
            .filter(|span| span.lane == "the admission record")
            .collect();
        assert_eq!(record.len(), 2, "{record:?}");
        assert_eq!(
            (record[0].start, record[0].end, record[0].colour),
            (1.2, Some(20.0), RED)
        );
        assert_eq!((record[1].start, record[1].colour), (20.0, GREEN));
    }

    #[test]
    fn held_and_raced_runs_differ_at_a_glance() {
        let held = banner(&held_run());
        assert!(
            held.contains("verdict-held") && held.contains(">HELD<"),
            "{held}"
        );
        let mut raced_run = held_run();
        raced_run["verdict"] = json!("raced");
        raced_run["damaged"] = json!(true);
        let raced = banner(&raced_run);
        assert!(
            raced.contains("verdict-raced") && raced.contains("data damaged"),
            "{raced}"
        );
    }

    #[test]
    fn every_verdict_has_a_banner_of_its_own() {
        for verdict in RunFinding::ALL {
            let mut run = held_run();
            run["verdict"] = json!(verdict.name());
            let shown = banner(&run);
            assert!(
                shown.contains(&format!("class=\"banner verdict-{}\"", verdict.name())),
                "{shown}"
            );
            assert!(
                STYLE.contains(&format!(".verdict-{} {{", verdict.name())),
                "no style for {}",
                verdict.name()
            );
        }
    }

    #[test]
    fn a_deployers_apply_failed_for_another_cause_is_no_policy_refusal() {
        let entry = |message: &str| json!({"t": 1.0, "fact": "deployed", "release": "7.10.1", "accepted": false, "message": message, "text": "x"});
        let (_, marks, _) = layout(&[
            entry(
                "x is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'b' denied request: upgrade-gate: operator op",
            ),
            entry("dial tcp 10.0.0.1:6443: connect: connection refused"),
        ]);
        assert_eq!(
            marks
                .iter()
                .map(|mark| (mark.shape, mark.colour))
                .collect::<Vec<_>>(),
            [(Shape::Cross, RED), (Shape::Cross, GREY)]
        );
    }

    #[test]
    fn text_from_the_cluster_is_escaped_and_nothing_is_loaded() {
        let page = arm_page(&json!({"arm": "a", "runs": [held_run()], "total": 1}));
        assert!(page.contains("a &lt;quoted&gt; &amp; &#39;odd&#39; message"));
        assert!(page.contains("Pending &lt;OperatorConditionNotUpgradeable&gt;"));
        assert!(page.contains("default-src 'none'"));
        for forbidden in ["<script", "src=", "href=", "@import", "url("] {
            assert!(!page.contains(forbidden), "{forbidden}");
        }
    }

    #[test]
    fn the_matrix_has_a_row_per_arm() {
        let arm = |name: &str, held: u64, raced: u64| {
            json!({"arm": name, "expectation": "x", "held": held, "raced": raced, "inconclusive": 0, "damaged": 0, "total": held + raced,
                   "runs": [{"pending_seconds": 3.2, "load_margin_seconds": 1.0}, {"pending_seconds": null}]})
        };
        let page = matrix_page("olm", &[arm("gate-on", 10, 0), arm("gate-off", 1, 9)]);
        assert!(page.contains("pushed by olm"));
        assert_eq!(page.matches("<tr class=\"arm\"").count(), 2);
        assert!(page.contains("data-arm=\"gate-off\""));
        assert_eq!(page.matches("class=\"dot\"").count(), 4);
    }
}
