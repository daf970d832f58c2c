//! `/docs`: the API reference as one HTML page, rendered on the server from the same OpenAPI
//! document `/openapi.json` serves (so it cannot drift from it), with no script and nothing from
//! a network. Operations are grouped by tag with their parameters, request body and responses in
//! tables; every schema has an anchor, and every reference to it is a link.

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

/// The page's Content-Security-Policy: its own inline stylesheet, nothing else.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; \
                       base-uri 'none'; form-action 'none'";

const STYLE: &str = "
body{font:15px/1.5 system-ui,sans-serif;max-width:64rem;margin:2rem auto;padding:0 1rem;color:#1d2125;background:#fff}
@media (prefers-color-scheme: dark){body{color:#e4e6e8;background:#16181b}a{color:#7fb0ff}
 table th,table td{border-color:#33373c} .op{border-color:#33373c} code{background:#23262a}}
h1{font-size:1.6rem} h2{margin-top:2.2rem;border-bottom:1px solid #ccc;padding-bottom:.2rem}
h3{font-size:1.05rem;margin:0 0 .3rem} .op{border:1px solid #ddd;border-radius:8px;padding:.7rem 1rem;margin:1rem 0}
code{font:13px ui-monospace,monospace;background:#f3f4f6;padding:0 .2rem;border-radius:3px}
.m{display:inline-block;min-width:4.2rem;font-weight:700;font:600 13px ui-monospace,monospace}
.get{color:#0a66c2}.post{color:#1a7f37}.patch{color:#9a6700}.put{color:#8250df}.delete{color:#cf222e}
table{border-collapse:collapse;margin:.4rem 0 .8rem;font-size:.92rem;width:100%}
th,td{border-bottom:1px solid #e1e4e8;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{font-weight:600} td.n{white-space:nowrap} .req{color:#cf222e;font-size:.8rem}
nav.toc ul{columns:2;padding-left:1.2rem} nav.toc li{break-inside:avoid}
p.sum{margin:.2rem 0 .5rem} .muted{color:#6a737d}
p,td,h1,h2,h3,li,code{overflow-wrap:anywhere}
@media (max-width:40rem){nav.toc ul{columns:1} table{display:block;overflow-x:auto}}
";

/// The service's own page, rendered once per process on its first request (the document is
/// fixed at build time).
pub fn cached() -> &'static str {
    static PAGE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PAGE.get_or_init(|| {
        // The document `/openapi.json` serves (with the event model's schemas).
        let spec = serde_json::from_str(&super::openapi_json())
            .expect("the service's own OpenAPI document is JSON");
        page(&spec)
    })
}

/// The page for `spec` (the OpenAPI document as JSON).
pub fn page(spec: &Value) -> String {
    let info = &spec["info"];
    let title = info["title"].as_str().unwrap_or("API");
    let tags: Vec<(String, String)> = spec["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_owned(),
                t["description"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    // Operations in the spec's path order, each under its first tag (untagged last).
    let mut ops: Vec<(String, &str, &str, &Value)> = Vec::new();
    if let Some(paths) = spec["paths"].as_object() {
        for (path, item) in paths {
            for method in ["get", "post", "put", "patch", "delete"] {
                if let Some(op) = item.get(method) {
                    let tag = op["tags"][0].as_str().unwrap_or("").to_owned();
                    ops.push((tag, method, path.as_str(), op));
                }
            }
        }
    }
    let mut groups: Vec<(String, String)> = tags.clone();
    for (t, ..) in &ops {
        if !groups.iter().any(|(g, _)| g == t) {
            groups.push((t.clone(), String::new()));
        }
    }
    let schemas = spec["components"]["schemas"].as_object();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (title) " API reference" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) " API reference " span.muted { "v" (info["version"].as_str().unwrap_or("")) } }
                (prose(info["description"].as_str().unwrap_or("")))
                p { "Machine-readable: " a href="/openapi.json" { "/openapi.json" } " (OpenAPI 3.1; this page is rendered from it). The dashboard is at " a href="/ui" { "/ui" } "." }
                nav.toc aria-label="Operations" {
                    h2 { "Operations" }
                    @for (g, _) in &groups {
                        h3 { a href=(format!("#tag-{g}")) { (if g.is_empty() { "other" } else { g }) } }
                        ul {
                            @for (t, method, path, op) in &ops {
                                @if t == g {
                                    li { a href=(format!("#{}", op_id(op, method, path))) {
                                        span class=(format!("m {method}")) { (method.to_uppercase()) } " " code { (path) }
                                    } }
                                }
                            }
                        }
                    }
                }
                @for (g, about) in &groups {
                    h2 id=(format!("tag-{g}")) { (if g.is_empty() { "other" } else { g }) }
                    (prose(about))
                    @for (t, method, path, op) in &ops {
                        @if t == g { (operation(method, path, op)) }
                    }
                }
                h2 #schemas { "Schemas" }
                @if let Some(schemas) = schemas {
                    @for (name, s) in schemas {
                        section.op id=(format!("schema-{name}")) {
                            h3 { code { (name) } }
                            (schema(s))
                        }
                    }
                }
            }
        }
    }
    .into_string()
}

/// An operation's anchor: its operationId, else method and path.
fn op_id(op: &Value, method: &str, path: &str) -> String {
    op["operationId"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| {
            format!("{method}-{path}")
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect()
        })
}

fn operation(method: &str, path: &str, op: &Value) -> Markup {
    let params = op["parameters"].as_array().cloned().unwrap_or_default();
    let body = &op["requestBody"];
    html! {
        section.op id=(op_id(op, method, path)) {
            h3 { span class=(format!("m {method}")) { (method.to_uppercase()) } " " code { (path) } }
            (prose(op["summary"].as_str().unwrap_or("")))
            (prose(op["description"].as_str().unwrap_or("")))
            @if !params.is_empty() {
                table {
                    caption.muted { "Parameters" }
                    thead { tr { th { "name" } th { "in" } th { "type" } th { "description" } } }
                    tbody {
                        @for p in &params {
                            tr {
                                td.n { code { (p["name"].as_str().unwrap_or("")) } @if p["required"] == true { " " span.req { "required" } } }
                                td { (p["in"].as_str().unwrap_or("")) }
                                td { (type_of(&p["schema"])) }
                                td { (inline(p["description"].as_str().unwrap_or(""))) }
                            }
                        }
                    }
                }
            }
            @if let Some(content) = body["content"].as_object() {
                p { "Request body"
                    @if body["required"] == true { " " span.req { "required" } }
                    ": "
                    @for (i, (media, c)) in content.iter().enumerate() {
                        @if i > 0 { ", " }
                        (type_of(&c["schema"])) " " span.muted { "(" (media) ")" }
                    }
                }
            }
            @if let Some(responses) = op["responses"].as_object() {
                table {
                    caption.muted { "Responses" }
                    thead { tr { th { "status" } th { "body" } th { "when" } } }
                    tbody {
                        @for (status, r) in responses {
                            tr {
                                td.n { (status) }
                                td { @if let Some(c) = r["content"].as_object() {
                                    @for (i, (_, c)) in c.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        (type_of(&c["schema"]))
                                    }
                                } }
                                td { (inline(r["description"].as_str().unwrap_or(""))) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A schema: its description, then its properties (or values, or alternatives).
fn schema(s: &Value) -> Markup {
    let required: Vec<&str> = s["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    html! {
        (prose(s["description"].as_str().unwrap_or("")))
        @if let Some(props) = s["properties"].as_object() {
            table {
                thead { tr { th { "field" } th { "type" } th { "description" } } }
                tbody {
                    @for (name, p) in props {
                        tr {
                            td.n { code { (name) } @if required.contains(&name.as_str()) { " " span.req { "required" } } }
                            td { (type_of(p)) }
                            td { (inline(p["description"].as_str().unwrap_or(""))) }
                        }
                    }
                }
            }
            @if s["additionalProperties"] == false { p.muted { "No other fields are accepted." } }
        } @else {
            p { "Type: " (type_of(s)) }
        }
    }
}

/// A schema's type in a few words, each referenced schema a link to its anchor.
fn type_of(s: &Value) -> Markup {
    if let Some(r) = s["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return html! { a href=(format!("#schema-{name}")) { code { (name) } } };
    }
    for (key, word) in [
        ("oneOf", "one of"),
        ("anyOf", "any of"),
        ("allOf", "all of"),
    ] {
        if let Some(alts) = s[key].as_array() {
            // `allOf` with one member is how a described reference is written: show the member.
            if alts.len() == 1 {
                return type_of(&alts[0]);
            }
            return html! {
                (word) " "
                @for (i, a) in alts.iter().enumerate() {
                    @if i > 0 { " | " }
                    (type_of(a))
                }
            };
        }
    }
    if let Some(values) = s["enum"].as_array() {
        return html! {
            "one of "
            @for (i, v) in values.iter().enumerate() {
                @if i > 0 { ", " }
                code { (v.as_str().map(|t| format!("\"{t}\"")).unwrap_or_else(|| v.to_string())) }
            }
        };
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let nullable = types.contains(&"null");
    let main: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
    let mut bounds = Vec::new();
    for (k, w) in [
        ("minimum", "≥"),
        ("exclusiveMinimum", ">"),
        ("maximum", "≤"),
        ("exclusiveMaximum", "<"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
    ] {
        if let Some(v) = s.get(k).filter(|v| v.is_number()) {
            bounds.push(format!("{w} {v}"));
        }
    }
    html! {
        @if main == ["array"] {
            "array of " (type_of(&s["items"]))
        } @else if main.is_empty() {
            "any JSON"
        } @else {
            (main.join(" or "))
            @if let Some(f) = s["format"].as_str() { " (" (f) ")" }
        }
        @if !bounds.is_empty() { " " span.muted { (bounds.join(", ")) } }
        @if nullable { span.muted { " or null" } }
    }
}

/// Text with blank lines as paragraph breaks.
fn prose(text: &str) -> Markup {
    html! {
        @for para in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
            p.sum { (inline(para)) }
        }
    }
}

/// A line of text with `backticked` spans as code.
fn inline(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_and_schema_is_on_the_page_and_every_link_lands() {
        let spec: Value = serde_json::from_str(&crate::http::openapi_json()).unwrap();
        let html = page(&spec);
        for (path, item) in spec["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op_id(op, method, path);
                assert!(html.contains(&format!("id=\"{id}\"")), "{method} {path}");
            }
        }
        for name in spec["components"]["schemas"].as_object().unwrap().keys() {
            assert!(html.contains(&format!("id=\"schema-{name}\"")), "{name}");
        }
        for link in html.split("href=\"#").skip(1) {
            let target = link.split('"').next().unwrap();
            assert!(
                html.contains(&format!("id=\"{target}\"")),
                "#{target} lands nowhere"
            );
        }
        assert!(!html.contains("<script"));
    }

    #[test]
    fn text_is_escaped_and_code_spans_are_code() {
        let m = inline("use `a<b>` & more").into_string();
        assert_eq!(m, "use <code>a&lt;b&gt;</code> &amp; more");
    }
}
