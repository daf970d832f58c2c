//! Adversarial soundness suite: the accountant's reported figures against independent oracles
//! written from first principles (no code of the accountant is used to compute a truth).
//!
//! Every upper figure must be ≥ the truth (ε(δ), δ(ε), advantage, TPR, β_upper, μ.upper,
//! infinity_mass), every lower figure ≤ the truth (ε_lower, δ_lower, advantage_lower, β, μ.lower),
//! nothing may panic (a clean error is fine), and equivalent inputs must give overlapping brackets.
//!
//! Modules:
//! - [`hp`]: 320-bit arithmetic (dashu-float) and the normal distribution functions;
//! - [`pairs`]: exact finite pairs (hockey stick, Neyman–Pearson curve, μ at the vertices);
//! - [`gdp`]: μ-GDP closed forms;
//! - [`mixture`]: explicit neighbouring datasets for subsampled Gaussian/Laplace sums;
//! - [`oracle`]: the event semantics → a model with rigorous brackets;
//! - [`check`]: runs the accountant and lists every violation;
//! - [`known_bad`]: the bug report, one test per item; [`hunt`]: variations and other corners;
//! - [`equivalence`]: self_composed vs list, no-op events, order; [`random`]: seeded random inputs;
//! - [`child`]: runs a test in a child process (aborts/hangs); [`probe`]: an ignored diagnostic;
//! - [`renyi`]: Rényi black boxes against their closed-form worst case, Pinsker and the Gaussian
//!   witness; vertex scans past ε = 34; subsampled +∞ mass (issue 32).
//!
//! Environment: `SOUNDNESS_SEED`, `SOUNDNESS_CASES`, `SOUNDNESS_VERBOSE` (random inputs),
//! `SOUNDNESS_STRICT=1` (no f64 slack: also report ulp-level misses), `SOUNDNESS_PROBE` (probe).

mod certificates;
mod check;
mod child;
mod equivalence;
mod gdp;
mod hp;
mod hunt;
mod known_bad;
mod mixture;
mod oracle;
mod pairs;
mod probe;
mod random;
mod renyi;
mod widenings;
