//! Tests for grouping from confirmed links.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;

use proptest::prelude::*;

use super::*;

fn edge(a: usize, b: usize, score: f32) -> Edge {
    Edge { a, b, score }
}

/// A judge that confirms exactly `pairs` (each `(a, b, score)` with `a < b`) and says why
/// it refuses any other pair.
fn judge_of(pairs: &[(usize, usize, f32)]) -> impl Fn(usize, usize) -> Result<f32, String> + '_ {
    move |i, j| {
        pairs
            .iter()
            .find(|&&(a, b, _)| (a, b) == (i, j))
            .map(|&(_, _, score)| score)
            .ok_or_else(|| format!("{i} and {j} are different lessons"))
    }
}

fn never_asked(i: usize, j: usize) -> Result<f32, String> {
    panic!("the judge was asked about ({i}, {j})")
}

fn members(grouping: &GuardedGrouping) -> Vec<Vec<usize>> {
    grouping.groups.iter().map(|g| g.members.clone()).collect()
}

/// The hub h = 0 is confirmed with x = 1 and y = 2; x and y are no duplicates.
fn hub_first() -> Vec<Edge> {
    vec![edge(0, 1, 0.93), edge(0, 2, 0.91)]
}

/// The same star with x = 0 first in input order, then the hub h = 1, then y = 2.
fn spoke_first() -> Vec<Edge> {
    vec![edge(0, 1, 0.93), edge(1, 2, 0.91)]
}

#[test]
fn hub_single_groups_the_hub_with_both_spokes() {
    let out = group_confirmed(3, &hub_first(), Linkage::Single, never_asked).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1, 2]]);
    assert_eq!(out.groups[0].edges, hub_first());
    assert_eq!(out.groups[0].weakest_link, 0.91);
    assert!(out.refused.is_empty());
}

#[test]
fn hub_survivor_first_keeps_both_spokes_confirmed_against_it() {
    let out = group_confirmed(3, &hub_first(), Linkage::Survivor, never_asked).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1, 2]]);
    assert_eq!(out.groups[0].edges, hub_first());
    assert!(out.refused.is_empty());
}

#[test]
fn hub_survivor_spoke_first_refuses_the_other_spoke() {
    let asked = RefCell::new(Vec::new());
    let judge = |i, j| {
        asked.borrow_mut().push((i, j));
        judge_of(&[])(i, j)
    };
    let out = group_confirmed(3, &spoke_first(), Linkage::Survivor, judge).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1]]);
    assert_eq!(out.groups[0].edges, vec![edge(0, 1, 0.93)]);
    assert_eq!(
        out.refused,
        vec![RefusedLink { member: 2, other: 0, survivor: 0, reason: "0 and 2 are different lessons".into() }]
    );
    assert_eq!(asked.into_inner(), vec![(0, 2)], "the link (0, 1) needs no question");
}

#[test]
fn hub_complete_refuses_the_spoke_that_is_no_duplicate_of_the_other() {
    let out = group_confirmed(3, &hub_first(), Linkage::Complete, judge_of(&[])).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1]]);
    assert_eq!(
        out.refused,
        vec![RefusedLink { member: 2, other: 1, survivor: 0, reason: "1 and 2 are different lessons".into() }]
    );
}

#[test]
fn chain_single_joins_ends_that_are_no_duplicates() {
    let chain = [edge(0, 1, 0.9), edge(1, 2, 0.88)];
    let out = group_confirmed(3, &chain, Linkage::Single, never_asked).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1, 2]]);
    assert_eq!(out.groups[0].weakest_link, 0.88);
}

#[test]
fn chain_survivor_and_complete_keep_the_far_end_out() {
    let chain = [edge(0, 1, 0.9), edge(1, 2, 0.88)];
    for linkage in [Linkage::Survivor, Linkage::Complete] {
        let out = group_confirmed(3, &chain, linkage, judge_of(&[])).unwrap();
        assert_eq!(members(&out), vec![vec![0, 1]], "{linkage:?}");
        assert_eq!(
            out.refused,
            vec![RefusedLink { member: 2, other: 0, survivor: 0, reason: "0 and 2 are different lessons".into() }],
            "{linkage:?}"
        );
    }
}

#[test]
fn chain_survivor_takes_the_far_end_when_the_judge_confirms_it() {
    let chain = [edge(0, 1, 0.9), edge(1, 2, 0.88)];
    let out = group_confirmed(3, &chain, Linkage::Survivor, judge_of(&[(0, 2, 0.86)])).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1, 2]]);
    // A star around the survivor, with the judge's score where there is no link.
    assert_eq!(out.groups[0].edges, vec![edge(0, 1, 0.9), edge(0, 2, 0.86)]);
    assert_eq!(out.groups[0].weakest_link, 0.86);
    assert_eq!(out.groups[0].links(), vec![(1, 0, 0.9), (2, 0, 0.86)]);
}

#[test]
fn survivor_refused_members_survive_a_group_of_their_own() {
    // x = 0, y = 1, z = 2 all hang on the hub h = 3; only y and z are also duplicates.
    let star = [edge(0, 3, 0.95), edge(1, 3, 0.9), edge(2, 3, 0.9)];
    let out = group_confirmed(4, &star, Linkage::Survivor, judge_of(&[(1, 2, 0.97)])).unwrap();
    assert_eq!(members(&out), vec![vec![0, 3], vec![1, 2]]);
    assert_eq!(out.groups[1].edges, vec![edge(1, 2, 0.97)]);
    let refused: Vec<(usize, usize)> = out.refused.iter().map(|r| (r.member, r.survivor)).collect();
    assert_eq!(refused, vec![(1, 0), (2, 0)]);
}

#[test]
fn complete_edges_are_the_maximum_spanning_tree_of_all_pairs() {
    let links = [edge(0, 1, 0.9), edge(1, 2, 0.95)];
    let out = group_confirmed(3, &links, Linkage::Complete, judge_of(&[(0, 2, 0.97)])).unwrap();
    assert_eq!(members(&out), vec![vec![0, 1, 2]]);
    assert_eq!(out.groups[0].edges, vec![edge(0, 2, 0.97), edge(1, 2, 0.95)]);
    assert_eq!(out.groups[0].weakest_link, 0.95);
}

#[test]
fn a_pair_listed_twice_counts_with_its_higher_score() {
    let links = [edge(0, 1, 0.8), edge(0, 1, 0.9)];
    for linkage in [Linkage::Single, Linkage::Survivor, Linkage::Complete] {
        let out = group_confirmed(2, &links, linkage, never_asked).unwrap();
        assert_eq!(out.groups[0].edges, vec![edge(0, 1, 0.9)], "{linkage:?}");
    }
}

#[test]
fn no_links_give_no_groups() {
    for linkage in [Linkage::Single, Linkage::Survivor, Linkage::Complete] {
        let out = group_confirmed(5, &[], linkage, never_asked).unwrap();
        assert_eq!(out, GuardedGrouping { groups: Vec::new(), refused: Vec::new() });
    }
}

#[test]
fn malformed_links_are_rejected() {
    let cases = [
        (edge(1, 0, 0.9), "the first index must be below the second"),
        (edge(1, 1, 0.9), "the first index must be below the second"),
        (edge(0, 3, 0.9), "index out of range"),
        (edge(0, 1, f32::NAN), "score is not finite"),
        (edge(0, 1, f32::INFINITY), "score is not finite"),
    ];
    for (bad, problem) in cases {
        let links = [edge(0, 2, 0.9), bad];
        let err = group_confirmed(3, &links, Linkage::Single, never_asked).unwrap_err();
        assert_eq!(err, Error::InvalidLink { a: bad.a, b: bad.b, n: 3, problem });
    }
    let err = group_confirmed(3, &[edge(0, 3, 0.9)], Linkage::Single, never_asked).unwrap_err();
    assert_eq!(err.to_string(), "invalid link (0, 3) among 3 items: index out of range");
}

#[test]
fn a_judge_score_that_is_not_finite_is_rejected() {
    let chain = [edge(0, 1, 0.9), edge(1, 2, 0.88)];
    let err = group_confirmed(3, &chain, Linkage::Survivor, |_, _| Ok(f32::NAN)).unwrap_err();
    assert_eq!(err, Error::InvalidLink { a: 0, b: 2, n: 3, problem: "the judge's score is not finite" });
}

/// `n` items, a judge's verdict on every pair and the links: a subset of the confirmed
/// pairs, so links and judge agree.
#[derive(Debug, Clone)]
struct Case {
    n: usize,
    /// `score[a][b]` for `a < b`: `Some` when the judge confirms the pair.
    score: Vec<Vec<Option<f32>>>,
    links: Vec<Edge>,
}

impl Case {
    fn confirmed(&self, a: usize, b: usize) -> bool {
        let (a, b) = (a.min(b), a.max(b));
        self.score[a][b].is_some()
    }

    fn check(&self, i: usize, j: usize) -> Result<f32, String> {
        assert!(i < j, "check({i}, {j}) out of order");
        self.score[i][j].ok_or_else(|| format!("{i} and {j} differ"))
    }

    fn run(&self, links: &[Edge], linkage: Linkage) -> GuardedGrouping {
        group_confirmed(self.n, links, linkage, |i, j| self.check(i, j)).unwrap()
    }
}

fn arb_case() -> impl Strategy<Value = Case> {
    (2usize..14)
        .prop_flat_map(|n| {
            let pairs = n * (n - 1) / 2;
            let verdicts = proptest::collection::vec((0u8..3, 0.5f32..1.0, any::<bool>()), pairs);
            (Just(n), verdicts)
        })
        .prop_map(|(n, verdicts)| {
            let mut score = vec![vec![None; n]; n];
            let mut links = Vec::new();
            let pairs = (0..n).flat_map(|a| (a + 1..n).map(move |b| (a, b)));
            for ((a, b), (kind, s, linked)) in pairs.zip(verdicts) {
                // Two pairs in three are duplicates, half of those are links.
                if kind > 0 {
                    score[a][b] = Some(s);
                    if linked {
                        links.push(edge(a, b, s));
                    }
                }
            }
            Case { n, score, links }
        })
}

/// `v` in an order drawn from `seed` (Fisher–Yates over a linear congruential generator).
fn shuffled(v: &[Edge], seed: u64) -> Vec<Edge> {
    let mut v = v.to_vec();
    let mut state = seed;
    for i in (1..v.len()).rev() {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.swap(i, (state >> 33) as usize % (i + 1));
    }
    v
}

/// The invariants of [`Group`] and of a guarded grouping that hold in every mode.
fn assert_well_formed(case: &Case, out: &GuardedGrouping, single: &GuardedGrouping) {
    let mut seen = HashSet::new();
    for g in &out.groups {
        assert!(g.members.len() >= 2);
        assert!(g.members.windows(2).all(|w| w[0] < w[1]), "members in input order");
        assert!(g.members.iter().all(|&m| seen.insert(m)), "groups are disjoint");
        assert!(
            single.groups.iter().any(|c| g.members.iter().all(|m| c.members.contains(m))),
            "{:?} lies inside one component",
            g.members
        );
        assert_eq!(g.edges.len(), g.members.len() - 1);
        assert!(g.edges.windows(2).all(|w| w[0].score >= w[1].score), "strongest first");
        assert!(g.edges.iter().all(|e| e.a < e.b && case.confirmed(e.a, e.b)), "edges are confirmed pairs");
        assert_eq!(g.weakest_link, g.edges.last().unwrap().score);
        assert_eq!(g.links().len(), g.members.len() - 1, "edges span the group");
    }
    assert!(out.groups.windows(2).all(|w| w[0].survivor() < w[1].survivor()));
    for r in &out.refused {
        assert!(r.survivor <= r.other && r.other < r.member);
        assert!(!case.confirmed(r.other, r.member), "{r:?} was refused by the judge");
        assert!(single.groups.iter().any(|c| c.members.contains(&r.member) && c.members.contains(&r.survivor)));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn survivor_groups_are_confirmed_against_their_survivor(case in arb_case()) {
        let single = case.run(&case.links, Linkage::Single);
        let out = case.run(&case.links, Linkage::Survivor);
        assert_well_formed(&case, &out, &single);
        for g in &out.groups {
            for &m in &g.members[1..] {
                prop_assert!(case.confirmed(g.survivor(), m), "{m} against {}", g.survivor());
            }
            prop_assert!(g.edges.iter().all(|e| e.a == g.survivor()), "a star around the survivor");
        }
    }

    #[test]
    fn complete_groups_are_confirmed_pairwise(case in arb_case()) {
        let single = case.run(&case.links, Linkage::Single);
        let out = case.run(&case.links, Linkage::Complete);
        assert_well_formed(&case, &out, &single);
        for g in &out.groups {
            for (k, &a) in g.members.iter().enumerate() {
                for &b in &g.members[k + 1..] {
                    prop_assert!(case.confirmed(a, b), "{a} and {b}");
                }
            }
        }
    }

    #[test]
    fn single_groups_are_the_components_of_the_links(case in arb_case()) {
        let single = case.run(&case.links, Linkage::Single);
        assert_well_formed(&case, &single, &single);
        prop_assert!(single.refused.is_empty());
        let mut linked: HashSet<usize> = case.links.iter().flat_map(|e| [e.a, e.b]).collect();
        for g in &single.groups {
            for m in &g.members {
                prop_assert!(linked.remove(m));
            }
        }
        prop_assert!(linked.is_empty(), "every linked item is in a group");
    }

    #[test]
    fn result_does_not_depend_on_link_order(case in arb_case(), seed in any::<u64>()) {
        let links = shuffled(&case.links, seed);
        for linkage in [Linkage::Single, Linkage::Survivor, Linkage::Complete] {
            prop_assert_eq!(case.run(&links, linkage), case.run(&case.links, linkage), "{:?}", linkage);
        }
    }

    #[test]
    fn a_judge_that_confirms_everything_gives_the_single_groups(case in arb_case()) {
        let single = members(&case.run(&case.links, Linkage::Single));
        for linkage in [Linkage::Survivor, Linkage::Complete] {
            let out = group_confirmed(case.n, &case.links, linkage, |_, _| Ok(0.5)).unwrap();
            prop_assert_eq!(&members(&out), &single, "{:?}", linkage);
            prop_assert!(out.refused.is_empty());
        }
    }

    #[test]
    fn the_judge_is_asked_each_open_pair_at_most_once(case in arb_case()) {
        for linkage in [Linkage::Survivor, Linkage::Complete] {
            let asked = RefCell::new(HashSet::new());
            let calls = Cell::new(0usize);
            let judge = |i, j| {
                calls.set(calls.get() + 1);
                assert!(asked.borrow_mut().insert((i, j)), "({i}, {j}) asked twice");
                assert!(!case.links.iter().any(|e| (e.a, e.b) == (i, j)), "({i}, {j}) is a link");
                case.check(i, j)
            };
            group_confirmed(case.n, &case.links, linkage, judge).unwrap();
            prop_assert!(calls.get() <= case.n * case.n / 2, "{:?}: {} calls", linkage, calls.get());
        }
    }
}
