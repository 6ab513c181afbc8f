//! What a claim asks for: a lease that ends at the invocation's deadline
//! plus a margin, capped (`Leases`, a part of the configuration), a fresh owner token ([`owner_token`])
//! and the one expiry rule (a record outlives its lease:
//! [`ClaimRequest::start`]).

use std::time::Duration;

use crate::clock::now_ms;

use crate::config::Leases;
use crate::error::{Error, ErrorKind};
use crate::hash::hex;
use crate::progress::{owner_with_estimate, Progress};
use crate::store::ClaimRequest;

/// Say once per process that `max_lease` is shorter than an invocation: a
/// lease that ends while its invocation still runs lets a retry take the key
/// over and run the handler a second time, concurrently.
fn warn_lease_capped() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::error!(
            "max_lease is shorter than this invocation's remaining time: a retry can take the \
             key over while it still runs and run the handler twice; set max_lease above the \
             function timeout (plus the lease margin)"
        );
    }
}

/// A fresh owner token: SHA-256 of a secret seed, drawn from the operating
/// system once per process, and a counter, cut to 128 bits. Unpredictable and
/// unique like a token drawn from the OS on every call, without a system call
/// on every claim.
pub(crate) fn owner_token() -> Result<String, Error> {
    use sha2::{Digest, Sha256};
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = match SEED.get() {
        Some(seed) => seed,
        None => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| {
                Error::new(
                    ErrorKind::Randomness,
                    format!("could not draw a random seed for owner tokens from the operating system: {e}"),
                )
            })?;
            // A concurrent first call may have won; either seed is as good.
            SEED.get_or_init(|| seed)
        }
    };
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let digest = Sha256::new()
        .chain_update(seed)
        .chain_update(n.to_be_bytes())
        .finalize();
    Ok(hex(&digest[..16]))
}

impl ClaimRequest {
    /// The claim of `record_id` for the request with `fingerprint`, now, by
    /// a fresh owner (its token carrying when `progress` expects the claim
    /// to finish), its lease drawn by `leases` from the invocation's
    /// deadline. The record is kept `expires_after`, and always past its
    /// lease (a record must not expire while its lease still holds it). The
    /// flag says the lease was cut short of the deadline (counted and logged
    /// once here).
    pub(crate) fn start(
        record_id: String,
        fingerprint: String,
        deadline_ms: Option<u64>,
        leases: Leases,
        expires_after: Duration,
        progress: &Progress,
    ) -> Result<(ClaimRequest, bool), Error> {
        let now = now_ms();
        let (lease_end, capped) = leases.end(now, deadline_ms);
        if capped {
            warn_lease_capped();
        }
        let request = ClaimRequest {
            record_id,
            fingerprint,
            owner: owner_with_estimate(owner_token()?, progress.estimate(now)),
            now_ms: now,
            lease_expires_at_ms: lease_end,
            expires_at_s: (now / 1000)
                .saturating_add(expires_after.as_secs())
                .max(lease_end / 1000 + 1),
            origin: None,
        };
        Ok((request, capped))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_outlives_its_lease() {
        let leases = Leases {
            max_lease: Duration::from_secs(600),
            margin: Duration::ZERO,
        };
        let (request, capped) = ClaimRequest::start(
            "r".into(),
            "f".into(),
            None,
            leases,
            Duration::from_secs(1),
            &Progress::default(),
        )
        .unwrap();
        assert!(!capped);
        assert!(request.expires_at_s * 1000 > request.lease_expires_at_ms);
        assert_eq!(request.lease_expires_at_ms, request.now_ms + 600_000);
    }

    #[test]
    fn owner_tokens_are_distinct_128_bit_hex() {
        let tokens: std::collections::HashSet<String> =
            (0..1000).map(|_| owner_token().unwrap()).collect();
        assert_eq!(tokens.len(), 1000);
        assert!(tokens
            .iter()
            .all(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
