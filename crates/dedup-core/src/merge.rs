//! Seed 000's merge policy: the first member survives with its text and place, counters are
//! summed, the others are removed.

use crate::{Entry, EntryRef, Error, Group, Playbook, Result};

/// One entry folded into a survivor.
#[derive(Debug, Clone, PartialEq)]
pub struct Absorbed {
    /// Where the entry was.
    pub entry: EntryRef,
    /// Its `name`.
    pub name: String,
    /// Name of the member it was linked to on the way to the survivor (often the
    /// survivor itself).
    pub via: String,
    /// Similarity of that link.
    pub score: f32,
}

/// The merge of one group.
///
/// **Invariants:** `helpful` and `harmful` are the sums over the survivor and every
/// absorbed entry; `absorbed` is in flat playbook order and never contains the survivor.
#[derive(Debug, Clone, PartialEq)]
pub struct MergedGroup {
    /// Where the survivor is; it stays there.
    pub survivor: EntryRef,
    /// The survivor's `name`.
    pub survivor_name: String,
    /// The survivor's new `helpful` counter.
    pub helpful: u64,
    /// The survivor's new `harmful` counter.
    pub harmful: u64,
    /// Entries removed in favour of the survivor.
    pub absorbed: Vec<Absorbed>,
    /// The lowest similarity among the links that formed the group.
    pub weakest_link: f32,
}

/// What a deduplication run will change in a playbook: one [`MergedGroup`] per group of
/// duplicates, in flat playbook order of their survivors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MergePlan {
    /// The merges, ordered by survivor.
    pub groups: Vec<MergedGroup>,
}

/// Sums `(helpful, harmful)` pairs with overflow checks; `None` on overflow.
pub fn merge_counters(counters: impl IntoIterator<Item = (u64, u64)>) -> Option<(u64, u64)> {
    counters.into_iter().try_fold((0u64, 0u64), |(h, x), (dh, dx)| Some((h.checked_add(dh)?, x.checked_add(dx)?)))
}

impl MergePlan {
    /// Builds the plan for `groups`, whose member indices point into `entries` (the flat
    /// list from [`Playbook::entries`] that was embedded).
    ///
    /// Fails on a counter overflow, or when a group names an index outside `entries`.
    pub fn new(entries: &[(EntryRef, Entry)], groups: &[Group]) -> Result<MergePlan> {
        let entry = |i: usize| {
            entries.get(i).ok_or_else(|| Error::InvalidPlaybook {
                path: format!("entries[{i}]"),
                message: format!("group member {i} is out of range ({} entries)", entries.len()),
            })
        };
        let mut planned = Vec::with_capacity(groups.len());
        for group in groups {
            let (survivor_ref, survivor) = entry(group.survivor())?;
            let mut members = Vec::with_capacity(group.members.len());
            for &m in &group.members {
                members.push(entry(m)?);
            }
            let (helpful, harmful) =
                merge_counters(members.iter().map(|(_, e)| (e.helpful, e.harmful))).ok_or_else(|| {
                    let helpful_sum = merge_counters(members.iter().map(|(_, e)| (e.helpful, 0)));
                    Error::CounterOverflow {
                        field: if helpful_sum.is_none() { "helpful" } else { "harmful" },
                        survivor: survivor.name.clone(),
                    }
                })?;
            let mut absorbed = Vec::with_capacity(group.members.len() - 1);
            for (member, via, score) in group.links() {
                let (at, e) = entry(member)?;
                absorbed.push(Absorbed {
                    entry: at.clone(),
                    name: e.name.clone(),
                    via: entry(via)?.1.name.clone(),
                    score,
                });
            }
            planned.push(MergedGroup {
                survivor: survivor_ref.clone(),
                survivor_name: survivor.name.clone(),
                helpful,
                harmful,
                absorbed,
                weakest_link: group.weakest_link,
            });
        }
        Ok(MergePlan { groups: planned })
    }

    /// How many entries the plan removes.
    pub fn absorbed_count(&self) -> usize {
        self.groups.iter().map(|g| g.absorbed.len()).sum()
    }

    /// True when the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Applies the plan: survivors get the summed counters, absorbed entries are removed.
    /// All or nothing: on error the playbook is unchanged.
    pub fn apply(&self, playbook: &mut Playbook) -> Result<()> {
        let updates: Vec<(EntryRef, u64, u64)> =
            self.groups.iter().map(|g| (g.survivor.clone(), g.helpful, g.harmful)).collect();
        let removals: Vec<EntryRef> =
            self.groups.iter().flat_map(|g| g.absorbed.iter().map(|a| a.entry.clone())).collect();
        playbook.apply_merges(&updates, &removals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_with_overflow_check() {
        assert_eq!(merge_counters([(5, 0), (3, 1)]), Some((8, 1)));
        assert_eq!(merge_counters([]), Some((0, 0)));
        assert_eq!(merge_counters([(u64::MAX, 0), (1, 0)]), None);
        assert_eq!(merge_counters([(0, u64::MAX), (0, 1)]), None);
    }
}
