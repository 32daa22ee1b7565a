//! `GET /openapi.json`: the API described in OpenAPI 3.1, written by hand next to the types it
//! describes (a test checks every route of the router is in it).

use serde_json::{json, Value};

use crate::api::{DEFAULT_K, MAX_BATCH};
use cellar_search::params::{Mode, MAX_K, MAX_QUERY_BYTES};
use cellar_search::search::MAX_QUERY_VECTORS;

fn error_responses() -> Value {
    let error =
        json!({ "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
    let described = |text: &str| {
        let mut e = error.clone();
        e["description"] = json!(text);
        e
    };
    json!({
        "400": described("Malformed JSON, unknown field, or an invalid value (empty query, k, alpha, mode, NaN)"),
        "401": described("Missing or wrong API key (when the server has one)"),
        "413": described("Body larger than the server's limit"),
        "415": described("Body is not application/json"),
        "422": described("A query vector has the wrong dimension"),
        "429": described("The queue is full; see the Retry-After header"),
        "503": described("The query encoder's model is unavailable"),
        "504": described("The request's deadline passed")
    })
}

fn schemas() -> Value {
    json!({
        "SearchRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "query": { "type": "string", "maxLength": MAX_QUERY_BYTES, "description": "Query text (may be empty only in the dense-exact, ivf and dense modes with query_vectors)" },
                "k": { "type": "integer", "minimum": 1, "maximum": MAX_K, "default": DEFAULT_K },
                "mode": { "type": "string", "enum": Mode::ALL.map(Mode::name), "description": "Default: the index's (index.json). dense-exact: pooled-vector scan; ivf: the IVF alone; dense: IVF then MaxSim; rerank: BM25 then MaxSim; hybrid: BM25 (+ IVF candidates) then fused MaxSim" },
                "nprobe": { "type": "integer", "minimum": 1, "description": "IVF clusters probed (at most the IVF's cluster count)" },
                "oversample": { "type": "number", "minimum": 1, "maximum": 100, "description": "IVF shortlist as a multiple of the depth" },
                "rescore": { "type": "boolean", "description": "Rescore the IVF shortlist with full-precision vectors" },
                "prefetch": { "type": "boolean", "description": "Read likely candidates' token records while the IVF probe runs" },
                "prefetch_step": { "type": "number", "exclusiveMinimum": 0, "maximum": 1, "description": "Fraction of nprobe probed before the prefetch starts" },
                "hybrid_candidates": { "type": "integer", "minimum": 0, "description": "Hybrid: IVF candidates joined to BM25's" },
                "alpha": { "type": "number", "minimum": 0, "maximum": 1, "description": "Weight of z(BM25) in hybrid fusion" },
                "rerank_k": { "type": "integer", "minimum": 0, "description": "First-stage candidates re-scored with MaxSim" },
                "candidates": { "type": "integer", "minimum": 1, "description": "First-stage depth" },
                "include_text": { "type": "boolean", "default": true },
                "query_vectors": { "$ref": "#/components/schemas/QueryVectors" }
            }
        },
        "QueryVectors": {
            "type": "object",
            "additionalProperties": false,
            "description": "Caller-encoded query, in the model's output space (before any PCA); replaces server-side encoding",
            "properties": {
                "tokens": { "type": "array", "maxItems": MAX_QUERY_VECTORS, "description": "At least one row for the modes that score MaxSim", "items": { "type": "array", "items": { "type": "number" } } },
                "pooled": { "type": "array", "items": { "type": "number" }, "description": "Needed by dense-exact, ivf, dense, and hybrid with IVF candidates" }
            }
        },
        "SearchResponse": {
            "type": "object",
            "properties": {
                "hits": { "type": "array", "items": { "$ref": "#/components/schemas/Hit" } },
                "params": { "type": "object" },
                "candidates": { "type": "integer" },
                "reranked": { "type": "integer" },
                "timings": { "type": "object", "description": "Milliseconds: queue, encode, first_stage, read, maxsim, fuse, text, total" },
                "io": { "type": "object", "properties": { "read_calls": { "type": "integer" }, "pages": { "type": "integer" }, "bytes_read": { "type": "integer" } } }
            }
        },
        "Hit": {
            "type": "object",
            "properties": {
                "id": { "type": "string" }, "internal_id": { "type": "integer" }, "score": { "type": "number" },
                "stage": { "type": "string" }, "first_stage_score": { "type": "number" }, "maxsim": { "type": ["number", "null"] },
                "title": { "type": "string" }, "text": { "type": "string" }
            }
        },
        "BatchRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["queries"],
            "properties": { "queries": { "type": "array", "minItems": 1, "maxItems": MAX_BATCH, "items": { "$ref": "#/components/schemas/SearchRequest" } } }
        },
        "StreamDoc": {
            "type": "object",
            "additionalProperties": false,
            "description": "A streaming document. group and id come from the URL on PUT (if given in the body they must agree) and from the body in a feed. Without tokens the server encodes text with its model",
            "properties": {
                "group": { "type": "string", "maxLength": cellar_stream::doc::MAX_KEY_BYTES },
                "id": { "type": "string", "maxLength": cellar_stream::doc::MAX_KEY_BYTES },
                "text": { "type": "string", "maxLength": cellar_stream::doc::MAX_TEXT_BYTES },
                "metadata": { "type": "object", "maxProperties": cellar_stream::doc::MAX_META_FIELDS, "additionalProperties": { "type": ["string", "number", "boolean"] } },
                "tokens": { "type": "array", "minItems": 1, "maxItems": cellar_stream::doc::MAX_TOKENS, "items": { "type": "array", "items": { "type": "number" } } },
                "pooled": { "type": "array", "items": { "type": "number" }, "description": "Default: the normalised mean of the token vectors" }
            }
        },
        "FeedRequest": {
            "type": "object",
            "additionalProperties": false,
            "required": ["docs"],
            "properties": { "docs": { "type": "array", "minItems": 1, "maxItems": crate::streams::MAX_FEED, "items": { "$ref": "#/components/schemas/StreamDoc" } } }
        },
        "StreamSearchRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "query": { "type": "string", "description": "Encoded by the server when query_tokens is absent" },
                "query_tokens": { "type": "array", "items": { "type": "array", "items": { "type": "number" } } },
                "query_pooled": { "type": "array", "items": { "type": "number" } },
                "mode": { "type": "string", "enum": ["maxsim", "pooled"], "default": "maxsim" },
                "k": { "type": "integer", "minimum": 1, "maximum": cellar_stream::search::MAX_K, "default": cellar_stream::input::DEFAULT_K },
                "require_terms": { "type": "string", "description": "Only documents holding every term (lowercased, split on non-alphanumerics)" },
                "filters": { "type": "object", "description": "Metadata equality filters, all required" },
                "include_text": { "type": "boolean", "default": true }
            }
        },
        "Error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": { "code": { "type": "string" }, "message": { "type": "string" }, "details": { "type": "object" } }
        }
    })
}

fn json_body(schema: &str) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{schema}") } } } })
}

fn stream_responses(ok: &str) -> Value {
    let mut responses = error_responses();
    responses["404"] = json!({ "description": "No such stream, group or document (or the server serves no streams)", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
    responses["200"] = json!({ "description": ok });
    responses
}

/// The whole document.
pub fn document() -> Value {
    let mut search_responses = error_responses();
    search_responses["200"] = json!({ "description": "Ranked hits", "content": { "application/json": { "schema": { "$ref": "#/components/schemas/SearchResponse" } } } });
    let mut batch_responses = error_responses();
    batch_responses["200"] =
        json!({ "description": "One result per query, in order: a SearchResponse or {\"error\": Error}" });
    json!({
        "openapi": "3.1.0",
        "info": { "title": "Cellar", "version": env!("CARGO_PKG_VERSION"), "description": "SSD-resident late-interaction retrieval" },
        "components": {
            "schemas": schemas(),
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" }, "apiKey": { "type": "apiKey", "in": "header", "name": "X-Api-Key" } }
        },
        "paths": {
            "/v1/search": { "post": { "summary": "Search one query", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "requestBody": json_body("SearchRequest"), "responses": search_responses } },
            "/v1/search/batch": { "post": { "summary": "Search up to 64 queries", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "requestBody": json_body("BatchRequest"), "responses": batch_responses } },
            "/v1/streams/{name}": { "get": { "summary": "A streaming collection's figures (segments, memtable, RAM, disk)", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "responses": stream_responses("Stats") } },
            "/v1/streams/{name}/feed": { "post": { "summary": "Write up to 1000 documents as one batch (one log record, one fsync); creates the stream", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "requestBody": json_body("FeedRequest"), "responses": stream_responses("{stream, written, last_seq}") } },
            "/v1/streams/{name}/groups/{group}/docs/{id}": {
                "put": { "summary": "Write or replace one document (durable when answered); creates the stream", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "requestBody": json_body("StreamDoc"), "responses": stream_responses("{stream, group, id, seq}") },
                "get": { "summary": "Read one document (text, metadata, n_tokens)", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "responses": stream_responses("{group, id, seq, text, n_tokens, metadata}") },
                "delete": { "summary": "Delete one document (404 when it does not exist)", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "responses": stream_responses("{deleted, group, id, seq}") }
            },
            "/v1/streams/{name}/groups/{group}/search": { "post": { "summary": "Exact top-k in one group: MaxSim or pooled, optional filters and term match", "security": [{ "bearer": [] }, { "apiKey": [] }, {}], "requestBody": json_body("StreamSearchRequest"), "responses": stream_responses("{hits: [{id, score, text, metadata}], stats, timings}") } },
            "/healthz": { "get": { "summary": "Liveness and index facts", "responses": { "200": { "description": "ok" } } } },
            "/metrics": { "get": { "summary": "Prometheus text metrics", "responses": { "200": { "description": "text/plain; version=0.0.4" } } } },
            "/openapi.json": { "get": { "summary": "This document", "responses": { "200": { "description": "OpenAPI 3.1" } } } }
        }
    })
}
