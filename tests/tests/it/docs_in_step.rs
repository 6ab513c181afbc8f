//! What the repository says, in step with what the code does: the docs'
//! table of variables is generated from the one definition
//! (`lambda_idempotency::settings`), every `IDEMPOTENCY_*` variable a
//! template sets is in it, no code outside it reads one, and README's
//! quickstart is the crate docs' own.

use std::path::{Path, PathBuf};

use lambda_idempotency::settings::{markdown_table, VARIABLES};

const BEGIN: &str = "<!-- settings::markdown_table() begins: generated, do not edit -->\n";
const END: &str = "<!-- settings::markdown_table() ends -->";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `docs/configuration.md` holds `markdown_table()` between its markers.
/// `UPDATE_EXPECT=1` rewrites it (then review the diff).
#[test]
fn the_docs_table_of_variables_is_generated_from_the_settings() {
    let path = root().join("docs/configuration.md");
    let text = read(&path);
    let (head, rest) = text
        .split_once(BEGIN)
        .unwrap_or_else(|| panic!("{}: no line {BEGIN:?}", path.display()));
    let (table, tail) = rest
        .split_once(END)
        .unwrap_or_else(|| panic!("{}: no line {END:?}", path.display()));
    let expected = markdown_table();
    if table == expected {
        return;
    }
    if std::env::var_os("UPDATE_EXPECT").is_some_and(|v| v == "1") {
        std::fs::write(&path, format!("{head}{BEGIN}{expected}{END}{tail}"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    panic!(
        "{} differs from lambda_idempotency::settings::VARIABLES: run \
         `UPDATE_EXPECT=1 cargo test -p integration-tests --test it docs_in_step` and \
         commit the result",
        path.display()
    );
}

/// Every `IDEMPOTENCY_*` name in `text`.
fn variables_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("IDEMPOTENCY_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        found.push(name.trim_end_matches('_').to_owned());
    }
    found
}

/// What the deployments set is what the library defines: a variable in a
/// template that no code reads would be a setting that silently does
/// nothing.
#[test]
fn every_variable_the_templates_set_is_defined_in_the_settings() {
    let root = root();
    let mut templates = vec![root.join("template.yaml")];
    for dir in ["deploy", "template/{{cookiecutter.project_name}}"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("the templates' folder") {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                templates.push(path);
            }
        }
    }
    assert!(templates.len() >= 4, "{templates:?}");
    for path in templates {
        for name in variables_in(&read(&path)) {
            assert!(
                VARIABLES.iter().any(|v| v.name == name),
                "{} sets {name}, which lambda_idempotency::settings::VARIABLES does not define",
                path.display()
            );
        }
    }
}

/// Rust files under `dir`.
fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// No code but the settings module reads an `IDEMPOTENCY_*` variable: a
/// second parser is how the rules drifted apart (0 accepted as a lease by
/// one function, refused by the library).
#[test]
fn no_code_outside_the_settings_module_reads_an_idempotency_variable() {
    let root = root();
    let mut files = Vec::new();
    for dir in [
        "shared/src",
        "shared/examples",
        "functions",
        "cli/src",
        "tools/src",
        "template/{{cookiecutter.project_name}}/src",
    ] {
        rust_files(&root.join(dir), &mut files);
    }
    let settings = root.join("shared/src/settings.rs");
    let readers = ["var(\"", "var_os(\"", "lookup(\"", "env = \"", "getenv(\""];
    let mut offenders = Vec::new();
    for path in files.iter().filter(|p| **p != settings) {
        for (number, line) in read(path).lines().enumerate() {
            if readers.iter().any(|reader| {
                line.contains(&format!("{reader}IDEMPOTENCY_"))
                    || line.contains(&format!("{reader}LAMBDA_IDEMPOTENCY_"))
            }) {
                offenders.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "read these through lambda_idempotency::settings::Settings instead:\n{}",
        offenders.join("\n")
    );
}

/// The Rust block under `# Quickstart` / `## Quickstart` in `text`, with
/// the crate docs' `//! ` prefixes taken off.
fn quickstart(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|line| {
            line.strip_prefix("//!")
                .map_or(line, |l| l.strip_prefix(' ').unwrap_or(l))
        })
        .collect();
    let heading = lines
        .iter()
        .position(|l| *l == "# Quickstart" || *l == "## Quickstart")
        .expect("a Quickstart heading");
    let start = heading
        + lines[heading..]
            .iter()
            .position(|l| l.starts_with("```rust") || *l == "```no_run")
            .expect("a Rust block under Quickstart");
    let end = start
        + 1
        + lines[start + 1..]
            .iter()
            .position(|l| *l == "```")
            .expect("its end");
    lines[start + 1..end].join("\n")
}

/// A newcomer reads README first and docs.rs next: the same code in both.
#[test]
fn readme_and_the_crate_docs_show_the_same_quickstart() {
    let root = root();
    let readme = quickstart(&read(&root.join("README.md")));
    let crate_docs = quickstart(&read(&root.join("shared/src/lib.rs")));
    assert!(readme.contains("IdempotencyLayer"), "{readme}");
    assert_eq!(
        readme, crate_docs,
        "README.md's quickstart differs from shared/src/lib.rs's"
    );
}

/// Each bad value of a library variable is refused by the library, once,
/// and every function answers with the library's own line: the same rule
/// wherever the variable is read.
#[test]
fn every_function_refuses_a_bad_value_with_the_librarys_line() {
    use lambda_idempotency::settings::{self, Settings};
    // The consumer is only built, never called: a client that sends nothing.
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .build(),
    );
    let bad: &[(&str, &str)] = &[
        (settings::MAX_LEASE_ENV, "0"),
        (settings::MAX_LEASE_ENV, "15m"),
        (settings::EXPIRES_AFTER_ENV, "31536001"),
        (settings::WAIT_FOR_RESULT_ENV, "5s"),
        (settings::DISABLED_ENV, "yes"),
        (settings::LEGACY_DISABLED_ENV, "on"),
        (settings::WARM_UP_ENV, "maybe"),
        (settings::ALLOW_ANONYMOUS_ENV, "2"),
        (settings::POWERTOOLS_UNTIL_ENV, "2026-12-01T00:00:00Z"),
        (settings::REDIS_WAIT_REPLICAS_ENV, "1"),
    ];
    for (name, value) in bad {
        let pairs = [
            ("IDEMPOTENCY_TABLE", "idempotency"),
            ("ORDERS_TABLE", "orders"),
            (*name, *value),
        ];
        let lookup = integration_tests_lookup(&pairs);
        let library = Settings::from_lookup(&lookup)
            .expect_err("the library refuses it")
            .to_string();
        assert!(library.starts_with(name), "{library}");
        let orders = orders_api::Config::from_lookup(&lookup).expect_err("orders-api refuses it");
        let sweeper = sweeper::Config::from_lookup(&lookup).expect_err("the sweeper refuses it");
        let events = order_events::Consumer::from_lookup(client.clone(), &lookup)
            .expect_err("order-events refuses it");
        for (function, message) in [
            ("orders-api", orders),
            ("sweeper", sweeper),
            ("order-events", events),
        ] {
            assert_eq!(message, library, "{function}, {name}={value:?}");
        }
    }
}

fn integration_tests_lookup<'a>(
    pairs: &'a [(&'a str, &'a str)],
) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        let (_, value) = pairs.iter().find(|(key, _)| *key == name)?;
        Some((*value).to_owned())
    }
}
