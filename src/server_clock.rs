//! The API server's clock as this process reads it: the wall-clock time an
//! operator writes into the cluster's objects and compares with times that
//! other processes wrote there (a Job's `completionTime`, the failure time
//! or the queue place its predecessor recorded).
//!
//! Owns: the estimate of how far the API server's clock is from this
//! process's ([`next_offset`], pure and table-tested, from [`Sample`]s: the
//! `Date` header of a `GET /version`, whole seconds) and [`ServerClock`],
//! which applies it and looks again every [`SAMPLE_EVERY`]. Must not touch:
//! what this process times by itself (timeouts, the leader Lease's expiry
//! in [`crate::leader`]): that runs on the monotonic clock, which no
//! wall-clock skew moves.
//!
//! Why: a replica whose clock is ten minutes ahead of the API server's
//! would judge a Job finished 23 h 51 min ago as past a 24 h retention, and
//! two replicas ten minutes apart would each write times the other
//! misreads: a failure time that makes the next leader's retry twenty
//! minutes late (or at once), a queue place that puts an App that asked
//! later ahead of one that asked earlier. Read through this clock, every
//! replica writes and compares the API server's time, to within about a
//! second plus half a round trip.
//!
//! The estimate moves only when a sample proves it wrong: with clocks that
//! agree it stays exactly zero, and with a skewed one it is set once to
//! the middle of the first sample that excludes it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::telemetry::error_chain;

/// How often [`ServerClock::start`]'s task looks at the API server's clock
/// again (one `GET /version`); a clock that steps is followed within it.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(60);

/// How long one look may take; a slower answer says little about the time.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(10);

/// One look at the API server's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The response's `Date`: the API server's clock, cut to the second.
    pub date: Timestamp,
    /// This process's clock when the request was sent.
    pub sent: Timestamp,
    /// This process's clock when the response came.
    pub received: Timestamp,
}

impl Sample {
    /// The offsets (the API server's clock minus this process's) the sample
    /// admits, lowest and highest: the server stamped `date` somewhere
    /// between `sent` and `received`, and its clock then read between
    /// `date` and one second later. `None` when this process's clock went
    /// backwards between the two readings.
    pub fn bounds(&self) -> Option<(SignedDuration, SignedDuration)> {
        if self.received < self.sent {
            return None;
        }
        let low = self.received.duration_until(self.date);
        let high = self
            .sent
            .duration_until(self.date)
            .checked_add(SignedDuration::from_secs(1))?;
        Some((low, high))
    }
}

/// The offset to use after `sample`: `current` while the sample admits it,
/// otherwise the middle of what the sample admits.
pub fn next_offset(current: SignedDuration, sample: &Sample) -> SignedDuration {
    match sample.bounds() {
        Some((low, high)) if current < low || current > high => low + (high - low) / 2,
        _ => current,
    }
}

/// "ahead of"/"behind" wording of an offset, for the log line.
fn describe(offset: SignedDuration) -> String {
    let seconds = offset.as_secs_f64();
    if seconds >= 0.0 {
        format!("{seconds:.1} s ahead of this process's clock")
    } else {
        format!("{:.1} s behind this process's clock", -seconds)
    }
}

/// Why a look at the API server's clock failed.
#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    /// The request failed.
    #[error("GET /version failed")]
    Request(#[source] kube::Error),
    /// The answer was not a success.
    #[error("GET /version answered {0}")]
    Status(http::StatusCode),
    /// The answer had no `Date` header the clock can be read from.
    #[error("GET /version answered without a readable Date header ({0:?})")]
    NoDate(Option<String>),
    /// No answer within [`SAMPLE_TIMEOUT`].
    #[error("GET /version took longer than {SAMPLE_TIMEOUT:?}")]
    Timeout,
}

/// The API server's clock: this process's clock plus the estimated offset.
/// Clones share the estimate.
#[derive(Clone, Debug, Default)]
pub struct ServerClock {
    /// The offset in nanoseconds (an `i64` holds ±292 years).
    offset: Arc<AtomicI64>,
}

impl ServerClock {
    /// This process's own clock, never corrected (tests, and processes that
    /// write no times others compare).
    pub fn local() -> ServerClock {
        ServerClock::default()
    }

    /// Looks at the API server's clock once (waiting at most
    /// [`SAMPLE_TIMEOUT`], and going on with this process's clock if that
    /// fails), then again every [`SAMPLE_EVERY`] until every clone of the
    /// returned clock is dropped.
    pub async fn start(client: kube::Client) -> ServerClock {
        let clock = ServerClock::local();
        if let Err(error) = clock.look(&client).await {
            tracing::warn!(error = %error_chain(&error), "cannot read the API server's clock; using this process's until it can");
        }
        let shared = Arc::downgrade(&clock.offset);
        tokio::spawn(follow(shared, client));
        clock
    }

    /// The offset in use: the API server's clock minus this process's.
    pub fn offset(&self) -> SignedDuration {
        SignedDuration::from_nanos(self.offset.load(Ordering::Relaxed))
    }

    /// The API server's time now, as estimated.
    pub fn now(&self) -> Timestamp {
        let local = Timestamp::now();
        local.checked_add(self.offset()).unwrap_or(local)
    }

    /// One look: reads the `Date` of `GET /version` and updates the
    /// estimate; returns the offset in use after it.
    pub async fn look(&self, client: &kube::Client) -> Result<SignedDuration, SampleError> {
        let sample = tokio::time::timeout(SAMPLE_TIMEOUT, sample(client))
            .await
            .map_err(|_| SampleError::Timeout)??;
        Ok(self.apply(&sample))
    }

    /// Folds `sample` into the estimate (logged when it moves by a second
    /// or more); returns the offset in use after it.
    pub fn apply(&self, sample: &Sample) -> SignedDuration {
        let before = self.offset();
        let after = next_offset(before, sample);
        if after != before {
            self.offset.store(
                i64::try_from(after.as_nanos()).unwrap_or(0),
                Ordering::Relaxed,
            );
            if (after - before).abs() >= SignedDuration::from_secs(1) {
                tracing::info!(
                    offset_seconds = after.as_secs_f64(),
                    "the API server's clock is {}; the times this process writes and compares are the API server's",
                    describe(after)
                );
            }
        }
        after
    }
}

/// Looks again every [`SAMPLE_EVERY`] while the clock is in use.
async fn follow(offset: Weak<AtomicI64>, client: kube::Client) {
    let mut failing = false;
    loop {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let Some(offset) = offset.upgrade() else {
            return;
        };
        let clock = ServerClock { offset };
        match clock.look(&client).await {
            Ok(_) => failing = false,
            Err(error) if !failing => {
                failing = true;
                tracing::warn!(error = %error_chain(&error), "cannot read the API server's clock; keeping the last estimate");
            }
            Err(_) => {}
        }
    }
}

/// `GET /version` and its `Date`, with this process's clock around it.
async fn sample(client: &kube::Client) -> Result<Sample, SampleError> {
    let request = http::Request::get("/version")
        .body(kube::client::Body::empty())
        .map_err(|error| SampleError::Request(kube::Error::HttpError(error)))?;
    let sent = Timestamp::now();
    let started = std::time::Instant::now();
    let response = client.send(request).await.map_err(SampleError::Request)?;
    let elapsed = SignedDuration::try_from(started.elapsed()).unwrap_or(SignedDuration::MAX);
    let received = sent.checked_add(elapsed).unwrap_or(sent);
    if !response.status().is_success() {
        return Err(SampleError::Status(response.status()));
    }
    let header = response
        .headers()
        .get(http::header::DATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let date = header
        .as_deref()
        .and_then(parse_http_date)
        .ok_or(SampleError::NoDate(header))?;
    Ok(Sample {
        date,
        sent,
        received,
    })
}

/// An HTTP `Date` ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110's IMF-fixdate).
pub fn parse_http_date(text: &str) -> Option<Timestamp> {
    k8s_openapi::jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(text)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn ms(millis: i64) -> SignedDuration {
        SignedDuration::from_millis(millis)
    }

    /// A sample whose response was stamped `date` (whole seconds) while
    /// this process's clock read `sent`..`received`.
    fn sample(date: &str, sent: &str, received: &str) -> Sample {
        Sample {
            date: at(date),
            sent: at(sent),
            received: at(received),
        }
    }

    #[test]
    fn bounds_are_what_the_stamp_and_the_round_trip_admit() {
        let cases = [
            // Clocks that agree, a 100 ms round trip in the middle of a second.
            (
                sample(
                    "2026-12-04T12:00:00Z",
                    "2026-12-04T12:00:00.40Z",
                    "2026-12-04T12:00:00.50Z",
                ),
                Some((ms(-500), ms(600))),
            ),
            // The server ten minutes ahead.
            (
                sample(
                    "2026-12-04T12:10:00Z",
                    "2026-12-04T12:00:00.40Z",
                    "2026-12-04T12:00:00.50Z",
                ),
                Some((ms(599_500), ms(600_600))),
            ),
            // The server ten minutes behind.
            (
                sample(
                    "2026-12-04T11:50:00Z",
                    "2026-12-04T12:00:00.40Z",
                    "2026-12-04T12:00:00.50Z",
                ),
                Some((ms(-600_500), ms(-599_400))),
            ),
            // This process's clock went backwards in between: no bounds.
            (
                sample(
                    "2026-12-04T12:00:00Z",
                    "2026-12-04T12:00:01Z",
                    "2026-12-04T12:00:00Z",
                ),
                None,
            ),
        ];
        for (sample, expected) in cases {
            assert_eq!(sample.bounds(), expected, "{sample:?}");
        }
    }

    #[test]
    fn the_offset_moves_only_when_a_sample_excludes_it() {
        let agree = sample(
            "2026-12-04T12:00:00Z",
            "2026-12-04T12:00:00.40Z",
            "2026-12-04T12:00:00.50Z",
        );
        let server_ahead = sample(
            "2026-12-04T12:10:00Z",
            "2026-12-04T12:00:00.40Z",
            "2026-12-04T12:00:00.50Z",
        );
        let server_behind = sample(
            "2026-12-04T11:50:00Z",
            "2026-12-04T12:00:00.40Z",
            "2026-12-04T12:00:00.50Z",
        );
        let slow = sample(
            "2026-12-04T12:10:03Z",
            "2026-12-04T12:00:00Z",
            "2026-12-04T12:00:08Z",
        );
        let backwards = sample(
            "2026-12-04T12:10:00Z",
            "2026-12-04T12:00:01Z",
            "2026-12-04T12:00:00Z",
        );
        let cases = [
            // Clocks that agree: zero stays zero.
            (SignedDuration::ZERO, &agree, SignedDuration::ZERO),
            // A small offset the sample still admits is kept, not jittered.
            (ms(300), &agree, ms(300)),
            // The first sample of a skewed clock sets the middle.
            (SignedDuration::ZERO, &server_ahead, ms(600_050)),
            (SignedDuration::ZERO, &server_behind, ms(-599_950)),
            // An estimate the sample admits stays.
            (ms(600_000), &server_ahead, ms(600_000)),
            // A clock set right again: back near zero.
            (ms(600_000), &agree, ms(50)),
            // A slow answer admits a wide range: the estimate stays.
            (ms(600_000), &slow, ms(600_000)),
            // From zero, a slow answer still gets within its half-width.
            (SignedDuration::ZERO, &slow, ms(599_500)),
            // No bounds: nothing learnt.
            (ms(1_000), &backwards, ms(1_000)),
        ];
        for (current, sample, expected) in cases {
            assert_eq!(
                next_offset(current, sample),
                expected,
                "from {current:?} after {sample:?}"
            );
        }
    }

    #[test]
    fn the_clock_applies_the_estimate_and_shares_it_between_clones() {
        let clock = ServerClock::local();
        let copy = clock.clone();
        assert_eq!(clock.offset(), SignedDuration::ZERO);
        let sent = Timestamp::now();
        let ahead = Sample {
            date: sent
                .checked_add(SignedDuration::from_mins(10))
                .expect("in range"),
            sent,
            received: sent,
        };
        let offset = clock.apply(&ahead);
        assert_eq!(copy.offset(), offset);
        let gap = Timestamp::now().duration_until(copy.now());
        assert!(
            gap > ms(599_000) && gap < ms(602_000),
            "the clock reads {gap:?} from this process's"
        );
    }

    #[test]
    fn an_http_date_reads_as_its_instant() {
        assert_eq!(
            parse_http_date("Fri, 04 Dec 2026 12:00:07 GMT"),
            Some(at("2026-12-04T12:00:07Z"))
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }
}
