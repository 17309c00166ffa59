//! The labels the admission policy and the operator share on a
//! Deployment: the opt-in, the release it runs and the operator whose
//! record the policy reads.
//!
//! Owns: [`ADMISSION_LABEL`] and its value [`ENFORCE`], [`RELEASE_LABEL`]
//! and [`OPERATOR_LABEL`]. Must not touch: anything that reads or writes
//! them.

/// The label by which a Deployment opts in (value [`ENFORCE`]).
pub const ADMISSION_LABEL: &str = "upgrade-gate.dev/admission";
/// [`ADMISSION_LABEL`]'s value that makes the policy judge the Deployment.
pub const ENFORCE: &str = "enforce";
/// The label naming the release a Deployment runs; the policy compares the
/// old object's with the new one's.
pub const RELEASE_LABEL: &str = "upgrade-gate.dev/release";
/// The label naming the operator whose record the policy reads (default:
/// the Deployment's name); keeps the record across a renamed Deployment.
pub const OPERATOR_LABEL: &str = "upgrade-gate.dev/operator";
