//! The clock every record time is read from: epoch milliseconds, as the
//! store compares them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: the clock every record's times are
/// written in (a lease's end; seconds of it for an expiry), and the reading a
/// store's conditions compare them with ([`ClaimRequest::now_ms`](crate::store::ClaimRequest::now_ms)).
/// 0 when the system clock is set before 1970.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
