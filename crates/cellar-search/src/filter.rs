//! Filters on documents' metadata (`crate::meta`): the one filter type of every front end (a
//! search's `filter`, a delete by filter), its checks, the reference meaning (`Filter::matches`,
//! which the property test holds the index to), and its translation into a tantivy query over
//! the BM25 index's `meta` field. A search evaluates its filter once, into the set of matching
//! internal ids ([`Allowed`]), which every first stage then takes as it runs: BM25's collector,
//! the IVF probe's members, the dense scan, and the exact scan a selective filter switches to.
//!
//! ```json
//! {"and": [{"eq": {"field": "lang", "value": "en"}},
//!          {"range": {"field": "year", "gte": 2000, "lt": 2010}},
//!          {"not": {"in": {"field": "tags", "values": ["draft", "spam"]}}}]}
//! ```
//! `eq` on a list of strings matches when any of its strings is the value; numbers compare by
//! value (`2` equals `2.0`); `range` matches numbers only; `not` also matches documents without
//! the field.

use std::ops::Bound;

use cellar_core::{CellarError, DocId, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tantivy::query::{AllQuery, BooleanQuery, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::Term;

use crate::meta::{check_key, check_string, MetaValue, Metadata};

/// Nodes (comparisons and `and`/`or`/`not`) one filter may hold.
pub const MAX_FILTER_NODES: usize = 256;
/// Nesting depth of `and`/`or`/`not`.
pub const MAX_FILTER_DEPTH: usize = 16;
/// Values of one `in`.
pub const MAX_IN_VALUES: usize = 1024;
/// Values one whole filter compares with: one per `eq` and `range`, each of an `in`'s values.
/// Without it 255 `in`s of 1,024 values (a 2 MB body) cost 350 MiB to evaluate.
pub const MAX_FILTER_VALUES: usize = 4096;
/// A search whose filter matches at most this many documents ranks all of them exactly (MaxSim
/// of every match, or the pooled scan for the ivf mode) instead of running its first stage:
/// the request's `filter_exact_max` changes it.
pub const DEFAULT_FILTER_EXACT_MAX: usize = 1024;

/// A value a filter compares with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// `{"field": "lang", "value": "en"}`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Equals {
    pub field: String,
    pub value: Scalar,
}

/// `{"field": "lang", "values": ["en", "fr"]}`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnyOf {
    pub field: String,
    #[schemars(length(min = 1, max = MAX_IN_VALUES))]
    pub values: Vec<Scalar>,
}

/// `{"field": "year", "gte": 2000, "lt": 2010}`: at least one bound, numbers only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Range {
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gte: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<Scalar>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lte: Option<Scalar>,
}

/// A condition on documents' metadata.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
#[schemars(extend("x-max-values" = MAX_FILTER_VALUES))]
pub enum Filter {
    Eq(Equals),
    In(AnyOf),
    Range(Range),
    And(#[schemars(length(min = 1, max = MAX_FILTER_NODES))] Vec<Filter>),
    Or(#[schemars(length(min = 1, max = MAX_FILTER_NODES))] Vec<Filter>),
    Not(Box<Filter>),
}

/// A number of a filter: exact integer or float.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn of_value(v: &MetaValue) -> Option<Num> {
        match v {
            MetaValue::Int(i) => Some(Num::Int(*i)),
            MetaValue::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    fn of_scalar(s: &Scalar) -> Option<Num> {
        match s {
            Scalar::Int(i) => Some(Num::Int(*i)),
            Scalar::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    fn cmp(self, other: Num) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (a, b) => a.f64().partial_cmp(&b.f64()),
        }
    }
}

fn equals(value: &MetaValue, wanted: &Scalar) -> bool {
    match (value, wanted) {
        (MetaValue::Bool(a), Scalar::Bool(b)) => a == b,
        (MetaValue::Str(a), Scalar::Str(b)) => a == b,
        (MetaValue::List(list), Scalar::Str(b)) => list.contains(b),
        _ => match (Num::of_value(value), Num::of_scalar(wanted)) {
            (Some(a), Some(b)) => a.cmp(b) == Some(std::cmp::Ordering::Equal),
            _ => false,
        },
    }
}

impl Range {
    fn lower(&self) -> Bound<Num> {
        match (&self.gt, &self.gte) {
            (Some(v), _) => Bound::Excluded(Num::of_scalar(v).expect("checked")),
            (None, Some(v)) => Bound::Included(Num::of_scalar(v).expect("checked")),
            (None, None) => Bound::Unbounded,
        }
    }

    fn upper(&self) -> Bound<Num> {
        match (&self.lt, &self.lte) {
            (Some(v), _) => Bound::Excluded(Num::of_scalar(v).expect("checked")),
            (None, Some(v)) => Bound::Included(Num::of_scalar(v).expect("checked")),
            (None, None) => Bound::Unbounded,
        }
    }

    fn holds(&self, value: Num) -> bool {
        use std::cmp::Ordering::*;
        let above = match self.lower() {
            Bound::Excluded(b) => value.cmp(b) == Some(Greater),
            Bound::Included(b) => matches!(value.cmp(b), Some(Greater | Equal)),
            Bound::Unbounded => true,
        };
        let below = match self.upper() {
            Bound::Excluded(b) => value.cmp(b) == Some(Less),
            Bound::Included(b) => matches!(value.cmp(b), Some(Less | Equal)),
            Bound::Unbounded => true,
        };
        above && below
    }
}

impl Filter {
    /// Whether a document with `meta` matches: the meaning every stage is held to.
    pub fn matches(&self, meta: &Metadata) -> bool {
        match self {
            Filter::Eq(e) => meta.get(&e.field).is_some_and(|v| equals(v, &e.value)),
            Filter::In(a) => meta.get(&a.field).is_some_and(|v| a.values.iter().any(|w| equals(v, w))),
            Filter::Range(r) => meta.get(&r.field).and_then(Num::of_value).is_some_and(|n| r.holds(n)),
            Filter::And(all) => all.iter().all(|f| f.matches(meta)),
            Filter::Or(any) => any.iter().any(|f| f.matches(meta)),
            Filter::Not(f) => !f.matches(meta),
        }
    }

    /// Every check of a filter: field names, values, bounds, sizes. `at` (`filter`,
    /// `ops[2].delete_where`) is what errors name.
    pub fn check(&self, at: &str) -> Result<()> {
        let mut nodes = 0;
        self.check_node(at, 1, &mut nodes)?;
        let values = self.values();
        if values > MAX_FILTER_VALUES {
            return Err(CellarError::invalid(format!(
                "{at}: a filter compares at most {MAX_FILTER_VALUES} values in all (each of an in's \
                 values counts), got {values}"
            )));
        }
        Ok(())
    }

    /// Values this filter compares with: one per `eq` and `range`, each of an `in`'s values.
    pub fn values(&self) -> usize {
        match self {
            Filter::Eq(_) | Filter::Range(_) => 1,
            Filter::In(a) => a.values.len(),
            Filter::And(list) | Filter::Or(list) => list.iter().map(Filter::values).sum(),
            Filter::Not(f) => f.values(),
        }
    }

    fn check_node(&self, at: &str, depth: usize, nodes: &mut usize) -> Result<()> {
        *nodes += 1;
        let bad = |detail: String| CellarError::invalid(format!("{at}: {detail}"));
        if *nodes > MAX_FILTER_NODES {
            return Err(bad(format!("a filter holds at most {MAX_FILTER_NODES} conditions")));
        }
        if depth > MAX_FILTER_DEPTH {
            return Err(bad(format!("filters nest at most {MAX_FILTER_DEPTH} deep")));
        }
        let scalar = |field: &str, v: &Scalar| -> Result<()> {
            match v {
                Scalar::Str(s) => check_string(s).map_err(|e| bad(format!("{field}: {e}"))),
                Scalar::Float(f) if !f.is_finite() => {
                    Err(bad(format!("{field}: {f} is not a finite number")))
                }
                _ => Ok(()),
            }
        };
        match self {
            Filter::Eq(e) => {
                check_key(&e.field).map_err(bad)?;
                scalar("eq.value", &e.value)
            }
            Filter::In(a) => {
                check_key(&a.field).map_err(bad)?;
                if a.values.is_empty() || a.values.len() > MAX_IN_VALUES {
                    return Err(bad(format!(
                        "in.values holds 1 to {MAX_IN_VALUES} values, got {}",
                        a.values.len()
                    )));
                }
                a.values.iter().try_for_each(|v| scalar("in.values", v))
            }
            Filter::Range(r) => {
                check_key(&r.field).map_err(bad)?;
                if r.gt.is_some() && r.gte.is_some() || r.lt.is_some() && r.lte.is_some() {
                    return Err(bad("range: give gt or gte, lt or lte, not both".into()));
                }
                let bounds = [&r.gt, &r.gte, &r.lt, &r.lte];
                if bounds.iter().all(|b| b.is_none()) {
                    return Err(bad("range needs a bound: gt, gte, lt or lte".into()));
                }
                for b in bounds.into_iter().flatten() {
                    match Num::of_scalar(b) {
                        Some(Num::Float(f)) if !f.is_finite() => {
                            return Err(bad(format!("range: {f} is not a finite number")))
                        }
                        Some(_) => {}
                        None => return Err(bad(format!("range bounds are numbers, got {}", json(b)))),
                    }
                }
                Ok(())
            }
            Filter::And(list) | Filter::Or(list) => {
                let name = if matches!(self, Filter::And(_)) { "and" } else { "or" };
                if list.is_empty() {
                    return Err(bad(format!("{name} needs at least one condition")));
                }
                list.iter()
                    .enumerate()
                    .try_for_each(|(i, f)| f.check_node(&format!("{at}.{name}[{i}]"), depth + 1, nodes))
            }
            Filter::Not(f) => f.check_node(&format!("{at}.not"), depth + 1, nodes),
        }
    }

    /// The tantivy query over the JSON field `meta` that matches what [`Filter::matches`] does.
    /// Equality runs on the inverted index (numbers in tantivy's canonical form, as it indexes
    /// them), ranges on the fast columns.
    pub(crate) fn to_query(&self, meta: Field) -> Box<dyn Query> {
        match self {
            Filter::Eq(e) => term_query(meta, &e.field, &e.value),
            Filter::In(a) => Box::new(BooleanQuery::new(
                a.values.iter().map(|v| (Occur::Should, term_query(meta, &a.field, v))).collect(),
            )),
            Filter::Range(r) => range_query(meta, r),
            Filter::And(list) => {
                Box::new(BooleanQuery::new(list.iter().map(|f| (Occur::Must, f.to_query(meta))).collect()))
            }
            Filter::Or(list) => {
                Box::new(BooleanQuery::new(list.iter().map(|f| (Occur::Should, f.to_query(meta))).collect()))
            }
            Filter::Not(f) => Box::new(BooleanQuery::new(vec![
                (Occur::Must, Box::new(AllQuery) as Box<dyn Query>),
                (Occur::MustNot, f.to_query(meta)),
            ])),
        }
    }
}

fn json(s: &Scalar) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn term_query(meta: Field, field: &str, value: &Scalar) -> Box<dyn Query> {
    let mut term = Term::from_field_json_path(meta, field, false);
    match value {
        Scalar::Bool(b) => term.append_type_and_fast_value(*b),
        Scalar::Str(s) => term.append_type_and_str(s),
        Scalar::Int(i) => term.append_type_and_fast_value(*i),
        // tantivy indexes a float with no fraction that fits an i64 as that integer.
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => {
            term.append_type_and_fast_value(*f as i64)
        }
        Scalar::Float(f) => term.append_type_and_fast_value(*f),
    }
    Box::new(TermQuery::new(term, IndexRecordOption::Basic))
}

fn range_query(meta: Field, r: &Range) -> Box<dyn Query> {
    let (lower, upper) = (r.lower(), r.upper());
    let any_float = [lower, upper]
        .iter()
        .any(|b| matches!(b, Bound::Included(Num::Float(_)) | Bound::Excluded(Num::Float(_))));
    let term = |n: Num| {
        let mut term = Term::from_field_json_path(meta, &r.field, false);
        match (any_float, n) {
            (false, Num::Int(i)) => term.append_type_and_fast_value(i),
            (_, n) => term.append_type_and_fast_value(n.f64()),
        }
        term
    };
    Box::new(RangeQuery::new(lower.map(term), upper.map(term)))
}

/// The internal ids a filter matched, one bit each; what every first stage takes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allowed {
    bits: Vec<u64>,
    count: usize,
}

impl Allowed {
    /// The set of `ids` (any order, no repeats needed).
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Allowed {
        let mut bits: Vec<u64> = Vec::new();
        for id in ids {
            let word = id as usize / 64;
            if word >= bits.len() {
                bits.resize(word + 1, 0);
            }
            bits[word] |= 1 << (id % 64);
        }
        let count = bits.iter().map(|w| w.count_ones() as usize).sum();
        Allowed { bits, count }
    }

    pub fn contains(&self, id: DocId) -> bool {
        let (word, bit) = (id.0 as usize / 64, id.0 % 64);
        self.bits.get(word).is_some_and(|w| w >> bit & 1 == 1)
    }

    /// Matching documents.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The matching ids, ascending.
    pub fn ids(&self) -> impl Iterator<Item = DocId> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, word)| {
            (0..64).filter(move |b| word >> b & 1 == 1).map(move |b| DocId((w * 64 + b) as u32))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(text: &str) -> Metadata {
        serde_json::from_str(text).unwrap()
    }

    fn filter(text: &str) -> Filter {
        let f: Filter = serde_json::from_str(text).unwrap();
        f.check("filter").unwrap();
        f
    }

    #[test]
    fn each_condition_means_what_the_docs_say() {
        let m = meta(r#"{"lang":"en","year":2004,"score":2.0,"tags":["a","b"],"ok":true}"#);
        for (text, want) in [
            (r#"{"eq":{"field":"lang","value":"en"}}"#, true),
            (r#"{"eq":{"field":"lang","value":"fr"}}"#, false),
            (r#"{"eq":{"field":"score","value":2}}"#, true),
            (r#"{"eq":{"field":"year","value":2004.0}}"#, true),
            (r#"{"eq":{"field":"tags","value":"b"}}"#, true),
            (r#"{"eq":{"field":"ok","value":true}}"#, true),
            (r#"{"eq":{"field":"ok","value":1}}"#, false),
            (r#"{"in":{"field":"lang","values":["fr","en"]}}"#, true),
            (r#"{"range":{"field":"year","gte":2000,"lt":2004}}"#, false),
            (r#"{"range":{"field":"year","gt":2003.5}}"#, true),
            (r#"{"range":{"field":"lang","gt":0}}"#, false),
            (r#"{"not":{"eq":{"field":"missing","value":1}}}"#, true),
            (r#"{"and":[{"eq":{"field":"lang","value":"en"}},{"range":{"field":"score","lte":1}}]}"#, false),
            (r#"{"or":[{"eq":{"field":"lang","value":"de"}},{"range":{"field":"score","lte":2}}]}"#, true),
        ] {
            assert_eq!(filter(text).matches(&m), want, "{text}");
        }
    }

    #[test]
    fn bad_filters_are_refused_with_the_place_at_fault() {
        for (text, says) in [
            (r#"{"range":{"field":"year"}}"#, "needs a bound"),
            (r#"{"range":{"field":"year","gt":1,"gte":2}}"#, "not both"),
            (r#"{"range":{"field":"year","gt":"a"}}"#, "bounds are numbers"),
            (r#"{"and":[]}"#, "at least one"),
            (r#"{"or":[{"eq":{"field":"a b","value":1}}]}"#, "filter.or[0]: metadata key"),
            (r#"{"in":{"field":"a","values":[]}}"#, "1 to 1024"),
            (r#"{"eq":{"field":"a","value":""}}"#, "strings are 1 to"),
        ] {
            let f: Filter = serde_json::from_str(text).unwrap();
            let err = f.check("filter").unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
        let mut deep = r#"{"eq":{"field":"a","value":1}}"#.to_string();
        for _ in 0..MAX_FILTER_DEPTH {
            deep = format!(r#"{{"not":{deep}}}"#);
        }
        let f: Filter = serde_json::from_str(&deep).unwrap();
        assert!(f.check("filter").unwrap_err().to_string().contains("nest at most"));
        assert!(serde_json::from_str::<Filter>(r#"{"eq":{"field":"a","value":1,"x":2}}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"like":{"field":"a"}}"#).is_err());
    }

    /// `in` values count against the filter's limit: 255 full `in`s (a 2 MB body) cost 350 MiB
    /// to evaluate when only the conditions were counted.
    #[test]
    fn a_filter_compares_a_bounded_number_of_values_in_all() {
        let any_of = |n: usize| {
            let values: Vec<String> = (0..n).map(|i| format!("v{i}")).collect();
            serde_json::json!({"in": {"field": "tag", "values": values}})
        };
        let full: Vec<_> = (0..MAX_FILTER_VALUES / MAX_IN_VALUES).map(|_| any_of(MAX_IN_VALUES)).collect();
        let fits: Filter = serde_json::from_value(serde_json::json!({ "or": full })).unwrap();
        assert_eq!(fits.values(), MAX_FILTER_VALUES);
        fits.check("filter").unwrap();
        let many: Vec<_> = (0..255).map(|_| any_of(MAX_IN_VALUES)).collect();
        let big: Filter = serde_json::from_value(serde_json::json!({ "or": many })).unwrap();
        let err = big.check("filter").unwrap_err().to_string();
        assert!(err.contains(&format!("at most {MAX_FILTER_VALUES} values")), "{err}");
        assert!(err.contains(&(255 * MAX_IN_VALUES).to_string()), "{err}");
    }

    #[test]
    fn allowed_holds_its_ids_once_in_order() {
        let allowed = Allowed::from_ids([130, 3, 64, 3]);
        assert_eq!(allowed.count(), 3);
        assert!(
            allowed.contains(DocId(64)) && !allowed.contains(DocId(65)) && !allowed.contains(DocId(9999))
        );
        assert_eq!(allowed.ids().map(|d| d.0).collect::<Vec<_>>(), [3, 64, 130]);
    }
}
