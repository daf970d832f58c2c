//! Google dp_accounting's serialised `DpEvent`s, mapped onto our [`Event`] model.
//!
//! dp_accounting serialises an event with `DpEvent.to_named_tuple()`; as a JSON object (a recursive
//! `_asdict()`) that is `{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent",
//! "noise_multiplier": 1.0}`, with nested events as nested objects and lists as arrays
//! (dp_accounting 0.6.0 `dp_event.py` L87-128; field names and order in
//! `notes/dp_accounting_semantics.md` §1.2).
//!
//! dp_accounting's own inverse (`from_named_tuple`) imports `module_name` and calls `class_name` by
//! reflection, so it must never see untrusted input. Here the mapping is a closed match on
//! `class_name`; `module_name`, when present, must name dp_accounting's event module.
//!
//! | dp_accounting class | our event |
//! |---|---|
//! | `GaussianDpEvent{noise_multiplier}` | `gaussian` |
//! | `LaplaceDpEvent{noise_multiplier}` | `laplace` |
//! | `DiscreteLaplaceDpEvent{noise_parameter, sensitivity}` | `discrete_laplace` |
//! | `DiscreteGaussianDpEvent{sigma, sensitivity, dimension}` (dimension null or 1) | `discrete_gaussian` |
//! | `RandomizedResponseDpEvent{noise_parameter, num_buckets}` | `randomized_response` |
//! | `EpsilonDeltaDpEvent{epsilon, delta}` | `epsilon_delta` |
//! | `ZCDpEvent{rho, xi}` | `zcdp` |
//! | `PoissonSampledDpEvent{sampling_probability, event}` | `poisson_sampled{sampling_rate}` |
//! | `SampledWithoutReplacementDpEvent{source_dataset_size, sample_size, event}` | `sampled_without_replacement{population_size, sample_size}` |
//! | `SelfComposedDpEvent{event, count}` | `self_composed` |
//! | `ComposedDpEvent{events}` | `composed` |
//! | `NoOpDpEvent` | `composed{events: []}` |
//!
//! `EpsilonDeltaDpEvent` and `DiscreteGaussianDpEvent` are not in dp_accounting 0.6.0's
//! `dp_event.py` (its `PLDAccountant` answers "Unsupported event" for a generic (ε, δ) black box);
//! they are accepted in the shape above for documents written by other versions or by hand.
//!
//! `NonPrivateDpEvent`, `UnsupportedDpEvent` and every other class are rejected at
//! `<path>.class_name`.
//!
//! # Validation
//! The document is translated into our own JSON form (fields renamed, structure unchanged) and
//! parsed by [`Event::from_json_at`], so ranges and the depth/node limits are exactly those of the
//! native model. Field presence, unknown fields, `module_name`, `class_name` and `dimension` are
//! checked here; every error names the path and field name of the *original* dp_accounting
//! document (`$.event.sampling_probability`, not `$.event.sampling_rate`).

use super::event::{Event, MAX_EVENT_DEPTH, MAX_EVENT_NODES};
use super::json::{self, Fields, InputError, JsonPath};
use serde_json::{Map, Value};

/// The `module_name` values accepted (dp_accounting's event module, or the package that re-exports it).
pub const DP_ACCOUNTING_MODULES: &[&str] = &["dp_accounting.dp_event", "dp_accounting"];

/// The dp_accounting classes that map onto our model.
pub const DP_ACCOUNTING_CLASSES: &[&str] = &[
    "GaussianDpEvent",
    "LaplaceDpEvent",
    "DiscreteLaplaceDpEvent",
    "DiscreteGaussianDpEvent",
    "RandomizedResponseDpEvent",
    "EpsilonDeltaDpEvent",
    "ZCDpEvent",
    "PoissonSampledDpEvent",
    "SampledWithoutReplacementDpEvent",
    "SelfComposedDpEvent",
    "ComposedDpEvent",
    "NoOpDpEvent",
];

/// Fields whose names differ: (our name, dp_accounting's name). Renamed fields are always leaves, so
/// only the last segment of an error path can carry one.
const RENAMED: &[(&str, &str)] = &[
    ("sampling_rate", "sampling_probability"),
    ("population_size", "source_dataset_size"),
];

/// Parses one dp_accounting event (serialised by `to_named_tuple()` as a JSON object) located at
/// `path`, into the equivalent [`Event`].
///
/// # Errors
/// An [`InputError`] naming the offending path of the dp_accounting document: a class that cannot
/// be accounted (`NonPrivateDpEvent`, `UnsupportedDpEvent`, unknown classes) at `<path>.class_name`,
/// a foreign `module_name`, missing or unknown fields, out-of-range parameters, a `dimension` other
/// than 1, nesting or size beyond the native limits.
pub fn from_dp_accounting_json(v: &Value, path: &JsonPath) -> Result<Event, InputError> {
    let mut budget = MAX_EVENT_NODES;
    let ours = translate(v, path, 0, &mut budget)?;
    Event::from_json_at(&ours, path).map_err(|e| original_path(e, &path.to_string()))
}

/// Parses an event in either form: dp_accounting's (an object with a `class_name` field, see
/// [`from_dp_accounting_json`]) or ours ([`Event::from_json_at`]). The choice is made once, at the
/// top: a document is entirely in one form.
pub fn parse_any_event(v: &Value, path: &JsonPath) -> Result<Event, InputError> {
    match v {
        Value::Object(m) if m.contains_key("class_name") => from_dp_accounting_json(v, path),
        _ => Event::from_json_at(v, path),
    }
}

/// Rewrites a native parser error's path to the dp_accounting field name (only below `base`, the
/// path of the whole document, which may itself end in any name).
fn original_path(mut e: InputError, base: &str) -> InputError {
    if e.path.len() > base.len() && e.path.starts_with(base) {
        for (ours, theirs) in RENAMED {
            if let Some(prefix) = e.path.strip_suffix(&format!(".{ours}")) {
                if prefix.len() >= base.len() {
                    e.path = format!("{prefix}.{theirs}");
                    break;
                }
            }
        }
    }
    e
}

/// Translates one dp_accounting event at `path` into our JSON form, checking its structure.
fn translate(
    v: &Value,
    path: &JsonPath,
    depth: usize,
    budget: &mut usize,
) -> Result<Value, InputError> {
    // The same limits, with the same messages, as the native parser: this recursion must be bounded
    // before the native parser gets to see the document.
    if depth >= MAX_EVENT_DEPTH {
        return Err(InputError::new(
            path,
            format!("events are nested more than {MAX_EVENT_DEPTH} levels deep"),
        ));
    }
    if *budget == 0 {
        return Err(InputError::new(
            path,
            format!("more than {MAX_EVENT_NODES} events in one document"),
        ));
    }
    *budget -= 1;
    let mut f = Fields::new(v, path)?;
    if let Some((m, p)) = f.optional("module_name") {
        let module = json::string(m, &p)?;
        if !DP_ACCOUNTING_MODULES.contains(&module) {
            return Err(InputError::new(
                &p,
                format!(
                    "must be {} (dp_accounting's event module), got {module:?}",
                    DP_ACCOUNTING_MODULES
                        .iter()
                        .map(|m| format!("{m:?}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ));
        }
    }
    let (c, cpath) = f.required("class_name")?;
    let class = json::string(c, &cpath)?;
    let mut out = Map::new();
    let copy = |f: &mut Fields<'_>, out: &mut Map<String, Value>, theirs, ours: &str| {
        let (x, _) = f.required(theirs)?;
        out.insert(ours.to_owned(), x.clone());
        Ok::<(), InputError>(())
    };
    let ty = match class {
        "GaussianDpEvent" => {
            copy(&mut f, &mut out, "noise_multiplier", "noise_multiplier")?;
            "gaussian"
        }
        "LaplaceDpEvent" => {
            copy(&mut f, &mut out, "noise_multiplier", "noise_multiplier")?;
            "laplace"
        }
        "DiscreteLaplaceDpEvent" => {
            copy(&mut f, &mut out, "noise_parameter", "noise_parameter")?;
            copy(&mut f, &mut out, "sensitivity", "sensitivity")?;
            "discrete_laplace"
        }
        "DiscreteGaussianDpEvent" => {
            copy(&mut f, &mut out, "sigma", "sigma")?;
            copy(&mut f, &mut out, "sensitivity", "sensitivity")?;
            if let Some((d, p)) = f.optional("dimension") {
                let dim = json::integer(d, &p, 1)?;
                if dim != 1 {
                    return Err(InputError::new(
                        &p,
                        format!(
                            "must be null or 1, got {dim}: only one-dimensional discrete Gaussian \
                             noise can be accounted (a {dim}-dimensional one has no per-coordinate \
                             decomposition here)"
                        ),
                    ));
                }
            }
            "discrete_gaussian"
        }
        "RandomizedResponseDpEvent" => {
            copy(&mut f, &mut out, "noise_parameter", "noise_parameter")?;
            copy(&mut f, &mut out, "num_buckets", "num_buckets")?;
            "randomized_response"
        }
        "EpsilonDeltaDpEvent" => {
            copy(&mut f, &mut out, "epsilon", "epsilon")?;
            copy(&mut f, &mut out, "delta", "delta")?;
            "epsilon_delta"
        }
        "ZCDpEvent" => {
            copy(&mut f, &mut out, "rho", "rho")?;
            // dp_accounting 0.6.0 serialises xi (default 0.0) with every ZCDpEvent.
            if let Some((x, _)) = f.optional("xi") {
                out.insert("xi".into(), x.clone());
            }
            "zcdp"
        }
        "PoissonSampledDpEvent" => {
            copy(&mut f, &mut out, "sampling_probability", "sampling_rate")?;
            let (e, p) = f.required("event")?;
            out.insert("event".into(), translate(e, &p, depth + 1, budget)?);
            "poisson_sampled"
        }
        "SampledWithoutReplacementDpEvent" => {
            let (n, npath) = f.required("source_dataset_size")?;
            let (m, mpath) = f.required("sample_size")?;
            // The native parser's message would name `population_size`; check the order here.
            if let (Ok(n), Ok(m)) = (json::integer(n, &npath, 1), json::integer(m, &mpath, 1)) {
                if m > n {
                    return Err(InputError::new(
                        &mpath,
                        format!("must not exceed source_dataset_size ({n}), got {m}"),
                    ));
                }
            }
            copy(&mut f, &mut out, "source_dataset_size", "population_size")?;
            copy(&mut f, &mut out, "sample_size", "sample_size")?;
            let (e, p) = f.required("event")?;
            out.insert("event".into(), translate(e, &p, depth + 1, budget)?);
            "sampled_without_replacement"
        }
        "SelfComposedDpEvent" => {
            let (e, p) = f.required("event")?;
            out.insert("event".into(), translate(e, &p, depth + 1, budget)?);
            copy(&mut f, &mut out, "count", "count")?;
            "self_composed"
        }
        "ComposedDpEvent" => {
            let (es, p) = f.required("events")?;
            let items = json::array(es, &p)?;
            if items.len() > *budget {
                return Err(InputError::new(
                    &p,
                    format!(
                        "has {} events; at most {MAX_EVENT_NODES} events are allowed in one document",
                        items.len()
                    ),
                ));
            }
            let events = items
                .iter()
                .enumerate()
                .map(|(i, e)| translate(e, &p.index(i), depth + 1, budget))
                .collect::<Result<Vec<_>, _>>()?;
            out.insert("events".into(), Value::Array(events));
            "composed"
        }
        "NoOpDpEvent" => {
            out.insert("events".into(), Value::Array(Vec::new()));
            "composed"
        }
        "NonPrivateDpEvent" => {
            return Err(InputError::new(
                &cpath,
                "NonPrivateDpEvent releases data without privacy; it can never be admitted",
            ))
        }
        "UnsupportedDpEvent" => {
            return Err(InputError::new(
                &cpath,
                "UnsupportedDpEvent marks a mechanism dp_accounting itself cannot account; it \
                 cannot be accounted here either: describe the mechanism with a supported event",
            ))
        }
        other => {
            return Err(InputError::new(
                &cpath,
                format!(
                    "dp_accounting class {other:?} cannot be accounted; supported classes are: {}",
                    DP_ACCOUNTING_CLASSES.join(", ")
                ),
            ))
        }
    };
    f.finish()?;
    out.insert("type".into(), Value::String(ty.into()));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: &str = "dp_accounting.dp_event";

    fn parse(v: Value) -> Result<Event, InputError> {
        from_dp_accounting_json(&v, &JsonPath::root())
    }

    fn native(v: Value) -> Event {
        Event::from_json(&v).unwrap()
    }

    #[test]
    fn every_class_of_the_notes_maps_onto_the_native_event() {
        // The objects of notes/dp_accounting_semantics.md §1.2, verbatim.
        let cases = [
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}),
                json!({"type": "gaussian", "noise_multiplier": 1.0}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "LaplaceDpEvent", "noise_multiplier": 2.0}),
                json!({"type": "laplace", "noise_multiplier": 2.0}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "DiscreteLaplaceDpEvent", "noise_parameter": 0.5, "sensitivity": 1}),
                json!({"type": "discrete_laplace", "noise_parameter": 0.5, "sensitivity": 1}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "RandomizedResponseDpEvent", "noise_parameter": 0.5, "num_buckets": 2}),
                json!({"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 2}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "PoissonSampledDpEvent", "sampling_probability": 0.2, "event": {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 0.5}}),
                json!({"type": "poisson_sampled", "sampling_rate": 0.2, "event": {"type": "gaussian", "noise_multiplier": 0.5}}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "SampledWithoutReplacementDpEvent", "source_dataset_size": 1000, "sample_size": 10, "event": {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}}),
                json!({"type": "sampled_without_replacement", "population_size": 1000, "sample_size": 10, "event": {"type": "gaussian", "noise_multiplier": 1.0}}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", "event": {"module_name": "dp_accounting.dp_event", "class_name": "PoissonSampledDpEvent", "sampling_probability": 0.01, "event": {"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.1}}, "count": 100}),
                json!({"type": "self_composed", "count": 100, "event": {"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.1}}}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "ComposedDpEvent", "events": [{"module_name": "dp_accounting.dp_event", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}, {"module_name": "dp_accounting.dp_event", "class_name": "SelfComposedDpEvent", "event": {"module_name": "dp_accounting.dp_event", "class_name": "LaplaceDpEvent", "noise_multiplier": 1.0}, "count": 3}]}),
                json!({"type": "composed", "events": [{"type": "gaussian", "noise_multiplier": 1.0}, {"type": "self_composed", "count": 3, "event": {"type": "laplace", "noise_multiplier": 1.0}}]}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "EpsilonDeltaDpEvent", "epsilon": 1.0, "delta": 1e-06}),
                json!({"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "DiscreteGaussianDpEvent", "sigma": 2.0, "sensitivity": 1.0, "dimension": null}),
                json!({"type": "discrete_gaussian", "sigma": 2.0, "sensitivity": 1}),
            ),
            (
                json!({"module_name": "dp_accounting.dp_event", "class_name": "NoOpDpEvent"}),
                json!({"type": "composed", "events": []}),
            ),
        ];
        for (theirs, ours) in cases {
            let e = parse(theirs.clone()).unwrap_or_else(|e| panic!("{theirs}: {e}"));
            assert_eq!(e, native(ours), "{theirs}");
            // The dispatcher picks the dp_accounting form by its class_name.
            assert_eq!(parse_any_event(&theirs, &JsonPath::root()).unwrap(), e);
        }
    }

    #[test]
    fn module_name_is_optional_but_must_be_dp_accounting_when_present() {
        let e = parse(json!({"class_name": "GaussianDpEvent", "noise_multiplier": 2.0})).unwrap();
        assert_eq!(
            e,
            native(json!({"type": "gaussian", "noise_multiplier": 2.0}))
        );
        let e = parse(
            json!({"module_name": "dp_accounting", "class_name": "LaplaceDpEvent", "noise_multiplier": 2.0}),
        )
        .unwrap();
        assert_eq!(
            e,
            native(json!({"type": "laplace", "noise_multiplier": 2.0}))
        );
        let err = parse(
            json!({"module_name": "os", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.module_name");
        assert!(
            err.reason.contains("dp_accounting.dp_event"),
            "{}",
            err.reason
        );
        // Nested mismatch is reported at the nested path.
        let err = parse(json!({"module_name": M, "class_name": "SelfComposedDpEvent", "count": 2,
            "event": {"module_name": "evil.module", "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}}))
        .unwrap_err();
        assert_eq!(err.path, "$.event.module_name");
        let err = parse(json!({"module_name": 3, "class_name": "NoOpDpEvent"})).unwrap_err();
        assert_eq!(err.path, "$.module_name");
    }

    /// dp_accounting 0.6.0's own serialisation (`ZCDpEvent(0.5, 0.1).to_named_tuple()._asdict()`
    /// and `ZCDpEvent(0.5)`'s, printed by it): xi is kept, and a serialised xi of 0.0 is plain
    /// ρ-zCDP (one form with and without it).
    #[test]
    fn zcdp_events_carry_xi() {
        let with = json!({"module_name": "dp_accounting.dp_event", "class_name": "ZCDpEvent", "rho": 0.5, "xi": 0.1});
        assert_eq!(
            parse(with).unwrap(),
            native(json!({"type": "zcdp", "rho": 0.5, "xi": 0.1}))
        );
        let zero = json!({"module_name": "dp_accounting.dp_event", "class_name": "ZCDpEvent", "rho": 0.5, "xi": 0.0});
        assert_eq!(
            parse(zero).unwrap(),
            native(json!({"type": "zcdp", "rho": 0.5}))
        );
        let err = parse(json!({"class_name": "ZCDpEvent", "rho": 0.5, "xi": -1.0})).unwrap_err();
        assert_eq!(err.path, "$.xi");
    }

    #[test]
    fn non_private_unsupported_and_unknown_classes_are_refused_at_class_name() {
        let err = parse(json!({"module_name": M, "class_name": "NonPrivateDpEvent"})).unwrap_err();
        assert_eq!(err.path, "$.class_name");
        assert!(
            err.reason.contains("can never be admitted"),
            "{}",
            err.reason
        );
        let err = parse(json!({"module_name": M, "class_name": "UnsupportedDpEvent"})).unwrap_err();
        assert_eq!(err.path, "$.class_name");
        assert!(err.reason.contains("cannot be accounted"), "{}", err.reason);
        let err = parse(
            json!({"module_name": M, "class_name": "SampledWithReplacementDpEvent",
            "source_dataset_size": 10, "sample_size": 2, "event": {"class_name": "NoOpDpEvent"}}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.class_name");
        assert!(
            err.reason.contains("supported classes are"),
            "{}",
            err.reason
        );
        // Nested, inside a composition.
        let err = parse(json!({"class_name": "ComposedDpEvent", "events": [
            {"class_name": "NoOpDpEvent"}, {"class_name": "NonPrivateDpEvent"}]}))
        .unwrap_err();
        assert_eq!(err.path, "$.events[1].class_name");
        let err = parse(json!({"module_name": M, "noise_multiplier": 1.0})).unwrap_err();
        assert_eq!(err.path, "$.class_name");
        assert_eq!(err.reason, "is required");
        let err = parse(json!({"class_name": 7})).unwrap_err();
        assert_eq!(err.path, "$.class_name");
    }

    #[test]
    fn bad_nested_parameters_are_reported_at_their_original_path() {
        let doc = json!({"module_name": M, "class_name": "SelfComposedDpEvent", "count": 10,
            "event": {"module_name": M, "class_name": "PoissonSampledDpEvent", "sampling_probability": 1.5,
                      "event": {"module_name": M, "class_name": "GaussianDpEvent", "noise_multiplier": 1.0}}});
        let err = parse(doc).unwrap_err();
        assert_eq!(err.path, "$.event.sampling_probability");
        assert!(err.reason.contains("[0, 1]"), "{}", err.reason);

        let err = parse(json!({"class_name": "ComposedDpEvent", "events": [
            {"class_name": "GaussianDpEvent", "noise_multiplier": 1.0},
            {"class_name": "PoissonSampledDpEvent", "sampling_probability": 0.1,
             "event": {"class_name": "GaussianDpEvent", "noise_multiplier": -2.0}}]}))
        .unwrap_err();
        assert_eq!(err.path, "$.events[1].event.noise_multiplier");

        let err = parse(json!({"class_name": "SampledWithoutReplacementDpEvent",
            "source_dataset_size": 0, "sample_size": 1, "event": {"class_name": "NoOpDpEvent"}}))
        .unwrap_err();
        assert_eq!(err.path, "$.source_dataset_size");
        let err = parse(json!({"class_name": "SampledWithoutReplacementDpEvent",
            "source_dataset_size": 10, "sample_size": 11, "event": {"class_name": "NoOpDpEvent"}}))
        .unwrap_err();
        assert_eq!(err.path, "$.sample_size");
        assert!(
            err.reason.contains("source_dataset_size (10)"),
            "{}",
            err.reason
        );

        let err = parse(json!({"class_name": "SelfComposedDpEvent", "count": 2.5,
            "event": {"class_name": "NoOpDpEvent"}}))
        .unwrap_err();
        assert_eq!(err.path, "$.count");

        // Paths are relative to where the document sits, and a base path ending in a renamed
        // field's name is left alone.
        let base = JsonPath::root().field("sampling_rate");
        let err = from_dp_accounting_json(
            &json!({"class_name": "PoissonSampledDpEvent", "sampling_probability": "0.1",
                    "event": {"class_name": "NoOpDpEvent"}}),
            &base,
        )
        .unwrap_err();
        assert_eq!(err.path, "$.sampling_rate.sampling_probability");
        let err = from_dp_accounting_json(&json!([1]), &base).unwrap_err();
        assert_eq!(err.path, "$.sampling_rate");
    }

    #[test]
    fn missing_and_unknown_fields_are_named() {
        let err = parse(
            json!({"class_name": "PoissonSampledDpEvent", "sampling_rate": 0.1,
            "event": {"class_name": "NoOpDpEvent"}}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.sampling_probability");
        assert_eq!(err.reason, "is required");
        let err = parse(
            json!({"class_name": "GaussianDpEvent", "noise_multiplier": 1.0, "type": "gaussian"}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.type");
        assert!(err.reason.contains("allowed fields are"), "{}", err.reason);
        let err = parse(json!({"class_name": "NoOpDpEvent", "events": []})).unwrap_err();
        assert_eq!(err.path, "$.events");
        // Our optional total_variation is not part of dp_accounting's EpsilonDeltaDpEvent.
        let err = parse(
            json!({"class_name": "EpsilonDeltaDpEvent", "epsilon": 1.0, "delta": 0.0,
            "total_variation": 0.1}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.total_variation");
    }

    #[test]
    fn discrete_gaussian_dimension_must_be_one() {
        let ok = parse(json!({"class_name": "DiscreteGaussianDpEvent", "sigma": 2.0, "sensitivity": 3, "dimension": 1}))
            .unwrap();
        assert_eq!(
            ok,
            native(json!({"type": "discrete_gaussian", "sigma": 2.0, "sensitivity": 3}))
        );
        let err = parse(json!({"class_name": "DiscreteGaussianDpEvent", "sigma": 2.0, "sensitivity": 1.0, "dimension": 5}))
            .unwrap_err();
        assert_eq!(err.path, "$.dimension");
        assert!(err.reason.contains("one-dimensional"), "{}", err.reason);
        let err = parse(
            json!({"class_name": "DiscreteGaussianDpEvent", "sigma": 2.0, "sensitivity": 1.5}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.sensitivity");
    }

    #[test]
    fn the_dispatcher_reads_the_native_form_too() {
        let v = json!({"type": "gaussian", "noise_multiplier": 1.0});
        assert_eq!(
            parse_any_event(&v, &JsonPath::root()).unwrap(),
            native(v.clone())
        );
        let err = parse_any_event(&json!({"type": "nope"}), &JsonPath::root()).unwrap_err();
        assert_eq!(err.path, "$.type");
    }

    #[test]
    fn nesting_limits_are_those_of_the_native_parser() {
        let mut v = json!({"class_name": "GaussianDpEvent", "noise_multiplier": 1.0});
        for _ in 0..MAX_EVENT_DEPTH {
            v = json!({"class_name": "SelfComposedDpEvent", "count": 2, "event": v});
        }
        let err = parse(v).unwrap_err();
        assert!(err.reason.contains("nested"), "{}", err.reason);
        assert!(err.path.starts_with("$.event.event"), "{}", err.path);

        let mut v = json!({"class_name": "GaussianDpEvent", "noise_multiplier": 1.0});
        for _ in 0..MAX_EVENT_DEPTH - 1 {
            v = json!({"class_name": "SelfComposedDpEvent", "count": 2, "event": v});
        }
        assert_eq!(parse(v).unwrap().invocations(), 1 << (MAX_EVENT_DEPTH - 1));
    }
}
