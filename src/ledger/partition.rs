//! Partitioned datasets: disjoint blocks of the data, each with its own budget and filter.
//!
//! A dataset that keeps growing (events, logs, transactions) is split into blocks — time blocks of
//! a fixed calendar width in a time zone, or named partitions (e.g. user-id ranges) — and a query
//! is charged to exactly the blocks it reads (block composition: Lécuyer, Spahn, Vodrahalli,
//! Geambasu & Hsu 2019, "Privacy Accounting and Quality Control in the Sage Differentiated
//! Private ML Platform", SOSP; Luo, Pan, Tholoniat, Cidon, Geambasu & Lécuyer 2021,
//! "Privacy Budget Scheduling", OSDI). Each block is a ledger of its own (id `parent@block`),
//! created with the dataset's per-block budget by the first charge that reads it.
//!
//! # Guarantee
//! Under the add/remove-one relation on *records* (the only one a partitioned dataset accepts:
//! under replace-one a replacement could move a record between blocks, an add/remove in each),
//! each record lies in exactly one block (blocks are disjoint by construction: a time block by the
//! record's timestamp, a named partition by the caller's key). A neighbouring pair of datasets
//! therefore differs in one block only, and every mechanism that does not read that block has the
//! same output distribution on both. So the whole adaptive sequence of charges is μ_B-GDP (with
//! δ_B) for every record if the charges that read each block pass that block's filter — which is
//! what the gate checks (Σμᵢ² ≤ μ_B² per block; Smith & Thakurta 2022 for the adaptive filter;
//! parallel composition for the disjoint blocks: McSherry 2009, "Privacy Integrated Queries").
//! This is *event-level* (record-level) privacy. A *user* whose records span k blocks is
//! protected only by group privacy over those k records: up to k·μ_B under μ-GDP (one charge may
//! read all k blocks), √k·μ_B only if no charge reads more than one of them (Dong, Roth & Su,
//! "Gaussian differential privacy", Corollary 2). User-level privacy needs user-disjoint blocks
//! (a named partition by user id) with mechanisms calibrated to a user's whole contribution, or a
//! per-user budget across blocks, which this partitioning does not provide.
//!
//! # Why new blocks are sound and a budget refresh is not
//! A new block holds records no earlier query read: its fresh budget protects *those* records, and
//! no record's total loss grows. Refreshing the budget of a block (or of an unpartitioned dataset)
//! gives the *same* records a second budget: repeated across refreshes, the loss of every old
//! record is unbounded (AWS Clean Rooms warns that refresh "allows arbitrary amounts of
//! information to be revealed … when repeatedly queried across refreshes"). So blocks are created,
//! never reset; a block's budget changes only by an audited budget change of that block.
//!
//! # Retention
//! With `retention_blocks: N`, a time block whose end is more than N block widths in the past is
//! read-only: no charge may name it (its data is expected to be archived or deleted). Reading it
//! stays possible.

use crate::accountant::json::{self, Fields, InputError, JsonPath};
use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use serde_json::Value;

/// Most blocks one charge (or one range read) may name: a year of daily blocks with room to spare,
/// or 41 days of hourly ones. Checked before any block is read.
pub const MAX_BLOCKS: usize = 1000;

/// How many widths ahead of now a charge may reach by default: the current block and the next one
/// (a query running across a boundary). Nobody exhausts next year's blocks today.
pub const DEFAULT_HORIZON_BLOCKS: u32 = 1;

/// Most new block ledgers one charge may create (a year of daily blocks fits).
pub const MAX_NEW_LEDGERS_PER_REQUEST: usize = 400;

/// Most new block ledgers one principal may create per minute, per replica.
pub const MAX_NEW_LEDGERS_PER_MINUTE: usize = 2000;

/// Counts the block ledgers each principal created in the current minute (per replica): a flood
/// of charges naming fresh blocks cannot fill the store.
#[derive(Debug, Default)]
pub struct CreationLimit(
    std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, usize)>>,
);

impl CreationLimit {
    /// Takes `n` creations for `principal` at `now`, or the seconds until it may try again.
    pub fn take(&self, principal: &str, n: usize, now: std::time::Instant) -> Result<(), u64> {
        let minute = std::time::Duration::from_secs(60);
        let mut m = self.0.lock().expect("creation limit");
        if m.len() > 10_000 {
            m.retain(|_, (start, _)| now.duration_since(*start) < minute);
        }
        let e = m.entry(principal.to_owned()).or_insert((now, 0));
        if now.duration_since(e.0) >= minute {
            *e = (now, 0);
        }
        if e.1 + n > MAX_NEW_LEDGERS_PER_MINUTE {
            let left = minute.saturating_sub(now.duration_since(e.0));
            return Err(left.as_secs().max(1));
        }
        e.1 += n;
        Ok(())
    }
}

/// The separator of a block's ledger id, `parent@block` ('@' is not allowed in a dataset id).
pub const BLOCK_SEPARATOR: char = '@';

/// A dataset's partitioning, as declared at its creation.
#[derive(Debug, Clone, PartialEq)]
pub enum Partitioning {
    /// Time blocks of one calendar width in a time zone (IANA name).
    Time {
        width: Width,
        zone: chrono_tz::Tz,
        /// Blocks ending more than this many widths ago are read-only.
        retention_blocks: Option<u32>,
        /// How far ahead a charge may reach: blocks starting more than this many widths after
        /// now are refused (default [`DEFAULT_HORIZON_BLOCKS`]: the current block and the next).
        horizon_blocks: u32,
    },
    /// Blocks named by an admin of the dataset (e.g. user-id ranges), each declared before a
    /// charge may name it (`PUT /v1/datasets/{id}/blocks/{name}`).
    Named,
}

/// The calendar width of a time block, in local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    /// `2026-11-23T14`: one local hour (a repeated hour at a DST change is one block of two).
    Hour,
    /// `2026-11-23`: one local day.
    Day,
    /// `2026-W48`: one ISO week (Monday to Sunday, local).
    Week,
}

impl Width {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "hour" => Some(Width::Hour),
            "day" => Some(Width::Day),
            "week" => Some(Width::Week),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Width::Hour => "hour",
            Width::Day => "day",
            Width::Week => "week",
        }
    }

    /// The nominal length (the retention horizon counts in these).
    fn nominal(self) -> Duration {
        match self {
            Width::Hour => Duration::hours(1),
            Width::Day => Duration::days(1),
            Width::Week => Duration::weeks(1),
        }
    }

    /// The local start of the block containing local time `t`, and its name.
    fn block_of(self, t: NaiveDateTime) -> (NaiveDateTime, String) {
        let d = t.date();
        match self {
            Width::Hour => {
                let start = d.and_hms_opt(t.hour(), 0, 0).expect("a valid hour");
                (start, start.format("%Y-%m-%dT%H").to_string())
            }
            Width::Day => (
                d.and_hms_opt(0, 0, 0).expect("midnight"),
                d.format("%Y-%m-%d").to_string(),
            ),
            Width::Week => {
                let w = d.iso_week();
                let monday = NaiveDate::from_isoywd_opt(w.year(), w.week(), chrono::Weekday::Mon)
                    .expect("the Monday of an ISO week");
                (
                    monday.and_hms_opt(0, 0, 0).expect("midnight"),
                    format!("{}-W{:02}", w.year(), w.week()),
                )
            }
        }
    }

    /// The local start of the block named `name` (None if `name` is not this width's canonical
    /// form).
    fn start_of(self, name: &str) -> Option<NaiveDateTime> {
        let start = match self {
            Width::Hour => {
                let (d, h) = name.split_once('T')?;
                let d = NaiveDate::parse_from_str(d, "%Y-%m-%d").ok()?;
                let h: u32 = h.parse().ok()?;
                d.and_hms_opt(h, 0, 0)?
            }
            Width::Day => NaiveDate::parse_from_str(name, "%Y-%m-%d")
                .ok()?
                .and_hms_opt(0, 0, 0)?,
            Width::Week => {
                let (y, w) = name.split_once("-W")?;
                let d = NaiveDate::from_isoywd_opt(
                    y.parse().ok()?,
                    w.parse().ok()?,
                    chrono::Weekday::Mon,
                )?;
                d.and_hms_opt(0, 0, 0)?
            }
        };
        // Only the canonical spelling names a block (so one block has one ledger).
        (self.block_of(start).1 == name).then_some(start)
    }

    /// The local start of the block after the one starting at `start`.
    fn next(self, start: NaiveDateTime) -> NaiveDateTime {
        start + self.nominal()
    }

    fn format_hint(self) -> &'static str {
        match self {
            Width::Hour => "YYYY-MM-DDTHH",
            Width::Day => "YYYY-MM-DD",
            Width::Week => "YYYY-Www (ISO week)",
        }
    }
}

/// The instant local time `t` names in `zone`: the earlier one where it is ambiguous (a repeated
/// hour), and the end of the gap where it does not exist (a skipped hour).
fn instant(zone: chrono_tz::Tz, t: NaiveDateTime) -> DateTime<Utc> {
    let mut t = t;
    // A gap is at most a day in every zone (Pacific/Apia skipped 2011-12-30 whole): 50 hours of
    // quarter-hours leave room.
    for _ in 0..200 {
        if let Some(x) = zone.from_local_datetime(&t).earliest() {
            return x.with_timezone(&Utc);
        }
        t += Duration::minutes(15);
    }
    Utc.from_utc_datetime(&t)
}

/// What a charge (or a range read) names of a partitioned dataset.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockSelector {
    /// Blocks by name.
    Names(Vec<String>),
    /// The time blocks meeting `[from, to)`.
    Range {
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    },
}

impl BlockSelector {
    /// Parses the optional `blocks` / `time_range` fields of a body (at most one of them).
    pub fn from_fields(f: &mut Fields<'_>) -> Result<Option<Self>, InputError> {
        let blocks = f.optional("blocks");
        let range = f.optional("time_range");
        match (blocks, range) {
            (None, None) => Ok(None),
            (Some(_), Some((_, p))) => Err(InputError::new(
                &p,
                "give either \"blocks\" or \"time_range\", not both",
            )),
            (Some((v, p)), None) => {
                let items = json::array(v, &p)?;
                if items.is_empty() || items.len() > MAX_BLOCKS {
                    return Err(InputError::new(
                        &p,
                        format!("must name 1 to {MAX_BLOCKS} blocks, got {}", items.len()),
                    ));
                }
                let names = items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        let p = p.index(i);
                        block_name(json::string(x, &p)?, &p)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(BlockSelector::Names(names)))
            }
            (None, Some((v, p))) => {
                let mut r = Fields::new(v, &p)?;
                let (a, pa) = r.required("from")?;
                let from = instant_field(a, &pa)?;
                let (b, pb) = r.required("to")?;
                let to = instant_field(b, &pb)?;
                r.finish()?;
                if from >= to {
                    return Err(InputError::new(
                        &pb,
                        "must be after \"from\" (the range is [from, to))",
                    ));
                }
                Ok(Some(BlockSelector::Range { from, to }))
            }
        }
    }

    /// Parses a range read's query (`from`, `to` RFC 3339, or `blocks` comma-separated).
    pub fn from_query(
        from: Option<&str>,
        to: Option<&str>,
        blocks: Option<&str>,
    ) -> Result<Option<Self>, InputError> {
        let q = JsonPath::root();
        match (from, to, blocks) {
            (None, None, None) => Ok(None),
            (None, None, Some(b)) => {
                let p = q.field("blocks");
                let names: Vec<&str> = b.split(',').collect();
                if names.len() > MAX_BLOCKS {
                    return Err(InputError::new(
                        &p,
                        format!("must name at most {MAX_BLOCKS} blocks"),
                    ));
                }
                let names = names
                    .into_iter()
                    .map(|n| block_name(n, &p))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(BlockSelector::Names(names)))
            }
            (Some(a), Some(b), None) => {
                let from = parse_instant(a).map_err(|r| InputError::new(&q.field("from"), r))?;
                let to = parse_instant(b).map_err(|r| InputError::new(&q.field("to"), r))?;
                if from >= to {
                    return Err(InputError::new(&q.field("to"), "must be after \"from\""));
                }
                Ok(Some(BlockSelector::Range { from, to }))
            }
            _ => Err(InputError::new(
                &q.field("from"),
                "give both \"from\" and \"to\" (RFC 3339), or \"blocks\", not both",
            )),
        }
    }
}

fn parse_instant(s: &str) -> Result<DateTime<Utc>, String> {
    let t = DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("must be an RFC 3339 time such as 2026-11-23T00:00:00Z ({e})"))?;
    // Block names are four-digit years (a year past 9999 would be spelt with a sign).
    if !(1900..=9000).contains(&t.year()) {
        return Err(format!(
            "must be between the years 1900 and 9000, got {s:?}"
        ));
    }
    Ok(t)
}

fn instant_field(v: &Value, p: &JsonPath) -> Result<DateTime<Utc>, InputError> {
    parse_instant(json::string(v, p)?).map_err(|r| InputError::new(p, r))
}

/// Checks a block name: 1–64 characters from [A-Za-z0-9._-], not starting with '.' (time blocks'
/// names are further checked against their width).
pub fn block_name(s: &str, p: &JsonPath) -> Result<String, InputError> {
    if super::names::is_name(s, 64) {
        Ok(s.to_owned())
    } else {
        Err(InputError::new(
            p,
            format!(
                "a block name must be 1-64 characters from A-Z, a-z, 0-9, '.', '_' and '-', \
                 not starting with '.'; got {s:?}"
            ),
        ))
    }
}

/// A block's ledger id.
pub fn block_id(parent: &str, block: &str) -> String {
    format!("{parent}{BLOCK_SEPARATOR}{block}")
}

/// A block's parent and name, if `id` is a block's ledger id.
pub fn split_block_id(id: &str) -> Option<(&str, &str)> {
    id.split_once(BLOCK_SEPARATOR)
}

impl Partitioning {
    /// Parses a dataset's `partitioning`.
    pub fn from_json(v: &Value, p: &JsonPath) -> Result<Self, InputError> {
        let mut f = Fields::new(v, p)?;
        let (t, pt) = f.required("type")?;
        let out = match json::string(t, &pt)? {
            "named" => Partitioning::Named,
            "time" => {
                let (w, pw) = f.required("width")?;
                let width = Width::parse(json::string(w, &pw)?)
                    .ok_or_else(|| InputError::new(&pw, "must be \"hour\", \"day\" or \"week\""))?;
                let zone = match f.optional("time_zone") {
                    None => chrono_tz::UTC,
                    Some((z, pz)) => {
                        let name = json::string(z, &pz)?;
                        name.parse::<chrono_tz::Tz>().map_err(|_| {
                            InputError::new(
                                &pz,
                                format!(
                                    "must be an IANA time zone name such as \"UTC\" or \
                                     \"Europe/Paris\", got {name:?}"
                                ),
                            )
                        })?
                    }
                };
                let retention_blocks = match f.optional("retention_blocks") {
                    None => None,
                    Some((r, pr)) => {
                        let n = json::integer(r, &pr, 1)?;
                        Some(
                            u32::try_from(n)
                                .ok()
                                .filter(|n| *n <= 1_000_000)
                                .ok_or_else(|| {
                                    InputError::new(&pr, "must be an integer in [1, 1000000]")
                                })?,
                        )
                    }
                };
                let horizon_blocks = match f.optional("horizon_blocks") {
                    None => DEFAULT_HORIZON_BLOCKS,
                    Some((r, pr)) => u32::try_from(json::integer(r, &pr, 0)?)
                        .ok()
                        .filter(|n| *n <= 10_000)
                        .ok_or_else(|| InputError::new(&pr, "must be an integer in [0, 10000]"))?,
                };
                Partitioning::Time {
                    width,
                    zone,
                    retention_blocks,
                    horizon_blocks,
                }
            }
            other => {
                return Err(InputError::new(
                    &pt,
                    format!("must be \"time\" or \"named\", got {other:?}"),
                ))
            }
        };
        f.finish()?;
        Ok(out)
    }

    /// The canonical JSON (stored, and shown on the dataset).
    pub fn to_json(&self) -> Value {
        match self {
            Partitioning::Named => serde_json::json!({"type": "named"}),
            Partitioning::Time {
                width,
                zone,
                retention_blocks,
                horizon_blocks,
            } => serde_json::json!({
                "type": "time",
                "width": width.as_str(),
                "time_zone": zone.name(),
                "retention_blocks": retention_blocks,
                "horizon_blocks": horizon_blocks,
            }),
        }
    }

    /// Reads the stored form back.
    pub fn from_stored(s: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(s).map_err(|e| e.to_string())?;
        // The stored form has `retention_blocks: null`; the input form leaves it out.
        let v = match v {
            Value::Object(mut m) => {
                m.retain(|_, x| !x.is_null());
                Value::Object(m)
            }
            other => other,
        };
        Partitioning::from_json(&v, &JsonPath::root()).map_err(|e| e.to_string())
    }

    /// The names of the blocks `sel` names, in order and without repeats (at most
    /// [`MAX_BLOCKS`]); an error names the field.
    pub fn blocks(&self, sel: &BlockSelector, p: &JsonPath) -> Result<Vec<String>, InputError> {
        let mut names =
            match (self, sel) {
                (Partitioning::Named, BlockSelector::Range { .. }) => return Err(InputError::new(
                    &p.field("time_range"),
                    "the dataset's partitions are named, not time blocks: name them in \"blocks\"",
                )),
                (Partitioning::Named, BlockSelector::Names(n)) => n.clone(),
                (Partitioning::Time { width, .. }, BlockSelector::Names(n)) => {
                    for (i, name) in n.iter().enumerate() {
                        if width.start_of(name).is_none() {
                            return Err(InputError::new(
                                &p.field("blocks").index(i),
                                format!(
                                    "a {} block is named {}, got {name:?}",
                                    width.as_str(),
                                    width.format_hint()
                                ),
                            ));
                        }
                    }
                    n.clone()
                }
                (Partitioning::Time { width, zone, .. }, BlockSelector::Range { from, to }) => {
                    let mut out = Vec::new();
                    let mut t = *from;
                    while t < *to {
                        if out.len() == MAX_BLOCKS {
                            return Err(InputError::new(
                                &p.field("time_range"),
                                format!(
                                    "spans more than {MAX_BLOCKS} {} blocks; split the charge",
                                    width.as_str()
                                ),
                            ));
                        }
                        let (start, name) = width.block_of(t.with_timezone(zone).naive_local());
                        out.push(name);
                        let end = instant(*zone, width.next(start));
                        // A local boundary always lies ahead; the guard only keeps the loop finite.
                        t = if end > t {
                            end
                        } else {
                            t + Duration::minutes(1)
                        };
                    }
                    out
                }
            };
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Why block `name` may not be charged at `now` because it starts beyond the charge horizon
    /// (more than `horizon_blocks` widths ahead of now), if so.
    pub fn beyond_horizon(&self, name: &str, now: DateTime<Utc>) -> Option<String> {
        let Partitioning::Time {
            width,
            zone,
            horizon_blocks,
            ..
        } = self
        else {
            return None;
        };
        // In local calendar terms: the block may start no later than the `horizon_blocks`-th
        // block after the current one (a 23- or 25-hour day is still one day).
        let start = width.start_of(name)?;
        let (mut limit, _) = width.block_of(now.with_timezone(zone).naive_local());
        for _ in 0..*horizon_blocks {
            limit = width.next(limit);
        }
        (start > limit).then(|| {
            format!(
                "block {name:?} starts at {}, beyond the dataset's charge horizon ({horizon_blocks} \
                 {} block(s) after the current one): future blocks are charged when they come",
                instant(*zone, start).to_rfc3339(),
                width.as_str()
            )
        })
    }

    /// Why block `name` may not be charged at `now` (past the retention horizon), if so.
    pub fn read_only(&self, name: &str, now: DateTime<Utc>) -> Option<String> {
        let Partitioning::Time {
            width,
            zone,
            retention_blocks: Some(n),
            ..
        } = self
        else {
            return None;
        };
        let start = width.start_of(name)?;
        let end = instant(*zone, width.next(start));
        let horizon = now - width.nominal() * (*n as i32);
        (end <= horizon).then(|| {
            format!(
                "block {name:?} ended at {} and is past the dataset's retention of {n} {} blocks: \
                 it is read-only",
                end.to_rfc3339(),
                width.as_str()
            )
        })
    }

    /// A time block's span `[start, end)` (None for named partitions or a malformed name).
    pub fn span(&self, name: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let Partitioning::Time { width, zone, .. } = self else {
            return None;
        };
        let start = width.start_of(name)?;
        Some((instant(*zone, start), instant(*zone, width.next(start))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(width: &str, zone: &str) -> Partitioning {
        Partitioning::from_json(
            &serde_json::json!({"type": "time", "width": width, "time_zone": zone}),
            &JsonPath::root(),
        )
        .unwrap()
    }

    #[test]
    fn the_horizon_counts_calendar_blocks_across_daylight_saving_changes() {
        let at = |t: &str| parse_instant(t).unwrap();
        // Paris, 2026-10-25 is 25 hours long; at 00:30 local (22:30 UTC the day before) the next
        // block is 2026-10-26, more than a nominal day ahead, and still within the horizon.
        let p = time("day", "Europe/Paris");
        let now = at("2026-10-24T22:30:00Z");
        assert_eq!(p.beyond_horizon("2026-10-25", now), None);
        assert_eq!(p.beyond_horizon("2026-10-26", now), None);
        assert!(p.beyond_horizon("2026-10-27", now).is_some());
        // The repeated hour (02:00-03:00 local twice, one block of two hours): 03 is next.
        let h = time("hour", "Europe/Paris");
        let now = at("2026-10-25T00:30:00Z"); // 02:30 local, the first time
        assert_eq!(h.beyond_horizon("2026-10-25T03", now), None);
        assert!(h.beyond_horizon("2026-10-25T04", now).is_some());
        // Past blocks are never beyond it.
        assert_eq!(p.beyond_horizon("2020-01-01", now), None);
    }

    fn range(p: &Partitioning, from: &str, to: &str) -> Vec<String> {
        let sel = BlockSelector::Range {
            from: parse_instant(from).unwrap(),
            to: parse_instant(to).unwrap(),
        };
        p.blocks(&sel, &JsonPath::root()).unwrap()
    }

    #[test]
    fn a_utc_week_of_days_is_seven_blocks() {
        let p = time("day", "UTC");
        assert_eq!(
            range(&p, "2026-11-16T00:00:00Z", "2026-11-23T00:00:00Z"),
            [
                "2026-11-16",
                "2026-11-17",
                "2026-11-18",
                "2026-11-19",
                "2026-11-20",
                "2026-11-21",
                "2026-11-22"
            ]
        );
        // Half-open: a range ending one second into a day reads that day too.
        assert_eq!(
            range(&p, "2026-11-22T23:00:00Z", "2026-11-23T00:00:01Z"),
            ["2026-11-22", "2026-11-23"]
        );
    }

    #[test]
    fn days_follow_the_time_zone_across_a_dst_change() {
        let p = time("day", "Europe/Paris");
        // 2026-03-29 in Paris is 23 hours long (CET → CEST): 22:00Z on the 28th is its start.
        assert_eq!(
            range(&p, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"),
            ["2026-03-29"]
        );
        assert_eq!(
            p.span("2026-03-29").unwrap(),
            (
                parse_instant("2026-03-28T23:00:00Z").unwrap(),
                parse_instant("2026-03-29T22:00:00Z").unwrap()
            )
        );
        // A repeated local hour (CEST → CET on 2026-10-25) is one hourly block two hours long.
        let h = time("hour", "Europe/Paris");
        assert_eq!(
            range(&h, "2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"),
            ["2026-10-25T02"]
        );
    }

    #[test]
    fn iso_weeks_are_named_by_their_week_year() {
        let p = time("week", "UTC");
        // 2027-01-01 is a Friday of ISO week 2026-W53.
        assert_eq!(
            range(&p, "2026-12-31T00:00:00Z", "2027-01-05T00:00:00Z"),
            ["2026-W53", "2027-W01"]
        );
        assert!(p
            .blocks(
                &BlockSelector::Names(vec!["2026-W5".into()]),
                &JsonPath::root()
            )
            .is_err());
    }

    #[test]
    fn only_canonical_names_name_time_blocks() {
        let p = time("day", "UTC");
        for bad in ["2026-11-1", "2026-02-30", "20261123", "2026-11-23T00"] {
            let e = p
                .blocks(&BlockSelector::Names(vec![bad.into()]), &JsonPath::root())
                .unwrap_err();
            assert_eq!(e.path, "$.blocks[0]", "{bad}");
        }
    }

    #[test]
    fn a_range_beyond_the_block_limit_is_refused_before_it_is_listed() {
        let p = time("hour", "UTC");
        let sel = BlockSelector::Range {
            from: parse_instant("2026-01-01T00:00:00Z").unwrap(),
            to: parse_instant("2027-01-01T00:00:00Z").unwrap(),
        };
        let e = p.blocks(&sel, &JsonPath::root()).unwrap_err();
        assert!(e.reason.contains("more than 1000"), "{e}");
    }

    #[test]
    fn retention_makes_old_blocks_read_only() {
        let p = Partitioning::from_json(
            &serde_json::json!({"type": "time", "width": "day", "retention_blocks": 7}),
            &JsonPath::root(),
        )
        .unwrap();
        let now = parse_instant("2026-11-23T12:00:00Z").unwrap();
        // Horizon: 2026-11-16T12:00Z. The 15th ended at the 16th's midnight, before it.
        assert!(p.read_only("2026-11-15", now).is_some());
        assert!(p.read_only("2026-11-16", now).is_none());
        assert!(p.read_only("2026-12-01", now).is_none());
        assert_eq!(Partitioning::from_stored(&p.to_json().to_string()), Ok(p));
    }
}
