//! A streaming document's rules (the one document type, `cellar_search::DocIn`, with a group):
//! what `Collection::put_batch` checks before the grouped index takes a batch. Vectors are
//! stored as f16 (the index's codec), so a value beyond its range is refused, not stored as
//! infinity.

use cellar_core::codec::first_beyond_f16;
use cellar_core::store::MAX_TOKENS_PER_DOC;
use cellar_core::{CellarError, Result};
use cellar_search::doc::check_key;
use cellar_search::plan::flatten;
use cellar_search::vectors::mean_normalized;
use cellar_search::{DocIn, MetaValue, QueryVectorsIn};

/// Largest dimension of a stream's vectors (the first format held it in 16 bits).
pub const MAX_DIM: usize = 4096;
/// Largest document (text, f16 vectors and metadata together).
pub const MAX_DOC_BYTES: usize = 4 << 20;

fn invalid(message: String) -> CellarError {
    CellarError::InvalidInput(message)
}

/// Stored vectors are f16: a value beyond its range would be stored as infinity. `values` are
/// the ones from value `first` of `what` on (errors name a value by its place in the whole).
fn check_finite(what: &str, values: &[f32], first: usize) -> Result<()> {
    match first_beyond_f16(values) {
        Some(i) if values[i].is_finite() => Err(invalid(format!(
            "{what}: value {} ({}) is outside the range of the f16 vectors a stream stores (+-{})",
            first + i,
            values[i],
            half::f16::MAX
        ))),
        Some(i) => Err(invalid(format!("{what}: value {} is not finite", first + i))),
        None => Ok(()),
    }
}

/// A document's or a query's pooled vector when it gives none: the one rule of every front end
/// (`cellar_search::vectors::mean_normalized`); zero when the mean is zero.
pub fn mean_or_zero(tokens: &[f32], dim: usize) -> Vec<f32> {
    mean_normalized(tokens, dim).unwrap_or_else(|| vec![0.0; dim])
}

/// Checks a document's vectors against `dim` (at most `max_rows` token rows; `field` names them
/// in errors) and the range of f16, and returns its token count: JSON rows are checked in place,
/// row by row (nothing copied), the base64 forms decoded (`cellar_search::plan::flatten`).
fn check_vectors(vectors: &QueryVectorsIn, dim: usize, field: &str, max_rows: usize) -> Result<usize> {
    if vectors.tokens_b64.is_some() || vectors.pooled_b64.is_some() {
        let flat = flatten(vectors.clone(), dim, field, max_rows)?;
        check_finite("token vectors", &flat.tokens, 0)?;
        if let Some(pooled) = &flat.pooled {
            check_finite("pooled vector", pooled, 0)?;
        }
        return Ok(flat.tokens.len() / dim.max(1));
    }
    if let Some(row) = vectors.tokens.iter().find(|row| row.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: row.len() });
    }
    if let Some(pooled) = vectors.pooled.as_ref().filter(|p| p.len() != dim) {
        return Err(CellarError::WrongDimension { expected: dim, received: pooled.len() });
    }
    if vectors.tokens.len() > max_rows {
        return Err(invalid(format!(
            "{field}: {} token vectors; at most {max_rows} allowed",
            vectors.tokens.len()
        )));
    }
    for (r, row) in vectors.tokens.iter().enumerate() {
        check_finite("token vectors", row, r * dim)?;
    }
    if let Some(pooled) = &vectors.pooled {
        check_finite("pooled vector", pooled, 0)?;
    }
    Ok(vectors.tokens.len())
}

/// A collection's dimension: 1 to [`MAX_DIM`].
pub fn check_dim(dim: usize) -> Result<()> {
    if dim == 0 || dim > MAX_DIM {
        return Err(invalid(format!("dimension {dim}: 1 to {MAX_DIM} allowed")));
    }
    Ok(())
}

/// Every rule `doc` must pass before a collection of dimension `dim` takes it: the rules of
/// every document (`DocIn::check`: id, text, metadata), a group, no title, token vectors of
/// `dim` values in the range of f16, at most [`MAX_DOC_BYTES`] stored. `at` (`document`) is
/// what errors name.
pub fn check_doc(doc: &DocIn, dim: usize, at: &str) -> Result<()> {
    let group = doc.group.as_deref().ok_or_else(|| invalid(format!("{at}: the document has no group")))?;
    check_key("group", group)?;
    doc.check(at)?;
    if !doc.title.is_empty() {
        return Err(invalid(format!("{at}.title: a stream stores no title: put it in the text")));
    }
    let vectors = doc.vectors.as_ref().ok_or_else(|| invalid(format!("{at}: no vectors")))?;
    let n_tokens = check_vectors(vectors, dim, &format!("{at}.vectors"), MAX_TOKENS_PER_DOC)?;
    if n_tokens == 0 {
        return Err(invalid(format!("{at}: the document has no token vectors")));
    }
    let meta: usize = doc.metadata.0.iter().map(|(k, v)| 2 + k.len() + 1 + meta_value_len(v)).sum();
    let size = group.len() + doc.id.len() + doc.text.len() + 2 * dim * (n_tokens + 1) + meta;
    if size > MAX_DOC_BYTES {
        return Err(invalid(format!(
            "document {:?} is {size} bytes encoded, over the limit of {MAX_DOC_BYTES}",
            doc.id
        )));
    }
    Ok(())
}

fn meta_value_len(value: &MetaValue) -> usize {
    match value {
        MetaValue::Str(s) => 4 + s.len(),
        MetaValue::Int(_) | MetaValue::Float(_) => 8,
        MetaValue::Bool(_) => 1,
        MetaValue::List(l) => 4 + l.iter().map(|s| 4 + s.len()).sum::<usize>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_finite_refuses_exactly_what_f16_stores_as_infinity_or_nan() {
        let edges = [
            0.0f32,
            1.0,
            65_504.0,
            65_519.0,
            65_519.996,
            65_520.0,
            65_536.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for v in edges.into_iter().flat_map(|v| [v, -v]) {
            let stored = half::f16::from_f32(v).is_finite();
            assert_eq!(check_finite("v", &[0.5, v], 0).is_ok(), stored, "{v}");
        }
        // The first bad value is named wherever it lies (a later block's too).
        let mut long = vec![0.25f32; 200];
        long[130] = 1e6;
        long[190] = f32::NAN;
        let err = check_finite("token vectors", &long, 0).unwrap_err().to_string();
        assert!(err.contains("value 130 (1000000)"), "{err}");
        long[130] = 0.0;
        assert!(check_finite("token vectors", &long, 0)
            .unwrap_err()
            .to_string()
            .contains("value 190 is not finite"));
    }

    #[test]
    fn rows_are_checked_in_place_and_a_bad_value_named_by_its_place_in_the_document() {
        let mut rows = vec![vec![0.5f32; 4]; 3];
        let given = |rows: &Vec<Vec<f32>>| QueryVectorsIn { tokens: rows.clone(), ..Default::default() };
        assert_eq!(check_vectors(&given(&rows), 4, "v", 10).unwrap(), 3);
        rows[2][1] = 1e9;
        let err = check_vectors(&given(&rows), 4, "v", 10).unwrap_err().to_string();
        assert!(err.contains("token vectors: value 9 (1000000000)"), "{err}");
        rows[2][1] = 0.5;
        rows[1].push(0.5);
        assert!(matches!(
            check_vectors(&given(&rows), 4, "v", 10),
            Err(CellarError::WrongDimension { expected: 4, received: 5 })
        ));
        rows[1].pop();
        assert!(check_vectors(&given(&rows), 4, "v", 2).unwrap_err().to_string().contains("3 token vectors"));
    }
}
