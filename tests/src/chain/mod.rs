//! The chain runner: the feature request's upgrade chain 7.9.3 → (channel
//! switch) → 7.10.0 → 7.10.1 played through the real OLM from a
//! file-based catalog (or pushed by OLM v1, Helm or kubectl, the admission
//! policy their brake), each run in a fresh namespace with its own database
//! and Subscription, with a writer playing the application's clients,
//! recorded as a timeline of facts and judged: raced, held or
//! inconclusive? damaged?
//!
//! One runner serves `just race` (many runs of one arm, a JSON report),
//! `just race-matrix` (every arm), `just demo` (one run, narrated),
//! `just bench-scale` (a fleet of Apps upgraded at once, measured) and the
//! cluster tests (one run each, a fault injected between the switch and the
//! end).
//!
//! | module | what |
//! | --- | --- |
//! | [`arm`] | the race's factors (gate, start, successor), an arm's catalog and expectation |
//! | [`cluster`] | what the runner needs of a cluster; the local provider, the kubeconfig one (kind); choosing one |
//! | [`run`] | one run: set-up (a file a deployer), switch, end checks, verdict |
//! | [`timeline`] | the facts and the shared, time-ordered event list |
//! | [`facts`] | object versions → facts (pure) |
//! | [`watches`] | the fact watches: a watch per kind of object and the migration history poll |
//! | [`writer`] | the application's clients writing through the upgrade |
//! | [`write_failures`] | why a write failed, and the failed writes counted by cause |
//! | [`digest`] | what a row means, in each schema layout |
//! | [`judge`] | raced / damaged, with evidence (pure) |
//! | [`refusal`] | a failed apply: the admission policy's refusal (its words) or another cause (pure) |
//! | [`predicates`] | what the runner waits on and the cluster tests assert, read from the timeline (pure) |
//! | [`catalog`] | test-time edits of a catalog (a release published later, a skipRange) |
//! | [`report`] | `just race`'s and `just race-matrix`'s JSON and tables |
//! | [`narrate`] | `just demo`'s narration: a sink the runner and the binary write to, calling nothing of the run |
//! | [`pipeline`] | Helm and kubectl pushing a release as a pipeline does |
//! | [`picture`] | each run's page: an SVG timeline of its facts, its verdict beneath; the matrix's page |
//! | [`scale`] | `just bench-scale`: a fleet of Apps upgraded by OLM, measured |
//! | [`runner`] | the `chain` binary's commands: its command line, the cluster around a command, race, demo, exit codes |

pub mod arm;
pub mod catalog;
pub mod cluster;
pub mod digest;
pub mod facts;
pub mod judge;
pub mod narrate;
pub mod picture;
pub mod pipeline;
pub mod predicates;
pub mod refusal;
pub mod report;
pub mod run;
pub mod runner;
pub mod scale;
pub mod timeline;
pub mod watches;
pub mod write_failures;
pub mod writer;
