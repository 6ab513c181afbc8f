//! [`PgWrite`]: a handler's own SQL write, committed with the completion.

use tokio_postgres::types::{ToSql, Type};

/// One SQL statement a handler hands to its completion
/// ([`IdempotencyContext::defer_write`](crate::IdempotencyContext::defer_write)):
/// a [`PostgresStore`](crate::PostgresStore) runs it in the transaction of
/// the fenced completion, so the row it writes and the stored response commit
/// together or not at all.
///
/// Parameters are owned and typed (`$1`, `$2`, ... in order of
/// [`bind`](Self::bind)): the statement is sent with its types in one round
/// trip as an unnamed statement, never a named prepared one, so it works
/// through a transaction-pooling proxy (RDS Proxy, PgBouncer).
///
/// ```
/// use lambda_idempotency::store::postgres::{PgType, PgWrite};
///
/// let write = PgWrite::new("INSERT INTO orders (id, total_cents) VALUES ($1, $2)")
///     .bind("o-42".to_owned(), PgType::TEXT)
///     .bind(1250_i64, PgType::INT8);
/// assert_eq!(write.params(), 2);
///
/// // A conditional write: the completion is cancelled (nothing commits, the
/// // key is released) unless it changes a row.
/// let debit = PgWrite::new("UPDATE stock SET left = left - 1 WHERE sku = $1 AND left > 0")
///     .bind("sku-1".to_owned(), PgType::TEXT)
///     .require_rows(1);
/// # let _ = debit;
/// ```
pub struct PgWrite {
    pub(super) sql: String,
    pub(super) params: Vec<(Box<dyn ToSql + Send + Sync>, Type)>,
    pub(super) min_rows: u64,
}

impl PgWrite {
    /// The statement `sql`, with no parameters yet.
    pub fn new(sql: impl Into<String>) -> Self {
        PgWrite {
            sql: sql.into(),
            params: Vec::new(),
            min_rows: 0,
        }
    }

    /// The next parameter (`$1` first) and its PostgreSQL type.
    pub fn bind<T: ToSql + Send + Sync + 'static>(mut self, value: T, ty: Type) -> Self {
        self.params.push((Box::new(value), ty));
        self
    }

    /// Cancel the whole completion (nothing commits, the key is released:
    /// [`ErrorKind::TransactionCancelled`](crate::ErrorKind::TransactionCancelled))
    /// when the statement changes fewer than `rows` rows: a condition, like
    /// DynamoDB's condition expressions in a transaction.
    pub fn require_rows(mut self, rows: u64) -> Self {
        self.min_rows = rows;
        self
    }

    /// The statement's text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// How many parameters are bound.
    pub fn params(&self) -> usize {
        self.params.len()
    }
}

impl std::fmt::Debug for PgWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Parameter values may be personal data: only their types are shown.
        f.debug_struct("PgWrite")
            .field("sql", &self.sql)
            .field(
                "param_types",
                &self
                    .params
                    .iter()
                    .map(|(_, t)| t.name())
                    .collect::<Vec<_>>(),
            )
            .field("min_rows", &self.min_rows)
            .finish()
    }
}
