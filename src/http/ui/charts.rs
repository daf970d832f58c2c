//! SVG charts drawn on the server (no script, no network): a budget ring, μ spent over the
//! ledger's units, and trade-off curves. Colours come from the stylesheet's classes, so both
//! colour schemes apply; every chart has a text alternative beside it (the tables on the page).

use super::fmt::num;
use chrono::{DateTime, Datelike, Utc};
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

/// One point of the spending chart: when the unit was written, μ spent after it, and whether it
/// is still reserved.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub at: DateTime<Utc>,
    pub mu_after: f64,
    pub reserved: bool,
}

/// The budget μ in effect from `from` on (until the next change).
#[derive(Debug, Clone, Copy)]
pub struct BudgetFrom {
    pub from: DateTime<Utc>,
    pub mu: f64,
}

/// μ spent over time, as steps at the units' times, against the budget in effect at each time
/// (a step wherever the budget was changed). `budgets` is in time order and starts with the
/// budget in effect before the first change.
pub fn spending(steps: &[Step], budgets: &[BudgetFrom]) -> Markup {
    if steps.is_empty() {
        return html! { p.empty { "Nothing spent yet: the chart appears with the first charge." } };
    }
    let drawn = envelope(steps, MAX_STEPS);
    // The axis spans the units (and a twentieth more, so the last step shows): a ledger spent
    // in seconds is drawn over seconds, one spent over months over months.
    let t0 = steps[0].at;
    let last = steps[steps.len() - 1].at.max(t0);
    let t1 = last + ((last - t0) / 20).max(chrono::Duration::seconds(1));
    // The budget in effect at t0, then its changes inside (t0, t1].
    let mut line: Vec<(DateTime<Utc>, f64)> = Vec::new();
    for b in budgets {
        if b.from <= t0 || line.is_empty() {
            line.clear();
            line.push((t0, b.mu));
        } else if b.from <= t1 {
            line.push((b.from, b.mu));
        }
    }
    let y_max = drawn
        .iter()
        .map(|s| s.mu_after)
        .chain(line.iter().map(|b| b.1))
        .fold(f64::MIN_POSITIVE, f64::max)
        * 1.05;
    let span = (t1 - t0).num_milliseconds() as f64;
    let x =
        |t: DateTime<Utc>| LEFT + (W - LEFT - RIGHT) * (t - t0).num_milliseconds() as f64 / span;
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / y_max);
    // Each drawn step rises at its bucket's first time, so the line is never below a unit's μ.
    let mut path = format!("M{:.1},{:.1}", x(t0), y(0.0));
    for s in &drawn {
        let _ = write!(path, " H{:.1} V{:.1}", x(s.at), y(s.mu_after));
    }
    let _ = write!(path, " H{:.1}", x(t1));
    let mut budget_path = String::new();
    for (i, (from, mu)) in line.iter().enumerate() {
        let _ = if i == 0 {
            write!(budget_path, "M{:.1},{:.1}", x(*from), y(*mu))
        } else {
            write!(budget_path, " H{:.1} V{:.1}", x(*from), y(*mu))
        };
    }
    let _ = write!(budget_path, " H{:.1}", x(t1));
    let reserved: Vec<(f64, f64)> = drawn
        .iter()
        .filter(|s| s.reserved)
        .map(|s| (x(s.at), y(s.mu_after)))
        .collect();
    let mut y_ticks = vec![(0.0, "0".to_owned())];
    for (_, mu) in &line {
        if !y_ticks.iter().any(|(v, _)| (y(*v) - y(*mu)).abs() < 14.0) {
            y_ticks.push((*mu, num(*mu)));
        }
    }
    let last_budget = line.last().map_or(0.0, |b| b.1);
    let changes = line.len() - 1;
    html! {
        svg.chart viewBox=(format!("0 0 {W} {H}")) role="img"
            aria-label=(format!("μ spent over time by {} units from {} to {} UTC, budget μ = {}{}",
                steps.len(), t0.format("%Y-%m-%d %H:%M"), t1.format("%Y-%m-%d %H:%M"), num(last_budget),
                if changes > 0 { format!(" after {changes} budget changes") } else { String::new() })) {
            (axes(&y_ticks, y, "μ spent (√Σμᵢ²)"))
            @for (t, label) in time_ticks(t0, t1) {
                line.grid x1=(format!("{:.1}", x(t))) x2=(format!("{:.1}", x(t))) y1=(TOP) y2=(H - BOTTOM) {}
                text.axis-label x=(format!("{:.1}", x(t))) y=(H - BOTTOM + 18.0) text-anchor="middle" { (label) }
            }
            path.budget-line d=(budget_path) {}
            text.axis-label x=(W - RIGHT) y=(y(last_budget) - 5.0) text-anchor="end" { "budget" }
            path.spent d=(path) {}
            @for (cx, cy) in &reserved {
                circle.reserved cx=(format!("{cx:.1}")) cy=(format!("{cy:.1}")) r="3.5" {}
            }
            text.axis-label x=((LEFT + W - RIGHT) / 2.0) y=(H - 4.0) text-anchor="middle" {
                "time (UTC), " (t0.format("%Y-%m-%d")) " to " (t1.format("%Y-%m-%d"))
            }
        }
        @if drawn.len() < steps.len() {
            p.note { "Drawn as the upper envelope of " (steps.len()) " units in " (drawn.len()) " steps." }
        }
    }
}

/// Ticks of a time axis from `t0` to `t1`: the smallest round step (minutes, hours, days, weeks,
/// months, years, UTC) that makes at most six, each labelled by as much of the date as it needs.
fn time_ticks(t0: DateTime<Utc>, t1: DateTime<Utc>) -> Vec<(DateTime<Utc>, String)> {
    const SECOND: i64 = 1;
    const MINUTE: i64 = 60;
    const HOUR: i64 = 3600;
    const DAY: i64 = 86_400;
    let span = (t1 - t0).num_seconds().max(1);
    let fixed = [
        SECOND,
        5 * SECOND,
        15 * SECOND,
        30 * SECOND,
        MINUTE,
        5 * MINUTE,
        15 * MINUTE,
        30 * MINUTE,
        HOUR,
        3 * HOUR,
        6 * HOUR,
        12 * HOUR,
        DAY,
        2 * DAY,
        7 * DAY,
        14 * DAY,
    ];
    if let Some(&step) = fixed.iter().find(|&&s| span / s <= 6) {
        let fmt = if step < MINUTE {
            "%H:%M:%S"
        } else if step < DAY {
            if t0.date_naive() == t1.date_naive() {
                "%H:%M"
            } else {
                "%b %d %H:%M"
            }
        } else {
            "%b %d"
        };
        // In milliseconds: the first round time at or after t0 (a tick before t0 would be drawn
        // left of the axis).
        let step_ms = step * 1000;
        let first = (t0.timestamp_millis() + step_ms - 1).div_euclid(step_ms) * step_ms;
        return (0..)
            .map(|k| first + k * step_ms)
            .take_while(|&t| t <= t1.timestamp_millis())
            .filter_map(DateTime::from_timestamp_millis)
            .map(|t| (t, t.format(fmt).to_string()))
            .collect();
    }
    // Months: steps of 1, 3, 6 or 12·k months from the first month start after t0.
    let months = |t: DateTime<Utc>| t.year() as i64 * 12 + t.month0() as i64;
    let n = months(t1) - months(t0);
    let step = [1, 3, 6, 12]
        .into_iter()
        .chain((2..).map(|k| 12 * k))
        .find(|s| n / s <= 6)
        .unwrap_or(12);
    let first = (months(t0) + 1 + step - 1).div_euclid(step) * step;
    (0..)
        .map(|k| first + k * step)
        .take_while(|&m| m <= months(t1))
        .filter_map(|m| {
            chrono::NaiveDate::from_ymd_opt(m.div_euclid(12) as i32, m.rem_euclid(12) as u32 + 1, 1)
        })
        .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
        .map(|t| {
            (
                t,
                t.format(if step >= 12 { "%Y" } else { "%b %Y" })
                    .to_string(),
            )
        })
        .collect()
}

/// At most `max` steps: consecutive buckets, each drawn from its first unit's time at its largest
/// μ (and as reserved if any unit in it is).
fn envelope(steps: &[Step], max: usize) -> Vec<Step> {
    if steps.len() <= max {
        return steps.to_vec();
    }
    let per = steps.len().div_ceil(max);
    steps
        .chunks(per)
        .map(|c| Step {
            at: c[0].at,
            mu_after: c.iter().map(|s| s.mu_after).fold(0.0, f64::max),
            reserved: c.iter().any(|s| s.reserved),
        })
        .collect()
}

/// A curve of a trade-off chart: its name (the legend's), its CSS class and its (α, β) points.
pub struct Curve<'a> {
    pub name: String,
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
        let t0 = DateTime::from_timestamp(1_790_000_000, 0).unwrap();
        let steps: Vec<Step> = (0..10_000)
            .map(|i| Step {
                at: t0 + chrono::Duration::seconds(i),
                mu_after: ((i % 97) as f64).sqrt(),
                reserved: i == 5_000,
            })
            .collect();
        let drawn = envelope(&steps, MAX_STEPS);
        assert!(drawn.len() <= MAX_STEPS);
        // The drawn line at a unit's time is the last drawn step that started at or before it.
        for s in &steps {
            let at = drawn.iter().rev().find(|d| d.at <= s.at).unwrap();
            assert!(at.mu_after >= s.mu_after);
        }
        assert_eq!(drawn.iter().filter(|s| s.reserved).count(), 1);
    }

    #[test]
    fn time_ticks_are_round_few_and_inside_the_axis() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        for (from, to, first, count) in [
            (
                "2026-11-27T10:07:00Z",
                "2026-11-27T10:07:04.200Z",
                "10:07:00",
                5,
            ),
            ("2026-11-27T10:07:00Z", "2026-11-27T11:00:00Z", "10:15", 4),
            (
                "2026-11-27T10:07:00Z",
                "2026-11-29T09:00:00Z",
                "Nov 27 12:00",
                4,
            ),
            ("2026-11-01T00:00:00Z", "2026-11-29T09:00:00Z", "Nov 05", 4),
            (
                "2026-01-15T00:00:00Z",
                "2026-11-29T09:00:00Z",
                "Apr 2026",
                3,
            ),
            ("2016-01-15T00:00:00Z", "2026-11-29T09:00:00Z", "2018", 5),
        ] {
            let (t0, t1) = (at(from), at(to));
            let ticks = time_ticks(t0, t1);
            assert_eq!(ticks.len(), count, "{from} to {to}: {ticks:?}");
            assert_eq!(ticks[0].1, first, "{from} to {to}: {ticks:?}");
            assert!(ticks.iter().all(|(t, _)| t0 <= *t && *t <= t1));
        }
    }

    #[test]
    fn a_budget_change_is_a_step_at_its_time() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let steps = [Step {
            at: at("2026-11-27T00:00:00Z"),
            mu_after: 1.0,
            reserved: false,
        }];
        let budgets = [
            BudgetFrom {
                from: at("2026-11-20T00:00:00Z"),
                mu: 2.0,
            },
            BudgetFrom {
                from: at("2026-11-28T00:00:00Z"),
                mu: 3.0,
            },
        ];
        let steps = [
            steps[0],
            Step {
                at: at("2026-11-28T21:42:51.429Z"),
                ..steps[0]
            },
        ];
        let svg = spending(&steps, &budgets).into_string();
        // The axis runs from the first unit to the last and a twentieth more (to 2026-11-29):
        // the budget is 2 for the first half, then steps up to 3.
        let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / (3.0 * 1.05));
        let mid = LEFT + (W - LEFT - RIGHT) / 2.0;
        let d = format!(
            "M{:.1},{:.1} H{:.1} V{:.1} H{:.1}",
            LEFT,
            y(2.0),
            mid,
            y(3.0),
            W - RIGHT
        );
        assert!(svg.contains(&d), "{d} not in {svg}");
        assert!(svg.contains("after 1 budget changes"));
    }

    #[test]
    fn charts_escape_nothing_they_should_not_and_stay_finite() {
        let svg = tradeoff(
            &[Curve {
                name: "<b>x</b>".into(),
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
