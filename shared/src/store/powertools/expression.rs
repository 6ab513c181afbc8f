//! Powertools' JMESPath expressions (`event_key_jmespath`,
//! `payload_validation_jmespath`), evaluated as Powertools evaluated them:
//! the JMESPath functions plus its own `powertools_json`,
//! `powertools_base64` and `powertools_base64_gzip`, on the event as
//! Powertools saw it ([`ClaimOrigin`](crate::store::ClaimOrigin)).

use std::sync::{Arc, OnceLock};

use jmespath::ast::Ast;
use jmespath::functions::{ArgumentType, CustomFunction, Signature};
use jmespath::{Context, ErrorReason, JmespathError, Rcvar, Runtime, Variable};
use serde_json::Value;

use crate::error::{Error, ErrorKind};

/// The largest text `powertools_base64_gzip` inflates to: Lambda's largest
/// synchronous payload. A bigger claim in a gzip trailer is refused rather
/// than allocated.
const MAX_INFLATED_BYTES: usize = 6 * 1024 * 1024;

/// A compiled expression and its text.
#[derive(Clone)]
pub(crate) struct Expression {
    text: String,
    compiled: Arc<jmespath::Expression<'static>>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expression").field(&self.text).finish()
    }
}

/// The runtime every expression compiles against: the JMESPath functions
/// and Powertools' three.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let mut runtime = Runtime::new();
        runtime.register_builtin_functions();
        let string = || Signature::new(vec![ArgumentType::String], None);
        runtime.register_function(
            "powertools_json",
            Box::new(CustomFunction::new(
                string(),
                Box::new(|args: &[Rcvar], ctx: &mut Context<'_>| {
                    let text = args[0].as_string().map(String::as_str).unwrap_or("");
                    let value: Value = serde_json::from_str(text)
                        .map_err(|e| failed(ctx, format!("powertools_json: not JSON ({e})")))?;
                    Ok(Rcvar::new(Variable::try_from(value)?))
                }),
            )),
        );
        runtime.register_function(
            "powertools_base64",
            Box::new(CustomFunction::new(
                string(),
                Box::new(|args: &[Rcvar], ctx: &mut Context<'_>| {
                    let bytes = base64_of(args, ctx, "powertools_base64")?;
                    text_of(bytes, ctx, "powertools_base64")
                }),
            )),
        );
        runtime.register_function(
            "powertools_base64_gzip",
            Box::new(CustomFunction::new(
                string(),
                Box::new(|args: &[Rcvar], ctx: &mut Context<'_>| {
                    let bytes = base64_of(args, ctx, "powertools_base64_gzip")?;
                    let inflated = gunzip(&bytes)
                        .map_err(|why| failed(ctx, format!("powertools_base64_gzip: {why}")))?;
                    text_of(inflated, ctx, "powertools_base64_gzip")
                }),
            )),
        );
        runtime
    })
}

fn failed(ctx: &Context<'_>, why: String) -> JmespathError {
    JmespathError::from_ctx(ctx, ErrorReason::Parse(why))
}

fn base64_of(args: &[Rcvar], ctx: &Context<'_>, name: &str) -> Result<Vec<u8>, JmespathError> {
    use base64::Engine;
    let text = args[0].as_string().map(String::as_str).unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| failed(ctx, format!("{name}: not base64 ({e})")))
}

fn text_of(bytes: Vec<u8>, ctx: &Context<'_>, name: &str) -> Result<Rcvar, JmespathError> {
    let text =
        String::from_utf8(bytes).map_err(|e| failed(ctx, format!("{name}: not UTF-8 ({e})")))?;
    Ok(Rcvar::new(Variable::String(text)))
}

/// The bytes a gzip member holds (one member, as Python's and Node's
/// `gzip` write).
fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let Some(trailer) = bytes.len().checked_sub(4).map(|at| &bytes[at..]) else {
        return Err("not gzip (too short)".into());
    };
    let size = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) as usize;
    if size > MAX_INFLATED_BYTES {
        return Err(format!(
            "inflates to {size} bytes, more than the {MAX_INFLATED_BYTES} a Lambda payload holds"
        ));
    }
    let mut out = vec![0u8; size];
    let written = libdeflater::Decompressor::new()
        .gzip_decompress(bytes, &mut out)
        .map_err(|e| format!("not gzip ({e})"))?;
    out.truncate(written);
    Ok(out)
}

impl Expression {
    /// `text` compiled, or an error naming `setting` (what the expression
    /// came from) and why it is not JMESPath.
    pub(crate) fn compile(text: &str, setting: &str) -> Result<Expression, Error> {
        let compiled = runtime().compile(text).map_err(|e| {
            Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "{setting} {text:?} is not a JMESPath expression ({e}); give the \
                     expression Powertools was configured with, such as \
                     powertools_json(body).order_id"
                ),
            )
        })?;
        Ok(Expression {
            text: text.to_owned(),
            compiled: Arc::new(compiled),
        })
    }

    /// The expression as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The value the expression selects from `event`; `Err` when its
    /// evaluation fails (a body that is not JSON under `powertools_json`,
    /// a function given the wrong type), where Powertools raised and so
    /// stored nothing.
    pub(crate) fn search(&self, event: &Value) -> Result<Value, String> {
        let data = Variable::try_from(event).map_err(|e| e.to_string())?;
        let found = self
            .compiled
            .search(Rcvar::new(data))
            .map_err(|e| e.to_string())?;
        serde_json::to_value(&*found).map_err(|e| e.to_string())
    }

    /// Does the expression select the value at `path` (field names from
    /// the event's root), or an object holding it, so that two events that
    /// differ there never select the same value? Only the forms that keep
    /// every field they select count: a chain of fields (`a.b."c"`), and a
    /// list or object of expressions (`[a.b, c]`, `{t: a.b, k: c}`) one of
    /// whose parts does. Anything that may drop it (`||`, filters,
    /// functions, projections) does not.
    pub(crate) fn keeps(&self, path: &[String]) -> bool {
        keeps(self.compiled.as_ast(), path)
    }
}

fn keeps(ast: &Ast, path: &[String]) -> bool {
    match ast {
        Ast::MultiList { elements, .. } => elements.iter().any(|e| keeps(e, path)),
        Ast::MultiHash { elements, .. } => elements.iter().any(|kv| keeps(&kv.value, path)),
        other => match fields(other) {
            Some(chain) => !chain.is_empty() && path.starts_with(&chain),
            None => false,
        },
    }
}

/// The field names of a chain of fields (`a.b.c`), `None` for anything else.
fn fields(ast: &Ast) -> Option<Vec<String>> {
    match ast {
        Ast::Field { name, .. } => Some(vec![name.clone()]),
        Ast::Subexpr { lhs, rhs, .. } => {
            let mut chain = fields(lhs)?;
            chain.extend(fields(rhs)?);
            Some(chain)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn search(expression: &str, event: Value) -> Result<Value, String> {
        Expression::compile(expression, "TEST")
            .unwrap()
            .search(&event)
    }

    #[test]
    fn powertools_functions_read_what_powertools_reads() {
        let body = json!({"body": "{\"order_id\": \"o-1\", \"customer_id\": 7}"});
        assert_eq!(
            search("powertools_json(body).order_id", body.clone()),
            Ok(json!("o-1"))
        );
        assert_eq!(
            search("powertools_json(body).[customer_id, order_id]", body),
            Ok(json!([7, "o-1"]))
        );
        // base64 of `{"id": 1}`; and the same gzipped by Python's gzip module.
        assert_eq!(
            search(
                "powertools_json(powertools_base64(data)).id",
                json!({"data": "eyJpZCI6IDF9"})
            ),
            Ok(json!(1))
        );
        assert_eq!(
            search(
                "powertools_json(powertools_base64_gzip(data)).id",
                json!({"data": "H4sIAAAAAAACA6tWykxRslIwrAUAhUDUVgkAAAA="})
            ),
            Ok(json!(1))
        );
    }

    #[test]
    fn a_missing_field_is_null_and_a_bad_body_is_an_error() {
        assert_eq!(
            search("headers.\"idempotency-key\"", json!({"headers": {}})),
            Ok(Value::Null)
        );
        let err = search("powertools_json(body).id", json!({"body": "not json"})).unwrap_err();
        assert!(err.contains("powertools_json: not JSON"), "{err}");
        let err = search("powertools_base64_gzip(d)", json!({"d": "AAAA"})).unwrap_err();
        assert!(err.contains("powertools_base64_gzip"), "{err}");
    }

    #[test]
    fn an_expression_that_is_not_jmespath_is_refused_naming_the_setting() {
        let err = Expression::compile("headers.[", "IDEMPOTENCY_X").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("IDEMPOTENCY_X"), "{err}");
    }

    #[test]
    fn only_forms_that_keep_a_field_count_as_selecting_it() {
        let sub: Vec<String> = ["requestContext", "authorizer", "jwt", "claims", "sub"]
            .map(String::from)
            .to_vec();
        let keeps = |e: &str| Expression::compile(e, "T").unwrap().keeps(&sub);
        assert!(keeps(
            "[requestContext.authorizer.jwt.claims.sub, headers.\"idempotency-key\"]"
        ));
        assert!(keeps("{t: requestContext.authorizer.jwt.claims, k: body}"));
        assert!(keeps("requestContext"));
        assert!(!keeps("headers.\"idempotency-key\""));
        assert!(!keeps("requestContext.authorizer.jwt.claims.sub || body"));
        assert!(!keeps("length(requestContext.authorizer.jwt.claims.sub)"));
        assert!(!keeps("requestContext.authorizer.jwt.claims.email"));
    }
}
