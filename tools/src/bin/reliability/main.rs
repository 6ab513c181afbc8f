//! The reliability run behind `make reliability`: "at most one execution per
//! key, and nothing lost", under load, crashes and store faults, against real
//! DynamoDB Local. Writes RELIABILITY.md and exits non-zero on any violation.
//!
//!   reliability full|ci ORDERS_API_BIN OUT_MD PROPERTY_LOG
//!
//! 1. storm: duplicate requests over few keys through the Lambda Runtime API to
//!    several `orders-api` processes;
//! 2. crash: SIGKILL `orders-api` processes mid-handler, clients retry after the
//!    lease (some never do; the sweeper resolves theirs);
//! 3. faults: the middleware on DynamoDB Local behind a proxy injecting
//!    throttling, 500s, delays past the SDK timeout and dropped responses;
//! 4. and 5. the property tests (fuzzing, model check) are run by
//!    scripts/reliability.sh just before; their tallies, from PROPERTY_LOG,
//!    are reported here.
//!
//! One file per phase (`storm.rs`, `crash.rs`, `faults.rs`), the property
//! tallies (`properties.rs`) and the Markdown report (`report.rs`); what the
//! clients of every phase send and read back is in `client.rs`.

mod client;
mod crash;
mod faults;
mod properties;
mod report;
mod storm;

use std::sync::Mutex;

use crash::crash;
use faults::faults;
use properties::Properties;
use report::render;
use storm::storm;

type Result<T> = std::result::Result<T, String>;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Size {
    pub(crate) name: &'static str,
    pub(crate) storm_requests: usize,
    pub(crate) storm_keys: usize,
    pub(crate) crash_keys: usize,
    pub(crate) crash_target: u64,
    pub(crate) fault_keys: usize,
    pub(crate) fault_seconds: u64,
}

const FULL: Size = Size {
    name: "full",
    storm_requests: 10_000,
    storm_keys: 1_000,
    crash_keys: 400,
    crash_target: 100,
    fault_keys: 300,
    fault_seconds: 20,
};
const CI: Size = Size {
    name: "ci",
    storm_requests: 1_500,
    storm_keys: 150,
    crash_keys: 60,
    crash_target: 10,
    fault_keys: 60,
    fault_seconds: 5,
};

/// Invariant violations, collected rather than fatal so the report shows all.
#[derive(Default)]
pub(crate) struct Violations(Mutex<Vec<String>>);

impl Violations {
    pub(crate) fn add(&self, what: impl Into<String>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(what.into());
        }
    }
    fn list(&self) -> Vec<String> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

fn main() {
    const USAGE: &str = "usage: reliability full|ci ORDERS_API_BIN OUT_MD PROPERTY_LOG";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = match args.first().map(String::as_str) {
        Some("full") => FULL,
        Some("ci") => CI,
        _ => fail(USAGE.into()),
    };
    let (Some(bin), Some(out), Some(log)) = (args.get(1), args.get(2), args.get(3)) else {
        fail(USAGE.into())
    };
    let properties = Properties::read(log).unwrap_or_else(|e| fail(e));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(e.to_string()));
    let violations = Violations::default();
    let report = runtime.block_on(async {
        let storm = storm(bin, size, &violations).await?;
        eprintln!("reliability: storm done");
        let crash = crash(bin, size, &violations).await?;
        eprintln!("reliability: crash injection done");
        let faults = faults(size, &violations).await?;
        eprintln!("reliability: fault injection done");
        Ok::<_, String>(render(
            size,
            &storm,
            &crash,
            &faults,
            &properties,
            &violations.list(),
        ))
    });
    let report = report.unwrap_or_else(|e| fail(e));
    if let Err(e) = std::fs::write(out, &report) {
        fail(format!("write {out}: {e}"));
    }
    println!("{report}");
    let found = violations.list();
    if !found.is_empty() {
        fail(format!("{} invariant violation(s); see {out}", found.len()));
    }
}

fn fail(message: String) -> ! {
    eprintln!("reliability: {message}");
    std::process::exit(1)
}
