//! [`TableLayout`]: how records sit in a table the crate did not create —
//! every attribute name, the key (a partition key alone, or a composite key
//! for single-table designs) and the sweep index.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::schema;
use crate::error::{Error, ErrorKind};

/// The value of one key attribute of a record's item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    /// The record id after `prefix` (`""`: the record id itself). Prefixes
    /// keep records apart from other items in a shared table.
    RecordId {
        /// Text before the record id (`"IDEMPOTENCY#"`).
        prefix: String,
    },
    /// The same value for every record (a static partition value): all
    /// records share one partition, which a Query reads (the other key then
    /// holds the record id).
    Static(String),
}

impl KeyValue {
    /// The record id itself.
    pub fn record_id() -> Self {
        KeyValue::RecordId {
            prefix: String::new(),
        }
    }

    /// The record id after `prefix`.
    pub fn prefixed(prefix: impl Into<String>) -> Self {
        KeyValue::RecordId {
            prefix: prefix.into(),
        }
    }

    /// The same `value` for every record.
    pub fn fixed(value: impl Into<String>) -> Self {
        KeyValue::Static(value.into())
    }

    fn of(&self, record_id: &str) -> String {
        match self {
            KeyValue::RecordId { prefix } => format!("{prefix}{record_id}"),
            KeyValue::Static(value) => value.clone(),
        }
    }
}

/// How records sit in their DynamoDB table: every attribute name, the key,
/// and the sweep index. [`TableLayout::default`] is the layout of the
/// template's table (names in [`schema`](crate::store::dynamodb::schema)), so a store without
/// a layout reads and writes exactly what it always did. Give a store
/// another one with [`DynamoStoreBuilder::with_layout`](crate::store::dynamodb::DynamoStoreBuilder::with_layout)
/// to adopt an existing table, a single-table design included; every writer
/// of the table and the sweeper must use the same layout.
///
/// ```
/// use lambda_idempotency::store::dynamodb::{KeyValue, TableLayout};
///
/// // One partition, the record id in the sort key: pk = "idempotency", sk = record id.
/// let layout = TableLayout::default()
///     .partition_key("pk", KeyValue::fixed("idempotency"))
///     .sort_key("sk", KeyValue::record_id())
///     .status_attr("state")
///     .expiry_attr("ttl")
///     .data_attr("data")
///     .validation_attr("validation")
///     .in_progress_expiry_attr("in_progress_expiry");
/// assert!(layout.validate().is_ok());
///
/// // A record id under a prefix in the partition key, and a fixed sort key.
/// let layout = TableLayout::default()
///     .partition_key("PK", KeyValue::prefixed("IDEMPOTENCY#"))
///     .sort_key("SK", KeyValue::fixed("RECORD"));
/// assert!(layout.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLayout {
    pub(super) partition: (String, KeyValue),
    pub(super) sort: Option<(String, KeyValue)>,
    pub(super) status: String,
    pub(super) fingerprint: String,
    pub(super) attempt: String,
    pub(super) owner: String,
    pub(super) lease_expires_at: String,
    pub(super) expires_at: String,
    pub(super) response_status: String,
    pub(super) response_headers: String,
    pub(super) response_body: String,
    pub(super) response_body_kind: String,
    pub(super) response_encoding: String,
    pub(super) checkpoint: String,
    pub(super) sweep_shard: String,
    pub(super) sweep_at: String,
    pub(super) sweep_index: String,
}

impl Default for TableLayout {
    /// The template's table: partition key `id` = record id, every name of
    /// [`schema`](crate::store::dynamodb::schema).
    fn default() -> Self {
        TableLayout {
            partition: (schema::ID.to_owned(), KeyValue::record_id()),
            sort: None,
            status: schema::STATUS.to_owned(),
            fingerprint: schema::FINGERPRINT.to_owned(),
            attempt: schema::ATTEMPT.to_owned(),
            owner: schema::OWNER.to_owned(),
            lease_expires_at: schema::LEASE_EXPIRES_AT.to_owned(),
            expires_at: schema::EXPIRES_AT.to_owned(),
            response_status: schema::RESPONSE_STATUS.to_owned(),
            response_headers: schema::RESPONSE_HEADERS.to_owned(),
            response_body: schema::RESPONSE_BODY.to_owned(),
            response_body_kind: schema::RESPONSE_BODY_KIND.to_owned(),
            response_encoding: schema::RESPONSE_ENCODING.to_owned(),
            checkpoint: schema::CHECKPOINT.to_owned(),
            sweep_shard: schema::SWEEP_SHARD.to_owned(),
            sweep_at: schema::SWEEP_AT.to_owned(),
            sweep_index: schema::SWEEP_INDEX.to_owned(),
        }
    }
}

/// Attribute names of the items that keep the sweeper's place in the stream
/// (besides the key and the expiry), see `stream.rs`.
pub(super) const POSITION_ATTRS: [&str; 5] = [
    "position",
    "iterator",
    "iterator_at",
    "listed_at",
    "started_at",
];

impl TableLayout {
    /// The partition key: its attribute `name` and its value (default: `id`
    /// = the record id).
    pub fn partition_key(mut self, name: impl Into<String>, value: KeyValue) -> Self {
        self.partition = (name.into(), value);
        self
    }

    /// The partition key's attribute name, its value unchanged.
    pub fn key_attr(mut self, name: impl Into<String>) -> Self {
        self.partition.0 = name.into();
        self
    }

    /// A sort key: its attribute `name` and its value. With a
    /// [`KeyValue::Static`] partition, this key holds the record id.
    pub fn sort_key(mut self, name: impl Into<String>, value: KeyValue) -> Self {
        self.sort = Some((name.into(), value));
        self
    }

    /// A sort key under a static partition value: every record in
    /// the partition `partition_value` of the partition key (its name as set
    /// by [`key_attr`](Self::key_attr)), the record id in the sort key `name`.
    pub fn sort_key_attr(
        self,
        name: impl Into<String>,
        partition_value: impl Into<String>,
    ) -> Self {
        let partition_name = self.partition.0.clone();
        self.partition_key(partition_name, KeyValue::fixed(partition_value))
            .sort_key(name, KeyValue::record_id())
    }

    /// `IN_PROGRESS` or `COMPLETED` (S); default `status`.
    pub fn status_attr(mut self, name: impl Into<String>) -> Self {
        self.status = name.into();
        self
    }

    /// The TTL attribute, epoch seconds (N); default `expires_at`. Enable
    /// the table's TTL on it.
    pub fn expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.expires_at = name.into();
        self
    }

    /// The request fingerprint (S), the payload validation hash; default
    /// `fingerprint`.
    pub fn validation_attr(mut self, name: impl Into<String>) -> Self {
        self.fingerprint = name.into();
        self
    }

    /// The lease end, epoch milliseconds (N), the in-progress expiry;
    /// default `lease_expires_at`.
    pub fn in_progress_expiry_attr(mut self, name: impl Into<String>) -> Self {
        self.lease_expires_at = name.into();
        self
    }

    /// The fencing token (N); default `attempt`.
    pub fn attempt_attr(mut self, name: impl Into<String>) -> Self {
        self.attempt = name.into();
        self
    }

    /// The lease holder's owner token (S); default `owner`.
    pub fn owner_attr(mut self, name: impl Into<String>) -> Self {
        self.owner = name.into();
        self
    }

    /// The recovery point (M); default `checkpoint`.
    pub fn checkpoint_attr(mut self, name: impl Into<String>) -> Self {
        self.checkpoint = name.into();
        self
    }

    /// The stored response body (B), the result's data; default
    /// `response_body`. The response's other parts keep their names (see
    /// [`response_attrs`](Self::response_attrs)).
    pub fn data_attr(mut self, name: impl Into<String>) -> Self {
        self.response_body = name.into();
        self
    }

    /// Every attribute of the stored response under `prefix`:
    /// `<prefix>status`, `<prefix>headers`, `<prefix>body`,
    /// `<prefix>body_kind` and `<prefix>encoding` (the default prefix is
    /// `response_`).
    pub fn response_attrs(mut self, prefix: &str) -> Self {
        self.response_status = format!("{prefix}status");
        self.response_headers = format!("{prefix}headers");
        self.response_body = format!("{prefix}body");
        self.response_body_kind = format!("{prefix}body_kind");
        self.response_encoding = format!("{prefix}encoding");
        self
    }

    /// The stored response's status (N); default `response_status`.
    pub fn response_status_attr(mut self, name: impl Into<String>) -> Self {
        self.response_status = name.into();
        self
    }

    /// The stored response's headers (L); default `response_headers`.
    pub fn response_headers_attr(mut self, name: impl Into<String>) -> Self {
        self.response_headers = name.into();
        self
    }

    /// The stored body's kind (S); default `response_body_kind`.
    pub fn response_body_kind_attr(mut self, name: impl Into<String>) -> Self {
        self.response_body_kind = name.into();
        self
    }

    /// The stored body's encoding (S); default `response_encoding`.
    pub fn response_encoding_attr(mut self, name: impl Into<String>) -> Self {
        self.response_encoding = name.into();
        self
    }

    /// The sparse sweep index (opted into with
    /// [`DynamoStoreBuilder::with_sweep_index`](crate::store::dynamodb::DynamoStoreBuilder::with_sweep_index)):
    /// its name and its partition (S) and sort (N) key attributes; default
    /// `sweep` on `sweep_shard`, `sweep_at`.
    pub fn sweep_index(
        mut self,
        index: impl Into<String>,
        shard_attr: impl Into<String>,
        at_attr: impl Into<String>,
    ) -> Self {
        self.sweep_index = index.into();
        self.sweep_shard = shard_attr.into();
        self.sweep_at = at_attr.into();
        self
    }

    /// The partition key's attribute name.
    pub fn partition_key_name(&self) -> &str {
        &self.partition.0
    }

    /// The sort key's attribute name, if the layout has one.
    pub fn sort_key_name(&self) -> Option<&str> {
        self.sort.as_ref().map(|(name, _)| name.as_str())
    }

    /// The sweep index's name.
    pub fn sweep_index_name(&self) -> &str {
        &self.sweep_index
    }

    /// The key of record `record_id`'s item (its partition key, and its
    /// sort key where the layout has one).
    pub fn key(&self, record_id: &str) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::from([(
            self.partition.0.clone(),
            AttributeValue::S(self.partition.1.of(record_id)),
        )]);
        if let Some((name, value)) = &self.sort {
            key.insert(name.clone(), AttributeValue::S(value.of(record_id)));
        }
        key
    }

    /// The record id an item's key holds, `None` when the key is not one
    /// this layout makes (another application's item in a shared table).
    pub(super) fn record_id_of<V: KeyText>(&self, key: &HashMap<String, V>) -> Option<String> {
        let read = |(name, value): &(String, KeyValue)| -> Option<Option<String>> {
            let text = key.get(name)?.text()?;
            match value {
                KeyValue::Static(fixed) => (text == fixed).then_some(None),
                KeyValue::RecordId { prefix } => text
                    .strip_prefix(prefix.as_str())
                    .map(|id| Some(id.to_owned())),
            }
        };
        let from_partition = read(&self.partition)?;
        let from_sort = match &self.sort {
            Some(sort) => read(sort)?,
            None => None,
        };
        match (from_partition, from_sort) {
            // Both keys hold it: they must agree.
            (Some(a), Some(b)) => (a == b).then_some(a),
            (Some(id), None) | (None, Some(id)) => Some(id),
            (None, None) => None,
        }
        .filter(|id| !id.is_empty())
    }

    /// Every attribute name with what it is, for validation and messages.
    fn names(&self) -> Vec<(&'static str, &str)> {
        let mut names = vec![("partition key", self.partition.0.as_str())];
        if let Some((name, _)) = &self.sort {
            names.push(("sort key", name));
        }
        names.extend([
            ("status", self.status.as_str()),
            ("validation (fingerprint)", &self.fingerprint),
            ("attempt", &self.attempt),
            ("owner", &self.owner),
            ("in-progress expiry (lease)", &self.lease_expires_at),
            ("expiry", &self.expires_at),
            ("response status", &self.response_status),
            ("response headers", &self.response_headers),
            ("data (response body)", &self.response_body),
            ("response body kind", &self.response_body_kind),
            ("response encoding", &self.response_encoding),
            ("checkpoint", &self.checkpoint),
            ("sweep index shard", &self.sweep_shard),
            ("sweep index sort", &self.sweep_at),
        ]);
        names
    }

    /// Check the layout: no empty name, no two attributes with one name, a
    /// key that tells records apart (one key holds the record id), no empty
    /// static key value (DynamoDB refuses empty key strings), and no key or
    /// expiry attribute named like the sweeper's position attributes
    /// (`position`, `carry`, `listed_at`).
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |what: String| {
            Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("invalid table layout: {what}; fix the TableLayout given to DynamoStoreBuilder::with_layout"),
            ))
        };
        let names = self.names();
        for (i, (what, name)) in names.iter().enumerate() {
            if name.is_empty() {
                return invalid(format!("the {what} attribute has an empty name"));
            }
            if let Some((other, _)) = names[..i].iter().find(|(_, n)| n == name) {
                return invalid(format!(
                    "the {other} and the {what} attributes are both named `{name}`"
                ));
            }
        }
        if self.sweep_index.is_empty() {
            return invalid("the sweep index has an empty name".into());
        }
        let keys = std::iter::once(&self.partition).chain(self.sort.as_ref());
        let mut holds_id = false;
        for (name, value) in keys {
            match value {
                KeyValue::Static(fixed) if fixed.is_empty() => {
                    return invalid(format!("the key `{name}` has an empty static value"))
                }
                KeyValue::Static(_) => {}
                KeyValue::RecordId { .. } => holds_id = true,
            }
        }
        if !holds_id {
            return invalid(
                "neither key holds the record id, so every record would be the same item: give \
                 the sort key (or the partition key) KeyValue::record_id() or a prefix"
                    .into(),
            );
        }
        for (what, name) in [
            ("partition key", Some(self.partition.0.as_str())),
            ("sort key", self.sort_key_name()),
            ("expiry", Some(self.expires_at.as_str())),
        ] {
            if let Some(name) = name.filter(|n| POSITION_ATTRS.contains(n)) {
                return invalid(format!(
                    "the {what} attribute may not be named `{name}`: the sweeper's position \
                     items use that name"
                ));
            }
        }
        Ok(())
    }

    /// The key condition or filter that keeps a listing to this layout's
    /// items, with its names and values: `None` for the default layout (every
    /// item is a record or a sweeper item).
    pub(super) fn listing_condition(&self) -> Option<ListingCondition> {
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut key_condition = Vec::new();
        let mut filter = Vec::new();
        let (pk_name, pk_value) = &self.partition;
        names.insert("#lpk".to_owned(), pk_name.clone());
        match pk_value {
            KeyValue::Static(value) => {
                key_condition.push("#lpk = :lpk".to_owned());
                values.insert(":lpk".to_owned(), AttributeValue::S(value.clone()));
            }
            KeyValue::RecordId { prefix } if !prefix.is_empty() => {
                filter.push("begins_with(#lpk, :lpk)".to_owned());
                values.insert(":lpk".to_owned(), AttributeValue::S(prefix.clone()));
            }
            KeyValue::RecordId { .. } => {}
        }
        if let Some((sk_name, sk_value)) = &self.sort {
            names.insert("#lsk".to_owned(), sk_name.clone());
            let (condition, value) = match sk_value {
                KeyValue::Static(value) => ("#lsk = :lsk", value),
                KeyValue::RecordId { prefix } if !prefix.is_empty() => {
                    ("begins_with(#lsk, :lsk)", prefix)
                }
                KeyValue::RecordId { .. } => ("", &String::new()),
            };
            if !condition.is_empty() {
                values.insert(":lsk".to_owned(), AttributeValue::S(value.clone()));
                // A Query's key condition may hold the sort key's; a Scan
                // filters on it.
                if key_condition.is_empty() {
                    filter.push(condition.to_owned());
                } else {
                    key_condition.push(condition.to_owned());
                }
            }
        }
        names.retain(|k, _| {
            key_condition
                .iter()
                .chain(&filter)
                .any(|c| c.contains(k.as_str()))
        });
        if key_condition.is_empty() && filter.is_empty() {
            return None;
        }
        Some(ListingCondition {
            key_condition: (!key_condition.is_empty()).then(|| key_condition.join(" AND ")),
            filter: (!filter.is_empty()).then(|| filter.join(" AND ")),
            names,
            values,
        })
    }

    /// The text of a scan or index cursor for `key` (a listing's last
    /// evaluated key): the partition value alone for a layout without a sort
    /// key (the record id, for the default one), else JSON of both.
    pub(super) fn key_cursor(&self, key: &HashMap<String, AttributeValue>) -> Option<String> {
        let text = |name: &str| key.get(name).and_then(|v| v.as_s().ok()).cloned();
        let pk = text(&self.partition.0)?;
        match self.sort_key_name() {
            None => Some(pk),
            Some(sk) => Some(serde_json::json!([pk, text(sk)?]).to_string()),
        }
    }

    /// The key a [`key_cursor`](Self::key_cursor) text stands for.
    pub(super) fn cursor_key(&self, text: &str) -> Option<HashMap<String, AttributeValue>> {
        let mut key = HashMap::new();
        match self.sort_key_name() {
            None => {
                key.insert(self.partition.0.clone(), AttributeValue::S(text.to_owned()));
            }
            Some(sk) => {
                let [pk, sv]: [String; 2] = serde_json::from_str(text).ok()?;
                key.insert(self.partition.0.clone(), AttributeValue::S(pk));
                key.insert(sk.to_owned(), AttributeValue::S(sv));
            }
        }
        Some(key)
    }
}

/// What keeps a listing to one layout's items: a Query's key condition
/// (static partition) and/or a filter (prefixes), with their names and
/// values.
pub(super) struct ListingCondition {
    pub(super) key_condition: Option<String>,
    pub(super) filter: Option<String>,
    pub(super) names: HashMap<String, String>,
    pub(super) values: HashMap<String, AttributeValue>,
}

/// A key attribute's text, in a table item or a stream image.
pub(super) trait KeyText {
    /// The string value, `None` for another type.
    fn text(&self) -> Option<&str>;
}

impl KeyText for AttributeValue {
    fn text(&self) -> Option<&str> {
        self.as_s().ok().map(String::as_str)
    }
}

#[cfg(feature = "sweep-via-stream")]
impl KeyText for aws_sdk_dynamodbstreams::types::AttributeValue {
    fn text(&self) -> Option<&str> {
        self.as_s().ok().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> AttributeValue {
        AttributeValue::S(text.to_owned())
    }

    #[test]
    fn the_default_layout_is_the_schema() {
        let layout = TableLayout::default();
        assert!(layout.validate().is_ok());
        assert_eq!(
            layout.key("abc"),
            HashMap::from([("id".to_owned(), s("abc"))])
        );
        assert_eq!(
            layout.record_id_of(&layout.key("abc")).as_deref(),
            Some("abc")
        );
        assert!(layout.listing_condition().is_none());
        let key = layout.key("abc");
        assert_eq!(layout.key_cursor(&key).as_deref(), Some("abc"));
        assert_eq!(layout.cursor_key("abc"), Some(key));
    }

    #[test]
    fn a_static_partition_keeps_the_record_id_in_the_sort_key() {
        let layout = TableLayout::default()
            .key_attr("pk")
            .sort_key_attr("sk", "idempotency");
        assert!(layout.validate().is_ok());
        let key = layout.key("abc");
        assert_eq!(
            key,
            HashMap::from([
                ("pk".to_owned(), s("idempotency")),
                ("sk".to_owned(), s("abc"))
            ])
        );
        assert_eq!(layout.record_id_of(&key).as_deref(), Some("abc"));
        let other_partition =
            HashMap::from([("pk".to_owned(), s("orders")), ("sk".to_owned(), s("abc"))]);
        assert_eq!(layout.record_id_of(&other_partition), None);
        let condition = layout.listing_condition().unwrap();
        assert_eq!(condition.key_condition.as_deref(), Some("#lpk = :lpk"));
        assert_eq!(condition.filter, None);
        let cursor = layout.key_cursor(&key).unwrap();
        assert_eq!(layout.cursor_key(&cursor), Some(key));
    }

    #[test]
    fn a_prefixed_partition_tells_records_from_other_items() {
        let layout = TableLayout::default()
            .partition_key("PK", KeyValue::prefixed("IDEMPOTENCY#"))
            .sort_key("SK", KeyValue::fixed("RECORD"));
        assert!(layout.validate().is_ok());
        let key = layout.key("abc");
        assert_eq!(layout.record_id_of(&key).as_deref(), Some("abc"));
        for (pk, sk) in [
            ("ORDER#abc", "RECORD"),
            ("IDEMPOTENCY#abc", "META"),
            ("IDEMPOTENCY#", "RECORD"),
        ] {
            let foreign = HashMap::from([("PK".to_owned(), s(pk)), ("SK".to_owned(), s(sk))]);
            assert_eq!(layout.record_id_of(&foreign), None, "{pk} {sk}");
        }
        let condition = layout.listing_condition().unwrap();
        assert_eq!(condition.key_condition, None);
        assert_eq!(
            condition.filter.as_deref(),
            Some("begins_with(#lpk, :lpk) AND #lsk = :lsk")
        );
    }

    #[test]
    fn invalid_layouts_are_refused_with_what_is_wrong() {
        let cases = [
            (TableLayout::default().status_attr(""), "empty name"),
            (
                TableLayout::default().status_attr("owner"),
                "both named `owner`",
            ),
            (
                TableLayout::default().partition_key("pk", KeyValue::fixed("x")),
                "neither key holds the record id",
            ),
            (
                TableLayout::default().sort_key_attr("sk", ""),
                "empty static value",
            ),
            (
                TableLayout::default().key_attr("position"),
                "position items",
            ),
            (
                TableLayout::default().sort_key("id", KeyValue::record_id()),
                "both named `id`",
            ),
        ];
        for (layout, expected) in cases {
            let err = layout.validate().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert!(err.to_string().contains(expected), "{err} lacks {expected}");
        }
    }
}
