//! The operator's exact API request sequences on its main paths, against a
//! `tower-test` mock API server and a scripted database reader:
//! the upgrade intent is written before the Job, which carries it; the Job
//! waits until no server pod is left; an existing Job of this intent is
//! adopted, not duplicated; a foreign Job with our name is reported, never
//! adopted or deleted; a stale Job of ours is deleted (Background, by UID)
//! before ours is created; a permanent refusal is not retried; a pod the
//! Job controller cannot create is reported from its Events; the gate opens
//! only after the operator verified the schema itself; without a free
//! upgrade slot an App queues and records no intent until one frees.

mod failures;
mod gate;
mod intent;
mod jobs;
mod world;
