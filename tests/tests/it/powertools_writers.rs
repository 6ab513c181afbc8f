//! Records written by the real Powertools for AWS Lambda idempotency
//! utilities, Python and TypeScript, under each key expression the cut-over
//! tests read: tests/powertools/write_expressions.py and
//! tests/powertools/typescript/write_expressions.mjs (their docs give the
//! cases and what they print).

/// The Powertools whose records a test reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// Powertools for AWS Lambda (Python), run by the Python of
    /// `IDEMPOTENCY_TEST_POWERTOOLS_PYTHON`.
    Python,
    /// Powertools for AWS Lambda (TypeScript), loaded from the node_modules
    /// folder of `IDEMPOTENCY_TEST_POWERTOOLS_NODE_MODULES`.
    TypeScript,
}

/// A table the writer filled and what it printed: `{"runtime", "version",
/// "cases": {CASE: {"prefix", "expression", "validation", "event", "id"}},
/// "expiration"}`.
pub struct Written {
    pub table: String,
    pub printed: serde_json::Value,
}

/// Runs the writer of `runtime` against DynamoDB Local
/// (AWS_ENDPOINT_URL_DYNAMODB, set by scripts/dynamodb-local.sh), which
/// creates a fresh table named `integration_tests::unique_name(name)` and
/// writes one record per case in it.
pub async fn powertools_wrote_expressions(runtime: Runtime, name: &str) -> Written {
    let table = integration_tests::unique_name(name);
    let mut command = match runtime {
        Runtime::Python => {
            let python = std::env::var("IDEMPOTENCY_TEST_POWERTOOLS_PYTHON").unwrap_or_else(|_| {
                panic!(
                    "IDEMPOTENCY_TEST_POWERTOOLS_PYTHON is not set: this test reads records \
                     written by Powertools for AWS Lambda (Python). Run it with `make test`, or \
                     set it to the Python of .tools/bench-venv (scripts/bench-venv.sh installs it)."
                )
            });
            let mut command = tokio::process::Command::new(python);
            command.arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/powertools/write_expressions.py"
            ));
            command
        }
        Runtime::TypeScript => {
            let modules =
                std::env::var("IDEMPOTENCY_TEST_POWERTOOLS_NODE_MODULES").unwrap_or_else(|_| {
                    panic!(
                        "IDEMPOTENCY_TEST_POWERTOOLS_NODE_MODULES is not set: this test reads \
                         records written by Powertools for AWS Lambda (TypeScript). Run it with \
                         `make test`, or set it to .tools/powertools-node/node_modules \
                         (scripts/powertools-node.sh installs it and exports it as \
                         $powertools_node_modules)."
                    )
                });
            let mut command = tokio::process::Command::new("node");
            command
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/powertools/typescript/write_expressions.mjs"
                ))
                // ESM ignores NODE_PATH: the script loads its packages from here.
                .env("POWERTOOLS_NODE_MODULES", modules)
                // The AWS SDK's notice that it will need a newer Node one day.
                .env("AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED", "true");
            command
        }
    };
    let out = command
        .arg(&table)
        .output()
        .await
        .unwrap_or_else(|e| panic!("run the {runtime:?} writer ({command:?}): {e}"));
    assert!(
        out.status.success(),
        "Powertools ({runtime:?}) did not write its records: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the {runtime:?} writer prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    Written { table, printed }
}
