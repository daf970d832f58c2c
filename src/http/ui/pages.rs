//! The dashboard's pages: pure functions from the ledger's views to HTML (maud escapes every
//! interpolated value). No script: links and forms only, so every page works with a keyboard
//! and without JavaScript.

use super::charts::{self, Curve, Step};
use super::fmt::{enc, num, num_down, num_up};
use crate::ledger::audit::AuditView;
use crate::ledger::dashboard::{DatasetCard, DatasetPage, UnitLine};
use crate::ledger::Preview;
use maud::{html, Markup, DOCTYPE};

/// Rows per page of the units table.
pub const TABLE_PAGE: usize = 100;

/// What a page's frame needs: its title, who is signed in, and which navigation item is current.
pub struct Frame<'a> {
    pub title: &'a str,
    pub principal: Option<&'a str>,
    pub current: Nav,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Datasets,
    Audit,
    None,
}

/// The common frame: header, navigation, main content.
pub fn layout(f: &Frame<'_>, body: Markup) -> Markup {
    let item = |nav: Nav, href: &str, label: &str| {
        html! {
            @if f.current == nav {
                a href=(href) aria-current="page" { (label) }
            } @else {
                a href=(href) { (label) }
            }
        }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                title { (f.title) " · privacy-ledger" }
                link rel="stylesheet" href="/ui/assets/style.css";
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/ui" { "privacy-ledger" }
                    @if let Some(p) = f.principal {
                        nav aria-label="Main" {
                            (item(Nav::Datasets, "/ui", "Datasets"))
                            (item(Nav::Audit, "/ui/audit", "Audit log"))
                            a href="/docs" { "API" }
                        }
                        form.signout method="post" action="/ui/signout" {
                            span.who { "Signed in as " strong { (p) } }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main #main { (body) }
            }
        }
    }
}

/// The sign-in form (with the reason of a failed attempt).
pub fn signin(error: Option<&str>) -> Markup {
    let f = Frame {
        title: "Sign in",
        principal: None,
        current: Nav::None,
    };
    layout(
        &f,
        html! {
            section.signin {
                h1 { "Sign in" }
                p { "Use an API token (" code { "pl_…" } "): the first start printed one, "
                    code { "privacy-ledger token create" } " makes more. The dashboard shows what the token may see." }
                @if let Some(e) = error {
                    p.error role="alert" { (e) }
                }
                form method="post" action="/ui/signin" {
                    label for="token" { "Token" }
                    input #token type="password" name="token" autocomplete="current-password" required autofocus;
                    button type="submit" { "Sign in" }
                }
            }
        },
    )
}

/// An error page (the API's code and message).
pub fn error(principal: Option<&str>, status: u16, code: &str, message: &str) -> Markup {
    let f = Frame {
        title: "Error",
        principal,
        current: Nav::None,
    };
    layout(
        &f,
        html! {
            section.error-page {
                h1 { "Something went wrong (" (status) ")" }
                p.error role="alert" { code { (code) } ": " (message) }
                p { a href="/ui" { "Back to the datasets" } }
            }
        },
    )
}

/// Share of the filter's budget used, Σμᵢ²/μ_B² (the quantity the gate adds up).
fn used(card: &DatasetCard) -> f64 {
    let d = &card.dataset;
    (d.mu_spent / d.budget.mu()).powi(2)
}

/// "About N more units like the last one".
fn more_like(card: &DatasetCard) -> Markup {
    html! {
        @match (card.last_unit, card.more_like_last) {
            (Some(u), Some(n)) => {
                "about " strong { (n) } " more "
                (if n == 1 { "unit" } else { "units" })
                " like the last one (μ = " (num_up(u.mu())) ", δ = " (num_up(u.delta())) ")"
            }
            _ => "no units yet",
        }
    }
}

/// The datasets page: one card per dataset.
pub fn datasets(principal: &str, cards: &[DatasetCard], next: Option<&str>) -> Markup {
    let f = Frame {
        title: "Datasets",
        principal: Some(principal),
        current: Nav::Datasets,
    };
    layout(
        &f,
        html! {
            h1 { "Datasets" }
            @if cards.is_empty() {
                p.empty { "No dataset you may see yet. An admin creates one with "
                    code { "POST /v1/datasets" } " or grants you one." }
            }
            ul.cards {
                @for c in cards {
                    @let d = &c.dataset;
                    @let u = used(c);
                    li.card {
                        (charts::ring(u, &format!("{}%", num_up(100.0 * u)),
                            &format!("{}% of the budget used", num_up(100.0 * u))))
                        div {
                            h2 { a href=(format!("/ui/datasets/{}", d.id)) { (d.id) } }
                            @if !d.description.is_empty() { p.desc { (d.description) } }
                            dl.figures {
                                dt { "μ spent" } dd { (num_up(d.mu_spent)) " of " (num(d.budget.mu())) }
                                dt { "δ spent" } dd { (num_up(d.delta_spent)) " of " (num(d.budget.delta())) }
                                dt { "μ remaining" } dd { (num_down(d.remaining_mu)) }
                                dt { "units" } dd { (d.units) @if d.reserved_units > 0 { " (" (d.reserved_units) " reserved)" } }
                            }
                            p.more { (more_like(c)) }
                        }
                    }
                }
            }
            @if let Some(n) = next {
                p { a href=(format!("/ui?after={n}")) { "More datasets →" } }
            }
        },
    )
}

/// Filters of the units table (query parameters of the dataset page).
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct TableFilter {
    /// Text in the label, charge id or run id.
    #[serde(default)]
    pub q: String,
    #[serde(default)]
    pub principal: String,
    /// `committed`, `reserved`, `released` or empty.
    #[serde(default)]
    pub status: String,
    /// Page of the table, newest first, from 0.
    #[serde(default)]
    pub page: usize,
    /// `log` for a log-scale α axis.
    #[serde(default)]
    pub alpha: String,
}

impl TableFilter {
    fn matches(&self, c: &UnitLine) -> bool {
        let q = self.q.trim().to_lowercase();
        (q.is_empty()
            || c.label.as_deref().unwrap_or("").to_lowercase().contains(&q)
            || c.id.to_lowercase().contains(&q)
            || c.run_id
                .as_deref()
                .unwrap_or("")
                .to_lowercase()
                .contains(&q))
            && (self.principal.is_empty()
                || c.principal.as_deref() == Some(self.principal.as_str()))
            && (self.status.is_empty() || c.status == self.status)
    }

    /// The page's link with this filter and `change` applied.
    fn link(&self, id: &str, change: impl FnOnce(&mut TableFilter)) -> String {
        let mut f = self.clone();
        change(&mut f);
        let mut q = vec![];
        for (k, v) in [
            ("q", f.q.as_str()),
            ("principal", f.principal.as_str()),
            ("status", f.status.as_str()),
            ("alpha", f.alpha.as_str()),
        ] {
            if !v.is_empty() {
                q.push(format!("{k}={}", enc(v)));
            }
        }
        if f.page > 0 {
            q.push(format!("page={}", f.page));
        }
        let qs = if q.is_empty() {
            String::new()
        } else {
            format!("?{}", q.join("&"))
        };
        format!("/ui/datasets/{id}{qs}")
    }
}

/// A dataset's page.
pub fn dataset(principal: &str, p: &DatasetPage, filter: &TableFilter) -> Markup {
    let d = &p.card.dataset;
    let f = Frame {
        title: &d.id,
        principal: Some(principal),
        current: Nav::Datasets,
    };
    let r = &p.report;
    let log = filter.alpha == "log";
    let steps: Vec<Step<'_>> = p
        .units
        .iter()
        .filter(|c| c.status != "released")
        .filter_map(|c| {
            c.mu_after.map(|m| Step {
                seq: c.seq,
                at: &c.created_at,
                mu_after: m,
                reserved: matches!(c.status.as_str(), "reserved" | "started"),
            })
        })
        .collect();
    let pts = |t: &[crate::accountant::report::TradeoffPoint]| -> Vec<(f64, f64)> {
        t.iter().map(|q| (q.alpha, q.beta)).collect()
    };
    let stated = match d.statement.validity {
        crate::ledger::Validity::Always => {
            "Guarantee: G_μmax ⊗ f_0,δmax at the budget's cap (holds however the charges and budget \
             changes were chosen)"
        }
        crate::ledger::Validity::UnlessRaised => {
            "Guarantee: G_μmax ⊗ f_0,δmax at the highest budget so far (holds unless the budget is \
             raised above it)"
        }
        crate::ledger::Validity::Unknown => {
            "Not a guarantee: no filter statement holds for this ledger's past (G_μmax ⊗ f_0,δmax \
             drawn for reference)"
        }
    };
    let mut curves = vec![Curve {
        name: stated,
        class: "guarantee",
        points: pts(&r.report.tradeoff),
    }];
    if let Some(s) = &p.spending {
        curves.push(Curve {
            name:
                "Spent so far, G_μspent ⊗ f_0,δspent: progress toward the budget, not a guarantee",
            class: "spent",
            points: pts(s),
        });
    }
    if let Some(x) = &r.exact_composition {
        curves.push(Curve {
            name: "Exact composition of the charges: valid only if they had been fixed in advance",
            class: "exact",
            points: pts(&x.report.tradeoff),
        });
    }
    let rows: Vec<&UnitLine> = p.units.iter().rev().filter(|c| filter.matches(c)).collect();
    let pages = rows.len().div_ceil(TABLE_PAGE).max(1);
    let page = filter.page.min(pages - 1);
    let shown =
        &rows[(page * TABLE_PAGE).min(rows.len())..((page + 1) * TABLE_PAGE).min(rows.len())];
    let principals: std::collections::BTreeSet<&str> = p
        .units
        .iter()
        .filter_map(|c| c.principal.as_deref())
        .collect();
    let u = used(&p.card);
    layout(
        &f,
        html! {
            nav.crumbs aria-label="Breadcrumb" { a href="/ui" { "Datasets" } " / " (d.id) }
            h1 { (d.id) }
            @if !d.description.is_empty() { p.desc { (d.description) } }
            section.summary aria-label="Budget" {
                (charts::ring(u, &format!("{}%", num_up(100.0 * u)),
                    &format!("{}% of the budget used", num_up(100.0 * u))))
                dl.figures {
                    dt { "μ spent (√Σμᵢ²)" } dd { span #mu-spent { (num_up(d.mu_spent)) } span.of { " of budget μ = " (num(d.budget.mu())) } }
                    dt { "δ spent (Σδᵢ)" } dd { span #delta-spent { (num_up(d.delta_spent)) } span.of { " of budget δ = " (num(d.budget.delta())) } }
                    dt { "μ remaining" } dd { span #mu-remaining { (num_down(d.remaining_mu)) } }
                    dt { "units" } dd { span #units { (d.units) } @if d.reserved_units > 0 { span.of { ", " (d.reserved_units) " reserved" } } }
                    @if let Some(x) = d.exact_composition_mu {
                        dt { "exact composition μ" } dd { span #exact-mu { (num_up(x)) } span.of { " if fixed in advance (comparison only)" } }
                    }
                    dt { "neighbouring relation" } dd { (d.neighboring_relation.as_str()) }
                    dt { "statement" } dd #statement { "G_μ ⊗ f_0,δ at μ = " (num_up(d.statement.mu)) ", δ = " (num_up(d.statement.delta)) ": " (d.statement.note) }
                }
                p.more { (more_like(&p.card)) ", each charged on its own." }
            }
            @if let Some(b) = &p.blocks {
                section aria-labelledby="h-blocks" {
                    h2 #h-blocks { "Blocks" }
                    p.note { "A partitioned dataset: each block has the budget above as its own, and a query is charged to the blocks it reads (POST /v1/charges). Blocks appear once charged." }
                    @if b.items.is_empty() {
                        p.empty { "No block has been charged yet." }
                    } @else {
                        div.scroll {
                            table #blocks {
                                caption { (b.items.len()) " blocks" @if b.next.is_some() { " (the first " (crate::ledger::dashboard::MAX_PAGE_BLOCKS) "; GET /v1/datasets/" (d.id) "/blocks pages through all)" } }
                                thead { tr {
                                    th scope="col" { "block" } th scope="col" { "μ spent" } th scope="col" { "μ remaining" }
                                    th scope="col" { "δ spent" } th scope="col" { "units" } th scope="col" { "" }
                                } }
                                tbody {
                                    @for it in &b.items {
                                        tr {
                                            td { a href=(format!("/ui/datasets/{}", it.ledger_id)) { (it.block) } }
                                            td { (num_up(it.mu_spent)) }
                                            td { (num_down(it.remaining_mu)) }
                                            td { (num_up(it.delta_spent)) }
                                            td { (it.units) }
                                            td { @if it.read_only { "read-only" } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="h-spend" {
                h2 #h-spend { "μ spent over time" }
                p.note { "Each unit is a step; reserved units (not yet committed or released) are marked with a dot." }
                (charts::spending(&steps, d.budget.mu()))
            }
            section aria-labelledby="h-curve" {
                h2 #h-curve { "Trade-off curve" }
                p.note {
                    "β = f(α): the smallest type II error of any membership test at type I error α. Lower curves mean an attacker does better. α axis: "
                    @if log {
                        a href=(filter.link(&d.id, |f| f.alpha.clear())) { "linear" } " · " strong { "log" }
                    } @else {
                        strong { "linear" } " · " a href=(filter.link(&d.id, |f| f.alpha = "log".into())) { "log" }
                    }
                }
                (charts::tradeoff(&curves, log))
            }
            section aria-labelledby="h-risk" {
                h2 #h-risk { "Attack risk" }
                p { "Largest membership-inference advantage (TPR − FPR): " strong #advantage { (num_up(r.report.advantage)) }
                    ". μ of the guarantee: " strong #report-mu { (num_up(r.report.mu.upper.unwrap_or(f64::INFINITY))) } "." }
                div.scroll {
                    table #tier2 {
                        caption { "Tier-II table: the best attack's true-positive rate at each false-positive rate" }
                        thead { tr { th scope="col" { "FPR (α)" } th scope="col" { "TPR at most" } th scope="col" { "β at least" } } }
                        tbody {
                            @for row in &r.report.tier2.rows {
                                tr { td { (num(row.alpha)) } td { (num_up(row.tpr)) } td { (num_down(row.beta)) } }
                            }
                        }
                    }
                    table #epsilons {
                        caption { "ε(δ): the (ε, δ)-DP pairs the guarantee implies" }
                        thead { tr { th scope="col" { "δ" } th scope="col" { "ε at most" } } }
                        tbody {
                            @for e in &r.report.epsilon {
                                tr { td { (num(e.delta)) } td { (num_up(e.epsilon.unwrap_or(f64::INFINITY))) } }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="h-units" {
                h2 #h-units { "Units and runs" }
                form.filters method="get" action=(format!("/ui/datasets/{}", d.id)) {
                    label { "Label, charge or run id " input type="search" name="q" value=(filter.q); }
                    label { "Principal "
                        select name="principal" {
                            option value="" { "any" }
                            @for pr in &principals {
                                option value=(pr) selected[filter.principal == *pr] { (pr) }
                            }
                        }
                    }
                    label { "Status "
                        select name="status" {
                            @for s in ["", "committed", "reserved", "started", "released"] {
                                option value=(s) selected[filter.status == s] { (if s.is_empty() { "any" } else { s }) }
                            }
                        }
                    }
                    @if log { input type="hidden" name="alpha" value="log"; }
                    button type="submit" { "Filter" }
                }
                @if p.truncated {
                    p.note { "Showing the units among the latest " (crate::ledger::dashboard::MAX_PAGE_ENTRIES) " ledger entries." }
                }
                @if rows.is_empty() {
                    p.empty { "No units match." }
                } @else {
                    div.scroll {
                        table #units-table {
                            caption { (rows.len()) " units, newest first (page " (page + 1) " of " (pages) ")" }
                            thead { tr {
                                th scope="col" { "#" } th scope="col" { "time (UTC)" } th scope="col" { "label" }
                                th scope="col" { "principal" } th scope="col" { "status" } th scope="col" { "run / chunk" }
                                th scope="col" { "μᵢ" } th scope="col" { "δᵢ" } th scope="col" { "μ spent after" }
                                th scope="col" { "charge id" }
                            } }
                            tbody {
                                @for c in shown {
                                    tr {
                                        td { (c.seq) }
                                        td { (c.created_at.get(..19).unwrap_or(&c.created_at).replace('T', " ")) }
                                        td { (c.label.as_deref().unwrap_or("")) }
                                        td { (c.principal.as_deref().unwrap_or("")) }
                                        td { span class=(format!("status {}", c.status)) { (c.status) } }
                                        td { @if let Some(run) = &c.run_id { code { (run.get(..8).unwrap_or(run)) } " / " (c.chunk.unwrap_or(0)) } }
                                        td { @if let Some(u) = c.unit { (num_up(u.mu())) } }
                                        td { @if let Some(u) = c.unit { (num_up(u.delta())) } }
                                        td { @if let Some(m) = c.mu_after { (num_up(m)) } }
                                        td { code { (c.id) } }
                                    }
                                }
                            }
                        }
                    }
                    nav.pager aria-label="Units pages" {
                        @if page > 0 { a href=(filter.link(&d.id, |f| f.page = page - 1)) { "← Newer" } }
                        @if page + 1 < pages { a href=(filter.link(&d.id, |f| f.page = page + 1)) { "Older →" } }
                    }
                }
            }
            section aria-labelledby="h-quotas" {
                h2 #h-quotas { "Quotas" }
                @if p.quotas.is_empty() {
                    p.empty { "No quotas: every principal spends from the dataset's budget." }
                } @else {
                    div.scroll {
                        table #quotas {
                            thead { tr { th scope="col" { "principal" } th scope="col" { "μ spent / quota" }
                                th scope="col" { "δ spent / quota" } th scope="col" { "μ remaining" } th scope="col" { "units" } } }
                            tbody {
                                @for q in &p.quotas {
                                    tr { td { (q.principal) } td { (num_up(q.mu_spent)) " / " (num(q.mu)) }
                                        td { (num_up(q.delta_spent)) " / " (num(q.delta)) }
                                        td { (num_down(q.remaining_mu)) } td { (q.units) } }
                                }
                            }
                        }
                    }
                }
            }
            section aria-labelledby="h-preview" {
                h2 #h-preview { "Would this run fit?" }
                (preview_form(&d.id, ""))
            }
        },
    )
}

/// The preview form (an event in the API's JSON, as `POST /v1/datasets/{id}/charges/preview`
/// takes it).
fn preview_form(id: &str, event: &str) -> Markup {
    // A DP-SGD run: 1000 steps, each a Poisson-sampled Gaussian (q = 0.01, σ = 1.1).
    let example = r#"{"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}"#;
    html! {
        form.preview method="post" action=(format!("/ui/datasets/{id}/preview")) {
            label for="event" { "Event (JSON, as the API takes it)" }
            textarea #event name="event" rows="5" spellcheck="false" required {
                (if event.is_empty() { example } else { event })
            }
            button type="submit" { "Preview" }
            p.note { "Nothing is charged: this asks the gate what it would do now." }
        }
    }
}

/// The preview's answer.
pub fn preview(
    principal: &str,
    id: &str,
    event: &str,
    result: Result<&Preview, (&str, &str)>,
) -> Markup {
    let f = Frame {
        title: "Preview",
        principal: Some(principal),
        current: Nav::Datasets,
    };
    layout(
        &f,
        html! {
            nav.crumbs aria-label="Breadcrumb" { a href="/ui" { "Datasets" } " / " a href=(format!("/ui/datasets/{id}")) { (id) } " / preview" }
            h1 { "Would this run fit?" }
            @match result {
                Ok(p) => {
                    @if p.admitted {
                        p.verdict.ok #verdict role="status" { "Yes: the gate would admit it now." }
                    } @else {
                        p.verdict.no #verdict role="status" { "No: the gate would refuse it. " (p.reason.as_deref().unwrap_or("")) }
                    }
                    dl.figures {
                        dt { "the unit's certificate" } dd { span #unit { "μ = " (num_up(p.unit.mu())) ", δ = " (num_up(p.unit.delta())) } }
                        @if let Some(m) = p.mu_after {
                            dt { "μ spent after it" } dd { span #mu-after { (num_up(m)) } span.of { " of " (num(p.mu_budget)) } }
                        }
                        dt { "δ spent after it" } dd { span #delta-after { (num_up(p.delta_after)) } span.of { " of " (num(p.delta_budget)) } }
                    }
                }
                Err((code, message)) => {
                    p.verdict.no #verdict role="alert" { "The event was not accepted: " code { (code) } " — " (message) }
                }
            }
            (preview_form(id, event))
        },
    )
}

/// Filters of the audit page.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct AuditFilter {
    #[serde(default)]
    pub dataset_id: String,
    #[serde(default)]
    pub principal: String,
    #[serde(default)]
    pub action: String,
    /// First and last day shown (UTC, `YYYY-MM-DD`, both included).
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    #[serde(default)]
    pub after: i64,
}

/// The audit log.
pub fn audit(principal: &str, f: &AuditFilter, records: &[AuditView], next: Option<i64>) -> Markup {
    let frame = Frame {
        title: "Audit log",
        principal: Some(principal),
        current: Nav::Audit,
    };
    // Every filter applies on the server: `records` is a page of matches.
    layout(
        &frame,
        html! {
            h1 { "Audit log" }
            p.note { "Every change, hash-chained per dataset. Newest last; filters apply on the server." }
            form.filters method="get" action="/ui/audit" {
                label { "Dataset " input type="text" name="dataset_id" value=(f.dataset_id); }
                label { "Principal " input type="text" name="principal" value=(f.principal); }
                label { "Action starts with " input type="text" name="action" value=(f.action) placeholder="unit."; }
                label { "From (UTC) " input type="date" name="from" value=(f.from); }
                label { "To (UTC) " input type="date" name="to" value=(f.to); }
                button type="submit" { "Filter" }
            }
            @if records.is_empty() {
                p.empty { "No records match." }
            } @else {
                div.scroll {
                    table #audit-table {
                        thead { tr { th scope="col" { "id" } th scope="col" { "time (UTC)" } th scope="col" { "principal" }
                            th scope="col" { "action" } th scope="col" { "dataset" } th scope="col" { "target" }
                            th scope="col" { "request" } th scope="col" { "hash" } } }
                        tbody {
                            @for r in records {
                                tr {
                                    td { (r.id) }
                                    td { (r.at.get(..19).unwrap_or(&r.at).replace('T', " ")) }
                                    td { (r.principal) }
                                    td { code { (r.action) } }
                                    td { (r.dataset_id.as_deref().unwrap_or("")) }
                                    td { code { (r.target.as_deref().unwrap_or("")) } }
                                    td { code { (r.request_id.as_deref().unwrap_or("").get(..8).unwrap_or("")) } }
                                    td { code title=(r.hash) { (r.hash.get(..12).unwrap_or(&r.hash)) } }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(n) = next {
                p { a href=(audit_link(f, n)) { "Next page →" } }
            }
        },
    )
}

fn audit_link(f: &AuditFilter, after: i64) -> String {
    format!(
        "/ui/audit?dataset_id={}&principal={}&action={}&from={}&to={}&after={after}",
        enc(&f.dataset_id),
        enc(&f.principal),
        enc(&f.action),
        enc(&f.from),
        enc(&f.to)
    )
}
