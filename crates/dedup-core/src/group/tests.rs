//! Tests for similarity grouping.

use proptest::prelude::*;

use super::*;

/// Unit vectors whose pairwise cosines are exactly the given Gram matrix (Cholesky).
pub(crate) fn vectors_with_cosines(gram: &[Vec<f64>]) -> Vec<Embedding> {
    let n = gram.len();
    let mut l = vec![vec![0.0f64; n]; n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i][k] * l[j][k]).sum();
            if i == j {
                l[i][j] = (gram[i][i] - s).sqrt();
            } else {
                l[i][j] = (gram[i][j] - s) / l[j][j];
            }
        }
    }
    l.into_iter().map(|row| Embedding::new(row.into_iter().map(|v| v as f32).collect()).unwrap()).collect()
}

fn random_embeddings(n: usize, dims: usize, seed: u64) -> Vec<Embedding> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
    };
    (0..n).map(|_| Embedding::new((0..dims).map(|_| next()).collect()).unwrap()).collect()
}

/// Reference: components by a naive double loop and a breadth-first search.
fn naive_components(embeddings: &[Embedding], threshold: f32) -> Vec<Vec<usize>> {
    let n = embeddings.len();
    let mut adjacent = vec![Vec::new(); n];
    for i in 0..n {
        for j in i + 1..n {
            if embeddings[i].cosine(&embeddings[j]).unwrap() >= threshold {
                adjacent[i].push(j);
                adjacent[j].push(i);
            }
        }
    }
    let mut seen = vec![false; n];
    let mut out = Vec::new();
    for start in 0..n {
        if seen[start] {
            continue;
        }
        let mut comp = vec![start];
        seen[start] = true;
        let mut k = 0;
        while k < comp.len() {
            for &m in &adjacent[comp[k]] {
                if !seen[m] {
                    seen[m] = true;
                    comp.push(m);
                }
            }
            k += 1;
        }
        if comp.len() > 1 {
            comp.sort_unstable();
            out.push(comp);
        }
    }
    out
}

fn t(v: f64) -> Threshold {
    Threshold::new(v).unwrap()
}

#[test]
fn transitive_chain_is_one_group_with_weakest_link() {
    let e = vectors_with_cosines(&[vec![1.0, 0.90, 0.80], vec![0.90, 1.0, 0.88], vec![0.80, 0.88, 1.0]]);
    let groups = group_by_similarity(&e, t(0.85)).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].members, vec![0, 1, 2]);
    assert_eq!(groups[0].edges.len(), 2);
    assert!((groups[0].weakest_link - 0.88).abs() < 1e-5, "{}", groups[0].weakest_link);
    let links = groups[0].links();
    assert_eq!(links.len(), 2);
    assert_eq!((links[0].0, links[0].1), (1, 0));
    assert_eq!((links[1].0, links[1].1), (2, 1));
    // Above the weakest link the group splits.
    let split = group_by_similarity(&e, t(0.89)).unwrap();
    assert_eq!(split.len(), 1);
    assert_eq!(split[0].members, vec![0, 1]);
}

#[test]
fn identical_vectors_group_at_threshold_exactly_one() {
    // Components chosen so that the f32 self-dot product rounds below 1.
    let v = Embedding::new((0..384).map(|i| ((i * 7919) % 101) as f32 / 37.0 - 1.3).collect()).unwrap();
    let e = vec![v.clone(), v.clone(), Embedding::new((0..384).map(|i| i as f32).collect()).unwrap(), v];
    let groups = group_by_similarity(&e, t(1.0)).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].members, vec![0, 1, 3]);
}

#[test]
fn fewer_than_two_items_give_no_groups() {
    assert!(group_by_similarity(&[], t(0.5)).unwrap().is_empty());
    assert!(group_by_similarity(&random_embeddings(1, 8, 1), t(0.0)).unwrap().is_empty());
}

#[test]
fn mixed_dimensions_are_rejected() {
    let e = vec![Embedding::new(vec![1.0, 0.0]).unwrap(), Embedding::new(vec![1.0, 0.0, 0.0]).unwrap()];
    assert_eq!(group_by_similarity(&e, t(0.5)), Err(Error::DimensionMismatch { expected: 2, actual: 3 }));
}

#[test]
fn identical_vectors_group_at_threshold_one() {
    let v = Embedding::new(vec![0.3, 0.4, 0.5]).unwrap();
    let e = vec![v.clone(), Embedding::new(vec![0.0, 0.0, 1.0]).unwrap(), v];
    let groups = group_by_similarity(&e, t(0.9999)).unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].members, vec![0, 2]);
}

#[test]
fn matches_naive_reference_across_tile_sizes() {
    // Low dimensions make random vectors correlate often, so groups are non-trivial.
    let e = random_embeddings(300, 6, 42);
    let expected = naive_components(&e, 0.95);
    assert!(expected.len() > 3, "fixture should produce several groups");
    for tile in [1, 7, 64, 256, 1000] {
        let options = GroupOptions { threshold: t(0.95), tile_size: tile };
        let got: Vec<Vec<usize>> =
            group_by_similarity_with(&e, options).unwrap().into_iter().map(|g| g.members).collect();
        assert_eq!(got, expected, "tile size {tile}");
    }
}

#[test]
fn output_does_not_depend_on_thread_count() {
    let e = random_embeddings(700, 5, 7);
    let run = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| group_by_similarity_with(&e, GroupOptions { threshold: t(0.97), tile_size: 32 }).unwrap())
    };
    let one = run(1);
    assert!(!one.is_empty());
    for threads in [2, 3, 8] {
        assert_eq!(run(threads), one, "{threads} threads");
    }
}

#[test]
fn spanning_edges_connect_each_group_and_are_strongest_first() {
    let e = random_embeddings(400, 4, 3);
    for g in group_by_similarity(&e, t(0.9)).unwrap() {
        assert_eq!(g.edges.len(), g.members.len() - 1);
        assert!(g.edges.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(g.edges.iter().all(|x| x.a < x.b && g.members.contains(&x.a) && g.members.contains(&x.b)));
        assert_eq!(g.links().len(), g.members.len() - 1);
        assert_eq!(g.weakest_link, g.edges.last().unwrap().score);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Postcondition of REQ-DEDUP-003: no two survivors (first members, plus every item in
    /// no group) have cosine >= threshold, and groups equal the naive components.
    #[test]
    fn survivors_are_never_similar(seed in 0u64..10_000, n in 2usize..120, dims in 2usize..10, thr in 0.5f64..0.99) {
        let e = random_embeddings(n, dims, seed);
        // A cosine within rounding distance of the threshold may fall either way: such
        // cases say nothing about the algorithm, so they are skipped, not asserted.
        let ambiguous = (0..n).any(|i| {
            (i + 1..n).any(|j| (f64::from(e[i].cosine(&e[j]).unwrap()) - thr).abs() < 1e-4)
        });
        prop_assume!(!ambiguous);
        let groups = group_by_similarity_with(&e, GroupOptions { threshold: t(thr), tile_size: 16 }).unwrap();
        let grouped: std::collections::HashSet<usize> = groups.iter().flat_map(|g| g.members.iter().copied()).collect();
        let survivors: Vec<usize> = (0..n).filter(|i| !grouped.contains(i) || groups.iter().any(|g| g.survivor() == *i)).collect();
        for (x, &i) in survivors.iter().enumerate() {
            for &j in &survivors[x + 1..] {
                prop_assert!(e[i].cosine(&e[j]).unwrap() < thr as f32 + 1e-6, "survivors {i} and {j}");
            }
        }
        let members: Vec<Vec<usize>> = groups.into_iter().map(|g| g.members).collect();
        prop_assert_eq!(members, naive_components(&e, thr as f32));
    }
}
