//! Filters on documents' metadata (`crate::meta`): the one filter type of every front end (a
//! search's `filter`, a delete by filter, a stream's search), its checks, the reference meaning (`Filter::matches`,
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
use tantivy::query::{AllQuery, BooleanQuery, EmptyQuery, InvertedIndexRangeQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::Term;

use crate::meta::{check_key, check_string, Indexed, MetaValue, Metadata};

mod json;

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

/// A condition on documents' metadata. It is written in its long form (one operator:
/// `{"eq": {"field": "color", "value": "red"}}`) or in the shorthand of equality,
/// `{"color": "red", "year": 2001}` (each field equals its value; a list value is `in`), which
/// may also stand inside `and`, `or` and `not`. A field named like an operator (`eq`, `in`,
/// `range`, `and`, `or`, `not`) takes the long form. It serialises in the long form.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Filter {
    Eq(Equals),
    In(AnyOf),
    Range(Range),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
}

/// A number of a filter: exact integer or float.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

/// An integer and a float compared exactly (no rounding of either; `None` for NaN).
fn cmp_int_float(i: i128, f: f64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering::*;
    const FAR: f64 = 1e30; // beyond every i128 this compares (u64 and i64 values)
    if f.is_nan() {
        return None;
    }
    if f >= FAR {
        return Some(Less);
    }
    if f <= -FAR {
        return Some(Greater);
    }
    let whole = f.trunc();
    // `whole` is an integer of at most 100 bits: exact as an i128.
    Some(i.cmp(&(whole as i128)).then(if f > whole {
        Less
    } else if f < whole {
        Greater
    } else {
        Equal
    }))
}

/// A float's floor or ceiling as an i128, clamped far beyond the 64-bit integers.
fn whole(f: f64) -> i128 {
    f.clamp(-1e30, 1e30) as i128
}

impl Num {
    fn of_value(v: &MetaValue) -> Option<Num> {
        match v {
            MetaValue::Int(i) => Some(Num::Int(*i)),
            MetaValue::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    /// How the BM25 index holds this number.
    fn indexed(self) -> Indexed {
        match self {
            Num::Int(i) => Indexed::I64(i),
            Num::Float(f) => Indexed::of_float(f),
        }
    }

    /// The least integer `n` with `n > self` (`strict`) or `n >= self`.
    fn int_above(self, strict: bool) -> i128 {
        match self {
            Num::Int(i) => i as i128 + strict as i128,
            Num::Float(f) if strict => whole(f.floor()) + 1,
            Num::Float(f) => whole(f.ceil()),
        }
    }

    /// The greatest integer `n` with `n < self` (`strict`) or `n <= self`.
    fn int_below(self, strict: bool) -> i128 {
        match self {
            Num::Int(i) => i as i128 - strict as i128,
            Num::Float(f) if strict => whole(f.ceil()) - 1,
            Num::Float(f) => whole(f.floor()),
        }
    }

    fn of_scalar(s: &Scalar) -> Option<Num> {
        match s {
            Scalar::Int(i) => Some(Num::Int(*i)),
            Scalar::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    /// Exact: an integer beyond 2^53 is never rounded to the float it is compared with.
    fn cmp(self, other: Num) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (Num::Int(a), Num::Float(b)) => cmp_int_float(a as i128, b),
            (Num::Float(a), Num::Int(b)) => cmp_int_float(b as i128, a).map(std::cmp::Ordering::reverse),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b),
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
        above(self.lower(), value) && below(self.upper(), value)
    }
}

/// Whether `value` passes a lower bound.
fn above(lower: Bound<Num>, value: Num) -> bool {
    use std::cmp::Ordering::*;
    match lower {
        Bound::Excluded(b) => value.cmp(b) == Some(Greater),
        Bound::Included(b) => matches!(value.cmp(b), Some(Greater | Equal)),
        Bound::Unbounded => true,
    }
}

/// Whether `value` passes an upper bound.
fn below(upper: Bound<Num>, value: Num) -> bool {
    use std::cmp::Ordering::*;
    match upper {
        Bound::Excluded(b) => value.cmp(b) == Some(Less),
        Bound::Included(b) => matches!(value.cmp(b), Some(Less | Equal)),
        Bound::Unbounded => true,
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
    /// Equality and ranges run on the inverted index, where every number keeps its exact value
    /// ([`Indexed`]); not on the fast columns, which hold a field of integers and floats as
    /// f64 and so round integers beyond 2^53.
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

fn number_term(meta: Field, field: &str, n: Indexed) -> Term {
    let mut term = Term::from_field_json_path(meta, field, false);
    match n {
        Indexed::I64(i) => term.append_type_and_fast_value(i),
        Indexed::U64(u) => term.append_type_and_fast_value(u),
        Indexed::F64(f) => term.append_type_and_fast_value(f),
    }
    term
}

fn term_query(meta: Field, field: &str, value: &Scalar) -> Box<dyn Query> {
    let term = match value {
        Scalar::Bool(b) => {
            let mut term = Term::from_field_json_path(meta, field, false);
            term.append_type_and_fast_value(*b);
            term
        }
        Scalar::Str(s) => {
            let mut term = Term::from_field_json_path(meta, field, false);
            term.append_type_and_str(s);
            term
        }
        Scalar::Int(i) => number_term(meta, field, Num::Int(*i).indexed()),
        Scalar::Float(f) => number_term(meta, field, Num::Float(*f).indexed()),
    };
    Box::new(TermQuery::new(term, IndexRecordOption::Basic))
}

/// A range as the union of three runs of the inverted index's terms, one per type a number is
/// indexed as ([`Indexed`]), each bounded on both sides (so it never strays into another type's
/// or another field's terms) and each holding exactly the values the range holds.
fn range_query(meta: Field, r: &Range) -> Box<dyn Query> {
    let (lower, upper) = (r.lower(), r.upper());
    // Integers: the least and greatest the range holds.
    let lo = match lower {
        Bound::Included(n) => Some(n.int_above(false)),
        Bound::Excluded(n) => Some(n.int_above(true)),
        Bound::Unbounded => None,
    };
    let hi = match upper {
        Bound::Included(n) => Some(n.int_below(false)),
        Bound::Excluded(n) => Some(n.int_below(true)),
        Bound::Unbounded => None,
    };
    let mut runs: Vec<(Indexed, Indexed)> = Vec::new();
    let (lo_i64, hi_i64) = (
        lo.unwrap_or(i64::MIN as i128).max(i64::MIN as i128),
        hi.unwrap_or(i64::MAX as i128).min(i64::MAX as i128),
    );
    if lo_i64 <= hi_i64 {
        runs.push((Indexed::I64(lo_i64 as i64), Indexed::I64(hi_i64 as i64)));
    }
    // U64 terms: 2^63 up to 2^64 - 2048 as themselves, 2^64 as u64::MAX.
    let two_64 = 1i128 << 64;
    let lo_u64 = lo.unwrap_or(0).max(0);
    let hi_u64 = hi.unwrap_or(two_64).min(two_64);
    if lo_u64 <= hi_u64 {
        let lo_term = lo_u64.min(u64::MAX as i128) as u64;
        let hi_term = if hi_u64 == two_64 { u64::MAX } else { hi_u64.min(u64::MAX as i128 - 1) as u64 };
        if lo_term <= hi_term {
            runs.push((Indexed::U64(lo_term), Indexed::U64(hi_term)));
        }
    }
    // F64 terms: the least and greatest floats the range holds.
    let lo_f = match lower {
        Bound::Unbounded => f64::NEG_INFINITY,
        Bound::Included(Num::Float(f)) => f,
        Bound::Excluded(Num::Float(f)) => f.next_up(),
        // The float nearest the integer, or the next one up when that one is not above it.
        Bound::Included(Num::Int(i)) | Bound::Excluded(Num::Int(i)) => {
            let f = i as f64;
            if above(lower, Num::Float(f)) {
                f
            } else {
                f.next_up()
            }
        }
    };
    let hi_f = match upper {
        Bound::Unbounded => f64::INFINITY,
        Bound::Included(Num::Float(f)) => f,
        Bound::Excluded(Num::Float(f)) => f.next_down(),
        Bound::Included(Num::Int(i)) | Bound::Excluded(Num::Int(i)) => {
            let f = i as f64;
            if below(upper, Num::Float(f)) {
                f
            } else {
                f.next_down()
            }
        }
    };
    if lo_f <= hi_f {
        runs.push((Indexed::F64(lo_f), Indexed::F64(hi_f)));
    }
    if runs.is_empty() {
        return Box::new(EmptyQuery);
    }
    let queries = runs.into_iter().map(|(lo, hi)| {
        let run = InvertedIndexRangeQuery::new(
            Bound::Included(number_term(meta, &r.field, lo)),
            Bound::Included(number_term(meta, &r.field, hi)),
        );
        (Occur::Should, Box::new(run) as Box<dyn Query>)
    });
    Box::new(BooleanQuery::new(queries.collect()))
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

    #[test]
    fn the_shorthand_means_equality_of_each_field_and_nests_in_the_long_form() {
        let long = |text: &str| serde_json::from_str::<Filter>(text).unwrap();
        assert_eq!(filter(r#"{"lang":"en"}"#), long(r#"{"eq":{"field":"lang","value":"en"}}"#));
        assert_eq!(
            filter(r#"{"lang":"en","year":2004}"#),
            long(r#"{"and":[{"eq":{"field":"lang","value":"en"}},{"eq":{"field":"year","value":2004}}]}"#)
        );
        assert_eq!(
            filter(r#"{"lang":["fr","en"]}"#),
            long(r#"{"in":{"field":"lang","values":["fr","en"]}}"#)
        );
        let m = meta(r#"{"lang":"en","year":2004,"ok":true}"#);
        for (text, want) in [
            (r#"{"lang":"en","ok":true}"#, true),
            (r#"{"lang":"en","year":2005}"#, false),
            (r#"{"not":{"lang":"fr"}}"#, true),
            (r#"{"or":[{"lang":"de"},{"range":{"field":"year","gte":2000}}]}"#, true),
        ] {
            assert_eq!(filter(text).matches(&m), want, "{text}");
        }
        // It serialises in the long form, which reads back the same.
        let f = filter(r#"{"lang":"en","year":2004}"#);
        assert_eq!(long(&serde_json::to_string(&f).unwrap()), f);
        for (text, says) in [
            (r#"{}"#, "empty filter object"),
            (r#"{"lang":null}"#, "field \"lang\" must equal"),
            (r#"{"lang":{"x":1}}"#, "got an object"),
            (r#"{"eq":{"field":"a","value":1},"lang":"en"}"#, "holds one operator, or only fields"),
            (r#""lang""#, "a filter is an object"),
        ] {
            let err = serde_json::from_str::<Filter>(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
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

    /// Integers and floats near 2^53, 2^62, 2^63 and i64::MIN, and a few halves: every value
    /// exact as an i128 twice its size.
    fn numbers_near_the_edges() -> Vec<Num> {
        let mut out = Vec::new();
        for centre in [0i128, 1 << 53, 1 << 62, i64::MAX as i128, i64::MIN as i128, -(1 << 53)] {
            for d in [-2049i128, -1025, -2, -1, 0, 1, 2, 1024, 2048] {
                let n = centre + d;
                if let Ok(i) = i64::try_from(n) {
                    out.push(Num::Int(i));
                }
                out.push(Num::Float(n as f64));
            }
        }
        out.extend([0.5, -0.5, 1.5, 9.3e18, 1.9e19, 2f64.powi(64), -1e19].map(Num::Float));
        out
    }

    /// A number's exact value, doubled (every value above is a multiple of a half).
    fn twice(n: Num) -> i128 {
        match n {
            Num::Int(i) => 2 * i as i128,
            Num::Float(f) => (2.0 * f) as i128,
        }
    }

    fn scalar(n: Num) -> Scalar {
        match n {
            Num::Int(i) => Scalar::Int(i),
            Num::Float(f) => Scalar::Float(f),
        }
    }

    fn value(n: Num) -> MetaValue {
        match n {
            Num::Int(i) => MetaValue::Int(i),
            Num::Float(f) => MetaValue::Float(f),
        }
    }

    #[test]
    fn ranges_and_equality_compare_large_integers_and_floats_exactly() {
        let numbers = numbers_near_the_edges();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(43);
        for &v in &numbers {
            let m = Metadata([("n".to_string(), value(v))].into_iter().collect());
            for &b in &numbers {
                let (x, y) = (twice(v), twice(b));
                let one = |op: &str| {
                    let mut r = Range { field: "n".into(), gt: None, gte: None, lt: None, lte: None };
                    *match op {
                        "gt" => &mut r.gt,
                        "gte" => &mut r.gte,
                        "lt" => &mut r.lt,
                        _ => &mut r.lte,
                    } = Some(scalar(b));
                    Filter::Range(r)
                };
                for (op, want) in [("gt", x > y), ("gte", x >= y), ("lt", x < y), ("lte", x <= y)] {
                    assert_eq!(one(op).matches(&m), want, "{v:?} {op} {b:?}");
                }
                let eq = Filter::Eq(Equals { field: "n".into(), value: scalar(b) });
                assert_eq!(eq.matches(&m), x == y, "{v:?} eq {b:?}");
                // A two-sided range with a random second bound.
                let c = numbers[rand::Rng::gen_range(&mut rng, 0..numbers.len())];
                let r = Range {
                    field: "n".into(),
                    gt: Some(scalar(b)),
                    gte: None,
                    lt: None,
                    lte: Some(scalar(c)),
                };
                assert_eq!(Filter::Range(r).matches(&m), x > y && x <= twice(c), "{b:?} < {v:?} <= {c:?}");
            }
        }
        // The issue's case: 2^62 and 2^62 + 1 beside a float in one field.
        let (a, b) = (Num::Int(1 << 62), Num::Int((1 << 62) + 1));
        let gt: Filter = serde_json::from_str(r#"{"range":{"field":"n","gt":4611686018427387904}}"#).unwrap();
        let gte: Filter =
            serde_json::from_str(r#"{"range":{"field":"n","gte":4611686018427387905}}"#).unwrap();
        let of = |n: Num| Metadata([("n".to_string(), value(n))].into_iter().collect());
        assert!(gt.matches(&of(b)) && !gt.matches(&of(a)) && gte.matches(&of(b)) && !gte.matches(&of(a)));
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
