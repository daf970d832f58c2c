//! The stateless entry point: a list of events in, a report out (the `account` command and the
//! stateless compose endpoint).

use super::composition::Composition;
use super::event::Event;
use super::json::{self, Fields, InputError, JsonPath};
use super::params::*;
use super::report::Report;
use super::{AccountantError, NeighboringRelation};
use serde_json::Value;

/// The input of `privacy-ledger account` (and of the stateless compose endpoint).
#[derive(Debug, Clone, PartialEq)]
pub struct AccountRequest {
    pub events: Vec<Event>,
    pub neighboring_relation: NeighboringRelation,
    pub options: ReportOptions,
}

impl AccountRequest {
    /// Parses `{"events": [...], "neighboring_relation", "deltas", "epsilons", "alphas", "delta_slack"}`.
    pub fn from_json(v: &Value) -> Result<Self, InputError> {
        let root = JsonPath::root();
        let mut f = Fields::new(v, &root)?;
        let (ev, p) = f.required("events")?;
        let items = json::array(ev, &p)?;
        if items.len() > super::event::MAX_EVENT_NODES {
            return Err(InputError::new(
                &p,
                format!(
                    "has {} events; at most {} are allowed",
                    items.len(),
                    super::event::MAX_EVENT_NODES
                ),
            ));
        }
        let events = items
            .iter()
            .enumerate()
            .map(|(i, e)| super::dp_event::parse_any_event(e, &p.index(i)))
            .collect::<Result<Vec<Event>, InputError>>()?;
        let neighboring_relation = match f.optional("neighboring_relation") {
            None => NeighboringRelation::default(),
            Some((x, p)) => {
                let s = json::string(x, &p)?;
                NeighboringRelation::parse(s).ok_or_else(|| {
                    InputError::new(
                        &p,
                        format!("must be \"add_or_remove_one\" or \"replace_one\", got {s:?}"),
                    )
                })?
            }
        };
        let mut options = ReportOptions::default();
        if let Some((x, p)) = f.optional("deltas") {
            options.deltas = json::number_list(x, &p, MAX_POINTS, Delta::new)?;
        }
        if let Some((x, p)) = f.optional("epsilons") {
            options.epsilons = json::number_list(x, &p, MAX_POINTS, Epsilon::new)?;
        }
        if let Some((x, p)) = f.optional("alphas") {
            options.alphas = json::number_list(x, &p, MAX_POINTS, Alpha::new)?;
        }
        if let Some((x, p)) = f.optional("delta_slack") {
            options.delta_slack =
                DeltaSlack::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?;
        }
        if let Some((x, p)) = f.optional("grid_step") {
            options.grid_step =
                GridStep::new(json::number(x, &p)?).map_err(|r| InputError::new(&p, r))?;
        }
        if let Some((x, p)) = f.optional("group_size") {
            let k = json::integer(x, &p, 1)?;
            options.group_size =
                Some(super::params::group_size(k).map_err(|r| InputError::new(&p, r))?);
        }
        f.finish()?;
        Ok(AccountRequest {
            events,
            neighboring_relation,
            options,
        })
    }
}

/// Accounts for a request: exactly (closed forms) when every event is μ-GDP, otherwise with the
/// numerical engine for the non-Gaussian part.
///
/// # Errors
/// [`AccountantError::TooLarge`] or [`AccountantError::Unsupported`] naming the event at fault.
pub fn account(req: &AccountRequest) -> Result<Report, AccountantError> {
    let mut comp = Composition::new(req.neighboring_relation, req.options.grid_step);
    // One push of them all, so their numerical leaves are composed as one list, half on each core
    // ([`Composition::push`]); errors still name `$.events[i]`.
    let all = Event::Composed {
        events: req.events.clone(),
    };
    comp.push(&all, &JsonPath::root())?;
    let g = comp.guarantee()?;
    Ok(Report::build(
        g.as_ref(),
        req.neighboring_relation,
        comp.invocations(),
        &req.options,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accountant::guarantee::Method;
    use serde_json::json;

    #[test]
    fn gaussian_ledger_reports_exact_mu_and_profile() {
        let req = AccountRequest::from_json(&json!({
            "events": [{"type": "self_composed", "count": 3,
                        "event": {"type": "gaussian", "noise_multiplier": 3f64.sqrt()}}],
            "epsilons": [1.0], "deltas": [1e-5], "alphas": [0.1]
        }))
        .unwrap();
        let r = account(&req).unwrap();
        let mu = r.mu.upper.unwrap();
        assert!((mu - 1.0).abs() < 1e-14, "{mu}");
        assert!((r.delta[0].delta - 0.126_936_737_506_644).abs() < 1e-13);
        assert!(r.delta[0].delta_lower <= r.delta[0].delta);
        let e = r.epsilon[0].epsilon.unwrap();
        assert!((e - 4.377_178_095_68).abs() < 1e-9);
        assert!(r.tradeoff[0].beta <= r.tradeoff[0].beta_upper);
        assert_eq!(r.method, Method::Analytic);
        assert!(r.clt.as_ref().unwrap().approximate);
    }

    #[test]
    fn request_fields_are_validated_with_paths() {
        let e =
            AccountRequest::from_json(&json!({"events": [], "deltas": [0.1, 2.0]})).unwrap_err();
        assert_eq!(e.path, "$.deltas[1]");
        let e = AccountRequest::from_json(&json!({"events": [], "neighboring_relation": "swap"}))
            .unwrap_err();
        assert_eq!(e.path, "$.neighboring_relation");
        let e = AccountRequest::from_json(&json!({"events": [], "delta_slack": 0.5})).unwrap_err();
        assert_eq!(e.path, "$.delta_slack");
        let e = AccountRequest::from_json(&json!({"events": [], "extra": 1})).unwrap_err();
        assert_eq!(e.path, "$.extra");
        let e = AccountRequest::from_json(&json!({})).unwrap_err();
        assert_eq!(e.path, "$.events");
    }

    #[test]
    fn events_without_meaning_under_the_relation_are_refused_with_a_clear_error() {
        let req = AccountRequest::from_json(&json!({"events": [
            {"type": "gdp", "mu": 1},
            {"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 2}
        ]}))
        .unwrap();
        let err = account(&req).unwrap_err();
        assert!(err.to_string().contains("$.events[1]"), "{err}");
        assert!(err.to_string().contains("replace_one"), "{err}");
    }
}
