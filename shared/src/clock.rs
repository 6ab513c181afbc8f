//! The clock every record time is read from: epoch milliseconds, as the
//! store compares them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The caller's clock, epoch milliseconds (0 before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
