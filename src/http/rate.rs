//! Rate limiting: a token bucket per key (refilled at `rate` per second, up to `burst`), so one
//! caller cannot starve the others; beyond it, 429 with Retry-After. Keys are principals' names
//! (requests) and client addresses (failed authentications, [`FAILED_AUTH_PER_SECOND`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Failed authentications a client address may make per second, on average; beyond
/// [`FAILED_AUTH_BURST`] at once, its requests get 429 before their credential is looked up (a
/// guessing client cannot make the store work per guess, OWASP API2:2023).
pub const FAILED_AUTH_PER_SECOND: f64 = 5.0;
/// Failed authentications a client address may make at once.
pub const FAILED_AUTH_BURST: f64 = 50.0;

/// Most principals tracked; beyond, buckets idle long enough to be full again are dropped first.
const MAX_BUCKETS: usize = 100_000;

/// The buckets of every principal.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `rate` requests per second on average, `burst` at once (both > 0).
    pub fn new(rate: f64, burst: f64) -> Self {
        RateLimiter {
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `key`'s bucket holds a request now (taking none), or how many whole seconds to
    /// wait.
    pub fn peek(&self, key: &str) -> Result<(), u64> {
        let b = self.buckets.lock().expect("rate buckets");
        match b.get(key) {
            None => Ok(()),
            Some(&(tokens, last)) => {
                self.take(self.refilled(tokens, last, Instant::now()), 0.0)
                    .1
            }
        }
    }

    /// Takes one request from `key`'s bucket, or says how many whole seconds to wait.
    pub fn check(&self, key: &str) -> Result<(), u64> {
        let now = Instant::now();
        let mut b = self.buckets.lock().expect("rate buckets");
        if b.len() >= MAX_BUCKETS && !b.contains_key(key) {
            let full_after = self.burst / self.rate;
            b.retain(|_, (_, t)| now.duration_since(*t).as_secs_f64() < full_after);
        }
        let (tokens, last) = b.entry(key.to_owned()).or_insert((self.burst, now));
        let (left, verdict) = self.take(self.refilled(*tokens, *last, now), 1.0);
        (*tokens, *last) = (left, now);
        verdict
    }

    /// A bucket holding `tokens` at `last`, refilled until `now` (at most `burst`).
    fn refilled(&self, tokens: f64, last: Instant, now: Instant) -> f64 {
        (tokens + now.duration_since(last).as_secs_f64() * self.rate).min(self.burst)
    }

    /// Takes `cost` (0 to only look) from a bucket holding `tokens` if it holds a whole request:
    /// what is left, and the verdict (how many whole seconds to wait if not).
    fn take(&self, tokens: f64, cost: f64) -> (f64, Result<(), u64>) {
        if tokens >= 1.0 {
            (tokens - cost, Ok(()))
        } else {
            (
                tokens,
                Err(((1.0 - tokens) / self.rate).ceil().max(1.0) as u64),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_allowed_then_the_rate_and_callers_are_independent() {
        let r = RateLimiter::new(1.0, 3.0);
        for _ in 0..3 {
            assert_eq!(r.check("a"), Ok(()));
        }
        assert_eq!(r.check("a"), Err(1));
        assert_eq!(r.check("b"), Ok(()));
        // Peeking takes nothing.
        assert_eq!(r.peek("a"), Err(1));
        assert_eq!(r.peek("c"), Ok(()));
        assert_eq!(r.peek("c"), Ok(()));
        assert_eq!(r.check("c"), Ok(()));
    }
}
