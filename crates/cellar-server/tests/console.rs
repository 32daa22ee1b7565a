//! The search console at `/ui`, driven in-process: its page and assets load without the API key
//! and link nothing outside the server, and the searches it sends still need the key. What a
//! browser shows is `python/tests/test_ui.py` (headless Chromium).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};

mod common;

use common::config;
use common::http::{app_with, call, post};

/// A GET's status, content type, content security policy and body.
async fn fetch(app: &axum::Router, path: &str) -> (StatusCode, String, String, String) {
    use tower::ServiceExt;
    let response = app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
    let header = |name| {
        response
            .headers()
            .get(name)
            .map_or(String::new(), |v: &axum::http::HeaderValue| v.to_str().unwrap().to_string())
    };
    let (status, kind, policy) =
        (response.status(), header("content-type"), header("content-security-policy"));
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, kind, policy, String::from_utf8(bytes.to_vec()).unwrap())
}

#[tokio::test]
async fn the_console_loads_without_the_api_key_and_its_searches_still_need_it() {
    let mut keyed = config();
    keyed.api_key = Some("s3cret".into());
    let (_, app) = app_with(keyed);
    let (status, kind, policy, page) = fetch(&app, "/ui").await;
    assert_eq!((status, kind.as_str()), (StatusCode::OK, "text/html; charset=utf-8"));
    assert!(page.contains("id=\"query-form\"") && page.contains("id=\"timing-bar\""), "{page}");
    assert!(policy.contains("default-src 'none'") && policy.contains("connect-src 'self'"), "{policy}");
    let mut script = String::new();
    for (asset, expected) in
        [("/ui/console.js", "text/javascript; charset=utf-8"), ("/ui/console.css", "text/css; charset=utf-8")]
    {
        assert!(page.contains(&format!("\"{asset}\"")), "the page links {asset}");
        let (status, kind, _, body) = fetch(&app, asset).await;
        assert_eq!((status, kind.as_str()), (StatusCode::OK, expected), "{asset}");
        assert!(!body.trim().is_empty(), "{asset} is empty");
        // Nothing from elsewhere (the one absolute URL is the SVG namespace, a name, not a fetch).
        for text in [&page, &body] {
            let outside = text.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside.contains("http://") && !outside.contains("https://"), "{asset} links outside");
        }
        if asset.ends_with(".js") {
            script = body;
        }
    }
    let (status, _, _, missing) = fetch(&app, "/ui/missing.js").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let missing: Value = serde_json::from_str(&missing).unwrap();
    assert_eq!(missing["code"], "not_found", "{missing}");
    assert!(missing["message"].as_str().unwrap().contains("console.js"), "it names the assets: {missing}");
    // The page searches with the key it is given, and a search from it without one is refused.
    assert!(script.contains("'/v1/search'") && script.contains("Authorization: 'Bearer '"));
    let body = json!({"query": "coffee", "mode": "bm25", "k": 3}).to_string();
    let mut from_page = post("/v1/search", body.clone());
    from_page.headers_mut().insert("referer", "http://127.0.0.1:7700/ui".parse().unwrap());
    let (status, answer, _) = call(&app, from_page).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    let mut keyed = post("/v1/search", body);
    keyed.headers_mut().insert("authorization", "Bearer s3cret".parse().unwrap());
    let (status, answer, _) = call(&app, keyed).await;
    assert_eq!((status, answer["hits"][0]["id"].as_str()), (StatusCode::OK, Some("espresso")));
    // What the page reads besides: keyless, as for every client.
    for path in ["/metrics", "/healthz", "/openapi.json"] {
        assert_eq!(fetch(&app, path).await.0, StatusCode::OK, "{path}");
    }
    let (_, doc, _) = call(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    for path in ["/ui", "/ui/{asset}"] {
        let operation = &doc["paths"][path]["get"];
        assert!(operation.is_object() && operation["security"].is_null(), "{path}: {operation}");
    }
}
