//! The dashboard's pages: pure functions from the ledger's views to HTML (maud escapes every
//! interpolated value). No script: links and forms only, so every page works with a keyboard
//! and without JavaScript.

use super::charts::{self, BudgetFrom, Curve, Step};
use super::fmt::{enc, num, num_down, num_up, num_up_near};
use crate::ledger::audit::AuditView;
use crate::ledger::dashboard::{DatasetCard, DatasetPage, UnitLine};
use crate::ledger::filter::shown_spent;
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

/// Share of the filter's budget used, Σμᵢ²/μ_B² (the quantity the gate adds up), as the API
/// states it: exactly 1 for a budget spent exactly, never above unless the budget was lowered.
fn used(card: &DatasetCard) -> f64 {
    card.dataset.used_fraction
}

/// μ spent as shown beside its budget: spending within the gate's tolerance of the budget is the
/// budget (the API's headline does the same), so an exactly spent budget never reads as an
/// overdraft.
fn shown_mu_spent(d: &crate::ledger::DatasetView) -> f64 {
    shown_spent(d.mu_spent, d.budget.mu(), d.used_fraction)
}

/// The ring of a used share, its label and its spoken text.
fn used_ring(u: f64, exhausted: bool) -> Markup {
    let label = format!("{}%", num_up(100.0 * u));
    let spoken = if exhausted {
        format!("{label} of the budget used: exhausted")
    } else {
        format!("{label} of the budget used")
    };
    charts::ring(u, &label, &spoken)
}

/// "About N more units like the last committed one".
fn more_like(card: &DatasetCard) -> Markup {
    html! {
        @match (card.last_unit, card.more_like_last) {
            (Some(u), Some(n)) => {
                "about " strong { (n) } " more "
                (if n == 1 { "unit" } else { "units" })
                " like the last committed one (μ = " (num_up(u.mu())) ", δ = " (num_up(u.delta())) ")"
            }
            _ if card.dataset.partitioning.is_some() => "a partitioned dataset: its blocks hold the spending",
            _ => "no committed unit yet",
        }
    }
}

/// "At a glance": the API's headline in words — the used share and what it means, what is left in
/// μ and in ε, the forecast, the runs in progress, the caller's own share, and a partitioned
/// dataset's calendar of blocks.
fn glance(h: &crate::ledger::headline::Headline) -> Markup {
    let pct = num_up(100.0 * h.used_fraction);
    let eps = |e: Option<f64>| e.map_or("∞".to_owned(), num_up);
    html! {
        section.glance aria-labelledby="h-glance" {
            h2 #h-glance { "At a glance" @if let Some(b) = &h.block { " — tightest block " (b) } }
            p.big {
                strong #used-percent { (pct) "%" } " of the budget used"
                @if h.exhausted { " — " strong.exhausted-label #exhausted { "exhausted" } }
            }
            p.note { "In the filter's own terms: (μ spent / μ budget)² — the filter adds each unit's μ², so used and remaining add up to 100 %." }
            dl.figures {
                dt { "left" } dd #left {
                    "μ " (num_down(h.remaining_mu))
                    @if h.remaining_mu > 0.0 {
                        " — one more release spending all of it would be (ε ≤ " (eps(h.epsilon.remaining)) ", δ = " (num(h.epsilon.delta)) ")-DP"
                    } @else {
                        " — nothing more can be charged"
                    }
                }
                dt { "budget" } dd #budget-epsilon {
                    "μ " (num(h.budget.mu())) " — the whole interaction is (ε ≤ " (eps(h.epsilon.budget)) ", δ = " (num(h.epsilon.delta)) ")-DP"
                    @if let Some(t) = &h.budget_target { " (given as ε = " (num(t.epsilon)) ", δ = " (num(t.delta)) ")" }
                }
                @if let Some(m) = &h.more_like_last {
                    dt { "room" } dd {
                        @match m.count {
                            Some(n) => { "about " strong { (n) } " more units like the last committed one" }
                            None => { "units like the last committed one spend nothing" }
                        }
                        " (μ = " (num_up(m.mu)) @if let Some(l) = &m.label { ", " (l) } ")"
                    }
                }
                dt { "forecast" } dd #forecast {
                    @match (&h.forecast.exhausted_on, h.forecast.days_left) {
                        (_, Some(d)) if d <= 0.0 => { "already used up" }
                        (Some(day), Some(d)) => { "runs out around " strong { (day) } " (in " (num_down(d)) " days) at the rate since " (h.forecast.since.get(..10).unwrap_or("")) }
                        _ => { "nothing spent in the last 7 days: no end in sight at that rate" }
                    }
                }
                @if let Some(s) = &h.share {
                    dt { "your share" } dd #share {
                        (num_up(100.0 * s.used_fraction)) "% of "
                        @if s.holder == "*" { "the unallocated share" } @else { "your quota" }
                        " used; μ " (num_down(s.remaining_mu)) " left"
                        @if s.exhausted { " — " strong.exhausted-label { "exhausted" } }
                    }
                }
            }
            @if !h.runs_in_progress.is_empty() {
                div.scroll {
                    table #runs-in-progress {
                        caption { "Runs in progress and what they still need" }
                        thead { tr { th scope="col" { "run" } th scope="col" { "chunks left" } th scope="col" { "μ to finish" } th scope="col" { "fits now" } } }
                        tbody {
                            @for r in &h.runs_in_progress {
                                tr {
                                    td { (r.label.as_deref().unwrap_or(&r.run_id)) }
                                    td { (r.chunks_left) " of " (r.chunks) @if r.chunks_reserved > 0 { " (" (r.chunks_reserved) " reserved)" } }
                                    td { (num_up(r.mu_to_finish)) }
                                    td { @if r.fits { "yes" } @else { strong.exhausted-label { "no" } } }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(b) = &h.blocks {
                h3 { "Blocks" }
                p.note { (b.items.len()) " blocks" @if b.truncated { " (the first; more exist)" } ", " (b.exhausted) " exhausted, " (b.read_only) " read-only. Each cell is a block, shaded by the share of its budget used." }
                ol.calendar #calendar {
                    @for c in &b.items {
                        li class=(format!("cell{}{} u{}",
                                if c.exhausted { " exhausted" } else { "" },
                                if c.read_only { " readonly" } else { "" },
                                // Tenths of the used share (a class, not a style: the dashboard's
                                // policy allows no inline style).
                                ((c.used_fraction.clamp(0.0, 1.0) * 10.0) as u32).min(9)))
                            title=(format!("{}: {}% used{}{}", c.block, num_up(100.0 * c.used_fraction),
                                if c.exhausted { ", exhausted" } else { "" }, if c.read_only { ", read-only" } else { "" })) {
                            span.day { (c.block.get(8..).unwrap_or(&c.block)) }
                            span.pct { (num_up(100.0 * c.used_fraction)) "%" }
                        }
                    }
                }
            }
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
                    @let u = c.blocks.as_ref().and_then(|b| b.fullest.as_ref()).map_or(used(c), |f| f.1);
                    li.card {
                        (used_ring(u, d.exhausted || c.blocks.as_ref().and_then(|b| b.fullest.as_ref()).is_some_and(|f| f.1 >= 1.0)))
                        div {
                            h2 { a href=(format!("/ui/datasets/{}", d.id)) { (d.id) } }
                            @if !d.description.is_empty() { p.desc { (d.description) } }
                            @if d.exhausted { p.exhausted { "Exhausted: every further charge is refused." } }
                            @if let Some(b) = &c.blocks {
                                p.blocks-glance {
                                    "Partitioned: " strong { (b.count) @if b.truncated { "+" } } " blocks charged"
                                    @if let Some((name, f)) = &b.fullest { "; the fullest, " (name) ", " strong { (num_up(100.0 * f)) "%" } " used" }
                                    @if b.exhausted > 0 { "; " strong.exhausted-label { (b.exhausted) " exhausted" } }
                                    ". Each block has the budget below as its own."
                                }
                            }
                            dl.figures {
                                @if let Some(t) = &d.budget_target {
                                    dt { "budget" } dd { "ε = " (num(t.epsilon)) ", δ = " (num(t.delta)) }
                                }
                                @if c.blocks.is_some() {
                                    dt { "budget per block" } dd { "μ " (num(d.budget.mu())) ", δ " (num(d.budget.delta())) }
                                } @else {
                                    dt { "μ spent" } dd { (num_up(shown_mu_spent(d))) " of " (num(d.budget.mu())) }
                                    dt { "δ spent" } dd { (num_up(d.delta_spent)) " of " (num(d.budget.delta())) }
                                    dt { "μ remaining" } dd { (num_down(d.remaining_mu)) }
                                    dt { "units" } dd { (d.units) @if d.reserved_units > 0 { " (" (d.reserved_units) " reserved)" } }
                                }
                            }
                            @if c.blocks.is_none() { p.more { (more_like(c)) } }
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
/// The guarantee's μ from which the trade-off chart opens on a log α axis: at μ = 2 the curve
/// is already below β = 0.25 for α ≥ 0.1, and it vanishes into the axis as μ grows.
const LOG_ALPHA_FROM_MU: f64 = 2.0;

pub fn dataset(principal: &str, p: &DatasetPage, filter: &TableFilter) -> Markup {
    let d = &p.card.dataset;
    let f = Frame {
        title: &d.id,
        principal: Some(principal),
        current: Nav::Datasets,
    };
    let r = &p.report;
    // A linear α axis shows nothing at a large μ (β ≈ 0 over nearly all of it): the log axis is
    // the default there, and either may be chosen.
    let log = match filter.alpha.as_str() {
        "log" => true,
        "linear" => false,
        _ => d.statement.mu >= LOG_ALPHA_FROM_MU,
    };
    let parse = |t: &str| {
        chrono::DateTime::parse_from_rfc3339(t)
            .ok()
            .map(|t| t.to_utc())
    };
    let mut steps: Vec<Step> = Vec::new();
    for c in p.units.iter().filter(|c| c.status != "released") {
        if let (Some(m), Some(at)) = (c.mu_after, parse(&c.created_at)) {
            // Time never runs backward on the axis (replicas' clocks may disagree a little).
            let at = steps.last().map_or(at, |s: &Step| s.at.max(at));
            steps.push(Step {
                at,
                mu_after: m,
                reserved: matches!(c.status.as_str(), "reserved" | "started"),
            });
        }
    }
    let budgets: Vec<BudgetFrom> = p
        .budgets
        .iter()
        .filter_map(|(since, mu)| {
            let from = match since {
                None => chrono::DateTime::<chrono::Utc>::MIN_UTC,
                Some(t) => parse(t)?,
            };
            Some(BudgetFrom { from, mu: *mu })
        })
        .collect();
    let pts = |t: &[crate::accountant::report::TradeoffPoint]| -> Vec<(f64, f64)> {
        t.iter().map(|q| (q.alpha, q.beta)).collect()
    };
    let at = format!(
        "μ = {}, δ = {}",
        num_up_near(d.statement.mu, d.statement.mu / (1.0 + 1e-9)),
        num_up_near(d.statement.delta, d.statement.delta / (1.0 + 1e-9))
    );
    let stated = match d.statement.validity {
        crate::ledger::Validity::Always => format!(
            "The budget's guarantee ({at}): holds however the charges and budget changes were chosen"
        ),
        crate::ledger::Validity::UnlessRaised => format!(
            "The guarantee of the highest budget so far ({at}): holds unless the budget is raised above it"
        ),
        crate::ledger::Validity::Unknown => format!(
            "Not a guarantee: no statement holds for this ledger's past (the highest budget, {at}, drawn for reference)"
        ),
    };
    let mut curves = vec![Curve {
        name: stated,
        class: "guarantee",
        points: pts(&r.report.tradeoff),
    }];
    if let Some(s) = &p.spending {
        curves.push(Curve {
            name: format!(
                "Spent so far (μ = {}, δ = {}): progress toward the budget, not a guarantee",
                num_up(shown_mu_spent(d)),
                num_up(d.delta_spent)
            ),
            class: "spent",
            points: pts(s),
        });
    }
    if let Some(x) = &r.exact_composition {
        curves.push(Curve {
            name: "Exact composition of the charges: valid only had they been fixed in advance"
                .into(),
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
            @if d.partitioning.is_some() {
                (glance(&p.headline))
            }
            section.summary aria-label="Budget" {
                @if d.partitioning.is_none() { (used_ring(u, d.exhausted)) }
                @else { p.note { "A partitioned dataset: its own ledger holds nothing; each block below spends from a budget of μ = " (num(d.budget.mu())) " of its own (the figures above are the tightest block's)." } }
                dl.figures {
                    dt { "μ spent (√Σμᵢ²)" } dd { span #mu-spent { (num_up(shown_mu_spent(d))) } span.of { " of budget μ = " (num(d.budget.mu())) } }
                    dt { "δ spent (Σδᵢ)" } dd { span #delta-spent { (num_up(d.delta_spent)) } span.of { " of budget δ = " (num(d.budget.delta())) } }
                    dt { "μ remaining" } dd { span #mu-remaining { (num_down(d.remaining_mu)) } }
                    dt { "units" } dd { span #units { (d.units) } @if d.reserved_units > 0 { span.of { ", " (d.reserved_units) " reserved" } } }
                    @if let Some(x) = d.exact_composition_mu {
                        dt { "exact composition μ" } dd { span #exact-mu { (num_up(x)) } span.of { " if fixed in advance (comparison only)" } }
                    }
                    dt { "neighbouring relation" } dd { (d.neighboring_relation.as_str()) }
                    dt { "privacy unit" } dd #privacy-unit { "one " (d.privacy_unit) " (every figure is per " (d.privacy_unit) ")" @if let Some(n) = d.size { span.of { "; " (n) " of them" } } }
                    dt { "statement" } dd #statement { "μ-GDP with δ (the Gaussian trade-off curve, then δ added): μ = " (num_up_near(d.statement.mu, d.budget.mu().max(d.statement.mu / (1.0 + 1e-9)))) ", δ = " (num_up_near(d.statement.delta, d.statement.delta / (1.0 + 1e-9))) " (the budget's high-water mark with the gate's 1e-9 relative tolerance): " (d.statement.note) }
                }
                p.more { (more_like(&p.card)) ", each charged on its own." }
            }
            @if d.partitioning.is_none() {
                (glance(&p.headline))
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
                                            td { (num_up(shown_spent(it.mu_spent, it.budget.mu(), it.used_fraction))) }
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
                p.note { "From the first unit to the last: each unit is a step at the time it was charged; the dashed line is the budget at each time (a step where it was changed); reserved units (not yet committed or released) are marked with a dot." }
                (charts::spending(&steps, &budgets))
            }
            section aria-labelledby="h-curve" {
                h2 #h-curve { "Trade-off curve" }
                p.note {
                    "β = f(α): the smallest type II error of any membership test at type I error α. Lower curves mean an attacker does better. α axis: "
                    @if log {
                        a href=(filter.link(&d.id, |f| f.alpha = "linear".into())) { "linear" } " · " strong { "log" }
                    } @else {
                        strong { "linear" } " · " a href=(filter.link(&d.id, |f| f.alpha = "log".into())) { "log" }
                    }
                }
                (charts::tradeoff(&curves, log))
            }
            section aria-labelledby="h-risk" {
                h2 #h-risk { "Attack risk" }
                p.note { "Whose risk: any one person whose record is in " (d.id) ", against an attacker who sees every output released from it over the whole interaction. These are the figures of the budget's guarantee (the statement at μ = " (num_up_near(d.statement.mu, d.statement.mu / (1.0 + 1e-9))) "), which holds whatever is charged within the budget — not of what has been spent so far." }
                p { "Largest membership-inference advantage (TPR − FPR): " strong #advantage { (num_up(r.report.advantage)) }
                    ". μ of the budget's guarantee: " strong #report-mu { (num_up_near(r.report.mu.upper.unwrap_or(f64::INFINITY), d.statement.mu / (1.0 + 1e-9))) } "." }
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
                    @if !filter.alpha.is_empty() { input type="hidden" name="alpha" value=(filter.alpha); }
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
            @if d.partitioning.is_none() {
                section aria-labelledby="h-preview" {
                    h2 #h-preview { "Would this run fit?" }
                    (preview_form(&d.id, &PreviewFields::default()))
                }
            } @else {
                section aria-labelledby="h-preview" {
                    h2 #h-preview { "Would this run fit?" }
                    p.note { "A partitioned dataset is charged through its blocks: ask POST /v1/charges with the blocks (or the time range) a query reads, or open a block's page to preview a charge on it." }
                }
            }
        },
    )
}

/// The preview form's fields: a run described by its parts (the form the dashboard offers), or
/// an event in the API's JSON (`form = "json"`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default)]
pub struct PreviewFields {
    /// `fields` (the default) or `json`.
    pub form: String,
    /// `gaussian` or `laplace`.
    pub mechanism: String,
    pub noise_multiplier: String,
    /// `none`, `poisson` or `without_replacement`.
    pub sampling: String,
    pub sampling_rate: String,
    pub population_size: String,
    pub sample_size: String,
    pub steps: String,
    /// The event as JSON (`form = "json"`).
    pub event: String,
}

impl Default for PreviewFields {
    /// A DP-SGD run: 1000 steps, each a Poisson-sampled Gaussian (q = 0.01, σ = 1.1).
    fn default() -> Self {
        PreviewFields {
            form: "fields".into(),
            mechanism: "gaussian".into(),
            noise_multiplier: "1.1".into(),
            sampling: "poisson".into(),
            sampling_rate: "0.01".into(),
            population_size: "60000".into(),
            sample_size: "600".into(),
            steps: "1000".into(),
            event: r#"{"type": "self_composed", "count": 1000, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}"#.into(),
        }
    }
}

impl PreviewFields {
    /// Whether the event is given as JSON.
    pub fn is_json(&self) -> bool {
        self.form == "json"
    }

    /// The event the fields describe, in the API's JSON (`steps` times the sampled mechanism), or
    /// the field that is wrong and why. Ranges are the API's to check (its message names the
    /// event's path); here only what is not a number.
    pub fn event(&self) -> Result<serde_json::Value, (&'static str, String)> {
        use serde_json::json;
        let number = |name: &'static str, v: &str| -> Result<f64, (&'static str, String)> {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or((
                    name,
                    format!(
                        "must be a number, got {:?}",
                        v.chars().take(40).collect::<String>()
                    ),
                ))
        };
        let whole = |name: &'static str, v: &str| -> Result<u64, (&'static str, String)> {
            v.trim().parse::<u64>().map_err(|_| {
                (
                    name,
                    format!(
                        "must be a whole number, got {:?}",
                        v.chars().take(40).collect::<String>()
                    ),
                )
            })
        };
        let mechanism = match self.mechanism.as_str() {
            m @ ("gaussian" | "laplace") => m,
            other => {
                return Err((
                    "mechanism",
                    format!("must be gaussian or laplace, got {other:?}"),
                ))
            }
        };
        let base = json!({"type": mechanism, "noise_multiplier": number("noise_multiplier", &self.noise_multiplier)?});
        let step = match self.sampling.as_str() {
            "none" => base,
            "poisson" => json!({"type": "poisson_sampled",
                "sampling_rate": number("sampling_rate", &self.sampling_rate)?, "event": base}),
            "without_replacement" => json!({"type": "sampled_without_replacement",
                "population_size": whole("population_size", &self.population_size)?,
                "sample_size": whole("sample_size", &self.sample_size)?, "event": base}),
            other => {
                return Err((
                    "sampling",
                    format!("must be none, poisson or without_replacement, got {other:?}"),
                ))
            }
        };
        Ok(json!({"type": "self_composed", "count": whole("steps", &self.steps)?, "event": step}))
    }
}

/// What calibration suggests beside a preview, for the same run: the smallest noise multiplier
/// with which it fits now, and the most steps that fit now as it is.
#[derive(Debug, Clone, Default)]
pub struct Suggestions {
    pub noise_multiplier: Option<f64>,
    pub steps: Option<u64>,
}

/// The preview forms: a run by its parts, and (folded) an event in the API's JSON.
fn preview_form(id: &str, f: &PreviewFields) -> Markup {
    let action = format!("/ui/datasets/{id}/preview");
    html! {
        form.preview #preview-fields method="post" action=(action) {
            input type="hidden" name="form" value="fields";
            div.fields {
                label { "Mechanism "
                    select name="mechanism" {
                        option value="gaussian" selected[f.mechanism == "gaussian"] { "Gaussian" }
                        option value="laplace" selected[f.mechanism == "laplace"] { "Laplace" }
                    }
                }
                label { "Noise multiplier (σ ÷ sensitivity) " input type="text" inputmode="decimal" name="noise_multiplier" value=(f.noise_multiplier) required; }
                label { "Batch sampling "
                    select name="sampling" {
                        option value="poisson" selected[f.sampling == "poisson"] { "Poisson (each record with probability q)" }
                        option value="without_replacement" selected[f.sampling == "without_replacement"] { "Fixed-size batch, without replacement" }
                        option value="none" selected[f.sampling == "none"] { "None (the whole dataset each step)" }
                    }
                }
                label { "Sampling rate q (Poisson) " input type="text" inputmode="decimal" name="sampling_rate" value=(f.sampling_rate); }
                label { "Dataset size (fixed-size) " input type="text" inputmode="numeric" name="population_size" value=(f.population_size); }
                label { "Batch size (fixed-size) " input type="text" inputmode="numeric" name="sample_size" value=(f.sample_size); }
                label { "Steps " input type="text" inputmode="numeric" name="steps" value=(f.steps) required; }
            }
            button type="submit" { "Preview" }
            p.note { "Nothing is charged: this asks the gate what it would do now, and calibration what would fit (a few seconds the first time for a long run; then remembered)." }
        }
        details.json-form open[f.is_json()] {
            summary { "Or give the event as JSON (any event the API takes)" }
            form.preview method="post" action=(action) {
                input type="hidden" name="form" value="json";
                label for="event" { "Event (JSON, as POST /v1/datasets/" (id) "/charges takes it)" }
                textarea #event name="event" rows="5" spellcheck="false" required { (f.event) }
                button type="submit" { "Preview" }
            }
        }
    }
}

/// The preview's answer.
pub fn preview(
    principal: &str,
    id: &str,
    form: &PreviewFields,
    event: Option<&serde_json::Value>,
    result: Result<(&Preview, &Suggestions), (&str, &str)>,
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
                Ok((p, s)) => {
                    @if p.admitted {
                        p.verdict.ok #verdict role="status" { "Yes: the gate would admit it now." }
                    } @else {
                        p.verdict.no #verdict role="status" { "No: the gate would refuse it." }
                        @if let Some(r) = &p.reason { p #refusal { "Why: " (r) } }
                    }
                    dl.figures {
                        dt { "the unit's certificate" } dd { span #unit { "μ = " (num_up(p.unit.mu())) ", δ = " (num_up(p.unit.delta())) } }
                        @if let Some(m) = p.mu_after {
                            dt { "μ spent after it" } dd { span #mu-after { (num_up(m)) } span.of { " of " (num(p.mu_budget)) } }
                        }
                        dt { "δ spent after it" } dd { span #delta-after { (num_up(p.delta_after)) } span.of { " of " (num(p.delta_budget)) } }
                        @if let Some(n) = p.units_like_this {
                            dt { "units like it that fit now" } dd { span #units-like-this { (n) } span.of { " (this one included; each still decided by the gate)" } }
                        }
                        @if let Some(sigma) = s.noise_multiplier {
                            dt { "smallest noise multiplier that fits now" } dd { span #fits-sigma { (num_up(sigma)) } span.of { " (same sampling and steps)" } }
                        }
                        @if let Some(n) = s.steps {
                            dt { "most steps that fit now" } dd { span #fits-steps { (n) } span.of { " (same mechanism and sampling)" } }
                        }
                    }
                    p.note { "Suggestions come from POST /v1/datasets/" (id) "/calibrate against the ledger as it stands now (and the caller's share); a later charge by anyone changes them, and every charge is still decided by the gate." }
                }
                Err((code, message)) => {
                    p.verdict.no #verdict role="alert" { "The event was not accepted: " (message) " (" code { (code) } ")" }
                }
            }
            @if let Some(e) = event {
                p.note { "As the API takes it: " code #event-json { (e.to_string()) } }
            }
            (preview_form(id, form))
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
    /// Records below this position (the next, older, page); 0: from the newest.
    #[serde(default)]
    pub before: i64,
}

/// An audit value in a few words: its figures as `name value` (numbers to four digits), a
/// ledger's state as its budget and μ spent, a unit as its certificate; long texts and whole
/// events left out (the API has the record in full).
fn summary_of(v: &serde_json::Value) -> String {
    use serde_json::Value;
    let n = |x: &Value| x.as_f64().map(num);
    let mut parts: Vec<String> = Vec::new();
    let Value::Object(m) = v else {
        return v.to_string().chars().take(80).collect();
    };
    for (k, x) in m {
        match (k.as_str(), x) {
            ("ledger", Value::Object(l)) => {
                if let Some(b) = l.get("budget_mu").and_then(n) {
                    parts.push(format!("budget μ {b}"));
                }
                if let Some(s) = l.get("mu_sq_spent").and_then(Value::as_f64) {
                    parts.push(format!("μ spent {}", num_up(s.sqrt())));
                }
            }
            ("unit", Value::Object(u)) => {
                if let (Some(m), Some(d)) = (u.get("mu").and_then(n), u.get("delta").and_then(n)) {
                    parts.push(format!("unit μ {m}, δ {d}"));
                }
            }
            ("budget", Value::Object(b)) => {
                if let Some(m) = b.get("mu").and_then(n) {
                    parts.push(format!("budget μ {m}"));
                }
            }
            ("reason" | "event" | "charge" | "description" | "statement", _) => {}
            (_, Value::Number(_)) => parts.push(format!(
                "{} {}",
                k.replace('_', " "),
                n(x).unwrap_or_default()
            )),
            (_, Value::String(t)) if t.chars().count() <= 40 => {
                parts.push(format!("{} {t}", k.replace('_', " ")))
            }
            (_, Value::Bool(b)) => parts.push(format!("{} {b}", k.replace('_', " "))),
            (_, Value::Array(a)) if a.iter().all(Value::is_number) && a.len() <= 10 => {
                parts.push(format!(
                    "{} {}",
                    k.replace('_', " "),
                    a.iter().filter_map(n).collect::<Vec<_>>().join(", ")
                ))
            }
            _ => {}
        }
        if parts.len() >= 6 {
            break;
        }
    }
    parts.join("; ")
}

/// What an audit record changed, in a line: the reason when it gives one, then before → after
/// ([`summary_of`] each).
fn change_of(r: &AuditView) -> String {
    let reason = r
        .after
        .as_ref()
        .and_then(|a| a.get("reason"))
        .and_then(|x| x.as_str())
        .map(|x| format!("{x}. "))
        .unwrap_or_default();
    match (&r.before, &r.after) {
        (Some(b), Some(a)) => format!("{reason}{} → {}", summary_of(b), summary_of(a)),
        (None, Some(a)) => format!("{reason}{}", summary_of(a)),
        (Some(b), None) => format!("{reason}{} → (none)", summary_of(b)),
        (None, None) => reason,
    }
}

/// The records of `records` (newest first) grouped by change: consecutive records of the same
/// action on the same target by the same request, each on another ledger, are one change (a
/// charge over several blocks or datasets writes one record per ledger, in one transaction).
fn changes(records: &[AuditView]) -> Vec<&[AuditView]> {
    let same = |a: &AuditView, b: &AuditView| {
        a.target.is_some()
            && a.target == b.target
            && a.action == b.action
            && a.request_id == b.request_id
            && a.principal == b.principal
            && a.dataset_id != b.dataset_id
    };
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=records.len() {
        if i == records.len() || !same(&records[start], &records[i]) {
            out.push(&records[start..i]);
            start = i;
        }
    }
    out
}

/// The ledgers of a grouped change, oldest record first: all of them up to four, else the first
/// two … the last.
fn ledgers_of(g: &[AuditView]) -> String {
    let ids: Vec<&str> = g
        .iter()
        .rev()
        .map(|r| r.dataset_id.as_deref().unwrap_or(""))
        .collect();
    if ids.len() <= 4 {
        ids.join(", ")
    } else {
        format!("{}, {} … {}", ids[0], ids[1], ids[ids.len() - 1])
    }
}

/// A record's time as the tables show it.
fn when(at: &str) -> String {
    at.get(..19).unwrap_or(at).replace('T', " ")
}

/// A record's target, shortened (the whole in its title).
fn target(r: &AuditView) -> Markup {
    let t = r.target.as_deref().unwrap_or("");
    html! { code title=(t) { (t.chars().take(14).collect::<String>()) } }
}

/// A record's hash, shortened (the whole in its title).
fn short_hash(r: &AuditView) -> Markup {
    html! { code title=(r.hash) { (r.hash.get(..12).unwrap_or(&r.hash)) } }
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
            p.note { "Every change, hash-chained per dataset. Newest first; filters apply on the server. Each row shows what the change was before and after (and the reason, when it gives one)." }
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
                            th scope="col" { "before → after" } th scope="col" { "hash" } } }
                        tbody {
                            @for g in changes(records) {
                                @if let [r] = g {
                                    tr {
                                        td { (r.id) }
                                        td { (when(&r.at)) }
                                        td { (r.principal) }
                                        td { code { (r.action) } }
                                        td { (r.dataset_id.as_deref().unwrap_or("")) }
                                        td { (target(r)) }
                                        td.change { (change_of(r)) }
                                        td { (short_hash(r)) }
                                    }
                                } @else {
                                    // One change written to several ledgers (a charge over many
                                    // blocks or datasets): one row, each ledger's record inside.
                                    tr.group {
                                        td { (g[g.len() - 1].id) "–" (g[0].id) }
                                        td { (when(&g[0].at)) }
                                        td { (g[0].principal) }
                                        td { code { (g[0].action) } }
                                        td { (g.len()) " ledgers" }
                                        td { (target(&g[0])) }
                                        td.change {
                                            details {
                                                summary { "One change on " (g.len()) " ledgers: " (ledgers_of(g)) }
                                                ul.ledgers {
                                                    @for r in g.iter().rev() {
                                                        li { strong { (r.dataset_id.as_deref().unwrap_or("")) } " (#" (r.id) "): " (change_of(r)) }
                                                    }
                                                }
                                            }
                                        }
                                        td { (short_hash(&g[0])) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(n) = next {
                p { a href=(audit_link(f, n)) { "Older records →" } }
            }
        },
    )
}

/// The audit page for a principal who may read only the records of datasets they audit: the
/// filters, and why a dataset must be named.
pub fn audit_needs_dataset(principal: &str, f: &AuditFilter, why: &str) -> Markup {
    let frame = Frame {
        title: "Audit log",
        principal: Some(principal),
        current: Nav::Audit,
    };
    layout(
        &frame,
        html! {
            h1 { "Audit log" }
            p.note #audit-needs-dataset { "Name a dataset you audit to see its records: " (why) "." }
            form.filters method="get" action="/ui/audit" {
                label { "Dataset " input type="text" name="dataset_id" value=(f.dataset_id) required; }
                button type="submit" { "Show its records" }
            }
        },
    )
}

fn audit_link(f: &AuditFilter, before: i64) -> String {
    format!(
        "/ui/audit?dataset_id={}&principal={}&action={}&from={}&to={}&before={before}",
        enc(&f.dataset_id),
        enc(&f.principal),
        enc(&f.action),
        enc(&f.from),
        enc(&f.to)
    )
}
