//! Central limit theorems for composition (DRS22 §3.2, §5): *approximations*, never bounds.
//!
//! Composing many near-perfect trade-off functions tends to G_μ. The functionals of each curve
//! (moments of its log-likelihood ratio) give μ and, through Berry–Esseen (DRS22 Thm. 5), an error
//! γ. Everything here is reported labelled "approximate" and is never used to admit a charge: the
//! CLT μ can be *below* the exact value (Gomez et al., "(ε,δ) considered harmful": σ = 9.4, T = 2000 gives 1.5634 vs 1.5668).

use super::normal;
use std::sync::OnceLock;

/// Moments of the privacy-loss L = ln(dP/dQ) under P for a pair (P, Q) with f = T(P, Q)
/// (DRS22 §3.2): kl = E L, κ₂ = E L², κ₃ = E|L|³, κ̄₃ = E|L − kl|³.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Functionals {
    pub kl: f64,
    pub kappa2: f64,
    pub kappa3: f64,
    pub kbar3: f64,
}

impl Functionals {
    /// The functionals of a discrete privacy loss given as (loss, P-probability) atoms.
    pub fn from_atoms(atoms: &[(f64, f64)]) -> Self {
        let kl: f64 = atoms.iter().map(|&(l, p)| p * l).sum();
        Functionals {
            kl,
            kappa2: atoms.iter().map(|&(l, p)| p * l * l).sum(),
            kappa3: atoms.iter().map(|&(l, p)| p * l.abs().powi(3)).sum(),
            kbar3: atoms.iter().map(|&(l, p)| p * (l - kl).abs().powi(3)).sum(),
        }
    }
}

/// Functionals of G_μ: L ~ N(μ²/2, μ²), so kl = μ²/2, κ₂ = μ² + μ⁴/4, κ̄₃ = 2√(2/π) μ³ and κ₃ is
/// the third absolute moment of that normal (DRS22, derived).
pub fn gdp(mu: f64) -> Functionals {
    let m = mu * mu / 2.0;
    let s = mu;
    let r = if s > 0.0 { m / s } else { 0.0 };
    // E|X|³ for X ~ N(m, s²): s³[(r³ + 3r)(1 − 2Φ(−r)) + 2(r² + 2)φ(r)].
    let kappa3 = s.powi(3)
        * ((r.powi(3) + 3.0 * r) * (1.0 - 2.0 * normal::sf(r))
            + 2.0 * (r * r + 2.0) * normal::pdf(r));
    Functionals {
        kl: m,
        kappa2: mu * mu + mu.powi(4) / 4.0,
        kappa3,
        kbar3: 2.0 * (2.0 / std::f64::consts::PI).sqrt() * mu.powi(3),
    }
}

/// Functionals of f_{ε,0} (randomized response with loss ±ε): kl = ε·tanh(ε/2), κ₂ = ε², κ₃ = ε³,
/// κ̄₃ = 8ε³e^ε(e^{2ε} + 1)/(1 + e^ε)⁴ (DRS22, derived).
pub fn pure_dp(eps: f64) -> Functionals {
    let q = 1.0 / (1.0 + (-eps).exp());
    Functionals::from_atoms(&[(eps, q), (-eps, 1.0 - q)])
}

/// Functionals of f_{ε,0,η}, the dominating pair of an ε-DP, η-TV mechanism (Ghazi & Issa App. E:
/// kl = εη, κ₂ = ηε²(e^ε + 1)/(e^ε − 1)).
pub fn pure_dp_tv(eps: f64, eta: f64) -> Functionals {
    let c = super::tv::TvComposition::new(eps, 0.0, eta, 1);
    let al = c.erasure();
    let q = 1.0 / (1.0 + (-eps).exp());
    Functionals::from_atoms(&[
        (eps, (1.0 - al) * q),
        (0.0, al),
        (-eps, (1.0 - al) * (1.0 - q)),
    ])
}

/// Functionals of C_p(G_μ), the uniformly subsampled Gaussian mechanism (DRS22 Lemma 4), by
/// Gauss–Legendre quadrature on [μ/2, μ + 40] (the Gaussian weights are below e^{−800} beyond).
///
/// With Z(x) = ln(p e^{μx − μ²/2} + 1 − p) and φ the normal density:
/// ```text
/// kl  = p ∫ Z(x)(φ(x−μ) − φ(x)) dx
/// κ₂  = ∫ Z(x)² (pφ(x−μ) + (2−p)φ(x)) dx
/// κ̄₃ = ∫ |Z(x) − kl|³ (pφ(x−μ) + (1−p)φ(x)) dx + ∫ |Z(x) + kl|³ φ(x) dx + kl³ (f_p(x*) − x*)
/// ```
/// The last κ̄₃ term is the slope −1 segment of C_p, which the printed Lemma 4 leaves out (DRS22
/// §12 flag 4); κ₃ is computed like κ̄₃ with kl = 0.
///
/// `None` for μ > [`MAX_CLT_MU`]: the quadrature's interval (and its cost) grows with μ, μ² soon
/// overflows, and a leaf that distinguishes its neighbours almost surely is far outside the CLT's
/// regime anyway (the CLT figure is an approximation shown beside the certified ones).
pub fn subsampled_gdp(mu: f64, p: f64) -> Option<Functionals> {
    if mu.is_nan() || mu > MAX_CLT_MU {
        return None;
    }
    let z = |x: f64| {
        let t = mu * x - mu * mu / 2.0;
        if t > 0.0 {
            t + (p + (1.0 - p) * (-t).exp()).ln()
        } else {
            (p * t.exp_m1()).ln_1p()
        }
    };
    let phi = normal::pdf;
    let (a, b) = (mu / 2.0, mu + 40.0);
    let kl = p * integrate(a, b, |x| z(x) * (phi(x - mu) - phi(x)));
    let kappa2 = integrate(a, b, |x| {
        z(x).powi(2) * (p * phi(x - mu) + (2.0 - p) * phi(x))
    });
    let third = |c: f64| {
        integrate(a, b, |x| {
            (z(x) - c).abs().powi(3) * (p * phi(x - mu) + (1.0 - p) * phi(x))
                + (z(x) + c).abs().powi(3) * phi(x)
        })
    };
    let segment = (1.0 - p) * (1.0 - 2.0 * normal::sf(mu / 2.0));
    let f = Functionals {
        kl,
        kappa2,
        kappa3: third(0.0),
        kbar3: third(kl) + kl.powi(3) * segment,
    };
    [f.kl, f.kappa2, f.kappa3, f.kbar3]
        .iter()
        .all(|x| x.is_finite())
        .then_some(f)
}

/// Largest μ of a subsampled Gaussian leaf whose CLT functionals are computed (Gauss–Legendre on
/// [μ/2, μ + 40]: at most 280 panels).
pub const MAX_CLT_MU: f64 = 30.0;

/// The Berry–Esseen CLT for a composition (DRS22 Thm. 5). **Approximate.**
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BerryEsseen {
    /// μ = 2‖kl‖₁ / √(‖κ₂‖₁ − ‖kl‖₂²).
    pub mu: f64,
    /// γ = 0.56‖κ̄₃‖₁ / (‖κ₂‖₁ − ‖kl‖₂²)^{3/2}; the theorem needs γ < 1/2.
    pub gamma: f64,
}

impl BerryEsseen {
    /// Whether γ < 1/2, the theorem's condition for its band G_μ(α + γ) − γ ≤ f ≤ G_μ(α − γ) + γ.
    pub fn applies(&self) -> bool {
        self.gamma < 0.5
    }
}

/// Running sums of functionals over a composition (‖kl‖₁, ‖κ₂‖₁, ‖kl‖₂², ‖κ̄₃‖₁): additive, so a
/// ledger keeps them incrementally and [`CltSums::berry_esseen`] costs O(1).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct CltSums {
    pub kl: f64,
    pub kappa2: f64,
    pub kl_sq: f64,
    pub kbar3: f64,
}

impl CltSums {
    /// Adds `count` copies of a curve with functionals `f`.
    pub fn add(&mut self, f: Functionals, count: u64) {
        let n = count as f64;
        self.kl += n * f.kl;
        self.kappa2 += n * f.kappa2;
        self.kl_sq += n * f.kl * f.kl;
        self.kbar3 += n * f.kbar3;
    }

    /// Adds another composition's sums.
    pub fn merge(&mut self, o: &CltSums) {
        self.kl += o.kl;
        self.kappa2 += o.kappa2;
        self.kl_sq += o.kl_sq;
        self.kbar3 += o.kbar3;
    }

    /// DRS22 Thm. 5 on these sums; `None` for zero variance (empty or degenerate composition).
    pub fn berry_esseen(&self) -> Option<BerryEsseen> {
        let var = self.kappa2 - self.kl_sq;
        if var <= 0.0 || !var.is_finite() {
            return None;
        }
        Some(BerryEsseen {
            mu: 2.0 * self.kl / var.sqrt(),
            gamma: 0.56 * self.kbar3 / var.powf(1.5),
        })
    }
}

/// DRS22 Thm. 5 over (functionals, count) terms:
/// ```text
/// μ = 2‖kl‖₁ / √(‖κ₂‖₁ − ‖kl‖₂²),   γ = 0.56‖κ̄₃‖₁ / (‖κ₂‖₁ − ‖kl‖₂²)^{3/2}
/// ```
/// Returns `None` for an empty or degenerate composition (zero variance).
pub fn berry_esseen(terms: impl IntoIterator<Item = (Functionals, u64)>) -> Option<BerryEsseen> {
    let mut sums = CltSums::default();
    for (f, n) in terms {
        sums.add(f, n);
    }
    sums.berry_esseen()
}

/// χ²₊(G_μ) = e^{μ²}Φ(3μ/2) + 3Φ(−μ/2) − 2 (DRS22 Lemma 3).
pub fn chi2_plus_gdp(mu: f64) -> f64 {
    (mu * mu).exp() * normal::cdf(1.5 * mu) + 3.0 * normal::sf(mu / 2.0) - 2.0
}

/// NoisySGD with uniform (without-replacement) subsampling, p = m/n, noise multiplier σ, T steps:
/// asymptotically μ-GDP with μ = √2·p√T·√(e^{σ⁻²}Φ(1.5/σ) + 3Φ(−0.5/σ) − 2) (DRS22 Cor. 4, with the
/// √2·c reading of DRS22). **Approximate** (a limit theorem).
pub fn noisy_sgd_mu_uniform(p: f64, sigma: f64, steps: f64) -> f64 {
    std::f64::consts::SQRT_2 * p * steps.sqrt() * chi2_plus_gdp(1.0 / sigma).sqrt()
}

/// NoisySGD with Poisson subsampling: μ = p√(T(e^{1/σ²} − 1)) (Bu et al. 2020; Su, "A statistical viewpoint on differential privacy").
/// **Approximate**, and known to be optimistic (below the exact μ).
pub fn noisy_sgd_mu_poisson(p: f64, sigma: f64, steps: f64) -> f64 {
    p * (steps * (1.0 / (sigma * sigma)).exp_m1()).sqrt()
}

/// ∫ₐᵇ g by 32-point Gauss–Legendre on panels of width ≤ 0.25 (integrands here are smooth and
/// Gaussian-weighted; the panel rule is exact to ~1e-15 relative on them).
fn integrate(a: f64, b: f64, g: impl Fn(f64) -> f64) -> f64 {
    let (nodes, weights) = gauss_legendre_32();
    let panels = ((b - a) / 0.25).ceil().max(1.0) as usize;
    let h = (b - a) / panels as f64;
    let mut total = 0.0;
    for k in 0..panels {
        let lo = a + k as f64 * h;
        let mid = lo + h / 2.0;
        let s: f64 = nodes
            .iter()
            .zip(weights.iter())
            .map(|(x, w)| w * g(mid + h / 2.0 * x))
            .sum();
        total += s * h / 2.0;
    }
    total
}

/// Nodes and weights of the 32-point Gauss–Legendre rule on [−1, 1], by Newton's method on P₃₂.
fn gauss_legendre_32() -> &'static (Vec<f64>, Vec<f64>) {
    static RULE: OnceLock<(Vec<f64>, Vec<f64>)> = OnceLock::new();
    RULE.get_or_init(|| {
        const N: usize = 32;
        let mut xs = vec![0.0; N];
        let mut ws = vec![0.0; N];
        for i in 0..N {
            let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (N as f64 + 0.5)).cos();
            let mut dp = 0.0;
            for _ in 0..100 {
                // Legendre recurrence for P_N(x) and its derivative.
                let (mut p0, mut p1) = (1.0, x);
                for k in 2..=N {
                    let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                    p0 = p1;
                    p1 = p2;
                }
                dp = N as f64 * (x * p1 - p0) / (x * x - 1.0);
                let dx = p1 / dp;
                x -= dx;
                if dx.abs() < 1e-16 {
                    break;
                }
            }
            xs[i] = x;
            ws[i] = 2.0 / ((1.0 - x * x) * dp * dp);
        }
        (xs, ws)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenfold_pure_dp_matches_drs22_theorem_5_example() {
        // DRS22: 10 × f_{1/√10,0}: μ = 1.00417187810128, γ = 0.183714736854.
        let f = pure_dp(1.0 / 10f64.sqrt());
        let be = berry_esseen([(f, 10)]).unwrap();
        assert!((be.mu - 1.004_171_878_101_28).abs() < 1e-12, "{}", be.mu);
        assert!((be.gamma - 0.183_714_736_854).abs() < 1e-11, "{}", be.gamma);
        assert!(be.applies());
    }

    #[test]
    fn gaussian_functionals_recover_exact_mu() {
        let be = berry_esseen([(gdp(0.5), 4)]).unwrap();
        assert!((be.mu - 1.0).abs() < 1e-14, "{}", be.mu);
    }

    #[test]
    fn subsampled_gaussian_functionals_match_lemma_4_values() {
        // DRS22 toy case p = 0.1, μ = 1: kl = 0.0109859928169, κ₂ = 0.0226332104229,
        // κ̄₃ (printed Lemma 4, without the slope −1 segment) = 0.0114742669784.
        let f = subsampled_gdp(1.0, 0.1).unwrap();
        assert!((f.kl - 0.010_985_992_816_9).abs() < 1e-12, "{}", f.kl);
        assert!(
            (f.kappa2 - 0.022_633_210_422_9).abs() < 1e-12,
            "{}",
            f.kappa2
        );
        let segment = 0.9 * (1.0 - 2.0 * normal::sf(0.5)) * f.kl.powi(3);
        assert!(
            (f.kbar3 - segment - 0.011_474_266_978_4).abs() < 1e-12,
            "{}",
            f.kbar3
        );
    }

    #[test]
    fn noisy_sgd_clt_matches_seed_values() {
        // DRS22: MNIST σ = 1.1, E = 60, m = 256: Cor 4 μ = 0.737401362, Poisson μ = 0.573591273.
        let p = 256.0 / 60000.0;
        let t = 14062.5;
        assert!((noisy_sgd_mu_uniform(p, 1.1, t) - 0.737_401_362).abs() < 1e-9);
        assert!((noisy_sgd_mu_poisson(p, 1.1, t) - 0.573_591_273).abs() < 1e-9);
    }
}
