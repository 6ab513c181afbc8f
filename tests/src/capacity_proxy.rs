//! A metering HTTP proxy between DynamoDB clients (the Rust SDK, boto3, a
//! function process) and DynamoDB Local: it asks for the capacity every
//! request consumes (`ReturnConsumedCapacity: INDEXES` added to the request)
//! and adds up what the answers report, per table, split into the table's own
//! units and its indexes'. One instrument for every client, so the Rust
//! library and Powertools are metered alike.
//!
//! A conditional write whose condition fails is billed on real DynamoDB too
//! ("If the expression evaluates to false, DynamoDB still consumes write
//! capacity units from the table", AWS's "Read/write capacity mode" page), on
//! the larger of the existing item and the one the request would write; the
//! local engine reports nothing for it, so the proxy applies that rule to the
//! item the failure returns (`ReturnValuesOnConditionCheckFailure: ALL_OLD`)
//! and to the request's own attributes, and counts those units apart
//! (`failed_write_units`), as an estimate.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Capacity consumed on one table, as reported (and, for failed conditional
/// writes, estimated).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    /// Requests naming the table.
    pub requests: u64,
    /// Write units of the table itself.
    pub table_write: f64,
    /// Write units of its global secondary indexes.
    pub index_write: f64,
    /// Read units of the table itself.
    pub table_read: f64,
    /// Read units of its indexes (queries of an index).
    pub index_read: f64,
    /// Conditional writes whose condition failed.
    pub failed_writes: u64,
    /// What those are billed on real DynamoDB (estimated, see the module docs).
    pub failed_write_units: f64,
}

impl Units {
    /// Every write unit: table, indexes and failed conditional writes.
    pub fn writes(&self) -> f64 {
        self.table_write + self.index_write + self.failed_write_units
    }

    /// Every read unit: table and indexes.
    pub fn reads(&self) -> f64 {
        self.table_read + self.index_read
    }
}

impl std::ops::Add for Units {
    type Output = Units;
    fn add(self, more: Units) -> Units {
        Units {
            requests: self.requests + more.requests,
            table_write: self.table_write + more.table_write,
            index_write: self.index_write + more.index_write,
            table_read: self.table_read + more.table_read,
            index_read: self.index_read + more.index_read,
            failed_writes: self.failed_writes + more.failed_writes,
            failed_write_units: self.failed_write_units + more.failed_write_units,
        }
    }
}

impl std::ops::Sub for Units {
    type Output = Units;
    fn sub(self, earlier: Units) -> Units {
        Units {
            requests: self.requests - earlier.requests,
            table_write: self.table_write - earlier.table_write,
            index_write: self.index_write - earlier.index_write,
            table_read: self.table_read - earlier.table_read,
            index_read: self.index_read - earlier.index_read,
            failed_writes: self.failed_writes - earlier.failed_writes,
            failed_write_units: self.failed_write_units - earlier.failed_write_units,
        }
    }
}

type Meters = Arc<Mutex<HashMap<String, Units>>>;

/// The proxy, serving on a loopback port until dropped with the process.
pub struct CapacityProxy {
    addr: SocketAddr,
    meters: Meters,
}

impl CapacityProxy {
    /// Start on a free loopback port, forwarding to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<CapacityProxy> {
        let meters = Meters::default();
        let addr = crate::serve_on_loopback(meters.clone(), move |meters, client| async move {
            if let Err(err) = serve(upstream, meters, client).await {
                eprintln!("capacity proxy: connection ended: {err}");
            }
            Ok(())
        })
        .await?;
        Ok(CapacityProxy { addr, meters })
    }

    /// `http://host:port`, for `AWS_ENDPOINT_URL_DYNAMODB`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What `table` has consumed so far through the proxy.
    pub fn units(&self, table: &str) -> Units {
        self.meters
            .lock()
            .map(|m| m.get(table).copied().unwrap_or_default())
            .unwrap_or_default()
    }
}

/// Operations that read (their units are read units).
const READS: [&str; 5] = [
    "getitem",
    "query",
    "scan",
    "batchgetitem",
    "transactgetitems",
];

/// Operations that accept `ReturnConsumedCapacity`.
const METERED: [&str; 10] = [
    "getitem",
    "putitem",
    "updateitem",
    "deleteitem",
    "query",
    "scan",
    "batchgetitem",
    "batchwriteitem",
    "transactwriteitems",
    "transactgetitems",
];

async fn serve(upstream: SocketAddr, meters: Meters, client: TcpStream) -> std::io::Result<()> {
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let upstream = TcpStream::connect(upstream).await?;
    let (upstream_read, mut upstream_write) = upstream.into_split();
    let mut upstream_read = BufReader::new(upstream_read);
    while let Some((head, body)) = read_message(&mut client_read).await? {
        let target = header(&head, "x-amz-target")
            .and_then(|t| t.rsplit('.').next().map(str::to_ascii_lowercase))
            .unwrap_or_default();
        let mut request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let metered = METERED.contains(&target.as_str()) && request.is_object();
        let body = if metered {
            request["ReturnConsumedCapacity"] = Value::from("INDEXES");
            serde_json::to_vec(&request).unwrap_or(body)
        } else {
            body
        };
        upstream_write
            .write_all(&with_length(&head, body.len()))
            .await?;
        upstream_write.write_all(&body).await?;
        let Some((response_head, response_body)) = read_message(&mut upstream_read).await? else {
            return Ok(());
        };
        if metered {
            let response: Value = serde_json::from_slice(&response_body).unwrap_or(Value::Null);
            if let Ok(mut meters) = meters.lock() {
                meter(&mut meters, &target, &request, &response);
            }
        }
        client_write.write_all(response_head.as_bytes()).await?;
        client_write.write_all(&response_body).await?;
    }
    Ok(())
}

/// Add what one answer reports (or, for a failed condition, what it bills).
fn meter(meters: &mut HashMap<String, Units>, target: &str, request: &Value, response: &Value) {
    let read = READS.contains(&target);
    let failed = response["__type"]
        .as_str()
        .is_some_and(|t| t.ends_with("ConditionalCheckFailedException"));
    if let Some(table) = request["TableName"].as_str() {
        let units = meters.entry(table.to_owned()).or_default();
        units.requests += 1;
        if failed {
            units.failed_writes += 1;
            units.failed_write_units += failed_write_units(request, response);
        }
    }
    let consumed = match &response["ConsumedCapacity"] {
        Value::Array(list) => list.clone(),
        Value::Null => Vec::new(),
        one => vec![one.clone()],
    };
    for capacity in consumed {
        let Some(table) = capacity["TableName"].as_str() else {
            continue;
        };
        let units = meters.entry(table.to_owned()).or_default();
        let own = capacity["Table"]["CapacityUnits"]
            .as_f64()
            .or(capacity["CapacityUnits"].as_f64())
            .unwrap_or(0.0);
        let indexes: f64 = ["GlobalSecondaryIndexes", "LocalSecondaryIndexes"]
            .iter()
            .filter_map(|k| capacity[*k].as_object())
            .flat_map(|m| m.values())
            .filter_map(|i| i["CapacityUnits"].as_f64())
            .sum();
        // An index-only answer (a Query of an index) reports the index alone.
        let own = if capacity["Table"].is_null() && indexes > 0.0 {
            0.0
        } else {
            own
        };
        if read {
            units.table_read += own;
            units.index_read += indexes;
        } else {
            units.table_write += own;
            units.index_write += indexes;
        }
    }
}

/// Write units a failed conditional write is billed: the larger of the
/// existing item (returned with the failure) and the item the request would
/// write, rounded up to whole KB, at least one.
fn failed_write_units(request: &Value, response: &Value) -> f64 {
    let existing = response["Item"].as_object().map_or(0, attributes_size);
    let attempted = match request["Item"].as_object() {
        // PutItem: the new item as sent.
        Some(item) => attributes_size(item),
        // UpdateItem: the existing item as the update would leave it.
        None => updated_size(request, response["Item"].as_object()),
        // DeleteItem: the existing item alone (attempted stays 0).
    };
    (existing.max(attempted).div_ceil(1024).max(1)) as f64
}

/// The size of the item an `UpdateItem` would leave: the existing item (or
/// the key alone) with each `SET` attribute replaced by the size of the
/// largest value its expression names, and each `REMOVE`d one dropped.
fn updated_size(request: &Value, existing: Option<&serde_json::Map<String, Value>>) -> u64 {
    let mut item: HashMap<String, u64> = existing
        .or(request["Key"].as_object())
        .map(|m| {
            m.iter()
                .map(|(name, value)| (name.clone(), name.len() as u64 + value_size(value)))
                .collect()
        })
        .unwrap_or_default();
    let names = &request["ExpressionAttributeNames"];
    let values = &request["ExpressionAttributeValues"];
    let name_of = |token: &str| -> String {
        names[token.trim()]
            .as_str()
            .map_or_else(|| token.trim().to_owned(), str::to_owned)
    };
    let expression = request["UpdateExpression"].as_str().unwrap_or_default();
    for (clause, body) in clauses(expression) {
        for part in split_top_level(body) {
            match clause {
                "SET" => {
                    let Some((target, expr)) = part.split_once('=') else {
                        continue;
                    };
                    let size = expr
                        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        .filter(|t| t.starts_with(':'))
                        .filter_map(|t| values.get(t).map(value_size))
                        .max()
                        .unwrap_or(0);
                    let name = name_of(target);
                    item.insert(name.clone(), name.len() as u64 + size);
                }
                "REMOVE" => {
                    item.remove(&name_of(part));
                }
                _ => {}
            }
        }
    }
    item.values().sum()
}

/// The clauses of an update expression: (`SET`, its body), (`REMOVE`, ...).
fn clauses(expression: &str) -> Vec<(&'static str, &str)> {
    let keywords = ["SET", "REMOVE", "ADD", "DELETE"];
    let mut starts: Vec<(usize, &'static str)> = keywords
        .iter()
        .flat_map(|k| {
            expression
                .match_indices(k)
                .filter(|(i, _)| {
                    (*i == 0 || expression.as_bytes()[i - 1] == b' ')
                        && expression.as_bytes().get(i + k.len()) == Some(&b' ')
                })
                .map(move |(i, _)| (i, *k))
        })
        .collect();
    starts.sort();
    starts
        .iter()
        .enumerate()
        .map(|(n, (i, k))| {
            let end = starts.get(n + 1).map_or(expression.len(), |(j, _)| *j);
            (*k, &expression[i + k.len()..end])
        })
        .collect()
}

/// `body` split on the commas outside parentheses.
fn split_top_level(body: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in body.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(body[start..].trim());
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// The size of attributes in DynamoDB's JSON form, by DynamoDB's rules:
/// names plus values (see `value_size`).
fn attributes_size(attributes: &serde_json::Map<String, Value>) -> u64 {
    attributes
        .iter()
        .map(|(name, value)| name.len() as u64 + value_size(value))
        .sum()
}

/// One value's size: strings by UTF-8 length, binaries by decoded length,
/// numbers one byte per two significant digits plus one, booleans and nulls
/// one, lists and maps three plus one per element plus the elements.
fn value_size(value: &Value) -> u64 {
    let Some((kind, inner)) = value.as_object().and_then(|o| o.iter().next()) else {
        return 0;
    };
    match (kind.as_str(), inner) {
        ("S", Value::String(s)) => s.len() as u64,
        // Base64 in the JSON: three bytes per four characters.
        ("B", Value::String(b)) => (b.trim_end_matches('=').len() as u64 * 3) / 4,
        ("N", Value::String(n)) => {
            let digits: String = n.chars().filter(char::is_ascii_digit).collect();
            (digits.trim_matches('0').len() as u64).div_ceil(2) + 1
        }
        ("BOOL" | "NULL", _) => 1,
        ("L", Value::Array(items)) => 3 + items.iter().map(|v| 1 + value_size(v)).sum::<u64>(),
        ("M", Value::Object(map)) => 3 + map.len() as u64 + attributes_size(map),
        (_, Value::Array(set)) => set
            .iter()
            .map(|v| v.as_str().map_or(0, |s| s.len() as u64))
            .sum(),
        _ => 0,
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// `head` with its `content-length` set to `length`.
fn with_length(head: &str, length: usize) -> Vec<u8> {
    let mut out = String::with_capacity(head.len() + 8);
    for line in head.split_inclusive("\r\n") {
        let is_length = line
            .split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"));
        if is_length {
            out.push_str(&format!("content-length: {length}\r\n"));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

/// One HTTP/1.1 message with a `content-length` body: (head, body).
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).await? == 0 {
            return Ok(None);
        }
        let blank = line == b"\r\n";
        head.extend_from_slice(&line);
        if blank {
            break;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let length = header(&head, "content-length")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(Some((head, body)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reported_units_are_split_into_table_and_indexes() {
        let mut meters = HashMap::new();
        let request = json!({"TableName": "t"});
        let response = json!({"ConsumedCapacity": {
            "TableName": "t", "CapacityUnits": 3.0,
            "Table": {"CapacityUnits": 2.0},
            "GlobalSecondaryIndexes": {"sweep": {"CapacityUnits": 1.0}}
        }});
        meter(&mut meters, "updateitem", &request, &response);
        meter(
            &mut meters,
            "getitem",
            &request,
            &json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5}}),
        );
        let units = meters["t"];
        assert_eq!((units.table_write, units.index_write), (2.0, 1.0));
        assert_eq!((units.table_read, units.index_read), (0.5, 0.0));
        assert_eq!(units.requests, 2);
    }

    #[test]
    fn a_failed_update_bills_the_item_as_it_would_leave_it() {
        let mut meters = HashMap::new();
        let big = "x".repeat(3000);
        // The claim sets small attributes and removes the big response: the
        // existing item (3 KB) is the larger, so 3 units.
        let request = json!({
            "TableName": "t", "Key": {"id": {"S": "k"}},
            "UpdateExpression": "SET #s = :s, #a = if_not_exists(#a, :zero) + :one REMOVE #rb",
            "ExpressionAttributeNames": {"#s": "status", "#a": "attempt", "#rb": "body"},
            "ExpressionAttributeValues": {":s": {"S": "IN_PROGRESS"}, ":zero": {"N": "0"}, ":one": {"N": "1"}},
        });
        let response = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Item": {"id": {"S": "k"}, "status": {"S": "COMPLETED"}, "body": {"S": big}},
        });
        meter(&mut meters, "updateitem", &request, &response);
        assert_eq!(meters["t"].failed_write_units, 3.0);
        // Setting a big value on a small item: the after image is the larger.
        let grow = json!({
            "TableName": "u", "Key": {"id": {"S": "k"}},
            "UpdateExpression": "SET #b = :b",
            "ExpressionAttributeNames": {"#b": "body"},
            "ExpressionAttributeValues": {":b": {"S": "y".repeat(2500)}},
        });
        let small = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Item": {"id": {"S": "k"}},
        });
        meter(&mut meters, "updateitem", &grow, &small);
        assert_eq!(meters["u"].failed_write_units, 3.0, "2,507 bytes: 3 KB");
    }

    #[test]
    fn a_failed_condition_bills_the_larger_item() {
        let mut meters = HashMap::new();
        let big = "x".repeat(3000);
        let request = json!({"TableName": "t", "Item": {"id": {"S": "k"}}});
        let response = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Item": {"id": {"S": "k"}, "data": {"S": big}},
        });
        meter(&mut meters, "putitem", &request, &response);
        assert_eq!(meters["t"].failed_writes, 1);
        assert_eq!(meters["t"].failed_write_units, 3.0, "3,009 bytes: 3 KB");
        assert_eq!(meters["t"].writes(), 3.0);
    }
}
