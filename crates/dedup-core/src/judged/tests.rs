//! Grouping by the local judge: vetoes split cosine groups, pairs below the floor are not
//! judged, and the result does not depend on threads or (for single linkage) on order.

use proptest::prelude::*;

use super::*;

fn unit(values: &[f32]) -> Embedding {
    Embedding::new(values.to_vec()).unwrap()
}

#[test]
fn a_cosine_group_splits_where_the_judge_vetoes() {
    let texts = [
        "The user has a standing 1:1 with their manager every Thursday at 14:00.",
        "The user has a standing 1:1 with their manager every Thursday at 16:00.",
        "Every Thursday at 14:00 the user has a standing 1:1 with their manager.",
    ];
    // All three as close as cosine can say: a threshold merges them all.
    let embeddings = vec![unit(&[1.0, 0.0]); 3];
    let judged = group_judged(&texts, &embeddings, &LocalJudge::default(), 0.9, Linkage::Complete).unwrap();
    let groups: Vec<&[usize]> = judged.grouping.groups.iter().map(|g| g.members.as_slice()).collect();
    assert_eq!(groups, [&[0, 2][..]]);
    assert_eq!(judged.judged, 3);
    let rejected: Vec<(usize, usize)> = judged.rejected.iter().map(|r| (r.a, r.b)).collect();
    assert_eq!(rejected, [(0, 1), (1, 2)]);
    assert_eq!(judged.rejected[0].judgement.reasons[0], "specifics differ: 14:00 vs 16:00");
}

#[test]
fn pairs_below_the_floor_are_not_judged() {
    let texts = ["Use ruff for linting Python.", "Python code is linted with ruff."];
    let embeddings = vec![unit(&[1.0, 0.0]), unit(&[0.0, 1.0])];
    let judged = group_judged(&texts, &embeddings, &LocalJudge::default(), 0.9, Linkage::Single).unwrap();
    assert_eq!(judged.judged, 0);
    assert!(judged.grouping.groups.is_empty());
    assert!(group_judged(&texts[..1], &embeddings, &LocalJudge::default(), 0.9, Linkage::Single).is_err());
}

#[test]
fn similar_pairs_are_every_pair_reaching_the_floor() {
    let embeddings = vec![unit(&[1.0, 0.0]), unit(&[0.8, 0.6]), unit(&[0.0, 1.0])];
    let pairs: Vec<(usize, usize)> = similar_pairs(&embeddings, 0.5).unwrap().iter().map(|e| (e.a, e.b)).collect();
    assert_eq!(pairs, [(0, 1), (1, 2)]);
    assert!(similar_pairs(&[unit(&[1.0]), unit(&[1.0, 0.0])], 0.5).is_err());
    assert!(similar_pairs(&[], 0.5).unwrap().is_empty());
}

#[test]
fn cosine_grouping_with_a_linkage_refuses_a_chain() {
    // a–b and b–c reach 0.9, a–c does not.
    let embeddings = vec![unit(&[1.0, 0.0]), unit(&[0.95, 0.312]), unit(&[0.8, 0.6])];
    let single = group_by_cosine(&embeddings, 0.9, Linkage::Single).unwrap();
    assert_eq!(single.groups[0].members, [0, 1, 2]);
    let from_similarity = crate::group_by_similarity(&embeddings, crate::Threshold::new(0.9).unwrap()).unwrap();
    assert_eq!(single.groups, from_similarity);
    let complete = group_by_cosine(&embeddings, 0.9, Linkage::Complete).unwrap();
    assert_eq!(complete.groups[0].members, [0, 1]);
    assert_eq!(complete.refused.len(), 1);
    assert!(complete.refused[0].reason.starts_with("cosine 0.8"), "{:?}", complete.refused);
}

/// Texts that make every kind of verdict between them.
const POOL: [&str; 8] = [
    "Rotate the API keys every month.",
    "API keys get rotated monthly.",
    "Rotate the API keys every month unless the vendor forbids it.",
    "Rotate the API keys every week.",
    "Go long BTC when funding turns negative.",
    "Go short BTC when funding turns negative.",
    "Never retry HTTP 429 responses.",
    "Retry HTTP 429 responses with backoff.",
];

fn corpus() -> impl Strategy<Value = (Vec<&'static str>, Vec<Embedding>)> {
    prop::collection::vec((0..POOL.len(), prop::collection::vec(-1.0f32..1.0, 3)), 2..12).prop_filter_map(
        "zero vector",
        |picks| {
            let texts = picks.iter().map(|(i, _)| POOL[*i]).collect();
            let embeddings = picks.iter().map(|(_, v)| Embedding::new(v.clone()).ok()).collect::<Option<Vec<_>>>()?;
            Some((texts, embeddings))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn similar_pairs_match_a_plain_comparison_across_tiles(
        vectors in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, 4), 0..600),
        floor in 0.0f32..0.99,
    ) {
        let embeddings: Vec<Embedding> = vectors.into_iter().filter_map(|v| Embedding::new(v).ok()).collect();
        let mut expected = Vec::new();
        for a in 0..embeddings.len() {
            for b in a + 1..embeddings.len() {
                let score = embeddings[a].cosine(&embeddings[b]).unwrap();
                // Scores at the floor itself may round either way in the tiled product.
                if (score - floor).abs() > 1e-5 && score >= floor {
                    expected.push((a, b));
                }
            }
        }
        let found: Vec<(usize, usize)> = similar_pairs(&embeddings, floor).unwrap().iter().map(|e| (e.a, e.b))
            .filter(|&(a, b)| (embeddings[a].cosine(&embeddings[b]).unwrap() - floor).abs() > 1e-5).collect();
        prop_assert_eq!(found, expected);
    }
}

proptest! {
    #[test]
    fn verdicts_do_not_depend_on_the_thread_count((texts, embeddings) in corpus()) {
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| group_judged(&texts, &embeddings, &LocalJudge::default(), 0.3, Linkage::Complete).unwrap())
        };
        prop_assert_eq!(run(1), run(3));
    }

    #[test]
    fn single_linkage_groups_do_not_depend_on_input_order((texts, embeddings) in corpus(), seed in any::<u64>()) {
        // A permutation drawn from the seed.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let shuffled_texts: Vec<&str> = order.iter().map(|&i| texts[i]).collect();
        let shuffled: Vec<Embedding> = order.iter().map(|&i| embeddings[i].clone()).collect();
        let judge = LocalJudge::default();
        let plain = group_judged(&texts, &embeddings, &judge, 0.3, Linkage::Single).unwrap();
        let moved = group_judged(&shuffled_texts, &shuffled, &judge, 0.3, Linkage::Single).unwrap();
        let sets = |g: &JudgedGrouping, map: &dyn Fn(usize) -> usize| {
            let mut sets: Vec<Vec<usize>> = g.grouping.groups.iter().map(|g| {
                let mut m: Vec<usize> = g.members.iter().map(|&i| map(i)).collect();
                m.sort_unstable();
                m
            }).collect();
            sets.sort();
            sets
        };
        prop_assert_eq!(sets(&plain, &|i| i), sets(&moved, &|i| order[i]));
        prop_assert_eq!(plain.judged, moved.judged);
    }

    #[test]
    fn every_complete_group_is_confirmed_pairwise((texts, embeddings) in corpus()) {
        let judge = LocalJudge::default();
        let judged = group_judged(&texts, &embeddings, &judge, 0.3, Linkage::Complete).unwrap();
        for group in &judged.grouping.groups {
            for (k, &a) in group.members.iter().enumerate() {
                for &b in &group.members[k + 1..] {
                    let cosine = embeddings[a].cosine(&embeddings[b]).unwrap();
                    prop_assert!(judge.judge(texts[a], texts[b], cosine).is_duplicate());
                }
            }
        }
    }
}

fn learned_settings() -> crate::LearnedJudgeSettings {
    let json = format!(
        r#"{{"format": 1, "model_file": "pair_judge.onnx", "model_sha256": "{}", "weights": "int8", "max_len": 96,
            "order": "canonical", "relations": ["unique", "related", "contradiction", "duplicate"],
            "decision": {{"features": ["duplicate_log_odds", "cosine"], "weights": [1.0, 0.0], "bias": 0.0}},
            "candidate_floor": 0.3, "duplicate_threshold": 0.9, "uncertain_threshold": 0.5,
            "precision_target": 0.98, "seed": 13, "base": "test"}}"#,
        "0".repeat(64)
    );
    crate::LearnedJudgeSettings::parse(&json).unwrap()
}

#[test]
fn learned_grouping_links_only_confirmed_pairs_and_reports_the_uncertain_ones() {
    let texts = ["run migrations first", "apply migrations before boot", "never run migrations first", "unrelated"];
    let candidates =
        [Edge { a: 0, b: 1, score: 0.7 }, Edge { a: 1, b: 2, score: 0.6 }, Edge { a: 0, b: 2, score: 0.9 }];
    let logits = [[-5.0, -5.0, -5.0, 5.0], [0.0, 0.0, 0.0, 2.0], [-3.0, 0.0, 4.0, -3.0]]
        .map(|l| crate::PairScores { logits: Some(l), tuned_cosine: None });
    let judged = group_learned(&texts, &candidates, &logits, &learned_settings(), 0.85, Linkage::Complete).unwrap();
    let groups: Vec<Vec<usize>> = judged.grouping.groups.iter().map(|g| g.members.clone()).collect();
    assert_eq!(groups, vec![vec![0, 1]]);
    let rejected: Vec<(usize, usize, PairVerdict)> =
        judged.rejected.iter().map(|r| (r.a, r.b, r.judgement.verdict)).collect();
    assert!(rejected.contains(&(1, 2, PairVerdict::Uncertain)), "{rejected:?}");
    assert!(rejected.contains(&(0, 2, PairVerdict::Related)), "{rejected:?}");
    assert_eq!(judged.judged, 3);
    // Mismatched inputs are refused.
    assert!(group_learned(&texts, &candidates, &logits[..2], &learned_settings(), 0.85, Linkage::Complete).is_err());
}

#[test]
fn complete_linkage_takes_an_unread_pair_of_the_same_wording_as_confirmed() {
    // 0 and 2 differ only in markup; only 0-1 and 1-2 were read (both duplicates).
    let texts =
        ["Install with pnpm, not npm.", "Use pnpm rather than npm for installs", "install with `pnpm`, not `npm`"];
    let candidates = [Edge { a: 0, b: 1, score: 0.8 }, Edge { a: 1, b: 2, score: 0.8 }];
    let dup = crate::PairScores { logits: Some([-5.0, -5.0, -5.0, 5.0]), tuned_cosine: None };
    let judged = group_learned(&texts, &candidates, &[dup, dup], &learned_settings(), 0.85, Linkage::Complete).unwrap();
    let groups: Vec<Vec<usize>> = judged.grouping.groups.iter().map(|g| g.members.clone()).collect();
    assert_eq!(groups, vec![vec![0, 1, 2]]);
    // Another sign is another text: the unread pair blocks the group.
    let texts = ["Set the offset to -5.", "Use an offset of minus five", "Set the offset to 5."];
    let judged = group_learned(&texts, &candidates, &[dup, dup], &learned_settings(), 0.85, Linkage::Complete).unwrap();
    assert!(judged.grouping.groups.iter().all(|g| g.members.len() < 3), "{:?}", judged.grouping.groups);
}

#[test]
fn keep_nearest_keeps_each_items_strongest_edges() {
    let e = |a, b, score| Edge { a, b, score };
    // Item 0 has four neighbours; with k = 2 only its two strongest stay, unless the
    // edge is among the other item's two strongest.
    let edges = vec![e(0, 1, 0.9), e(0, 2, 0.8), e(0, 3, 0.7), e(0, 4, 0.6), e(3, 4, 0.5), e(1, 2, 0.4)];
    let kept = keep_nearest(&edges, 5, 2);
    assert_eq!(kept, vec![e(0, 1, 0.9), e(0, 2, 0.8), e(0, 3, 0.7), e(0, 4, 0.6), e(3, 4, 0.5), e(1, 2, 0.4)]);
    let kept = keep_nearest(&edges, 5, 1);
    assert_eq!(kept, vec![e(0, 1, 0.9), e(0, 2, 0.8), e(0, 3, 0.7), e(0, 4, 0.6)], "{kept:?}");
    assert!(keep_nearest(&edges, 5, 0).is_empty());
}

/// Logits that call a pair a duplicate when both texts start with "dup", related otherwise.
fn dup_when_both_say_so(pairs: &[(&str, &str)]) -> Vec<crate::PairScores> {
    pairs
        .iter()
        .map(|(a, b)| {
            let logits = if a.starts_with("dup") && b.starts_with("dup") {
                [-5.0, -5.0, -5.0, 5.0]
            } else {
                [-5.0, 5.0, -5.0, -5.0]
            };
            crate::PairScores { logits: Some(logits), tuned_cosine: None }
        })
        .collect()
}

#[test]
fn learned_candidates_complete_the_groups_the_first_round_confirms() {
    let texts = ["dup a", "dup b", "dup c", "dup d", "other"];
    let e = |a, b, score| Edge { a, b, score };
    // A chain by cosine: each copy's nearest is the next one; "other" is near them all.
    let mut all = Vec::new();
    for a in 0..5 {
        for b in a + 1..5 {
            let score = if b == 4 { 0.5 } else { 0.9 - 0.1 * (b - a) as f32 + 0.01 * a as f32 };
            all.push(e(a, b, score));
        }
    }
    let mut settings = learned_settings();
    settings.candidates = 1;
    let mut rounds: Vec<usize> = Vec::new();
    let (read, scores) = learned_candidates::<String>(&texts, &all, &settings, |pairs| {
        rounds.push(pairs.len());
        Ok(dup_when_both_say_so(pairs))
    })
    .unwrap();
    let first = keep_nearest(&all, texts.len(), 1);
    assert_eq!(read[..first.len()], first[..], "the first round reads each text's nearest");
    assert_eq!(rounds, vec![first.len(), 6 - (first.len() - 1)], "then the rest of the copies' pairs");
    let grouped = group_learned(&texts, &read, &scores, &settings, 0.85, Linkage::Complete).unwrap();
    let groups: Vec<Vec<usize>> = grouped.grouping.groups.iter().map(|g| g.members.clone()).collect();
    assert_eq!(groups, vec![vec![0, 1, 2, 3]], "all four copies, every pair confirmed");
    assert!(read.iter().filter(|x| x.b == 4).count() <= 1, "\"other\" is read only as a nearest neighbour");

    // Without the second round the chain cannot be one complete group.
    let scores = dup_when_both_say_so(&first.iter().map(|x| (texts[x.a], texts[x.b])).collect::<Vec<_>>());
    let partial = group_learned(&texts, &first, &scores, &settings, 0.85, Linkage::Complete).unwrap();
    assert!(partial.grouping.groups.iter().all(|g| g.members.len() < 4), "{:?}", partial.grouping.groups);

    // A failing model fails the call.
    let failed = learned_candidates(&texts, &all, &settings, |_| Err("no model".to_owned()));
    assert_eq!(failed.unwrap_err(), "no model");
}

#[test]
fn completion_pairs_skip_judged_pairs_and_oversized_components() {
    let e = |a, b| Edge { a, b, score: 0.8 };
    let chain = |n: usize| (0..n - 1).map(|i| e(i, i + 1)).collect::<Vec<_>>();
    let all = |n: usize| (0..n).flat_map(|a| (a + 1..n).map(move |b| e(a, b))).collect::<Vec<_>>();
    // Three linked items of five: only their unjudged pair (0, 2) is asked for.
    assert_eq!(completion_pairs(5, &all(5), &chain(3), &chain(3)), vec![e(0, 2)]);
    assert!(completion_pairs(5, &all(5), &chain(3), &[]).is_empty(), "no duplicates, nothing to complete");
    let n = MAX_COMPLETED_COMPONENT;
    let expected = n * (n - 1) / 2 - (n - 1);
    assert_eq!(completion_pairs(n, &all(n), &chain(n), &chain(n)).len(), expected);
    assert!(completion_pairs(n + 1, &all(n + 1), &chain(n + 1), &chain(n + 1)).is_empty(), "too large to complete");
}
