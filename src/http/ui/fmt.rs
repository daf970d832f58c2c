//! Numbers as the pages show them: four significant digits, rounded in the direction that never
//! flatters privacy. A loss figure (μ, δ, ε spent, an attack's success) is rounded up, a
//! remaining budget or a type II error down; the API's full-precision value therefore lies on
//! the safe side of the shown digits, and agrees with them to the digits shown.

/// Significant digits shown.
const DIGITS: i32 = 4;

/// Direction of a shown number's rounding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Nearest,
    Up,
    Down,
}

/// `x` to four significant digits, rounded to nearest (axis labels and neutral figures).
pub fn num(x: f64) -> String {
    show(x, Dir::Nearest)
}

/// `x` to four significant digits, rounded up (privacy loss: μ, δ, ε spent, advantage, TPR).
pub fn num_up(x: f64) -> String {
    show(x, Dir::Up)
}

/// `x` to four significant digits, rounded down (what remains; β).
pub fn num_down(x: f64) -> String {
    show(x, Dir::Down)
}

/// A loss figure `x` that sits just above `anchor` (a budget, within 1e-6 relative: the gate's
/// tolerance, or a sum's upward rounding), rounded up with as many digits as it takes to stay
/// above `x` without reading as a 0.1 % overdraft: μ_B·(1 + 1e-9) = 3.000000003 shows as
/// "3.000000003", not "3.001". Elsewhere [`num_up`].
pub fn num_up_near(x: f64, anchor: f64) -> String {
    if anchor > 0.0 && x >= anchor && x <= anchor * (1.0 + 1e-6) {
        show_digits(x, Dir::Up, 10)
    } else {
        num_up(x)
    }
}

fn show(x: f64, dir: Dir) -> String {
    show_digits(x, dir, DIGITS)
}

fn show_digits(x: f64, dir: Dir, digits: i32) -> String {
    if x.is_nan() {
        return "—".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "∞" } else { "−∞" }.into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let e = x.abs().log10().floor() as i32;
    let decimals = digits - 1 - e;
    let scale = 10f64.powi(decimals);
    let scaled = x * scale;
    let mut m = match dir {
        Dir::Nearest => scaled.round(),
        Dir::Up => scaled.ceil(),
        Dir::Down => scaled.floor(),
    };
    // The scaling itself rounds: step once more if the shown value crossed x the wrong way.
    match dir {
        Dir::Up if m / scale < x => m += 1.0,
        Dir::Down if m / scale > x => m -= 1.0,
        _ => {}
    }
    let v = m / scale;
    if (-3..5).contains(&e) {
        let d = decimals.max(0) as usize;
        let s = format!("{v:.d$}");
        trim(&s)
    } else {
        // Scientific: mantissa with DIGITS significant digits.
        let mant = m / 10f64.powi(digits - 1);
        let exp = e + (mant.abs() >= 10.0) as i32;
        let mant = if mant.abs() >= 10.0 {
            mant / 10.0
        } else {
            mant
        };
        let d = (digits - 1).max(0) as usize;
        format!("{}e{}", trim(&format!("{mant:.d$}")), exp)
    }
}

/// Drops trailing zeros after a decimal point (and the point itself).
fn trim(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s.to_owned()
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The shown text parsed back (tests compare a page's digits with the API's values).
pub fn parse_shown(s: &str) -> Option<f64> {
    s.trim().replace('−', "-").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_digits() {
        assert_eq!(num(0.5), "0.5");
        assert_eq!(num_up(0.123_41), "0.1235");
        assert_eq!(num_down(0.123_49), "0.1234");
        assert_eq!(num_up(2.0), "2");
        assert_eq!(num_up(1e-10), "1e-10");
        assert_eq!(num_up(1.000_01e-10), "1.001e-10");
        assert_eq!(num_down(9.999_9e-6), "9.999e-6");
        assert_eq!(num_up(9.999_9e-6), "1e-5");
        assert_eq!(num(12_344.0), "12340");
        assert_eq!(num_up(123_456.0), "1.235e5");
        assert_eq!(num(f64::INFINITY), "∞");
        assert_eq!(num(f64::NAN), "—");
    }

    #[test]
    fn a_figure_just_above_its_budget_keeps_the_digits_that_say_so() {
        let x = 3.0 * (1.0 + 1e-9);
        // x is 3.0000000030000002 in binary: ten digits rounded up.
        let shown = num_up_near(x, 3.0);
        assert_eq!(shown, "3.000000004");
        assert!(parse_shown(&shown).unwrap() >= x);
        assert_eq!(num_up_near(3.0, 3.0), "3");
        assert_eq!(num_up_near(3.1, 3.0), "3.1");
        let tiny = num_up_near(1e-10 * (1.0 + 1e-9), 1e-10);
        assert!(
            tiny.starts_with("1.00000000") && tiny.ends_with("e-10"),
            "{tiny}"
        );
        assert!(parse_shown(&tiny).unwrap() >= 1e-10 * (1.0 + 1e-9));
    }

    #[test]
    fn up_is_never_below_and_down_never_above() {
        let mut x = 1.234_567_8e-12;
        while x < 1e12 {
            for v in [x, -x, x * 1.000_000_1, x * 0.999_999_9] {
                let u = parse_shown(&num_up(v)).unwrap();
                let d = parse_shown(&num_down(v)).unwrap();
                assert!(u >= v, "{v} shown up as {u}");
                assert!(d <= v, "{v} shown down as {d}");
                assert!((u - v).abs() <= v.abs() * 1.1e-3, "{v}: {u}");
                assert!((v - d).abs() <= v.abs() * 1.1e-3, "{v}: {d}");
            }
            x *= 1.37;
        }
    }
}
