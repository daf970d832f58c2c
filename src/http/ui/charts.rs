//! SVG charts drawn on the server (no script, no network): a budget ring, μ spent over the
//! ledger's units, and trade-off curves. Colours come from the stylesheet's classes, so both
//! colour schemes apply; every chart has a text alternative beside it (the tables on the page).

use super::fmt::num;
use maud::{html, Markup};
use std::fmt::Write;

/// Plot area of the line charts, in SVG user units (the SVG scales to its container).
const W: f64 = 640.0;
const H: f64 = 320.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;

/// Most steps drawn in the spending chart; longer ledgers are drawn by their upper envelope
/// (each drawn step is the largest μ within its bucket, so the line is never below a unit's).
pub const MAX_STEPS: usize = 1500;

/// A ring showing `used` ∈ [0, 1] of a budget, with `label` inside.
pub fn ring(used: f64, label: &str, aria: &str) -> Markup {
    let used = if used.is_finite() {
        used.clamp(0.0, 1.0)
    } else {
        1.0
    };
    let r = 40.0;
    let c = 2.0 * std::f64::consts::PI * r;
    let class = if used >= 0.9 {
        "ring-fill high"
    } else if used >= 0.6 {
        "ring-fill mid"
    } else {
        "ring-fill"
    };
    html! {
        svg.ring viewBox="0 0 100 100" role="img" aria-label=(aria) {
            circle.ring-track cx="50" cy="50" r=(r) {}
            circle class=(class) cx="50" cy="50" r=(r)
                stroke-dasharray=(format!("{:.2} {:.2}", used * c, c))
                transform="rotate(-90 50 50)" {}
            text.ring-label x="50" y="55" text-anchor="middle" { (label) }
        }
    }
}

/// One point of the spending chart: the unit's ledger position, μ spent after it, and whether it
/// is still reserved.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub seq: i64,
    /// When (RFC 3339).
    pub at: &'a str,
    pub mu_after: f64,
    pub reserved: bool,
}

/// μ spent after each unit, as steps, against the budget line.
pub fn spending(steps: &[Step<'_>], budget_mu: f64) -> Markup {
    if steps.is_empty() {
        return html! { p.empty { "Nothing spent yet: the chart appears with the first charge." } };
    }
    let drawn = envelope(steps, MAX_STEPS);
    let y_max = drawn
        .iter()
        .map(|s| s.mu_after)
        .fold(budget_mu, f64::max)
        .max(f64::MIN_POSITIVE)
        * 1.05;
    let n = drawn.len() as f64;
    let x = |i: f64| LEFT + (W - LEFT - RIGHT) * i / n.max(1.0);
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / y_max);
    let mut path = format!("M{:.1},{:.1}", x(0.0), y(0.0));
    for (i, s) in drawn.iter().enumerate() {
        let _ = write!(path, " V{:.1} H{:.1}", y(s.mu_after), x(i as f64 + 1.0));
    }
    let reserved: Vec<(f64, f64)> = drawn
        .iter()
        .enumerate()
        .filter(|(_, s)| s.reserved)
        .map(|(i, s)| (x(i as f64 + 0.5), y(s.mu_after)))
        .collect();
    let (first, last) = (&steps[0], &steps[steps.len() - 1]);
    let when = |s: &Step<'_>| s.at.get(..16).unwrap_or(s.at).replace('T', " ");
    html! {
        svg.chart viewBox=(format!("0 0 {W} {H}")) role="img"
            aria-label=(format!("μ spent after each of {} units, budget μ = {}", steps.len(), num(budget_mu))) {
            (axes(&[(0.0, "0".to_owned()), (budget_mu, num(budget_mu))], y, "μ spent (√Σμᵢ²)"))
            line.budget-line x1=(LEFT) x2=(W - RIGHT) y1=(y(budget_mu)) y2=(y(budget_mu)) {}
            text.axis-label x=(W - RIGHT) y=(y(budget_mu) - 4.0) text-anchor="end" { "budget" }
            path.spent d=(path) {}
            @for (cx, cy) in &reserved {
                circle.reserved cx=(format!("{cx:.1}")) cy=(format!("{cy:.1}")) r="3.5" {}
            }
            text.axis-label x=(LEFT) y=(H - 8.0) { "entry " (first.seq) ", " (when(first)) }
            text.axis-label x=(W - RIGHT) y=(H - 8.0) text-anchor="end" { "entry " (last.seq) ", " (when(last)) " UTC" }
        }
        @if drawn.len() < steps.len() {
            p.note { "Drawn as the upper envelope of " (steps.len()) " units in " (drawn.len()) " steps." }
        }
    }
}

/// At most `max` steps: consecutive buckets, each drawn at its largest μ (and as reserved if
/// any unit in it is).
fn envelope<'a>(steps: &[Step<'a>], max: usize) -> Vec<Step<'a>> {
    if steps.len() <= max {
        return steps.to_vec();
    }
    let per = steps.len().div_ceil(max);
    steps
        .chunks(per)
        .map(|c| Step {
            seq: c[c.len() - 1].seq,
            at: c[c.len() - 1].at,
            mu_after: c.iter().map(|s| s.mu_after).fold(0.0, f64::max),
            reserved: c.iter().any(|s| s.reserved),
        })
        .collect()
}

/// A curve of a trade-off chart: its name (the legend's), its CSS class and its (α, β) points.
pub struct Curve<'a> {
    pub name: &'a str,
    pub class: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// Smallest α of the log-scale trade-off chart.
pub const LOG_ALPHA_MIN: f64 = 1e-6;

/// Trade-off curves β = f(α) (type II error at type I error α) with the no-privacy diagonal
/// β = 1 − α, on a linear or a log-scale α axis.
pub fn tradeoff(curves: &[Curve<'_>], log_alpha: bool) -> Markup {
    let fx = |a: f64| -> f64 {
        if log_alpha {
            (a.max(LOG_ALPHA_MIN).log10() - LOG_ALPHA_MIN.log10()) / -LOG_ALPHA_MIN.log10()
        } else {
            a
        }
    };
    let x = |a: f64| LEFT + (W - LEFT - RIGHT) * fx(a);
    let y = |b: f64| TOP + (H - TOP - BOTTOM) * (1.0 - b);
    let poly = |pts: &[(f64, f64)]| -> String {
        let mut s = String::new();
        for (i, (a, b)) in pts.iter().enumerate() {
            if !a.is_finite() || !b.is_finite() || (log_alpha && *a < LOG_ALPHA_MIN) {
                continue;
            }
            let _ = write!(
                s,
                "{}{:.1},{:.1}",
                if i == 0 || s.is_empty() { "M" } else { " L" },
                x(*a),
                y(*b)
            );
        }
        s
    };
    let diagonal: Vec<(f64, f64)> = (0..=64)
        .map(|i| {
            let a = if log_alpha {
                10f64.powf(LOG_ALPHA_MIN.log10() * (1.0 - i as f64 / 64.0))
            } else {
                i as f64 / 64.0
            };
            (a, 1.0 - a)
        })
        .collect();
    let ticks: Vec<(f64, String)> = if log_alpha {
        (0..=6)
            .map(|k| {
                let a = 10f64.powi(-6 + k);
                (a, format!("1e-{}", 6 - k).replace("1e-0", "1"))
            })
            .collect()
    } else {
        (0..=4)
            .map(|k| (k as f64 / 4.0, num(k as f64 / 4.0)))
            .collect()
    };
    html! {
        svg.chart viewBox=(format!("0 0 {W} {H}")) role="img"
            aria-label=(format!("Trade-off curves on a {} α axis", if log_alpha { "logarithmic" } else { "linear" })) {
            (axes(&[(0.0, "0".into()), (0.5, "0.5".into()), (1.0, "1".into())], y, "β (type II error)"))
            @for (a, label) in &ticks {
                line.grid x1=(x(*a)) x2=(x(*a)) y1=(TOP) y2=(H - BOTTOM) {}
                text.axis-label x=(x(*a)) y=(H - BOTTOM + 16.0) text-anchor="middle" { (label) }
            }
            text.axis-label x=((LEFT + W - RIGHT) / 2.0) y=(H - 4.0) text-anchor="middle" {
                "α (type I error, the attack's false-positive rate)"
            }
            path.diagonal d=(poly(&diagonal)) {}
            @for c in curves {
                path class=(format!("curve {}", c.class)) d=(poly(&c.points)) {}
            }
        }
        ul.legend {
            li { span.swatch.diagonal {} "β = 1 − α: perfect privacy (no test beats guessing)" }
            @for c in curves {
                li { span class=(format!("swatch {}", c.class)) {} (c.name) }
            }
        }
    }
}

/// The y axis with its ticks and title (the x axis is each chart's own).
fn axes(ticks: &[(f64, String)], y: impl Fn(f64) -> f64, title: &str) -> Markup {
    html! {
        line.axis x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(H - BOTTOM) {}
        line.axis x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) {}
        @for (v, label) in ticks {
            text.axis-label x=(LEFT - 6.0) y=(y(*v) + 4.0) text-anchor="end" { (label) }
        }
        text.axis-label transform=(format!("translate(14 {:.1}) rotate(-90)", (TOP + H - BOTTOM) / 2.0))
            text-anchor="middle" { (title) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_never_draws_below_a_unit() {
        let steps: Vec<Step<'_>> = (0..10_000)
            .map(|i| Step {
                seq: i,
                at: "2026-11-24T00:00:00Z",
                mu_after: ((i % 97) as f64).sqrt(),
                reserved: i == 5_000,
            })
            .collect();
        let drawn = envelope(&steps, MAX_STEPS);
        assert!(drawn.len() <= MAX_STEPS);
        let per = steps.len().div_ceil(MAX_STEPS);
        for (k, s) in steps.iter().enumerate() {
            assert!(drawn[k / per].mu_after >= s.mu_after);
        }
        assert_eq!(drawn.iter().filter(|s| s.reserved).count(), 1);
    }

    #[test]
    fn charts_escape_nothing_they_should_not_and_stay_finite() {
        let svg = tradeoff(
            &[Curve {
                name: "<b>x</b>",
                class: "guarantee",
                points: vec![(0.0, 1.0), (0.5, f64::NAN), (1.0, 0.0)],
            }],
            true,
        )
        .into_string();
        assert!(svg.contains("&lt;b&gt;x&lt;/b&gt;"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
