//! The definition: every variable's name, what it holds, its default and
//! what it sets ([`VARIABLES`]), from which the parsers read and the docs'
//! table is generated.

/// What a variable holds, and so how it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Text, taken as written (spaces around it dropped).
    Text,
    /// A DynamoDB table name: 3 to 255 letters, digits, `_`, `-` and `.`.
    TableName,
    /// `true` or `false` (`1` or `0`), in any case.
    Boolean,
    /// A whole number from `min` to `max` (no upper bound when `max` is
    /// `u64::MAX`), in `unit`.
    Number {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
        /// What the number counts (`seconds`, `milliseconds`, `replicas`).
        unit: &'static str,
    },
    /// An RFC 3339 time such as `2026-12-01T00:00:00Z`.
    Time,
}

impl Kind {
    /// What the variable must hold, as the docs and the errors say it.
    pub fn describe(&self) -> String {
        match self {
            Kind::Text => "text".to_owned(),
            Kind::TableName => "a DynamoDB table name".to_owned(),
            Kind::Boolean => "a boolean (true or false)".to_owned(),
            Kind::Number { min, max, unit } if *max == u64::MAX => {
                format!("a whole number of {unit} of at least {min}")
            }
            Kind::Number { min, max, unit } => {
                format!("a whole number of {unit} from {min} to {max}")
            }
            Kind::Time => "an RFC 3339 time".to_owned(),
        }
    }
}

/// One environment variable: its name, what it holds, its default and what
/// it sets. [`VARIABLES`] lists them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Variable {
    /// The variable's name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// What applies when it is unset or empty.
    pub default: &'static str,
    /// What it sets.
    pub what: &'static str,
    /// Who reads it: the library's `from_env`s, a function, the CLI.
    pub read_by: &'static str,
}

/// `IDEMPOTENCY_TABLE`: the DynamoDB table of the idempotency records.
pub const TABLE_ENV: &str = "IDEMPOTENCY_TABLE";
/// `IDEMPOTENCY_DISABLED`: turns idempotency off, for local tests.
pub const DISABLED_ENV: &str = "IDEMPOTENCY_DISABLED";
/// The off switch's former name, still read (a warning says to rename it)
/// when [`DISABLED_ENV`] is unset.
pub const LEGACY_DISABLED_ENV: &str = "LAMBDA_IDEMPOTENCY_DISABLED";
/// `IDEMPOTENCY_EXPIRES_AFTER_SECONDS`: how long a completed record replays.
pub const EXPIRES_AFTER_ENV: &str = "IDEMPOTENCY_EXPIRES_AFTER_SECONDS";
/// `IDEMPOTENCY_MAX_LEASE_SECONDS`: the longest lease.
pub const MAX_LEASE_ENV: &str = "IDEMPOTENCY_MAX_LEASE_SECONDS";
/// How often the sweeper's full pass of the table, the stream's backstop,
/// starts (seconds; `0`: only when the stream shows a gap).
pub const SWEEP_FULL_PASS_ENV: &str = "IDEMPOTENCY_SWEEP_FULL_PASS_SECONDS";
/// The longest full-pass period accepted: a week.
pub const MAX_SWEEP_FULL_PASS_SECONDS: u64 = 7 * 24 * 3600;
/// `IDEMPOTENCY_WAIT_FOR_RESULT_MS`: how long a duplicate waits for the
/// outcome of the request in progress.
pub const WAIT_FOR_RESULT_ENV: &str = "IDEMPOTENCY_WAIT_FOR_RESULT_MS";
/// `IDEMPOTENCY_STORE_TIMEOUT_MS`: how long a store call may wait on the
/// store before the request is answered 503.
pub const STORE_TIMEOUT_ENV: &str = "IDEMPOTENCY_STORE_TIMEOUT_MS";
/// [`STORE_TIMEOUT_ENV`] when unset: 450 ms (docs/DESIGN.md, "Failing fast").
pub const DEFAULT_STORE_TIMEOUT_MS: u64 = 450;
/// The longest store call limit: Lambda's longest timeout.
pub const MAX_STORE_TIMEOUT_MS: u64 = 900_000;
/// `IDEMPOTENCY_METRICS_NAMESPACE`: the CloudWatch namespace of the metrics.
pub const METRICS_NAMESPACE_ENV: &str = "IDEMPOTENCY_METRICS_NAMESPACE";
/// `IDEMPOTENCY_METRICS_STACK`: the deployment every metric line names.
pub const METRICS_STACK_ENV: &str = "IDEMPOTENCY_METRICS_STACK";
/// `IDEMPOTENCY_WARM_UP`: open the store's connection during init.
pub const WARM_UP_ENV: &str = "IDEMPOTENCY_WARM_UP";
/// `IDEMPOTENCY_ALLOW_ANONYMOUS`: requests without a caller share one scope.
pub const ALLOW_ANONYMOUS_ENV: &str = "IDEMPOTENCY_ALLOW_ANONYMOUS";
/// `IDEMPOTENCY_OFFLOAD_BUCKET`: the S3 bucket of outputs too large for the
/// store.
pub const OFFLOAD_BUCKET_ENV: &str = "IDEMPOTENCY_OFFLOAD_BUCKET";
/// `IDEMPOTENCY_OFFLOAD_PREFIX`: the prefix of the offloaded objects.
pub const OFFLOAD_PREFIX_ENV: &str = "IDEMPOTENCY_OFFLOAD_PREFIX";
/// `IDEMPOTENCY_POWERTOOLS_TABLE`: the table Powertools kept its records in.
pub const POWERTOOLS_TABLE_ENV: &str = "IDEMPOTENCY_POWERTOOLS_TABLE";
/// `IDEMPOTENCY_POWERTOOLS_KEY_PREFIX`: the part before `#` of Powertools'
/// record ids.
pub const POWERTOOLS_KEY_PREFIX_ENV: &str = "IDEMPOTENCY_POWERTOOLS_KEY_PREFIX";
/// `IDEMPOTENCY_POWERTOOLS_UNTIL`: when the cut-over from Powertools ends.
pub const POWERTOOLS_UNTIL_ENV: &str = "IDEMPOTENCY_POWERTOOLS_UNTIL";
/// `IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH`: the `event_key_jmespath`
/// Powertools was configured with.
pub const POWERTOOLS_KEY_JMESPATH_ENV: &str = "IDEMPOTENCY_POWERTOOLS_KEY_JMESPATH";
/// `IDEMPOTENCY_POWERTOOLS_VALIDATION_JMESPATH`: its
/// `payload_validation_jmespath`.
pub const POWERTOOLS_VALIDATION_JMESPATH_ENV: &str = "IDEMPOTENCY_POWERTOOLS_VALIDATION_JMESPATH";
/// `IDEMPOTENCY_POWERTOOLS_SHARED_KEYS`: Powertools' keys were shared
/// across tenants.
pub const POWERTOOLS_SHARED_KEYS_ENV: &str = "IDEMPOTENCY_POWERTOOLS_SHARED_KEYS";
/// `IDEMPOTENCY_POWERTOOLS_RUNTIME`: `python` or `typescript`.
pub const POWERTOOLS_RUNTIME_ENV: &str = "IDEMPOTENCY_POWERTOOLS_RUNTIME";
/// `IDEMPOTENCY_POWERTOOLS_MAX_TIMEOUT_SECONDS`: the longest timeout of the
/// functions that wrote with Powertools.
pub const POWERTOOLS_MAX_TIMEOUT_ENV: &str = "IDEMPOTENCY_POWERTOOLS_MAX_TIMEOUT_SECONDS";
/// `IDEMPOTENCY_STORE_URL`: the records in Redis, Valkey or PostgreSQL.
pub const STORE_URL_ENV: &str = "IDEMPOTENCY_STORE_URL";
/// `IDEMPOTENCY_REDIS_CLUSTER`: the Redis URL names a cluster.
pub const REDIS_CLUSTER_ENV: &str = "IDEMPOTENCY_REDIS_CLUSTER";
/// `IDEMPOTENCY_CREATE_SCHEMA`: create the PostgreSQL table when missing.
pub const CREATE_SCHEMA_ENV: &str = "IDEMPOTENCY_CREATE_SCHEMA";
/// `IDEMPOTENCY_STORE_SECRET_ARN`: the secret holding the PostgreSQL
/// password.
pub const SECRET_ARN_ENV: &str = "IDEMPOTENCY_STORE_SECRET_ARN";
/// `IDEMPOTENCY_REDIS_WAIT_REPLICAS`: how many Redis replicas must hold
/// each write.
pub const REDIS_WAIT_REPLICAS_ENV: &str = "IDEMPOTENCY_REDIS_WAIT_REPLICAS";
/// `IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS`: how long a write waits for them.
pub const REDIS_WAIT_TIMEOUT_MS_ENV: &str = "IDEMPOTENCY_REDIS_WAIT_TIMEOUT_MS";

/// The longest record life: 365 days. Longer is a typo (a value in
/// milliseconds, an extra digit), and near `u64::MAX` the expiry would not
/// even be a time.
pub const MAX_EXPIRES_AFTER_SECONDS: u64 = 365 * 24 * 3600;
/// The longest lease: a day.
pub const MAX_LEASE_SECONDS: u64 = 24 * 3600;
/// The longest wait for a result: Lambda's longest timeout.
pub const MAX_WAIT_FOR_RESULT_MS: u64 = 900_000;
/// The Redis replica wait when [`REDIS_WAIT_TIMEOUT_MS_ENV`] is unset: a few
/// hundred milliseconds, as docs/engines.md advises for ElastiCache.
pub const DEFAULT_REDIS_WAIT_TIMEOUT_MS: u64 = 300;
/// The longest replica wait: under 2 s, so that a store waiting for
/// replicas still answers a request within seconds (its response timeout
/// is the wait plus 450 ms, `RedisStoreBuilder::response_timeout`).
pub const MAX_REDIS_WAIT_TIMEOUT_MS: u64 = 1999;

const LIBRARY: &str = "every `from_env`";
const FUNCTIONS: &str = "the example functions";

/// Every variable, in the order of the generated table.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: TABLE_ENV,
        kind: Kind::Text,
        default: "none: required on DynamoDB",
        what: "the DynamoDB table of the idempotency records (`DynamoStore::from_env`)",
        read_by: "`DynamoStore::from_env`, the example functions, the CLI (`--table`)",
    },
    Variable {
        name: DISABLED_ENV,
        kind: Kind::Boolean,
        default: "false",
        what: "turns idempotency off for local tests: every request runs its handler (a \
               warning is logged once); `LAMBDA_IDEMPOTENCY_DISABLED`, its former name, is \
               still read when it is unset",
        read_by: LIBRARY,
    },
    Variable {
        name: EXPIRES_AFTER_ENV,
        kind: Kind::Number {
            min: 1,
            max: MAX_EXPIRES_AFTER_SECONDS,
            unit: "seconds",
        },
        default: "86400 (24 hours)",
        what: "how long a completed record replays: at least your clients' retry window \
               (for a queue, its message retention)",
        read_by: LIBRARY,
    },
    Variable {
        name: MAX_LEASE_ENV,
        kind: Kind::Number {
            min: 1,
            max: MAX_LEASE_SECONDS,
            unit: "seconds",
        },
        default: "900 (Lambda's longest timeout)",
        what: "the longest lease, above the function's timeout; the sweeper reads it to \
               check its stream's retention",
        read_by: "every `from_env`, the sweeper",
    },
    Variable {
        name: SWEEP_FULL_PASS_ENV,
        kind: Kind::Number {
            min: 0,
            max: MAX_SWEEP_FULL_PASS_SECONDS,
            unit: "seconds",
        },
        default: "3600 (an hour)",
        what: "how often the sweeper's full pass of the table starts, the backstop of the \
               stream's listing: a stuck record is found within lease + grace + this + the \
               pass's own duration whatever the stream does; it reads the whole table once \
               per period (docs/SCALING.md); `0` starts one only when the stream shows a gap",
        read_by: "the sweeper, the CLI",
    },
    Variable {
        name: WAIT_FOR_RESULT_ENV,
        kind: Kind::Number {
            min: 0,
            max: MAX_WAIT_FOR_RESULT_MS,
            unit: "milliseconds",
        },
        default: "0: a duplicate answers at once (409)",
        what: "how long a duplicate that finds its request in progress waits for that \
               request's outcome",
        read_by: LIBRARY,
    },
    Variable {
        name: STORE_TIMEOUT_ENV,
        kind: Kind::Number {
            min: 1,
            max: MAX_STORE_TIMEOUT_MS,
            unit: "milliseconds",
        },
        default: "450",
        what: "how long one store call may wait on a store that does not answer before the \
               request is answered 503 (DynamoDB: the call, retries included, each attempt \
               5/9 of it; Redis: each command, connecting 4/9 of it; PostgreSQL: a new \
               connection); raise it for a slow store, such as a local emulator",
        read_by: "the stores' builders (`DynamoStore`, `RedisStore`, `PostgresStore`), so \
                  every `from_env` and the example functions",
    },
    Variable {
        name: METRICS_NAMESPACE_ENV,
        kind: Kind::Text,
        default: "no metrics",
        what: "the CloudWatch namespace of the EMF metrics (claims, replays, conflicts, ...)",
        read_by: LIBRARY,
    },
    Variable {
        name: METRICS_STACK_ENV,
        kind: Kind::Text,
        default: "no `Stack` dimension",
        what: "the value of the `Stack` dimension every EMF line carries (the templates set \
               the stack's name)",
        read_by: "every EMF line",
    },
    Variable {
        name: WARM_UP_ENV,
        kind: Kind::Boolean,
        default: "true",
        what: "open the store's connection during init, so the first request does not pay \
               for it",
        read_by: "orders-api",
    },
    Variable {
        name: ALLOW_ANONYMOUS_ENV,
        kind: Kind::Boolean,
        default: "false: a request without a JWT `sub` is refused (401)",
        what: "requests without a caller identity share one anonymous scope (an API without \
               an authorizer)",
        read_by: "orders-api",
    },
    Variable {
        name: OFFLOAD_BUCKET_ENV,
        kind: Kind::Text,
        default: "none: an output too large for the store completes with the too-large \
                  problem",
        what: "the S3 bucket that keeps outputs too large for the store (`S3Offload`)",
        read_by: FUNCTIONS,
    },
    Variable {
        name: OFFLOAD_PREFIX_ENV,
        kind: Kind::Text,
        default: "the function's name and `/`",
        what: "the prefix of the offloaded objects (the function's IAM policy and the \
               bucket's lifecycle rule are scoped to it)",
        read_by: FUNCTIONS,
    },
    Variable {
        name: POWERTOOLS_TABLE_ENV,
        kind: Kind::TableName,
        default: "no cut-over",
        what: "the DynamoDB table Powertools kept its records in: turns on the cut-over \
               (docs/powertools.md); needs the next two",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_KEY_PREFIX_ENV,
        kind: Kind::Text,
        default: "none: required with the table",
        what: "the part before `#` of Powertools' record ids, such as \
               `orders-api.app.lambda_handler`",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_UNTIL_ENV,
        kind: Kind::Time,
        default: "none: required with the table",
        what: "the switch plus Powertools' `expires_after_seconds`; records are read until \
               then plus the next variable plus 1 s",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_MAX_TIMEOUT_ENV,
        kind: Kind::Number {
            min: 1,
            max: 900,
            unit: "seconds",
        },
        default: "900",
        what: "the longest timeout of the functions that ran with Powertools: a call in \
               flight at the switch saves its record up to that much later",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_RUNTIME_ENV,
        kind: Kind::Text,
        default: "`python`",
        what: "which Powertools wrote the records: `python` (2.x, 3.x) or `typescript` \
               (`@aws-lambda-powertools/idempotency` 2.x)",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_KEY_JMESPATH_ENV,
        kind: Kind::Text,
        default: "the `Idempotency-Key` header's text",
        what: "the `event_key_jmespath` Powertools used, evaluated on the API Gateway event \
               with Powertools' functions (`powertools_json(body).order_id`)",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_VALIDATION_JMESPATH_ENV,
        kind: Kind::Text,
        default: "no validation",
        what: "the `payload_validation_jmespath` Powertools used: a request whose payload \
               differs from the record's answers `422`",
        read_by: "orders-api",
    },
    Variable {
        name: POWERTOOLS_SHARED_KEYS_ENV,
        kind: Kind::Boolean,
        default: "`false`",
        what: "Powertools' keys were shared across tenants: replay its records to any tenant \
               (without it, a key expression that does not name the tenant refuses to start)",
        read_by: "orders-api",
    },
    Variable {
        name: STORE_URL_ENV,
        kind: Kind::Text,
        default: "DynamoDB (`IDEMPOTENCY_TABLE`)",
        what: "the records in Redis or Valkey (`redis://`, `rediss://`) or PostgreSQL \
               (`postgres://`), honoured as written",
        read_by: "the example functions, the CLI (`--store-url`)",
    },
    Variable {
        name: REDIS_CLUSTER_ENV,
        kind: Kind::Boolean,
        default: "false",
        what: "the Redis URL names a cluster (ElastiCache Serverless, MemoryDB)",
        read_by: "the example functions, the CLI (`--redis-cluster`)",
    },
    Variable {
        name: CREATE_SCHEMA_ENV,
        kind: Kind::Boolean,
        default: "false: a missing table fails the start",
        what: "create the PostgreSQL table when it is missing (safe when many cold starts do \
               it at once)",
        read_by: FUNCTIONS,
    },
    Variable {
        name: SECRET_ARN_ENV,
        kind: Kind::Text,
        default: "the password in the URL, if any",
        what: "a Secrets Manager secret whose JSON `password` field is the PostgreSQL \
               password, read once at start",
        read_by: FUNCTIONS,
    },
    Variable {
        name: REDIS_WAIT_REPLICAS_ENV,
        kind: Kind::Number {
            min: 1,
            max: u64::MAX,
            unit: "replicas",
        },
        default: "a write counts once the primary has it",
        what: "how many replicas of one Redis primary must hold a claim, a recovery point or \
               a completion before it counts (not with a cluster)",
        read_by: FUNCTIONS,
    },
    Variable {
        name: REDIS_WAIT_TIMEOUT_MS_ENV,
        kind: Kind::Number {
            min: 1,
            max: MAX_REDIS_WAIT_TIMEOUT_MS,
            unit: "milliseconds",
        },
        default: "300",
        what: "how long a write waits for those replicas (only with \
               `IDEMPOTENCY_REDIS_WAIT_REPLICAS`)",
        read_by: FUNCTIONS,
    },
];

/// The entry of `name` in [`VARIABLES`].
///
/// # Panics
///
/// When `name` has none: a mistake in this module, caught by its tests.
pub fn variable(name: &str) -> &'static Variable {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("{name} is not in settings::VARIABLES"))
}

/// The Markdown table of [`VARIABLES`], as `docs/configuration.md` holds it.
pub fn markdown_table() -> String {
    let mut table = String::from(
        "| variable | holds | unset or empty | what it sets | read by |\n|---|---|---|---|---|\n",
    );
    for v in VARIABLES {
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            v.name,
            v.kind.describe(),
            v.default,
            v.what,
            v.read_by
        ));
    }
    table
}
