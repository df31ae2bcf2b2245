//! Tests for the vector index: exactness against a brute-force scan, bookkeeping, and the
//! error bound the pruning relies on.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn id(raw: i64) -> MemoryId {
    MemoryId::new(raw)
}

fn embedding(values: &[f32]) -> Embedding {
    Embedding::new(values.to_vec()).unwrap()
}

/// Deterministic values in [-0.5, 0.5) from a linear congruential generator.
fn noise(seed: u64) -> impl FnMut() -> f32 {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) as f32
    }
}

fn random_embedding(dims: usize, next: &mut impl FnMut() -> f32) -> Embedding {
    loop {
        if let Ok(e) = Embedding::new((0..dims).map(|_| next()).collect()) {
            return e;
        }
    }
}

/// `base` plus noise of size `eps` per component, renormalised.
fn near(base: &Embedding, eps: f32, next: &mut impl FnMut() -> f32) -> Embedding {
    Embedding::new(base.as_slice().iter().map(|v| v + eps * next()).collect()).unwrap()
}

/// The reference: score every vector with [`dot`], filter on the exact score, sort by
/// score descending then id ascending, keep `k`.
fn brute_force<'a>(
    vectors: impl IntoIterator<Item = (MemoryId, &'a Embedding)>,
    query: &Embedding,
    k: usize,
    min_score: Option<f32>,
) -> Vec<Neighbour> {
    let mut all: Vec<Neighbour> = vectors
        .into_iter()
        .map(|(id, e)| Neighbour { id, score: dot(query.as_slice(), e.as_slice()) })
        .filter(|n| min_score.is_none_or(|min| n.score >= min))
        .collect();
    all.sort_by(|a, b| b.score.partial_cmp(&a.score).unwrap().then(a.id.cmp(&b.id)));
    all.truncate(k);
    all
}

/// Results with scores as bits, so equality means bit-identical scores.
fn bits(neighbours: &[Neighbour]) -> Vec<(i64, u32)> {
    neighbours.iter().map(|n| (n.id.get(), n.score.to_bits())).collect()
}

fn assert_exact(
    index: &VectorIndex,
    model: &BTreeMap<MemoryId, Embedding>,
    query: &Embedding,
    k: usize,
    min: Option<f32>,
) {
    let got = index.top_k(query, k, min).unwrap();
    let want = brute_force(model.iter().map(|(&id, e)| (id, e)), query, k, min);
    assert_eq!(bits(&got), bits(&want), "k={k} min={min:?}");
}

#[test]
fn empty_index_returns_nothing() {
    let index = VectorIndex::new(3);
    assert!(index.is_empty());
    assert_eq!(index.len(), 0);
    assert_eq!(index.top_k(&embedding(&[1.0, 0.0, 0.0]), 5, None).unwrap(), vec![]);
    assert!(!index.contains(id(1)));
}

#[test]
fn k_zero_returns_nothing_and_k_beyond_len_returns_all() {
    let mut index = VectorIndex::new(2);
    index.upsert(id(1), &embedding(&[1.0, 0.0])).unwrap();
    index.upsert(id(2), &embedding(&[0.0, 1.0])).unwrap();
    index.upsert(id(3), &embedding(&[1.0, 1.0])).unwrap();
    let query = embedding(&[1.0, 0.2]);
    assert_eq!(index.top_k(&query, 0, None).unwrap(), vec![]);
    let all = index.top_k(&query, 100, None).unwrap();
    assert_eq!(all.iter().map(|n| n.id).collect::<Vec<_>>(), vec![id(1), id(3), id(2)]);
    assert_eq!(index.top_k(&query, usize::MAX, Some(0.5)).unwrap().len(), 2);
}

#[test]
fn dimension_mismatch_is_an_error() {
    let mut index = VectorIndex::new(3);
    let wrong = embedding(&[1.0, 0.0]);
    assert_eq!(index.upsert(id(1), &wrong), Err(dedup_core::Error::DimensionMismatch { expected: 3, actual: 2 }));
    assert!(index.is_empty());
    assert_eq!(index.top_k(&wrong, 1, None), Err(dedup_core::Error::DimensionMismatch { expected: 3, actual: 2 }));
    // Also on an empty index and with k = 0: the query is checked first.
    assert!(index.top_k(&wrong, 0, None).is_err());
}

#[test]
fn upsert_replaces_the_vector() {
    let mut index = VectorIndex::new(2);
    index.upsert(id(7), &embedding(&[1.0, 0.0])).unwrap();
    index.upsert(id(8), &embedding(&[0.6, 0.8])).unwrap();
    index.upsert(id(7), &embedding(&[0.0, 1.0])).unwrap();
    assert_eq!(index.len(), 2);
    let hits = index.top_k(&embedding(&[0.0, 1.0]), 2, None).unwrap();
    assert_eq!(hits[0], Neighbour { id: id(7), score: 1.0 });
    assert_eq!(hits[1].id, id(8));
    assert!(index.top_k(&embedding(&[1.0, 0.0]), 1, None).unwrap()[0].id == id(8));
}

#[test]
fn remove_last_middle_and_absent() {
    let mut next = noise(1);
    let mut index = VectorIndex::new(5);
    let mut model = BTreeMap::new();
    for raw in 0..6 {
        let e = random_embedding(5, &mut next);
        index.upsert(id(raw), &e).unwrap();
        model.insert(id(raw), e);
    }
    assert!(index.remove(id(5)), "last");
    assert!(index.remove(id(2)), "middle");
    assert!(!index.remove(id(2)), "already removed");
    assert!(!index.remove(id(99)), "never present");
    model.remove(&id(5));
    model.remove(&id(2));
    assert_eq!(index.len(), 4);
    assert!(!index.contains(id(2)) && !index.contains(id(5)));
    assert!(index.contains(id(0)) && index.contains(id(4)));
    for (&raw, e) in &model {
        // Every remaining vector still finds itself first, with its own score.
        assert_eq!(index.top_k(e, 1, None).unwrap()[0].id, raw);
        assert_exact(&index, &model, e, 10, None);
    }
    // The moved vector (4 took 2's place) can be replaced and removed.
    let replacement = random_embedding(5, &mut next);
    index.upsert(id(4), &replacement).unwrap();
    model.insert(id(4), replacement.clone());
    assert_exact(&index, &model, &replacement, 10, None);
    for raw in [0, 1, 3, 4] {
        assert!(index.remove(id(raw)));
    }
    assert!(index.is_empty());
    assert_eq!(index.top_k(&replacement, 3, None).unwrap(), vec![]);
}

#[test]
fn memory_bytes_counts_the_rows() {
    let mut next = noise(2);
    let mut index = VectorIndex::new(384);
    let empty = index.memory_bytes();
    for raw in 0..100 {
        index.upsert(id(raw), &random_embedding(384, &mut next)).unwrap();
    }
    // At least the f32 rows and the int8 codes.
    assert!(index.memory_bytes() >= empty + 100 * 384 * 5);
}

#[test]
fn exact_copies_tie_by_lower_id() {
    let mut next = noise(3);
    let base = random_embedding(40, &mut next);
    let mut index = VectorIndex::new(40);
    for raw in [9, 3, 7, 1] {
        index.upsert(id(raw), &base).unwrap();
    }
    let hits = index.top_k(&base, 3, None).unwrap();
    assert_eq!(hits.iter().map(|n| n.id).collect::<Vec<_>>(), vec![id(1), id(3), id(7)]);
    assert!(hits.iter().all(|n| n.score == hits[0].score));
    // min_score equal to the exact score keeps them; just above drops them.
    let score = hits[0].score;
    assert_eq!(index.top_k(&base, 10, Some(score)).unwrap().len(), 4);
    assert_eq!(index.top_k(&base, 10, Some(f32::from_bits(score.to_bits() + 1))).unwrap().len(), 0);
}

/// Many vectors in tight clusters at 384 dimensions: scores differ by less than the
/// bound, so pruning keeps many candidates and the exact rerank decides.
#[test]
fn clustered_near_duplicates_at_384_dims_match_brute_force() {
    let mut next = noise(4);
    let dims = 384;
    let bases: Vec<Embedding> = (0..8).map(|_| random_embedding(dims, &mut next)).collect();
    let mut index = VectorIndex::new(dims);
    let mut model = BTreeMap::new();
    for j in 0..1500i64 {
        let base = &bases[j as usize % bases.len()];
        let e = match j % 5 {
            0 => base.clone(),
            1 => random_embedding(dims, &mut next),
            _ => near(base, 1e-3 * (j % 7) as f32, &mut next),
        };
        let raw = (j * 7919) % 10_007;
        index.upsert(id(raw), &e).unwrap();
        model.insert(id(raw), e);
    }
    for (q, base) in bases.iter().enumerate() {
        assert_exact(&index, &model, base, 5, None);
        assert_exact(&index, &model, &near(base, 2e-3, &mut next), 1 + q, Some(0.9));
        assert_exact(&index, &model, &random_embedding(dims, &mut next), 5, None);
        assert_exact(&index, &model, &random_embedding(dims, &mut next), 3, Some(0.1));
    }
}

/// Above the parallel threshold the scan runs in chunks on rayon; the result is the brute
/// force's whatever the thread count.
#[test]
fn parallel_scan_matches_brute_force_for_any_thread_count() {
    let mut next = noise(5);
    let dims = 12;
    let len = scan::PARALLEL_MIN_LEN + 9_000;
    let bases: Vec<Embedding> = (0..50).map(|_| random_embedding(dims, &mut next)).collect();
    let mut index = VectorIndex::new(dims);
    let mut model = BTreeMap::new();
    for j in 0..len {
        let base = &bases[j % bases.len()];
        let e = if j % 3 == 0 { base.clone() } else { near(base, 1e-2, &mut next) };
        let raw = (j as i64 * 104_729) % 1_000_003;
        index.upsert(id(raw), &e).unwrap();
        model.insert(id(raw), e);
    }
    let queries: Vec<(Embedding, usize, Option<f32>)> = vec![
        (bases[0].clone(), 5, None),
        (near(&bases[1], 1e-2, &mut next), 9, None),
        (random_embedding(dims, &mut next), 1, Some(0.5)),
        (random_embedding(dims, &mut next), 700, None),
    ];
    let expected: Vec<Vec<Neighbour>> =
        queries.iter().map(|(q, k, min)| brute_force(model.iter().map(|(&id, e)| (id, e)), q, *k, *min)).collect();
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        for ((q, k, min), want) in queries.iter().zip(&expected) {
            let got = pool.install(|| index.top_k(q, *k, *min).unwrap());
            assert_eq!(bits(&got), bits(want), "threads={threads} k={k}");
        }
    }
}

/// What the pruning relies on: for every stored vector, `|dot(q, x) − a| ≤ b`, including
/// flat vectors whose integer sums are the largest possible (the `i32` limit at 512 padded
/// dimensions, the blocked `i64` path beyond), and queries along a vector's rounding
/// error `x − s·c`, where Cauchy–Schwarz is attained for the stored vector's term.
#[test]
fn approximate_score_is_within_its_bound() {
    let mut next = noise(6);
    for dims in [1, 2, 7, 31, 32, 33, 100, 384, 512, 513, 768, 1536] {
        let mut vectors: Vec<Embedding> = (0..60).map(|_| random_embedding(dims, &mut next)).collect();
        vectors.push(embedding(&vec![1.0; dims]));
        vectors.push(embedding(&vec![-1.0; dims]));
        let mut spike = vec![1e-4; dims];
        spike[dims / 2] = 1.0;
        vectors.push(embedding(&spike));
        let base = vectors[0].clone();
        vectors.extend((0..20).map(|_| near(&base, 1e-4, &mut next)));
        let mut index = VectorIndex::new(dims);
        for (j, e) in vectors.iter().enumerate() {
            index.upsert(id(j as i64), e).unwrap();
        }
        let rounding_errors: Vec<(usize, Embedding)> = (0..10)
            .filter_map(|j| {
                let code = &index.codes[j * index.stride..][..dims];
                let error = vectors[j].as_slice().iter().zip(code).map(|(x, &c)| x - index.scales[j] * f32::from(c));
                Some((j, Embedding::new(error.collect()).ok()?))
            })
            .collect();
        let mut worst = 0.0f32;
        let mut check = |query: &Embedding, j: usize| {
            let exact = dot(query.as_slice(), vectors[j].as_slice());
            let (approx, bound) = index.approx_score(query, id(j as i64)).unwrap();
            assert!((exact - approx).abs() <= bound, "dims={dims} j={j}: exact {exact} approx {approx} bound {bound}");
            assert!(approx - bound <= exact && exact <= approx + bound, "dims={dims} j={j}: f32 interval");
            worst = worst.max(bound);
            (exact - approx).abs() / bound
        };
        for query in &vectors {
            for j in 0..vectors.len() {
                check(query, j);
            }
        }
        for (j, query) in &rounding_errors {
            let tightness = check(query, *j);
            // The stored vector's term `nq·r` is attained; the query's own int8 error
            // `eq·(1 + r)`, about as large, is not by this query: a quarter to a half of it.
            if dims >= 32 {
                assert!(tightness > 0.25, "dims={dims} j={j}: aligned error is only {tightness} of the bound");
            }
        }
        // The bound must be tight enough to prune: int8 error of a unit vector is about
        // sqrt(dims) · max|x| / (127 · sqrt(12)).
        if dims == 384 {
            assert!(worst < 0.05, "bound {worst} too loose to prune");
        }
    }
}

/// How to build one vector of a generated dataset.
#[derive(Debug, Clone)]
enum Recipe {
    Random(Vec<f32>),
    /// Base `i` (modulo the number of bases) plus noise of size `eps`.
    Near(usize, f32, Vec<f32>),
    Copy(usize),
}

impl Recipe {
    fn build(&self, bases: &[Vec<f32>]) -> Option<Embedding> {
        match self {
            Recipe::Random(v) => Embedding::new(v.clone()).ok(),
            Recipe::Near(i, eps, v) => {
                let base = &bases[i % bases.len()];
                Embedding::new(base.iter().zip(v).map(|(b, n)| b + eps * n).collect()).ok()
            }
            Recipe::Copy(i) => Embedding::new(bases[i % bases.len()].clone()).ok(),
        }
    }
}

fn recipe(dims: usize) -> impl Strategy<Value = Recipe> {
    let values = move || prop::collection::vec(-1.0f32..1.0, dims);
    prop_oneof![
        values().prop_map(Recipe::Random),
        (0usize..4, prop::sample::select(vec![0.0f32, 1e-6, 1e-4, 1e-3, 1e-2]), values())
            .prop_map(|(i, eps, v)| Recipe::Near(i, eps, v)),
        (0usize..4).prop_map(Recipe::Copy),
    ]
}

/// One change to the index: upsert the recipe's vector under the id, or remove the id.
#[derive(Debug, Clone)]
enum Op {
    Upsert(i64, Recipe),
    Remove(i64),
}

#[derive(Debug, Clone)]
enum MinScore {
    None,
    Fixed(f32),
    /// Exactly the score of the brute force's result at this rank (a boundary case).
    AtRank(usize),
}

#[derive(Debug, Clone)]
struct Scenario {
    dims: usize,
    bases: Vec<Vec<f32>>,
    ops: Vec<Op>,
    queries: Vec<(Recipe, usize, MinScore)>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    prop_oneof![1usize..=40, Just(384)].prop_flat_map(|dims| {
        let bases = prop::collection::vec(prop::collection::vec(-1.0f32..1.0, dims), 1..4);
        let op = prop_oneof![
            6 => (0i64..40, recipe(dims)).prop_map(|(id, r)| Op::Upsert(id, r)),
            1 => (0i64..40).prop_map(Op::Remove),
        ];
        let min_score = prop_oneof![
            2 => Just(MinScore::None),
            1 => (-1.0f32..1.0).prop_map(MinScore::Fixed),
            1 => (0usize..12).prop_map(MinScore::AtRank),
        ];
        let query = (recipe(dims), 0usize..10, min_score);
        (Just(dims), bases, prop::collection::vec(op, 0..60), prop::collection::vec(query, 1..6))
            .prop_map(|(dims, bases, ops, queries)| Scenario { dims, bases, ops, queries })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// After any sequence of upserts and removes, `top_k` is exactly the brute force: the
    /// same ids in the same order with bit-identical scores, min_score applied to the
    /// exact score.
    #[test]
    fn top_k_equals_brute_force(s in scenario()) {
        let mut index = VectorIndex::new(s.dims);
        let mut model = BTreeMap::new();
        for op in &s.ops {
            match op {
                Op::Upsert(raw, recipe) => {
                    if let Some(e) = recipe.build(&s.bases) {
                        index.upsert(id(*raw), &e).unwrap();
                        model.insert(id(*raw), e);
                    }
                }
                Op::Remove(raw) => prop_assert_eq!(index.remove(id(*raw)), model.remove(&id(*raw)).is_some()),
            }
        }
        prop_assert_eq!(index.len(), model.len());
        for raw in 0..40 {
            prop_assert_eq!(index.contains(id(raw)), model.contains_key(&id(raw)));
        }
        for (recipe, k, min) in &s.queries {
            let Some(query) = recipe.build(&s.bases) else { continue };
            let min = match min {
                MinScore::None => None,
                MinScore::Fixed(min) => Some(*min),
                MinScore::AtRank(rank) => {
                    brute_force(model.iter().map(|(&id, e)| (id, e)), &query, usize::MAX, None).get(*rank).map(|n| n.score)
                }
            };
            let got = index.top_k(&query, *k, min).unwrap();
            let want = brute_force(model.iter().map(|(&id, e)| (id, e)), &query, *k, min);
            prop_assert_eq!(bits(&got), bits(&want), "k={} min={:?}", k, min);
        }
    }
}

/// The point of the codes: on random 384-d vectors (the hardest case, every score near
/// zero) almost every row is dropped by its bound and only a handful are rescored.
#[test]
fn the_scan_rescores_only_a_few_rows() {
    let mut next = noise(41);
    let mut index = VectorIndex::new(384);
    for i in 0..10_000 {
        index.upsert(id(i), &random_embedding(384, &mut next)).unwrap();
    }
    let table =
        CodeTable { codes: &index.codes, scales: &index.scales, residuals: &index.residuals, stride: index.stride };
    for seed in 0..5 {
        let query = random_embedding(384, &mut noise(1000 + seed));
        let code = QueryCode::new(query.as_slice(), index.stride);
        let rescored = scan::candidates(table, &code, 5, f32::NEG_INFINITY).len();
        assert!((5..=100).contains(&rescored), "query {seed}: {rescored} of 10000 rows rescored");
    }
}
