//! Eigen-decomposition of a symmetric matrix: Householder tridiagonalisation followed by the
//! implicit QL algorithm (the EISPACK `tred2`/`tql2` pair, as ported in the public-domain JAMA).
//! O(n^3); a 384 x 384 covariance takes a few tens of milliseconds.

/// Eigenvalues and unit eigenvectors of a symmetric `n x n` matrix.
pub(crate) struct SymEigen {
    /// Eigenvalues, largest first.
    pub values: Vec<f64>,
    /// Eigenvectors, row `k` (`n` values) belongs to `values[k]`.
    pub vectors: Vec<f64>,
}

/// Most QL iterations spent on one eigenvalue before giving up (a few suffice in practice).
const MAX_ITER: usize = 64;

/// Decomposes the symmetric row-major `n x n` matrix `a`. `None` if the iteration does not
/// converge (only happens for non-finite input).
pub(crate) fn sym_eigen(a: &[f64], n: usize) -> Option<SymEigen> {
    if n == 0 || a.len() != n * n {
        return None;
    }
    let mut v = a.to_vec();
    let (mut d, mut e) = (vec![0.0; n], vec![0.0; n]);
    tred2(&mut v, &mut d, &mut e, n);
    // tql2 rotates columns of V; work on its transpose so each rotation touches two contiguous rows.
    let mut vt = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            vt[j * n + i] = v[i * n + j];
        }
    }
    tql2(&mut vt, &mut d, &mut e, n)?;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| d[y].total_cmp(&d[x]));
    let values = order.iter().map(|&k| d[k]).collect();
    let vectors = order.iter().flat_map(|&k| vt[k * n..(k + 1) * n].iter().copied()).collect();
    Some(SymEigen { values, vectors })
}

/// Householder reduction of `v` (row-major, overwritten with the accumulated transform) to a
/// tridiagonal matrix with diagonal `d` and sub-diagonal `e[1..]`.
fn tred2(v: &mut [f64], d: &mut [f64], e: &mut [f64], n: usize) {
    let ix = |r: usize, c: usize| r * n + c;
    d.copy_from_slice(&v[ix(n - 1, 0)..ix(n - 1, 0) + n]);
    for i in (1..n).rev() {
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[ix(i - 1, j)];
                v[ix(i, j)] = 0.0;
                v[ix(j, i)] = 0.0;
            }
        } else {
            for dk in d[..i].iter_mut() {
                *dk /= scale;
                h += *dk * *dk;
            }
            let mut f = d[i - 1];
            let mut g = if f > 0.0 { -h.sqrt() } else { h.sqrt() };
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e[..i].fill(0.0);
            for j in 0..i {
                f = d[j];
                v[ix(j, i)] = f;
                g = e[j] + v[ix(j, j)] * f;
                for k in j + 1..i {
                    g += v[ix(k, j)] * d[k];
                    e[k] += v[ix(k, j)] * f;
                }
                e[j] = g;
            }
            f = 0.0;
            for j in 0..i {
                e[j] /= h;
                f += e[j] * d[j];
            }
            let hh = f / (h + h);
            for j in 0..i {
                e[j] -= hh * d[j];
            }
            for j in 0..i {
                let (f, g) = (d[j], e[j]);
                for k in j..i {
                    v[ix(k, j)] -= f * e[k] + g * d[k];
                }
                d[j] = v[ix(i - 1, j)];
                v[ix(i, j)] = 0.0;
            }
        }
        d[i] = h;
    }
    for i in 0..n - 1 {
        v[ix(n - 1, i)] = v[ix(i, i)];
        v[ix(i, i)] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[ix(k, i + 1)] / h;
            }
            for j in 0..=i {
                let g: f64 = (0..=i).map(|k| v[ix(k, i + 1)] * v[ix(k, j)]).sum();
                for k in 0..=i {
                    v[ix(k, j)] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[ix(k, i + 1)] = 0.0;
        }
    }
    for j in 0..n {
        d[j] = v[ix(n - 1, j)];
        v[ix(n - 1, j)] = 0.0;
    }
    v[ix(n - 1, n - 1)] = 1.0;
    e[0] = 0.0;
}

/// Implicit QL on the tridiagonal (`d`, `e`), rotating the rows of `vt` (the transposed transform)
/// so that row `k` ends up as the eigenvector of `d[k]`. `None` if an eigenvalue does not converge.
fn tql2(vt: &mut [f64], d: &mut [f64], e: &mut [f64], n: usize) -> Option<()> {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let (mut f, mut tst1) = (0.0f64, 0.0f64);
    let eps = f64::EPSILON;
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n - 1 && e[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            let mut iter = 0;
            loop {
                iter += 1;
                if iter > MAX_ITER || !tst1.is_finite() {
                    return None;
                }
                f += ql_step(vt, d, e, n, l, m);
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += f;
        e[l] = 0.0;
    }
    Some(())
}

/// One implicit-shift QL sweep over rows `l..=m` of the tridiagonal; returns the shift applied.
fn ql_step(vt: &mut [f64], d: &mut [f64], e: &mut [f64], n: usize, l: usize, m: usize) -> f64 {
    let mut g = d[l];
    let mut p = (d[l + 1] - g) / (2.0 * e[l]);
    let mut r = p.hypot(1.0);
    if p < 0.0 {
        r = -r;
    }
    d[l] = e[l] / (p + r);
    d[l + 1] = e[l] * (p + r);
    let dl1 = d[l + 1];
    let shift = g - d[l];
    for di in d[l + 2..n].iter_mut() {
        *di -= shift;
    }
    p = d[m];
    let (mut c, mut c2, mut c3) = (1.0, 1.0, 1.0);
    let el1 = e[l + 1];
    let (mut s, mut s2) = (0.0, 0.0);
    for i in (l..m).rev() {
        c3 = c2;
        c2 = c;
        s2 = s;
        g = c * e[i];
        let h = c * p;
        r = p.hypot(e[i]);
        e[i + 1] = s * r;
        s = e[i] / r;
        c = p / r;
        p = c * d[i] - s * g;
        d[i + 1] = h + s * (c * g + s * d[i]);
        rotate(vt, n, i, c, s);
    }
    p = -s * s2 * c3 * el1 * e[l] / dl1;
    e[l] = s * p;
    d[l] = c * p;
    shift
}

/// Applies the plane rotation (`c`, `s`) to rows `i` and `i + 1` of `vt`.
fn rotate(vt: &mut [f64], n: usize, i: usize, c: f64, s: f64) {
    let (lo, hi) = vt[i * n..(i + 2) * n].split_at_mut(n);
    for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
        let (x, y) = (*a, *b);
        *b = s * x + c * y;
        *a = c * x - s * y;
    }
}

#[cfg(test)]
mod tests {
    use super::sym_eigen;

    #[test]
    fn diagonalises_a_small_matrix() {
        let a = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 1.0];
        let eig = sym_eigen(&a, 3).expect("converges");
        for k in 0..3 {
            let v = &eig.vectors[k * 3..k * 3 + 3];
            for r in 0..3 {
                let av: f64 = (0..3).map(|c| a[r * 3 + c] * v[c]).sum();
                assert!((av - eig.values[k] * v[r]).abs() < 1e-10);
            }
            assert!((v.iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert!(eig.values[0] >= eig.values[1] && eig.values[1] >= eig.values[2]);
    }

    #[test]
    fn one_by_one() {
        let eig = sym_eigen(&[2.5], 1).expect("converges");
        assert_eq!(eig.values, vec![2.5]);
        assert_eq!(eig.vectors, vec![1.0]);
    }
}
