//! CEL as the API server evaluates it for admission: an expression compiled once, with CEL's standard library and
//! Kubernetes' extension libraries (the kube-rs project's `kube-cel`, over the `cel` crate; kube-core's own `cel`
//! feature uses the same), evaluated in a scope that binds the request's variables.
//!
//! Objects reach CEL as Kubernetes types them from JSON: integers are `int`, numbers with a fraction `double`.

use std::collections::HashMap;
use std::sync::Arc;

use kube_cel::KubeCelExt;
use kube_cel::cel::common::ast::{EntryExpr, Expr, IdedExpr};
use kube_cel::cel::objects::Key;
use kube_cel::cel::{Context, Program, Value};

/// The variables an admission expression may read that say something about the object: an expression that reads
/// none of them (and of `request` only `request.userInfo`) depends on who asks, and on the parameter, alone.
const OBJECT_VARIABLES: [&str; 5] = ["object", "oldObject", "namespaceObject", "variables", "authorizer"];

/// A compiled expression.
pub struct Expression {
    pub source: String,
    program: Program,
    /// Reads nothing of the request but `request.userInfo`, and nothing of the object (`params` it may read).
    pub reads_only_the_requester: bool,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expression").field("source", &self.source).finish_non_exhaustive()
    }
}

/// An expression that does not compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed to compile the CEL expression {expression:?}: {reason}")]
pub struct CompileError {
    pub expression: String,
    pub reason: String,
}

impl Expression {
    pub fn compile(source: &str) -> Result<Expression, CompileError> {
        let program = Program::compile(source)
            .map_err(|e| CompileError { expression: source.to_owned(), reason: e.to_string() })?;
        let mut reads_only_the_requester = true;
        walk(program.expression(), &mut reads_only_the_requester);
        Ok(Expression { source: source.to_owned(), program, reads_only_the_requester })
    }

    /// Evaluates in `scope`; an evaluation error is the API server's message for it.
    pub fn evaluate(&self, scope: &Context<'_>) -> Result<Value, String> {
        self.program.execute(scope).map_err(|e| format!("expression '{}' resulted in error: {e}", self.source))
    }

    /// Evaluates to a boolean, as conditions and validations must.
    pub fn evaluate_bool(&self, scope: &Context<'_>) -> Result<bool, String> {
        match self.evaluate(scope)? {
            Value::Bool(value) => Ok(value),
            other => Err(format!("expression '{}' resulted in a {:?}, not a bool", self.source, other.type_of())),
        }
    }
}

/// Clears `only_requester` when the expression reads the object or anything of the request but `userInfo`.
fn walk(expression: &IdedExpr, only_requester: &mut bool) {
    match &expression.expr {
        Expr::Ident(name) => {
            if name == "request" || OBJECT_VARIABLES.contains(&name.as_str()) {
                *only_requester = false;
            }
        }
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(name) if name == "request" => {
                if select.field != "userInfo" {
                    *only_requester = false;
                }
            }
            _ => walk(&select.operand, only_requester),
        },
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(target, only_requester);
            }
            call.args.iter().for_each(|arg| walk(arg, only_requester));
        }
        Expr::Comprehension(comprehension) => {
            for part in [
                &comprehension.iter_range,
                &comprehension.accu_init,
                &comprehension.loop_cond,
                &comprehension.loop_step,
                &comprehension.result,
            ] {
                walk(part, only_requester);
            }
        }
        Expr::List(list) => list.elements.iter().for_each(|element| walk(element, only_requester)),
        Expr::Map(map) => map.entries.iter().for_each(|entry| walk_entry(&entry.expr, only_requester)),
        Expr::Struct(structure) => structure.entries.iter().for_each(|entry| walk_entry(&entry.expr, only_requester)),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn walk_entry(entry: &EntryExpr, only_requester: &mut bool) {
    match entry {
        EntryExpr::StructField(field) => walk(&field.value, only_requester),
        EntryExpr::MapEntry(entry) => {
            walk(&entry.key, only_requester);
            walk(&entry.value, only_requester);
        }
    }
}

/// The functions every evaluation may call: CEL's standard library and Kubernetes' extensions. Building them
/// costs about 18 µs (measured), so an API server builds them once and evaluates in scopes below them.
pub fn functions() -> Context<'static> {
    Context::default().with_all()
}

/// JSON as Kubernetes' CEL sees it.
pub fn value_of(json: &serde_json::Value) -> Value {
    match json {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(value) => Value::Bool(*value),
        serde_json::Value::Number(number) => match number.as_i64() {
            Some(int) => Value::Int(int),
            None => match number.as_u64() {
                Some(uint) => Value::UInt(uint),
                None => Value::Float(number.as_f64().unwrap_or(f64::NAN)),
            },
        },
        serde_json::Value::String(text) => Value::String(Arc::new(text.clone())),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(value_of).collect())),
        serde_json::Value::Object(fields) => {
            let map: HashMap<Key, Value> =
                fields.iter().map(|(key, value)| (Key::String(Arc::new(key.clone())), value_of(value))).collect();
            Value::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(source: &str, bindings: &[(&str, serde_json::Value)]) -> Result<bool, String> {
        let functions = functions();
        let mut scope = functions.new_inner_scope();
        for (name, value) in bindings {
            scope.add_variable_from_value(*name, value_of(value));
        }
        Expression::compile(source).unwrap().evaluate_bool(&scope)
    }

    #[test]
    fn the_kubernetes_libraries_and_macros_policies_use_evaluate() {
        let request =
            serde_json::json!({"userInfo": {"username": "alice", "groups": ["admins", "system:authenticated"]}});
        let params = serde_json::json!({"data": {"groups": "ops, admins"}});
        let admins = "params.data.groups.split(',').exists(g, g.trim() in request.userInfo.groups)";
        assert_eq!(eval(admins, &[("request", request.clone()), ("params", params)]), Ok(true));
        let object = serde_json::json!({"spec": {"count": 1, "className": "h100"}, "metadata": {}});
        let old = serde_json::json!({"spec": {"count": 8, "className": "h100"}, "metadata": {}});
        assert_eq!(eval("object.spec != oldObject.spec", &[("object", object.clone()), ("oldObject", old)]), Ok(true));
        assert_eq!(eval("object.spec.count == 1 && !has(object.metadata.labels)", &[("object", object)]), Ok(true));
        assert_eq!(eval("oldObject == null", &[("oldObject", serde_json::Value::Null)]), Ok(true));
    }

    #[test]
    fn an_expression_that_reads_only_who_asks_is_told_apart() {
        let only = |source: &str| Expression::compile(source).unwrap().reads_only_the_requester;
        assert!(only("params == null || request.userInfo.username != params.data.controllerUser"));
        assert!(only("['a'].exists(g, g in request.userInfo.groups)"));
        assert!(!only("request.operation == 'CREATE'"));
        assert!(!only("has(object.metadata.labels)"));
        assert!(!only("request == null"));
        assert!(!only("variables.trusted"));
    }

    #[test]
    fn errors_name_the_expression() {
        assert_eq!(
            eval("object.spec.count > 1", &[("object", serde_json::json!({"spec": {}}))]).unwrap_err(),
            "expression 'object.spec.count > 1' resulted in error: No such key: count"
        );
        let error = Expression::compile("object.spec ==").unwrap_err();
        assert_eq!(error.expression, "object.spec ==");
    }
}
