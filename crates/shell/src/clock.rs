//! The machine's clocks, as the clock checks (`gpuledger_core::clock`) read them: a monotonic
//! clock that also counts time suspended (`CLOCK_BOOTTIME`, so a machine resumed from sleep is
//! not taken for a stepped wall clock) and the kernel's NTP synchronisation state.

/// Milliseconds of `CLOCK_BOOTTIME`: never steps, counts time suspended.
pub fn monotonic_ms() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    (t.tv_sec as u64).saturating_mul(1000) + (t.tv_nsec as u64) / 1_000_000
}

/// Whether the kernel says the wall clock is synchronised (adjtimex: not `TIME_ERROR`, and
/// `STA_UNSYNC` clear); `None` when it cannot say (not Linux, or the call failed).
pub fn kernel_synchronised() -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: adjtimex with `modes` 0 only reads the kernel's state into the zeroed
        // struct it is given, which lives for the whole call.
        let mut t: libc::timex = unsafe { std::mem::zeroed() };
        let state = unsafe { libc::adjtimex(&mut t) };
        if state < 0 {
            return None;
        }
        Some(state != libc::TIME_ERROR && t.status & libc::STA_UNSYNC == 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = monotonic_ms();
        assert!(b >= a + 20, "{a} then {b}");
        // This machine's kernel answers one way or the other.
        #[cfg(target_os = "linux")]
        assert!(kernel_synchronised().is_some());
    }
}
