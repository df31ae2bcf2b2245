//! Grouping from links a pair judge confirmed, guarded against hubs.
//!
//! Connected components chain: when a hub `h` is a duplicate of `x` and of `y`, the
//! component `{h, x, y}` merges `x` and `y` even when they are no duplicates of each other.
//! [`group_confirmed`] starts from those components and, in [`Linkage::Survivor`] and
//! [`Linkage::Complete`] mode, asks the judge about the pairs the links leave open, splits
//! the component where it says no, and reports every link it refused.

use std::collections::HashMap;

use super::{Edge, Group, RawEdge, assemble_groups, kruskal};
use crate::{Error, Result};

/// How a group may be joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    /// Connected components of the confirmed links (a chain a–b–c makes one group).
    Single,
    /// Every member must be confirmed a duplicate of the group's survivor itself.
    Survivor,
    /// Every pair of members must be confirmed duplicates (complete linkage).
    Complete,
}

/// A link the guard refused: `member` was connected to the group of `survivor` through
/// confirmed links, but the judge did not confirm `member` against `other`.
///
/// **Invariants:** `other < member` and `survivor <= other`, all in the same component of
/// the confirmed links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedLink {
    /// The item that was kept out of the group.
    pub member: usize,
    /// The member of the group it was checked against and failed: the survivor in
    /// [`Linkage::Survivor`] mode, the first member that failed in [`Linkage::Complete`]
    /// mode.
    pub other: usize,
    /// The survivor of the group it was kept out of.
    pub survivor: usize,
    /// The judge's reason for not confirming the pair.
    pub reason: String,
}

/// What [`group_confirmed`] decided.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardedGrouping {
    /// Groups of two or more, disjoint, ordered by survivor (first member). Each lies inside
    /// one connected component of the confirmed links.
    pub groups: Vec<Group>,
    /// Every refusal of a member linked into the group that refused it, in the order the
    /// guard met them: component by component (by first member), then in input order
    /// within a component. A member may be refused by one
    /// group and still join or survive a later one.
    pub refused: Vec<RefusedLink>,
}

/// Groups `n` items from `links`, the pairs a judge confirmed as duplicates, joining groups
/// as `linkage` allows.
///
/// Each link's `score` is its cosine or the judge's score; a pair listed twice counts with
/// its higher score. `check(i, j)` asks the judge about a pair that is not among `links`
/// and returns `Ok(score)` when it confirms a duplicate (the score of their edge), or
/// `Err(reason)` when not. It is always called with `i < j`, never for a pair among
/// `links` (those count as confirmed), at most once per pair, and only in
/// [`Linkage::Survivor`] and [`Linkage::Complete`] mode: at most `k (k - 1) / 2` times for
/// a component of `k` items.
///
/// Components are first found as in [`group_by_similarity`](super::group_by_similarity):
/// a maximum spanning forest of `links` under a total order, so the result depends only on
/// the inputs, not on the order of `links`. Then, per component, members in input order:
///
/// - [`Linkage::Single`]: the component is the group. `edges` is the maximum spanning tree
///   of its links, as for similarity groups.
/// - [`Linkage::Survivor`]: the first member is the survivor; the group is the survivor
///   plus every member confirmed against it, and every other member is refused (`other` is
///   the survivor; reported when it has a link into the group). The refused members are grouped the same way among themselves, until
///   fewer than two remain. `edges` is the star `(survivor, member, score)` for every other
///   member, so [`Group::links`] names the survivor as each member's `via`.
/// - [`Linkage::Complete`]: each member joins the first group all of whose members it is
///   confirmed against, checked in input order; it is refused by every group where one
///   fails (`other` is the first that failed; reported when it has a link into that
///   group, so a report stays proportional to the links), and starts a group of its own when none
///   takes it. `edges` is the maximum spanning tree of the group's pairs, all of which are
///   confirmed.
///
/// In every mode each edge is a confirmed pair, `edges` spans the group and is strongest
/// first, and `weakest_link` is its lowest score.
///
/// Fails when a link does not have `a < b < n`, when a score is not finite, or when an
/// index does not fit in 32 bits.
pub fn group_confirmed(
    n: usize,
    links: &[Edge],
    linkage: Linkage,
    check: impl FnMut(usize, usize) -> Result<f32, String>,
) -> Result<GuardedGrouping> {
    let raw = links.iter().map(|e| raw_edge(n, e)).collect::<Result<Vec<_>>>()?;
    let components = assemble_groups(n, kruskal(raw));
    let mut linked: HashMap<(usize, usize), f32> = HashMap::with_capacity(links.len());
    for e in links {
        let score = linked.entry((e.a, e.b)).or_insert(e.score);
        *score = score.max(e.score);
    }
    let mut judge = Judge { n, linked, check };
    let mut out = GuardedGrouping { groups: Vec::new(), refused: Vec::new() };
    for component in components {
        match linkage {
            Linkage::Single => out.groups.push(component),
            Linkage::Survivor => survivor_linkage(&component.members, &mut judge, &mut out)?,
            Linkage::Complete => complete_linkage(&component.members, &mut judge, &mut out)?,
        }
    }
    out.groups.sort_by_key(Group::survivor);
    Ok(out)
}

/// Checks a link and converts it to the compact form of the spanning-forest code.
fn raw_edge(n: usize, e: &Edge) -> Result<RawEdge> {
    let invalid = |problem| Error::InvalidLink { a: e.a, b: e.b, n, problem };
    if e.a >= e.b {
        return Err(invalid("the first index must be below the second"));
    }
    if e.b >= n {
        return Err(invalid("index out of range"));
    }
    if !e.score.is_finite() {
        return Err(invalid("score is not finite"));
    }
    let b = u32::try_from(e.b).map_err(|_| invalid("index does not fit in 32 bits"))?;
    Ok(RawEdge { score: e.score, a: e.a as u32, b })
}

/// The confirmed links plus the judge for every other pair.
struct Judge<F> {
    n: usize,
    linked: HashMap<(usize, usize), f32>,
    check: F,
}

impl<F: FnMut(usize, usize) -> Result<f32, String>> Judge<F> {
    /// Whether `i < j` are confirmed duplicates: the outer error is unusable input, the
    /// inner result the verdict (their score, or the judge's reason for refusing).
    fn confirm(&mut self, i: usize, j: usize) -> Result<Result<f32, String>> {
        if let Some(&score) = self.linked.get(&(i, j)) {
            return Ok(Ok(score));
        }
        match (self.check)(i, j) {
            Ok(score) if !score.is_finite() => {
                Err(Error::InvalidLink { a: i, b: j, n: self.n, problem: "the judge's score is not finite" })
            }
            verdict => Ok(verdict),
        }
    }

    /// Whether `m` has a link to one of `members`: a refusal there is a link the guard
    /// refused, worth reporting; elsewhere `m` was never headed for that group.
    fn linked_to_any(&self, m: usize, members: &[usize]) -> bool {
        members.iter().any(|&x| self.linked.contains_key(&(x.min(m), x.max(m))))
    }
}

/// [`Linkage::Survivor`] over one component's members, in input order.
fn survivor_linkage<F: FnMut(usize, usize) -> Result<f32, String>>(
    component: &[usize],
    judge: &mut Judge<F>,
    out: &mut GuardedGrouping,
) -> Result<()> {
    let mut remaining = component.to_vec();
    while remaining.len() >= 2 {
        let survivor = remaining[0];
        let mut members = vec![survivor];
        let mut edges = Vec::new();
        let mut refused = Vec::new();
        for &m in &remaining[1..] {
            match judge.confirm(survivor, m)? {
                Ok(score) => {
                    members.push(m);
                    edges.push(Edge { a: survivor, b: m, score });
                }
                Err(reason) => refused.push((m, reason)),
            }
        }
        for (m, reason) in &refused {
            if judge.linked_to_any(*m, &members) {
                out.refused.push(RefusedLink { member: *m, other: survivor, survivor, reason: reason.clone() });
            }
        }
        let refused: Vec<usize> = refused.into_iter().map(|(m, _)| m).collect();
        if members.len() >= 2 {
            out.groups.push(Group::from_tree(members, edges));
        }
        remaining = refused;
    }
    Ok(())
}

/// A group being built in [`Linkage::Complete`] mode, with the scores of all its pairs.
struct Clique {
    members: Vec<usize>,
    pairs: Vec<Edge>,
}

/// [`Linkage::Complete`] over one component's members, in input order.
fn complete_linkage<F: FnMut(usize, usize) -> Result<f32, String>>(
    component: &[usize],
    judge: &mut Judge<F>,
    out: &mut GuardedGrouping,
) -> Result<()> {
    let mut cliques: Vec<Clique> = Vec::new();
    'member: for &m in component {
        for clique in &mut cliques {
            let mut pairs = Vec::with_capacity(clique.members.len());
            let mut failed = None;
            for &x in &clique.members {
                match judge.confirm(x, m)? {
                    Ok(score) => pairs.push(Edge { a: x, b: m, score }),
                    Err(reason) => {
                        failed = Some((x, reason));
                        break;
                    }
                }
            }
            match failed {
                None => {
                    clique.members.push(m);
                    clique.pairs.extend(pairs);
                    continue 'member;
                }
                Some((other, reason)) => {
                    if judge.linked_to_any(m, &clique.members) {
                        out.refused.push(RefusedLink { member: m, other, survivor: clique.members[0], reason });
                    }
                }
            }
        }
        cliques.push(Clique { members: vec![m], pairs: Vec::new() });
    }
    for clique in cliques.into_iter().filter(|c| c.members.len() >= 2) {
        // Indices come from validated links, so they fit in 32 bits.
        let raw = clique.pairs.iter().map(|e| RawEdge { score: e.score, a: e.a as u32, b: e.b as u32 }).collect();
        let tree = kruskal(raw).into_iter().map(|e| Edge { a: e.a as usize, b: e.b as usize, score: e.score });
        out.groups.push(Group::from_tree(clique.members, tree.collect()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
