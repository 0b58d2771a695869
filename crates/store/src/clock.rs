//! The ledger clock's guard: every time the sequencer stamps entries with (`received_at`) and
//! every time rule the ledger applies is first judged by `core::clock::ClockWatch` against the
//! log's last entry and the monotonic clock. While the clock is unreliable (stepped, or behind
//! what the log already used) nothing is written, no checkpoint is signed and nothing is
//! invoiced: [`StoreError::ClockUnreliable`], answered 503 `clock_unreliable` with
//! `Retry-After`, and `/readyz` is not ready. Metrics: `gpuledger_clock_synchronized` here;
//! `gpuledger_clock_unreliable` and `gpuledger_clock_steps_total` from [`ClockGuard::fault`]
//! and [`ClockGuard::steps`] when `/metrics` is read.

use super::StoreError;
use gpuledger_core::clock::{ClockPolicy, ClockWatch, Reading, Unreliable};
use gpuledger_core::time::Timestamp;
use std::sync::Mutex;

/// The check and what it last found.
pub struct ClockGuard {
    policy: ClockPolicy,
    state: Mutex<(ClockWatch, Option<Unreliable>)>,
}

impl ClockGuard {
    /// A guard for a log whose last entry was received at `latest`.
    pub fn new(policy: ClockPolicy, latest: Option<Timestamp>) -> ClockGuard {
        ClockGuard {
            policy,
            state: Mutex::new((ClockWatch::new(latest), None)),
        }
    }

    /// How long after its end a period may be invoiced or certified, if configured
    /// (`serve`'s `invoice_close_seconds`; `None`: the log policy's skew).
    pub fn close_seconds(&self) -> Option<u64> {
        self.policy.close_seconds
    }

    /// Reads the clocks and judges the reading: the time to use, or
    /// [`StoreError::ClockUnreliable`]. Logs each change between reliable and not. The clocks
    /// are read under the guard's lock, so readings from several threads reach the check in
    /// the order they were taken.
    pub fn check(&self) -> Result<Timestamp, StoreError> {
        let synchronised = gpuledger_shell::clock::kernel_synchronised();
        if let Some(s) = synchronised {
            metrics::gauge!("gpuledger_clock_synchronized").set(if s { 1.0 } else { 0.0 });
        }
        let mut state = self.state.lock().expect("clock guard lock");
        let reading = Reading {
            wall: Timestamp::now(),
            mono_ms: gpuledger_shell::clock::monotonic_ms(),
            synchronised,
        };
        let (watch, fault) = &mut *state;
        let verdict = watch.observe(reading, &self.policy);
        match verdict {
            Ok(t) => {
                if let Some(was) = fault.take() {
                    tracing::warn!(%was, "the ledger's clock is reliable again; writes resume");
                }
                Ok(t)
            }
            Err(u) => {
                if fault.as_ref() != Some(&u) {
                    let new = fault.is_none()
                        || !matches!(
                            (&*fault, &u),
                            (Some(Unreliable::Stepped { seconds: a, .. }), Unreliable::Stepped { seconds: b, .. }) if a == b
                        );
                    if new {
                        tracing::error!(reason = %u, "the ledger's clock is unreliable");
                    }
                }
                *fault = Some(u.clone());
                Err(StoreError::ClockUnreliable(u.to_string()))
            }
        }
    }

    /// Why the clock was unreliable at its last check, if it was.
    pub fn fault(&self) -> Option<Unreliable> {
        self.state.lock().expect("clock guard lock").1.clone()
    }

    /// Steps seen since start.
    pub fn steps(&self) -> u64 {
        self.state.lock().expect("clock guard lock").0.steps()
    }
}
