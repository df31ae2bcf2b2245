//! `scan_collection`: groups of duplicates in a collection of memories, per namespace.

use memdedup::{CollectionItem, DEFAULT_NAMESPACE, ScanOptions, ScanReport, scan_collection};
use serde_json::{Value, json};

use crate::support::{CountingEmbedder, FailingEmbedder, FixedEmbedder, threshold};

fn item(id: Value, text: &str, namespace: Option<&str>) -> CollectionItem {
    CollectionItem { id, text: text.to_owned(), namespace: namespace.map(str::to_owned) }
}

fn options(cross_namespace: bool) -> ScanOptions {
    ScanOptions { cross_namespace, ..ScanOptions::new(threshold(0.85)) }
}

async fn scan(items: &[CollectionItem], embedder: &FixedEmbedder, options: ScanOptions) -> ScanReport {
    scan_collection(items, embedder, options, &|_, _| {}).await.unwrap_or_else(|e| panic!("scan failed: {e}"))
}

fn members(report: &ScanReport) -> Vec<Vec<usize>> {
    report.groups.iter().map(|g| g.members.clone()).collect()
}

fn assert_close(actual: f32, expected: f64) {
    assert!((f64::from(actual) - expected).abs() < 1e-5, "expected {expected}, got {actual}");
}

#[tokio::test]
async fn identical_texts_in_different_namespaces_group_only_across_namespaces() {
    let text = "the user prefers dark mode";
    let embedder = FixedEmbedder::new([(text, vec![1.0, 0.0])]);
    let items = [item(json!(1), text, Some("alice")), item(json!(2), text, Some("bob"))];

    let isolated = scan(&items, &embedder, options(false)).await;
    assert!(isolated.groups.is_empty(), "{isolated:?}");
    assert_eq!((isolated.items, isolated.duplicates), (2, 0));

    let crossed = scan(&items, &embedder, options(true)).await;
    assert_eq!(members(&crossed), [vec![0, 1]]);
    assert_eq!(crossed.duplicates, 1);
}

#[tokio::test]
async fn items_without_namespace_share_the_default_namespace() {
    let text = "deploy after the tests pass";
    let embedder = FixedEmbedder::new([(text, vec![0.0, 1.0])]);
    let items = [
        item(json!("a"), text, None),
        item(json!("b"), text, Some("elsewhere")),
        item(json!("c"), text, Some(DEFAULT_NAMESPACE)),
    ];
    let report = scan(&items, &embedder, options(false)).await;
    assert_eq!(members(&report), [vec![0, 2]]);
}

#[tokio::test]
async fn ids_of_any_json_kind_come_back_unchanged() {
    let (a, b) = ("rotate keys monthly", "rotate the API keys every month");
    let embedder = FixedEmbedder::pair(a, b, 0.93);
    let items = vec![item(json!("mem-7f3a"), a, None), item(json!(42), b, None), item(json!(4.5), a, None)];
    let before = items.clone();
    let report = scan(&items, &embedder, options(false)).await;

    assert_eq!(items, before, "the items were modified");
    let ids: Vec<Vec<&Value>> =
        report.groups.iter().map(|g| g.members.iter().map(|&m| &items[m].id).collect()).collect();
    assert_eq!(ids, [vec![&json!("mem-7f3a"), &json!(42), &json!(4.5)]]);
    let edge_ids: Vec<(&Value, &Value)> =
        report.groups[0].edges.iter().map(|e| (&items[e.a].id, &items[e.b].id)).collect();
    // The identical pair links at 1.0 first, then the paraphrase.
    assert_eq!(edge_ids, [(&json!("mem-7f3a"), &json!(4.5)), (&json!("mem-7f3a"), &json!(42))]);
}

#[tokio::test]
async fn members_list_the_survivor_first_then_input_order() {
    let texts =
        ["use tabs", "indentation with tabs", "tabs for indenting", "keep secrets out of git", "no secrets in git"];
    let embedder = FixedEmbedder::with_cosines(
        &texts,
        &[
            vec![1.0, 0.9, 0.9, 0.0, 0.0],
            vec![0.9, 1.0, 0.9, 0.0, 0.0],
            vec![0.9, 0.9, 1.0, 0.0, 0.0],
            vec![0.0, 0.0, 0.0, 1.0, 0.95],
            vec![0.0, 0.0, 0.0, 0.95, 1.0],
        ],
    );
    // Namespaces interleave; the later group in namespace "a" must still come after the
    // earlier-starting group of namespace "b".
    let items = [
        item(json!(0), texts[3], Some("b")),
        item(json!(1), texts[2], Some("a")),
        item(json!(2), texts[0], Some("a")),
        item(json!(3), texts[4], Some("b")),
        item(json!(4), texts[1], Some("a")),
    ];
    let report = scan(&items, &embedder, options(false)).await;
    assert_eq!(members(&report), [vec![0, 3], vec![1, 2, 4]]);
    for group in &report.groups {
        assert!(group.edges.iter().all(|e| e.a < e.b), "{group:?}");
        assert!(group.edges.iter().all(|e| group.members.contains(&e.a) && group.members.contains(&e.b)));
    }
}

#[tokio::test]
async fn duplicates_count_every_member_but_the_survivors() {
    let texts = ["a", "b", "c", "d", "e", "f"];
    // {a, b, c} and {d, e} are groups; f stands alone.
    let embedder = FixedEmbedder::new(
        texts
            .iter()
            .zip([
                vec![1.0, 0.0, 0.0],
                vec![1.0, 0.05, 0.0],
                vec![1.0, 0.0, 0.05],
                vec![0.0, 1.0, 0.0],
                vec![0.0, 1.0, 0.1],
                vec![0.0, 0.0, 1.0],
            ])
            .map(|(t, v)| (*t, v)),
    );
    let items: Vec<CollectionItem> = texts.iter().enumerate().map(|(i, t)| item(json!(i), t, None)).collect();
    let report = scan(&items, &embedder, options(false)).await;
    assert_eq!(members(&report), [vec![0, 1, 2], vec![3, 4]]);
    assert_eq!((report.items, report.duplicates), (6, 3));
    assert_eq!(report.model, FixedEmbedder::MODEL_ID);
    assert_eq!(report.threshold, threshold(0.85));
}

#[tokio::test]
async fn weakest_link_is_the_weakest_spanning_edge() {
    // A–B 0.95, B–C 0.90, A–C 0.80: C joins only through B. The unrelated item comes
    // first, in another namespace, so indices are not group-local.
    let texts = ["unrelated", "A", "B", "C"];
    let embedder = FixedEmbedder::with_cosines(
        &texts,
        &[vec![1.0, 0.0, 0.0, 0.0], vec![0.0, 1.0, 0.95, 0.80], vec![0.0, 0.95, 1.0, 0.90], vec![0.0, 0.80, 0.90, 1.0]],
    );
    let items = [
        item(json!("x"), texts[0], Some("other")),
        item(json!(1), texts[1], None),
        item(json!(2), texts[2], None),
        item(json!(3), texts[3], None),
    ];
    let report = scan(&items, &embedder, options(false)).await;

    assert_eq!(members(&report), [vec![1, 2, 3]]);
    let group = &report.groups[0];
    let edges: Vec<(usize, usize)> = group.edges.iter().map(|e| (e.a, e.b)).collect();
    assert_eq!(edges, [(1, 2), (2, 3)], "strongest first, in item indices");
    assert_close(group.edges[0].score, 0.95);
    assert_close(group.edges[1].score, 0.90);
    assert_close(group.weakest_link, 0.90);
}

#[tokio::test]
async fn fewer_than_two_items_embed_nothing() {
    for items in [vec![], vec![item(json!(1), "alone", None)]] {
        let embedder = CountingEmbedder::new(FailingEmbedder::inference("must not be called"));
        let calls = embedder.calls();
        let report = scan_collection(&items, &embedder, options(false), &|_, _| {}).await.expect("nothing to embed");
        assert_eq!((report.items, report.duplicates, report.groups.len()), (items.len(), 0, 0));
        assert_eq!(calls.calls(), 0);
    }
}

#[tokio::test]
async fn identical_texts_are_embedded_once() {
    let text = "always run the linter";
    let embedder = CountingEmbedder::new(FixedEmbedder::new([(text, vec![1.0, 2.0]), ("other", vec![2.0, -1.0])]));
    let calls = embedder.calls();
    let items = [item(json!(1), text, None), item(json!(2), "other", None), item(json!(3), text, None)];
    let report = scan_collection(&items, &embedder, options(false), &|_, _| {}).await.expect("scan");
    assert_eq!(members(&report), [vec![0, 2]]);
    assert_close(report.groups[0].weakest_link, 1.0);
    assert_eq!(calls.texts(), 2);
}

#[tokio::test]
async fn embedder_failure_is_reported_as_unavailable() {
    let items = [item(json!(1), "one", None), item(json!(2), "two", None)];
    let err = scan_collection(&items, &FailingEmbedder::model_missing(), options(false), &|_, _| {})
        .await
        .expect_err("the embedder fails");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("cargo xtask fetch-model"), "{err}");
}
