//! `GET /openapi.json`, generated: each API module declares its endpoints as [`Operation`]s and
//! registers them through [`Api::route`], which adds the route to the router and the operation
//! to the document in one call, so the two cannot drift. Request and response bodies are the
//! JSON schemas of the Rust types the handlers deserialize and serialize (schemars); path
//! parameters are read off the path.

use std::sync::Arc;

use axum::routing::MethodRouter;
use axum::Router;
use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::app::AppState;
use crate::error::ErrorBody;

/// A body's schema, made by a generator (so named types land in `components/schemas`).
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T` for [`Operation::request`] and [`Operation::response`].
pub fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// One endpoint as the document shows it.
#[derive(Clone, Copy)]
pub struct Operation {
    /// `get`, `post`, `put` or `delete`.
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    /// The JSON body it takes, if any.
    pub request: Option<SchemaFn>,
    /// What a 200 holds, in words.
    pub ok: &'static str,
    /// The 200 body's schema, when it is a typed one.
    pub response: Option<SchemaFn>,
    /// Error statuses it may answer, besides those every `/v1` route may (401, 429, 504).
    pub errors: &'static [(u16, &'static str)],
}

impl Operation {
    pub const fn new(method: &'static str, path: &'static str, summary: &'static str) -> Operation {
        Operation { method, path, summary, request: None, ok: "ok", response: None, errors: &[] }
    }
}

/// Errors a request body can cause on every endpoint that takes one.
pub const BODY_ERRORS: &[(u16, &str)] = &[
    (400, "Malformed JSON, an unknown field, or an invalid value"),
    (413, "Body larger than the server's limit"),
    (415, "Body is not application/json"),
];

/// Routes and their operations, registered together.
pub struct Api {
    router: Router<Arc<AppState>>,
    operations: Vec<Operation>,
}

impl Default for Api {
    fn default() -> Self {
        Api { router: Router::new(), operations: Vec::new() }
    }
}

impl Api {
    /// Adds `handler` at `operation.path` and `operation` to the document. `handler` must serve
    /// exactly `operation.method` (a second operation on the same path adds its method).
    pub fn route(mut self, operation: Operation, handler: MethodRouter<Arc<AppState>>) -> Api {
        self.router = self.router.route(operation.path, handler);
        self.operations.push(operation);
        self
    }

    /// [`Api::route`], and the same operation at `named`, its `/v1/indexes/{name}/...` twin: one
    /// handler serves both, on the `--index` or on the data directory's index `{name}`
    /// (`indexes::Target`).
    pub fn route_twins(
        self,
        operation: Operation,
        named: &'static str,
        handler: MethodRouter<Arc<AppState>>,
    ) -> Api {
        let twin = Operation { path: named, ..operation };
        self.route(operation, handler.clone()).route(twin, handler)
    }

    /// Both APIs in one.
    pub fn merge(mut self, other: Api) -> Api {
        self.router = self.router.merge(other.router);
        self.operations.extend(other.operations);
        self
    }

    /// The router and its operations (for [`document`]).
    pub fn into_parts(self) -> (Router<Arc<AppState>>, Vec<Operation>) {
        (self.router, self.operations)
    }
}

/// `{x}` segments of a path, in order.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/').filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect()
}

fn error_response(text: &str) -> Value {
    json!({ "description": text, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } } })
}

fn operation_json(op: &Operation, requests: &mut SchemaGenerator, responses: &mut SchemaGenerator) -> Value {
    let mut out = Map::new();
    out.insert("summary".into(), json!(op.summary));
    let params: Vec<Value> = path_params(op.path)
        .into_iter()
        .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
        .collect();
    if !params.is_empty() {
        out.insert("parameters".into(), Value::Array(params));
    }
    let mut codes = Map::new();
    let mut ok = json!({ "description": op.ok });
    if let Some(response) = op.response {
        ok["content"] = json!({ "application/json": { "schema": response(responses) } });
    }
    codes.insert("200".into(), ok);
    if let Some(request) = op.request {
        out.insert(
            "requestBody".into(),
            json!({ "required": true, "content": { "application/json": { "schema": request(requests) } } }),
        );
        for (status, text) in BODY_ERRORS {
            codes.insert(status.to_string(), error_response(text));
        }
    }
    for (status, text) in op.errors {
        codes.insert(status.to_string(), error_response(text));
    }
    if op.path.starts_with("/v1/") {
        out.insert("security".into(), json!([{ "bearer": [] }, { "apiKey": [] }, {}]));
        codes.insert("401".into(), error_response("Missing or wrong API key (when the server has one)"));
        codes.insert("429".into(), error_response("The server is full; see the Retry-After header"));
        codes.insert("504".into(), error_response("The request's deadline passed"));
    }
    out.insert("responses".into(), Value::Object(codes));
    Value::Object(out)
}

/// The OpenAPI 3.1 document of `operations`.
pub fn document(operations: &[Operation]) -> Value {
    let settings = |contract| {
        let mut s = SchemaSettings::draft2020_12();
        s.definitions_path = "/components/schemas".into();
        s.meta_schema = None;
        s.contract = contract;
        s
    };
    let mut requests = settings(Contract::Deserialize).into_generator();
    let mut responses = settings(Contract::Serialize).into_generator();
    responses.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for op in operations {
        let entry = paths.entry(op.path.to_string()).or_insert_with(|| json!({}));
        entry[op.method] = operation_json(op, &mut requests, &mut responses);
    }
    let mut schemas = responses.take_definitions(true);
    // Request schemas win where a type appears in both (the request's contract is the stricter).
    schemas.extend(requests.take_definitions(true));
    json!({
        "openapi": "3.1.0",
        "info": { "title": "Cellar", "version": env!("CARGO_PKG_VERSION"), "description": "SSD-resident late-interaction retrieval" },
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" }, "apiKey": { "type": "apiKey", "in": "header", "name": "X-Api-Key" } }
        },
        "paths": paths,
    })
}
