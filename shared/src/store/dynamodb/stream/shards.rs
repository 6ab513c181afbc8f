//! The stream's shards, in the order a listing reads them: every parent
//! before its children, so that a record's images, which follow one lineage
//! of shards, are read in the order they were written.

use std::collections::HashSet;

use aws_sdk_dynamodbstreams::types::Shard;

use super::super::DynamoStore;
use crate::error::Error;

impl DynamoStore {
    /// Every shard the stream `arn` still holds (DescribeStream, paged by
    /// shard id), in the service's order.
    pub(super) async fn describe_shards(
        &self,
        streams: &aws_sdk_dynamodbstreams::Client,
        arn: &str,
    ) -> Result<Vec<Shard>, Error> {
        let mut shards = Vec::new();
        let mut from: Option<String> = None;
        loop {
            let out = streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(from.clone())
                .send()
                .await
                .map_err(|err| self.stream_error("DescribeStream", err))?;
            let Some(description) = out.stream_description() else {
                return Ok(shards);
            };
            shards.extend(description.shards().iter().cloned());
            match description.last_evaluated_shard_id() {
                Some(last) => from = Some(last.to_owned()),
                None => return Ok(shards),
            }
        }
    }
}

/// `shards` with every parent before its children, whatever order they were
/// described in (a parent gone from the stream counts as read). Shards
/// without an id are left out: nothing can be read of them.
pub(super) fn parents_first(shards: &[Shard]) -> Vec<&Shard> {
    let ids: HashSet<&str> = shards.iter().filter_map(|s| s.shard_id()).collect();
    let mut ordered: Vec<&Shard> = Vec::new();
    let mut placed: HashSet<&str> = HashSet::new();
    loop {
        let before = ordered.len();
        for shard in shards {
            let Some(id) = shard.shard_id() else { continue };
            if placed.contains(id) {
                continue;
            }
            let parent_ready = shard
                .parent_shard_id()
                .is_none_or(|p| !ids.contains(p) || placed.contains(p));
            if parent_ready {
                placed.insert(id);
                ordered.push(shard);
            }
        }
        // Nothing more placed: all are (or a cycle no stream has is left).
        if ordered.len() == before {
            return ordered;
        }
    }
}

/// The parent of `shard` when the stream still holds it.
pub(super) fn parent_in<'a>(shard: &'a Shard, shards: &[&Shard]) -> Option<&'a str> {
    shard
        .parent_shard_id()
        .filter(|p| shards.iter().any(|s| s.shard_id() == Some(*p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, parent: Option<&str>) -> Shard {
        Shard::builder()
            .shard_id(id)
            .set_parent_shard_id(parent.map(str::to_owned))
            .build()
    }

    #[test]
    fn parents_come_before_their_children_in_any_described_order() {
        // A split and a merge of lineages, described children first.
        let shards = vec![
            shard("d", Some("b")),
            shard("c", Some("a")),
            shard("b", Some("a")),
            shard("a", Some("gone")),
            shard("e", None),
        ];
        let order: Vec<&str> = parents_first(&shards)
            .iter()
            .filter_map(|s| s.shard_id())
            .collect();
        assert_eq!(order.len(), 5);
        let at = |id: &str| order.iter().position(|s| *s == id).unwrap();
        assert!(at("a") < at("b") && at("a") < at("c") && at("b") < at("d"));
        let described: Vec<&Shard> = shards.iter().collect();
        assert_eq!(parent_in(&shards[3], &described), None);
        assert_eq!(parent_in(&shards[0], &described), Some("b"));
    }
}
