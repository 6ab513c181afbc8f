//! How records are rows: the one place that turns a [`Record`] and its
//! parts into columns and statement parameters, and back.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::to_i64;
use crate::error::Error;
use crate::record::{decode_body, Checkpoint, Record, Status, StoredBody, StoredResponse};
use crate::store::rules::{self, Fitted};

/// Every column of a record, as the decoder reads them.
pub(super) const COLUMNS: &str =
    "id, status, fingerprint, attempt, owner, lease_expires_at, expires_at, \
     response_status, response_header_names, response_header_values, response_body, \
     response_body_kind, response_encoding, checkpoint::text AS checkpoint";

/// A response as the completion writes it: `$4`..`$10` of the completion
/// statement (`HotSql::complete`).
pub(super) struct ResponseParams {
    expires_at: i64,
    status: i32,
    header_names: Vec<String>,
    header_values: Vec<Vec<u8>>,
    body: Option<Vec<u8>>,
    kind: &'static str,
    encoding: Option<&'static str>,
}

impl ResponseParams {
    pub(super) fn new(fitted: &Fitted<'_>, expires_at_s: u64) -> Self {
        let response = &fitted.response;
        ResponseParams {
            expires_at: to_i64(expires_at_s),
            status: i32::from(response.status),
            header_names: response.headers.iter().map(|(n, _)| n.clone()).collect(),
            header_values: response.headers.iter().map(|(_, v)| v.clone()).collect(),
            body: (!fitted.body.is_empty()).then(|| fitted.body.to_vec()),
            kind: response.body.kind(),
            encoding: fitted.gzip.then_some("gzip"),
        }
    }

    /// The response's parameters, in the order the completion statement
    /// numbers them (`$4`..`$10` there).
    pub(super) fn params(&self) -> [(&(dyn ToSql + Sync), Type); 7] {
        [
            (&self.expires_at, Type::INT8),
            (&self.status, Type::INT4),
            (&self.header_names, Type::TEXT_ARRAY),
            (&self.header_values, Type::BYTEA_ARRAY),
            (&self.body, Type::BYTEA),
            (&self.kind, Type::TEXT),
            (&self.encoding, Type::TEXT),
        ]
    }
}

/// A record this engine cannot read back (see [`rules::corrupt`]).
pub(super) fn corrupt(record_id: &str, what: &str) -> Error {
    rules::corrupt("row", record_id, what)
}

pub(super) fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    id: &str,
    name: &str,
) -> Result<T, Error> {
    row.try_get(name)
        .map_err(|err| corrupt(id, &format!("column {name}: {err}")))
}

/// Column `name` of the record `id`'s row, a count or a time stored as
/// `BIGINT`, which must not be negative.
pub(super) fn unsigned_column(row: &Row, id: &str, name: &str) -> Result<u64, Error> {
    let value: i64 = column(row, id, name)?;
    u64::try_from(value).map_err(|_| corrupt(id, &format!("{name} is negative")))
}

/// A row of [`COLUMNS`] as a record.
pub(super) fn decode(row: &Row) -> Result<Record, Error> {
    let id: String = column(row, "(unknown)", "id")?;
    let status: String = column(row, &id, "status")?;
    let status = Status::parse(&status)
        .ok_or_else(|| corrupt(&id, &format!("unknown status `{status}`")))?;
    let response = match column::<Option<i32>>(row, &id, "response_status")? {
        None if status == Status::Completed => {
            return Err(corrupt(&id, "completed without a response"))
        }
        None => None,
        Some(code) => {
            let code = u16::try_from(code)
                .map_err(|_| corrupt(&id, &format!("response status {code}")))?;
            let names: Vec<String> =
                column::<Option<_>>(row, &id, "response_header_names")?.unwrap_or_default();
            let values: Vec<Vec<u8>> =
                column::<Option<_>>(row, &id, "response_header_values")?.unwrap_or_default();
            if names.len() != values.len() {
                return Err(corrupt(&id, "header names and values differ in number"));
            }
            let bytes: Vec<u8> =
                column::<Option<_>>(row, &id, "response_body")?.unwrap_or_default();
            let gzip = match column::<Option<String>>(row, &id, "response_encoding")?.as_deref() {
                None => false,
                Some("gzip") => true,
                Some(other) => return Err(corrupt(&id, &format!("unknown encoding `{other}`"))),
            };
            let bytes =
                decode_body(bytes, gzip).ok_or_else(|| corrupt(&id, "the body does not decode"))?;
            let kind: Option<String> = column(row, &id, "response_body_kind")?;
            let body = StoredBody::from_parts(kind.as_deref().unwrap_or("empty"), bytes)
                .ok_or_else(|| corrupt(&id, "unknown body kind or a text body not UTF-8"))?;
            Some(StoredResponse::new(
                code,
                names.into_iter().zip(values).collect(),
                body,
            ))
        }
    };
    let checkpoint = match column::<Option<String>>(row, &id, "checkpoint")? {
        None => None,
        Some(text) => {
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|err| corrupt(&id, &format!("checkpoint: {err}")))?;
            match (value["name"].as_str(), value["attempt"].as_u64()) {
                (Some(name), Some(attempt)) => Some(Checkpoint {
                    name: name.to_owned(),
                    data: value["data"].clone(),
                    attempt,
                }),
                _ => return Err(corrupt(&id, "checkpoint lacks its name or attempt")),
            }
        }
    };
    Ok(Record {
        status,
        fingerprint: column(row, &id, "fingerprint")?,
        attempt: unsigned_column(row, &id, "attempt")?,
        owner: column(row, &id, "owner")?,
        lease_expires_at_ms: unsigned_column(row, &id, "lease_expires_at")?,
        expires_at_s: unsigned_column(row, &id, "expires_at")?,
        response,
        checkpoint,
        id,
    })
}
