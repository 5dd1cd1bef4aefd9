use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;

use super::*;
use crate::tools::tests::ctx_in;

/// Serves each connection the response `route` gives for its request
/// path, on 127.0.0.1; returns the port.
fn serve(route: fn(&str, u16) -> String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
            }
            let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
            let _ = stream.write_all(route(&path, port).as_bytes());
        }
    });
    port
}

fn response(status: &str, headers: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn site(path: &str, port: u16) -> String {
    match path {
        "/page" => response(
            "200 OK",
            "Content-Type: text/html; charset=utf-8\r\n",
            "<html><body><h1>Hello</h1><p>From <b>the</b> server.</p></body></html>",
        ),
        "/notes.txt" => response("200 OK", "Content-Type: text/plain\r\n", "just text"),
        "/image" => response("200 OK", "Content-Type: image/png\r\n", "\u{89}PNG"),
        "/missing" => response("404 Not Found", "", "no"),
        "/hop" => response("302 Found", "Location: /page\r\n", ""),
        "/away" => response(
            "301 Moved",
            &format!("Location: http://localhost:{port}/page\r\n"),
            "",
        ),
        "/loop" => response("302 Found", "Location: /loop\r\n", ""),
        _ => response("500 Oops", "", ""),
    }
}

fn ctx_with(rules: &[&str]) -> (tempfile::TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let mut ctx = ctx_in(dir.path());
    let rules: Vec<Rule> = rules.iter().map(|r| r.parse().unwrap()).collect();
    ctx.web = WebAccess::new(
        Arc::default(),
        &crate::config::WebSection::default(),
        &rules,
    );
    (dir, ctx)
}

async fn fetch_text(ctx: &ToolContext, url: &str) -> Result<String, String> {
    run(json!({ "url": url }), ctx)
        .await
        .map(|o| o.content)
        .map_err(|e| e.0)
}

#[tokio::test]
async fn loopback_needs_a_rule_that_names_it() {
    let port = serve(site);
    let url = format!("http://127.0.0.1:{port}/page");
    let (_d, ctx) = ctx_with(&["allow web_fetch"]);
    let err = fetch_text(&ctx, &url).await.unwrap_err();
    assert!(err.contains("a loopback address"), "{err}");
    assert!(err.contains("allow web_fetch(domain:127.0.0.1)"), "{err}");

    let (_d, ctx) = ctx_with(&["allow web_fetch(domain:127.0.0.1)"]);
    let page = fetch_text(&ctx, &url).await.unwrap();
    assert!(page.contains("# Hello"), "{page}");
    assert!(page.contains("From **the** server."), "{page}");
    assert!(
        page.starts_with(&format!("URL: {url}\nContent-Type: text/html")),
        "{page}"
    );
}

#[tokio::test]
async fn text_binary_errors_and_redirects() {
    let port = serve(site);
    let base = format!("http://127.0.0.1:{port}");
    let (_d, ctx) = ctx_with(&["allow web_fetch(domain:127.0.0.1)"]);
    assert!(
        fetch_text(&ctx, &format!("{base}/notes.txt"))
            .await
            .unwrap()
            .ends_with("just text")
    );
    let err = fetch_text(&ctx, &format!("{base}/image"))
        .await
        .unwrap_err();
    assert!(err.contains("binary content (image/png)"), "{err}");
    let err = fetch_text(&ctx, &format!("{base}/missing"))
        .await
        .unwrap_err();
    assert!(err.contains("HTTP 404"), "{err}");
    let hop = fetch_text(&ctx, &format!("{base}/hop")).await.unwrap();
    assert!(hop.starts_with(&format!("URL: {base}/page")), "{hop}");
    let err = fetch_text(&ctx, &format!("{base}/loop")).await.unwrap_err();
    assert!(err.contains("more than 5 redirects"), "{err}");
    // Another host the rules do not allow: the model is told where.
    let away = fetch_text(&ctx, &format!("{base}/away")).await.unwrap();
    assert!(
        away.contains(&format!("redirects to http://localhost:{port}/page")),
        "{away}"
    );
    let err = fetch_text(&ctx, "ftp://example.org/x").await.unwrap_err();
    assert!(err.contains("only http and https"), "{err}");
    let err = fetch_text(&ctx, "https://ex%61mple.org/")
        .await
        .unwrap_err();
    assert!(err.contains("cannot be read unambiguously"), "{err}");
}

#[tokio::test]
async fn pages_are_cached_and_cut_to_the_budget() {
    let port = serve(site);
    let url = format!("http://127.0.0.1:{port}/page");
    let (_d, ctx) = ctx_with(&["allow web_fetch(domain:127.0.0.1)"]);
    let first = fetch_text(&ctx, &url).await.unwrap();
    assert!(ctx.web.cache.get(&url, ctx.web.cache_ttl).is_some());
    assert_eq!(fetch_text(&ctx, &url).await.unwrap(), first);
    let page = cache::Page {
        url: "https://x.org/".into(),
        content_type: String::new(),
        text: "line\n".repeat(10_000),
        cut: true,
    };
    let out = render(&page, 2_000, 50_000).content;
    assert!(out.len() < 2_200, "{}", out.len());
    assert!(
        out.contains("[output truncated: 50000 bytes total"),
        "{out}"
    );
    assert!(out.contains("only the first 50000 bytes"), "{out}");
}
