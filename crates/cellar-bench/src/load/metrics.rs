//! Reading a few values out of the server's Prometheus text (`GET /metrics`).

/// Sum of every sample of metric `name` (all label sets); `None` when it has no sample.
pub fn sum_metric(text: &str, name: &str) -> Option<f64> {
    sum_labelled(text, name, "")
}

/// Sum of the samples of metric `name` whose labels hold `label` (e.g. `stage="read"`; empty:
/// every sample); `None` when it has no such sample.
pub fn sum_labelled(text: &str, name: &str, label: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(|c: char| c == '{' || c.is_whitespace()).unwrap_or(line.len());
        if &line[..name_end] != name {
            continue;
        }
        let rest = &line[name_end..];
        let (labels, rest) = match rest.strip_prefix('{') {
            Some(labels) => match labels.rfind('}') {
                Some(end) => (&labels[..end], &labels[end + 1..]),
                None => continue,
            },
            None => ("", rest),
        };
        if !label.is_empty() && !labels.split(',').any(|l| l == label) {
            continue;
        }
        if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()) {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_samples_across_labels_and_ignores_lookalikes() {
        let text = "# HELP cellar_read_bytes_total bytes\n# TYPE cellar_read_bytes_total counter\n\
                    cellar_read_bytes_total 4096\n\
                    cellar_read_bytes_total_other 1\n\
                    cellar_requests_total{endpoint=\"search\",status=\"200\"} 10\n\
                    cellar_requests_total{endpoint=\"search\",status=\"429\"} 3 1700000000\n\
                    cellar_process_rss_bytes 1.5e7\n";
        assert_eq!(sum_metric(text, "cellar_read_bytes_total"), Some(4096.0));
        assert_eq!(sum_metric(text, "cellar_requests_total"), Some(13.0));
        assert_eq!(sum_metric(text, "cellar_process_rss_bytes"), Some(1.5e7));
        assert_eq!(sum_metric(text, "cellar_queue_depth"), None);
        let label = "endpoint=\"search\"";
        assert_eq!(sum_labelled(text, "cellar_requests_total", label), Some(13.0));
        assert_eq!(sum_labelled(text, "cellar_requests_total", "status=\"429\""), Some(3.0));
        assert_eq!(sum_labelled(text, "cellar_requests_total", "status=\"500\""), None);
    }
}
