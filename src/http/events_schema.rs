//! The event model in the OpenAPI document: a discriminated `oneOf` on `type`, each variant with
//! its fields' types and ranges, so generated clients get one model per event.
//!
//! The ranges are the parser's (`accountant::event`), written once more here as a schema; the test
//! `every_event_the_schema_describes_is_accepted_and_the_parser_agrees` checks that the two agree
//! on an example of every variant and on the variant list. Requests also accept dp_accounting's
//! serialised events (`{"class_name": ...}`), so request fields are `EventInput` = `anyOf`
//! [`Event`, `DpAccountingEvent`]; responses carry `Event` (events are stored in our form).

use serde_json::{json, Map, Value};

/// A number field: `exclusive` minimum 0 (`> 0`), or minimum 0 (`≥ 0`), with an optional maximum.
fn number(desc: &str, exclusive_min: bool, max: Option<f64>) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), json!("number"));
    if exclusive_min {
        m.insert("exclusiveMinimum".into(), json!(0));
    } else {
        m.insert("minimum".into(), json!(0));
    }
    if let Some(x) = max {
        m.insert("maximum".into(), json!(x));
    }
    m.insert("description".into(), json!(desc));
    Value::Object(m)
}

/// A whole number in [min, 2^53] (counts beyond 2^53 are refused: not every one is a double).
fn integer(desc: &str, min: u64) -> Value {
    json!({"type": "integer", "format": "int64", "minimum": min,
           "maximum": crate::accountant::json::MAX_EXACT_INTEGER, "description": desc})
}

fn event_ref() -> Value {
    json!({"$ref": "#/components/schemas/Event"})
}

/// One variant: its tag, schema name, description and fields (all required but
/// `total_variation` and `xi`).
type Variant = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(&'static str, Value)>,
);

/// The variants, in the parser's order.
fn variants() -> Vec<Variant> {
    vec![
        ("gaussian", "GaussianEvent", "Gaussian noise of standard deviation noise_multiplier × C (C: the per-record contribution bound).",
            vec![("noise_multiplier", number("σ/C", true, None))]),
        ("laplace", "LaplaceEvent", "Laplace noise of scale noise_multiplier × C.",
            vec![("noise_multiplier", number("b/C", true, None))]),
        ("discrete_laplace", "DiscreteLaplaceEvent", "P[x] ∝ e^{−a|x|} added to an integer query of the given sensitivity.",
            vec![("noise_parameter", number("a", true, None)), ("sensitivity", integer("Δ, an integer ≥ 1", 1))]),
        ("discrete_gaussian", "DiscreteGaussianEvent", "P[x] ∝ e^{−x²/2σ²} added to an integer query of the given sensitivity.",
            vec![("sigma", number("σ", true, None)), ("sensitivity", integer("Δ, an integer ≥ 1", 1))]),
        ("randomized_response", "RandomizedResponseEvent", "With probability noise_parameter answer a uniformly random bucket, else the true one (replace_one only).",
            vec![("noise_parameter", number("p ∈ (0, 1]", true, Some(1.0))), ("num_buckets", integer("k ≥ 2", 2))]),
        ("epsilon_delta", "EpsilonDeltaEvent", "A black box known to be (ε, δ)-DP, and optionally η-TV.",
            vec![("epsilon", number("ε ≥ 0", false, None)), ("delta", number("δ ∈ [0, 1]", false, Some(1.0))),
                 ("total_variation", number("η ∈ [0, 1] (optional)", false, Some(1.0)))]),
        ("gdp", "GdpEvent", "A black box known to be μ-GDP.",
            vec![("mu", number("μ ≥ 0", false, None))]),
        ("zcdp", "ZcdpEvent", "A black box known to be (ξ, ρ)-zCDP (Rényi divergence at most ξ + ρα at every order α > 1, both ways; ξ absent or 0: ρ-zCDP); accounted through its optimal (ε, δ) profile.",
            vec![("rho", number("ρ ≥ 0", false, None)),
                 ("xi", number("ξ ≥ 0 (optional, default 0)", false, None))]),
        ("rdp", "RdpEvent", "A black box known by points of its Rényi-DP curve: at order orders[i] > 1 its Rényi divergence between neighbouring outputs, both ways, is at most rdp[i]; accounted through the smallest of the points' (ε, δ) conversions (Canonne, Kamath & Steinke 2020, Prop. 12) at every ε.",
            vec![("orders", json!({"type": "array", "minItems": 1, "maxItems": crate::accountant::event::MAX_RDP_ORDERS,
                                   "items": {"type": "number", "format": "double", "exclusiveMinimum": 1, "maximum": crate::accountant::event::MAX_RDP_ORDER},
                                   "description": "Rényi orders α > 1"})),
                 ("rdp", json!({"type": "array", "minItems": 1, "maxItems": crate::accountant::event::MAX_RDP_ORDERS,
                                "items": {"type": "number", "format": "double", "minimum": 0},
                                "description": "the divergence bound τ ≥ 0 at each order (as many as orders)"}))]),
        ("poisson_sampled", "PoissonSampledEvent", "`event` run on a Poisson subsample (each record independently with probability sampling_rate).",
            vec![("sampling_rate", number("q ∈ [0, 1]", false, Some(1.0))), ("event", event_ref())]),
        ("sampled_without_replacement", "SampledWithoutReplacementEvent", "`event` run on a uniformly random subset of sample_size of population_size records (sample_size ≤ population_size).",
            vec![("sample_size", integer("m ≥ 1, at most population_size", 1)), ("population_size", integer("n ≥ 1", 1)), ("event", event_ref())]),
        ("self_composed", "SelfComposedEvent", "`event` run `count` times.",
            vec![("count", integer("k ≥ 1", 1)), ("event", event_ref())]),
        ("composed", "ComposedEvent", "Each event run in turn.",
            vec![("events", json!({"type": "array", "items": event_ref(), "maxItems": crate::accountant::event::MAX_EVENT_NODES}))]),
    ]
}

/// The schemas to add to `components.schemas`.
fn schemas() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut refs = Vec::new();
    let mut mapping = Map::new();
    for (tag, name, desc, fields) in variants() {
        let mut props = Map::new();
        props.insert("type".into(), json!({"type": "string", "enum": [tag]}));
        let mut required = vec![json!("type")];
        for (f, schema) in fields {
            if f == "total_variation" || f == "xi" {
                // Optional: absent or null.
                let mut s = schema;
                s["type"] = json!(["number", "null"]);
                props.insert(f.into(), s);
                continue;
            }
            required.push(json!(f));
            props.insert(f.into(), schema);
        }
        out.push((
            name.to_owned(),
            json!({"type": "object", "description": desc, "properties": props,
                   "required": required, "additionalProperties": false}),
        ));
        let r = format!("#/components/schemas/{name}");
        refs.push(json!({"$ref": r}));
        mapping.insert(tag.into(), json!(r));
    }
    out.push((
        "Event".into(),
        json!({
            "description": format!(
                "A mechanism invocation: a closed tagged union on `type` (nested at most {} levels, \
                 at most {} events in one document).",
                crate::accountant::event::MAX_EVENT_DEPTH,
                crate::accountant::event::MAX_EVENT_NODES
            ),
            "oneOf": refs,
            "discriminator": {"propertyName": "type", "mapping": mapping},
        }),
    ));
    out.push((
        "DpAccountingEvent".into(),
        json!({
            "type": "object",
            "description": "A Google dp_accounting DpEvent serialised with to_named_tuple() \
                            (`class_name`, `module_name` and the event's fields).",
            "properties": {
                "class_name": {"type": "string", "enum": crate::accountant::dp_event::DP_ACCOUNTING_CLASSES},
                // Optional: absent or null (the parser reads null as absent, as for every
                // optional field).
                "module_name": {
                    "type": ["string", "null"],
                    "enum": crate::accountant::dp_event::DP_ACCOUNTING_MODULES
                        .iter()
                        .map(|m| json!(m))
                        .chain([Value::Null])
                        .collect::<Vec<_>>(),
                },
            },
            "required": ["class_name"],
            "additionalProperties": true,
        }),
    ));
    out.push((
        "EventInput".into(),
        json!({
            "description": "An event in our form or dp_accounting's.",
            "anyOf": [event_ref(), {"$ref": "#/components/schemas/DpAccountingEvent"}],
        }),
    ));
    out
}

/// Adds the event schemas and points every `event`/`events` property at them: `EventInput` in
/// requests (schemas named `…Request`), `Event` in responses.
pub fn add(spec: &mut Value) {
    let Some(components) = spec
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (name, schema) in components.iter_mut() {
        let target = if name.ends_with("Request") {
            "#/components/schemas/EventInput"
        } else {
            "#/components/schemas/Event"
        };
        let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(e) = props.get_mut("event") {
            let desc = e.get("description").cloned();
            let nullable = e["type"]
                .as_array()
                .is_some_and(|t| t.contains(&json!("null")));
            let r = json!({"$ref": target});
            *e = match (nullable, desc) {
                (true, Some(d)) => json!({"oneOf": [r, {"type": "null"}], "description": d}),
                (true, None) => json!({"oneOf": [r, {"type": "null"}]}),
                (false, Some(d)) => json!({"allOf": [r], "description": d}),
                (false, None) => r,
            };
        }
        if let Some(e) = props.get_mut("events") {
            e["items"] = json!({"$ref": target});
            e["maxItems"] = json!(crate::accountant::event::MAX_EVENT_NODES);
        }
    }
    for (name, schema) in schemas() {
        components.insert(name, schema);
    }
}

/// One example of every variant (the test checks the parser accepts each).
#[cfg(test)]
fn examples() -> Vec<Value> {
    vec![
        json!({"type": "gaussian", "noise_multiplier": 1.1}),
        json!({"type": "laplace", "noise_multiplier": 2.0}),
        json!({"type": "discrete_laplace", "noise_parameter": 0.5, "sensitivity": 2}),
        json!({"type": "discrete_gaussian", "sigma": 3.0, "sensitivity": 1}),
        json!({"type": "randomized_response", "noise_parameter": 0.5, "num_buckets": 4}),
        json!({"type": "epsilon_delta", "epsilon": 1.0, "delta": 1e-6, "total_variation": 0.3}),
        json!({"type": "gdp", "mu": 0.5}),
        json!({"type": "zcdp", "rho": 0.5}),
        json!({"type": "rdp", "orders": [2.0, 4.0, 8.0], "rdp": [0.1, 0.2, 0.4]}),
        json!({"type": "poisson_sampled", "sampling_rate": 0.01, "event": {"type": "gaussian", "noise_multiplier": 1.0}}),
        json!({"type": "sampled_without_replacement", "sample_size": 10, "population_size": 100, "event": {"type": "laplace", "noise_multiplier": 1.0}}),
        json!({"type": "self_composed", "count": 3, "event": {"type": "gdp", "mu": 0.1}}),
        json!({"type": "composed", "events": [{"type": "gdp", "mu": 0.1}]}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema's variants are the parser's, every example parses, and each example's fields
    /// are exactly its variant's properties (required ones present).
    #[test]
    fn every_event_the_schema_describes_is_accepted_and_the_parser_agrees() {
        let tags: Vec<&str> = variants().iter().map(|v| v.0).collect();
        assert_eq!(tags, crate::accountant::event::EVENT_TYPES);
        let schemas: Map<String, Value> = schemas().into_iter().collect();
        for (ex, (tag, name, _, _)) in examples().iter().zip(variants()) {
            assert_eq!(ex["type"], tag);
            crate::accountant::event::Event::from_json(ex).unwrap_or_else(|e| panic!("{tag}: {e}"));
            let s = &schemas[name];
            for (k, _) in ex.as_object().unwrap() {
                assert!(
                    s["properties"].get(k).is_some(),
                    "{tag}.{k} not in the schema"
                );
            }
            for r in s["required"].as_array().unwrap() {
                assert!(ex.get(r.as_str().unwrap()).is_some(), "{tag} lacks {r}");
            }
        }
    }
}
