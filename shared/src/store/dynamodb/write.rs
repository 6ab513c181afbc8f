//! A conditional write built from typed parts: the clauses its condition
//! ANDs, its `SET` and `REMOVE` actions, and what the placeholders stand
//! for. A write that adds to another (the sweeper's `fail` to a completion,
//! a release to the lease fence) adds parts; nothing is patched into a
//! string after the fact. DynamoDB refuses a name or a value no expression
//! uses, so only those the clauses and actions use are sent.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// One clause of a condition: an attribute (its `#name` placeholder)
/// compared with a `:value` placeholder, or tested for absence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Clause {
    /// `#name = :value`
    Eq(&'static str, &'static str),
    /// `#name < :value`
    Lt(&'static str, &'static str),
    /// `#name >= :value`
    Ge(&'static str, &'static str),
    /// `attribute_not_exists(#name)`
    Absent(&'static str),
}

impl Clause {
    fn render(self) -> String {
        match self {
            Clause::Eq(name, value) => format!("{name} = {value}"),
            Clause::Lt(name, value) => format!("{name} < {value}"),
            Clause::Ge(name, value) => format!("{name} >= {value}"),
            Clause::Absent(name) => format!("attribute_not_exists({name})"),
        }
    }

    fn placeholders(self) -> [Option<&'static str>; 2] {
        match self {
            Clause::Eq(name, value) | Clause::Lt(name, value) | Clause::Ge(name, value) => {
                [Some(name), Some(value)]
            }
            Clause::Absent(name) => [Some(name), None],
        }
    }
}

/// The parts of a conditional write (an `UpdateItem`, a `DeleteItem`, or
/// the update of a transaction).
#[derive(Debug, Default, Clone)]
pub(super) struct WriteParts {
    clauses: Vec<Clause>,
    sets: Vec<(&'static str, &'static str)>,
    removes: Vec<&'static str>,
    names: HashMap<&'static str, String>,
    values: HashMap<&'static str, AttributeValue>,
}

impl WriteParts {
    /// `placeholder` (`#name`) stands for the attribute `attribute`.
    pub(super) fn name(mut self, placeholder: &'static str, attribute: &str) -> Self {
        self.names.insert(placeholder, attribute.to_owned());
        self
    }

    /// `placeholder` (`:value`) stands for `value`.
    pub(super) fn value(mut self, placeholder: &'static str, value: AttributeValue) -> Self {
        self.values.insert(placeholder, value);
        self
    }

    /// The condition must also hold `clause`.
    pub(super) fn when(mut self, clause: Clause) -> Self {
        self.clauses.push(clause);
        self
    }

    /// `SET name = value`.
    pub(super) fn set(mut self, name: &'static str, value: &'static str) -> Self {
        self.sets.push((name, value));
        self
    }

    /// `REMOVE name`.
    pub(super) fn remove(mut self, name: &'static str) -> Self {
        self.removes.push(name);
        self
    }

    /// What `placeholder` stands for, if set (for tests).
    #[cfg(test)]
    pub(super) fn value_of(&self, placeholder: &str) -> Option<&AttributeValue> {
        self.values.get(placeholder)
    }

    /// The condition: every clause, ANDed.
    pub(super) fn condition(&self) -> String {
        self.clauses
            .iter()
            .map(|clause| clause.render())
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// The update expression (empty for a delete).
    pub(super) fn expression(&self) -> String {
        let mut parts = Vec::new();
        if !self.sets.is_empty() {
            let sets: Vec<String> = self
                .sets
                .iter()
                .map(|(name, value)| format!("{name} = {value}"))
                .collect();
            parts.push(format!("SET {}", sets.join(", ")));
        }
        if !self.removes.is_empty() {
            parts.push(format!("REMOVE {}", self.removes.join(", ")));
        }
        parts.join(" ")
    }

    /// The names the condition and the actions use, as the SDK takes them.
    pub(super) fn used_names(&self) -> HashMap<String, String> {
        let used = self.placeholders();
        self.names
            .iter()
            .filter(|(placeholder, _)| used.contains(*placeholder))
            .map(|(placeholder, attribute)| ((*placeholder).to_owned(), attribute.clone()))
            .collect()
    }

    /// The values the condition and the actions use, as the SDK takes them.
    pub(super) fn used_values(&self) -> HashMap<String, AttributeValue> {
        let used = self.placeholders();
        self.values
            .iter()
            .filter(|(placeholder, _)| used.contains(*placeholder))
            .map(|(placeholder, value)| ((*placeholder).to_owned(), value.clone()))
            .collect()
    }

    fn placeholders(&self) -> Vec<&'static str> {
        self.clauses
            .iter()
            .flat_map(|clause| clause.placeholders())
            .flatten()
            .chain(self.sets.iter().flat_map(|(name, value)| [*name, *value]))
            .chain(self.removes.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_renders_its_parts_and_sends_only_the_placeholders_it_uses() {
        let write = WriteParts::default()
            .name("#status", "status")
            .name("#owner", "owner")
            .name("#unused", "never")
            .value(":in_progress", AttributeValue::S("IN_PROGRESS".into()))
            .value(":resolver", AttributeValue::S("resolved:o".into()))
            .value(":spare", AttributeValue::N("1".into()))
            .name("#checkpoint", "checkpoint")
            .when(Clause::Eq("#status", ":in_progress"))
            .when(Clause::Absent("#checkpoint"))
            .set("#owner", ":resolver")
            .remove("#checkpoint");
        assert_eq!(
            write.condition(),
            "#status = :in_progress AND attribute_not_exists(#checkpoint)"
        );
        assert_eq!(
            write.expression(),
            "SET #owner = :resolver REMOVE #checkpoint"
        );
        let mut names: Vec<String> = write.used_names().into_keys().collect();
        names.sort();
        assert_eq!(names, ["#checkpoint", "#owner", "#status"]);
        let mut values: Vec<String> = write.used_values().into_keys().collect();
        values.sort();
        assert_eq!(values, [":in_progress", ":resolver"]);
        // A delete: a condition and no actions.
        let delete = WriteParts::default()
            .name("#lease", "lease")
            .value(":cutoff", AttributeValue::N("5".into()))
            .when(Clause::Lt("#lease", ":cutoff"))
            .when(Clause::Ge("#lease", ":cutoff"));
        assert_eq!(delete.expression(), "");
        assert_eq!(delete.condition(), "#lease < :cutoff AND #lease >= :cutoff");
    }
}
