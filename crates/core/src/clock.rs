//! The ledger's clock, checked rather than trusted: whether a wall-clock reading may stamp
//! entries (`received_at`) and drive the time rules, judged against the log's last entry and a
//! monotonic clock. Pure: the readings are handed in (the store reads the clocks).
//!
//! A reading is **sane** when it is not behind the latest time the ledger already used (so
//! `received_at` never decreases) and it agrees, within [`ClockPolicy::step_seconds`], with the
//! previous sane reading plus the monotonic time elapsed since (so a step of the wall clock, an
//! NTP step or a VM resumed with a wrong clock, is noticed at once). After a step the clock is
//! **unreliable** until the wall clock comes back to where the monotonic clock says it should
//! be, or until the stepped clock has run in step with the monotonic clock for
//! [`ClockPolicy::settle_seconds`] while the kernel says it is synchronised (a correction that
//! stays): only then does it become the new reference. A clock behind the latest time used stays
//! unreliable until it has caught up, whatever else holds.

use crate::time::Timestamp;

/// Default [`ClockPolicy::step_seconds`].
pub const DEFAULT_STEP_SECONDS: i64 = 30;
/// Default [`ClockPolicy::settle_seconds`].
pub const DEFAULT_SETTLE_SECONDS: i64 = 120;

/// The thresholds of the check (settings `clock_step_seconds`, `clock_settle_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockPolicy {
    /// Largest disagreement, in seconds, between the wall clock and the previous sane reading
    /// plus the monotonic time elapsed, that is not a step.
    pub step_seconds: i64,
    /// How long a stepped clock must run in step with the monotonic clock (with the kernel
    /// synchronised) before it is trusted as the new reference.
    pub settle_seconds: i64,
    /// How long after its end a period may be invoiced or certified
    /// ([`crate::admission::period_closes_at`]); `None`: the log policy's
    /// `max_future_skew_seconds`.
    pub close_seconds: Option<u64>,
}

impl Default for ClockPolicy {
    fn default() -> Self {
        ClockPolicy {
            step_seconds: DEFAULT_STEP_SECONDS,
            settle_seconds: DEFAULT_SETTLE_SECONDS,
            close_seconds: None,
        }
    }
}

/// Longest a writer's clock reading may trail the log's last `received_at` and still be
/// stamped, raised to it: another process appending to the same log (two `serve`s on one
/// database) read its clock after this one did and committed first, while this one waited for
/// the head lock. Beyond it the two writers' clocks disagree, and the write is refused.
pub const MAX_WRITER_LAG_SECONDS: i64 = 60;

/// The `received_at` a transaction stamps, under the head lock: its clock `reading`, raised to
/// the log's last `received_at` (`last`) when it trails it by at most
/// [`MAX_WRITER_LAG_SECONDS`], so that receive times never decrease (PROTOCOL §7); a reading
/// further behind is [`Unreliable::Behind`].
pub fn stamp(reading: Timestamp, last: Option<Timestamp>) -> Result<Timestamp, Unreliable> {
    match last {
        Some(last) if reading < last => {
            if reading.seconds_until(last) <= MAX_WRITER_LAG_SECONDS {
                Ok(last)
            } else {
                Err(Unreliable::Behind {
                    wall: reading,
                    latest: last,
                })
            }
        }
        _ => Ok(reading),
    }
}

/// One reading of the clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The wall clock.
    pub wall: Timestamp,
    /// A monotonic clock, in milliseconds from any fixed origin.
    pub mono_ms: u64,
    /// Whether the kernel says the wall clock is synchronised (NTP); `None` when unknown.
    pub synchronised: Option<bool>,
}

/// Why the clock may not be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreliable {
    /// The wall clock is behind the latest time the ledger used.
    Behind { wall: Timestamp, latest: Timestamp },
    /// The wall clock stepped by `seconds` (positive: forward) against the monotonic clock,
    /// `since_ms` ago (monotonic), and has not settled.
    Stepped { seconds: i64, since_ms: u64 },
}

impl std::fmt::Display for Unreliable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreliable::Behind { wall, latest } => write!(
                f,
                "the ledger's clock reads {wall}, behind {latest}, a time the log already used \
                 (it stepped back); writes, checkpoints and invoices wait until it has caught up"
            ),
            Unreliable::Stepped { seconds, since_ms } => write!(
                f,
                "the ledger's clock stepped {} by {} s against the monotonic clock {} s ago; \
                 writes, checkpoints and invoices wait until it is back, or has run steadily and \
                 synchronised for the settle time",
                if *seconds >= 0 { "forward" } else { "back" },
                seconds.abs(),
                since_ms / 1000
            ),
        }
    }
}

/// The state of the check: the reference reading, the latest time used, a step not yet
/// settled, and how many steps were seen.
#[derive(Debug, Clone, Default)]
pub struct ClockWatch {
    reference: Option<Reading>,
    latest: Option<Timestamp>,
    /// The first reading after a step, and the step's size in seconds.
    step: Option<(Reading, i64)>,
    steps: u64,
}

impl ClockWatch {
    /// A watch that knows the latest time the log used (its last entry's `received_at`).
    pub fn new(latest: Option<Timestamp>) -> ClockWatch {
        ClockWatch {
            latest,
            ..ClockWatch::default()
        }
    }

    /// Steps seen since the watch began.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The latest time a sane reading gave (or the log held).
    pub fn latest(&self) -> Option<Timestamp> {
        self.latest
    }

    /// Judges `r`: `Ok` with the time to use (the reading's wall clock), or why not.
    pub fn observe(&mut self, r: Reading, policy: &ClockPolicy) -> Result<Timestamp, Unreliable> {
        let drift = |from: &Reading| {
            let elapsed = (r.mono_ms.saturating_sub(from.mono_ms) / 1000) as i64;
            r.wall.unix() - (from.wall.unix() + elapsed)
        };
        if let Some(reference) = self.reference {
            let d = drift(&reference);
            if d.abs() > policy.step_seconds {
                match self.step {
                    // Still the same stepped clock: settled once it ran long enough, in sync.
                    Some((first, seconds)) if drift(&first).abs() <= policy.step_seconds => {
                        let ran = r.mono_ms.saturating_sub(first.mono_ms);
                        if ran < policy.settle_seconds as u64 * 1000
                            || r.synchronised == Some(false)
                        {
                            return Err(Unreliable::Stepped {
                                seconds,
                                since_ms: ran,
                            });
                        }
                    }
                    // A new step (or another one).
                    _ => {
                        self.step = Some((r, d));
                        self.steps += 1;
                        return Err(Unreliable::Stepped {
                            seconds: d,
                            since_ms: 0,
                        });
                    }
                }
            }
        }
        if let Some(latest) = self.latest {
            if r.wall < latest {
                // Not a new reference: the time the log used stays the bar.
                return Err(Unreliable::Behind {
                    wall: r.wall,
                    latest,
                });
            }
        }
        self.reference = Some(r);
        self.step = None;
        self.latest = Some(r.wall);
        Ok(r.wall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(wall: i64, mono_s: u64) -> Reading {
        Reading {
            wall: Timestamp::from_unix(wall).unwrap(),
            mono_ms: mono_s * 1000,
            synchronised: Some(true),
        }
    }

    const T: i64 = 1_800_000_000;

    /// Each case: the log's latest time, then readings (wall offset from T, monotonic
    /// seconds) with whether each is sane.
    #[test]
    fn table() {
        let p = ClockPolicy {
            step_seconds: 30,
            settle_seconds: 120,
            close_seconds: None,
        };
        type Case = (&'static str, Option<i64>, &'static [(i64, u64, bool)]);
        let cases: &[Case] = &[
            (
                "steady",
                Some(-5),
                &[(0, 0, true), (10, 10, true), (20, 20, true)],
            ),
            (
                "slews within the threshold",
                None,
                &[(0, 0, true), (25, 0, true), (40, 10, true)],
            ),
            (
                "a start behind the log's last entry",
                Some(100),
                &[(0, 0, false), (50, 50, false), (100, 100, true)],
            ),
            (
                "forward 40 days for 25 s, then back",
                None,
                &[
                    (0, 0, true),
                    (3_456_000, 1, false),
                    (3_456_025, 26, false),
                    (27, 27, true),
                ],
            ),
            (
                "back one hour for 30 s, then back to normal",
                None,
                &[
                    (0, 0, true),
                    (-3_600, 1, false),
                    (-3_570, 31, false),
                    (32, 32, true),
                ],
            ),
            (
                "back one hour and staying: never below what the log used",
                None,
                &[
                    (100, 100, true),
                    (-3_500, 101, false),
                    (-3_500 + 130, 231, false),
                    (101, 3_701, true),
                ],
            ),
            (
                "a forward correction that stays is trusted after the settle time",
                None,
                &[
                    (0, 0, true),
                    (600, 1, false),
                    (660, 61, false),
                    (721, 122, true),
                    (731, 132, true),
                ],
            ),
            (
                "a second step restarts the settle time",
                None,
                &[
                    (0, 0, true),
                    (600, 1, false),
                    (1_300, 100, false),
                    (1_400, 200, false),
                    (1_421, 221, true),
                ],
            ),
        ];
        for (name, latest, readings) in cases {
            let mut w = ClockWatch::new(latest.map(|l| Timestamp::from_unix(T + l).unwrap()));
            for (i, (wall, mono, sane)) in readings.iter().enumerate() {
                let got = w.observe(at(T + wall, *mono), &p);
                assert_eq!(got.is_ok(), *sane, "{name}: reading {i}: {got:?}");
                if let Ok(t) = got {
                    assert_eq!(t.unix(), T + wall);
                }
            }
        }
    }

    #[test]
    fn an_unsynchronised_clock_never_settles_and_steps_are_counted() {
        let p = ClockPolicy::default();
        let mut w = ClockWatch::new(None);
        let mut r = at(T, 0);
        assert!(w.observe(r, &p).is_ok());
        r = at(T + 600, 1);
        r.synchronised = Some(false);
        assert!(w.observe(r, &p).is_err());
        r = at(T + 600 + 500, 501);
        r.synchronised = Some(false);
        let e = w.observe(r, &p).unwrap_err();
        assert!(
            matches!(e, Unreliable::Stepped { seconds: 599, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("forward by 599 s"), "{e}");
        assert_eq!(w.steps(), 1);
        r.synchronised = Some(true);
        assert!(w.observe(r, &p).is_ok());
        assert_eq!(w.latest(), Some(r.wall));
    }

    #[test]
    fn a_stamp_never_goes_behind_the_log() {
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s).unwrap();
        for (name, reading, last, want) in [
            ("an empty log", t(0), None, Ok(t(0))),
            ("after the last entry", t(5), Some(t(0)), Ok(t(5))),
            ("the same second", t(0), Some(t(0)), Ok(t(0))),
            ("a second behind: raised", t(0), Some(t(1)), Ok(t(1))),
            ("the lag exactly: raised", t(0), Some(t(60)), Ok(t(60))),
            (
                "beyond the lag: refused",
                t(0),
                Some(t(61)),
                Err(Unreliable::Behind {
                    wall: t(0),
                    latest: t(61),
                }),
            ),
        ] {
            assert_eq!(stamp(reading, last), want, "{name}");
        }
    }
}
