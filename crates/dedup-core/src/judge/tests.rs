//! Tests of the judge contract: payload shape and every validation rule.

use proptest::prelude::*;

use super::*;

fn memory(id: i64, status: MemoryStatus) -> JudgeMemory {
    JudgeMemory {
        id,
        status,
        text: format!("lesson {id}"),
        kind: "lesson".into(),
        metadata: serde_json::Map::new(),
        occurrence_count: 1,
    }
}

/// Incremental: 1 and 2 unverified, 10 and 11 verified.
fn incremental() -> JudgeBatch {
    JudgeBatch {
        mode: JudgeMode::Incremental,
        batch_id: "run-1-pass1-batch1".into(),
        rules: JudgeRules::default(),
        memories: vec![
            memory(1, MemoryStatus::Unverified),
            memory(2, MemoryStatus::Unverified),
            memory(10, MemoryStatus::Verified),
            memory(11, MemoryStatus::Verified),
        ],
        candidate_edges: vec![
            CandidateEdge { source_id: 1, target_id: 10, similarity: 0.84 },
            CandidateEdge { source_id: 2, target_id: 11, similarity: 0.61 },
        ],
    }
}

fn bootstrap() -> JudgeBatch {
    JudgeBatch {
        mode: JudgeMode::Bootstrap,
        batch_id: "b".into(),
        rules: JudgeRules::default(),
        memories: (1..=4).map(|id| memory(id, MemoryStatus::Unverified)).collect(),
        candidate_edges: vec![CandidateEdge { source_id: 1, target_id: 2, similarity: 0.9 }],
    }
}

fn group(ids: &[i64]) -> JudgeGroup {
    JudgeGroup { ids: ids.to_vec(), canonical_text: "The rule.".into(), confidence: 0.9, reason: "Same rule.".into() }
}

fn reply(groups: Vec<JudgeGroup>, no_match: &[i64]) -> JudgeResponse {
    JudgeResponse { groups, no_match_ids: no_match.to_vec(), notes: vec![], uncertain: vec![] }
}

fn violations(batch: &JudgeBatch, response: JudgeResponse) -> Vec<Violation> {
    validate_response(batch, response, &ContractLimits::default()).expect_err("must be rejected").violations
}

#[test]
fn payload_has_the_seed_shape() {
    let payload: serde_json::Value = serde_json::from_str(&incremental().to_payload()).unwrap();
    assert_eq!(payload["mode"], "incremental");
    assert_eq!(payload["batch_id"], "run-1-pass1-batch1");
    assert_eq!(payload["rules"]["min_confidence_hint"], 0.8);
    assert_eq!(payload["rules"]["max_groups"], 20);
    assert_eq!(payload["memories"][0]["status"], "unverified");
    assert_eq!(payload["memories"][2]["status"], "verified");
    assert_eq!(payload["memories"][0]["occurrence_count"], 1);
    assert_eq!(payload["memories"][0]["kind"], "lesson");
    assert_eq!(payload["candidate_edges"][0], serde_json::json!({"source_id": 1, "target_id": 10, "similarity": 0.84}));
}

#[test]
fn a_valid_reply_is_returned_in_deterministic_order() {
    let response = reply(vec![group(&[11, 2]), group(&[10, 1])], &[]);
    let valid = validate_response(&incremental(), response, &ContractLimits::default()).unwrap();
    assert_eq!(valid.groups[0].ids, [1, 10]);
    assert_eq!(valid.groups[1].ids, [2, 11]);
    let valid = validate_response(&incremental(), reply(vec![], &[2, 1]), &ContractLimits::default()).unwrap();
    assert_eq!(valid.no_match_ids, [1, 2]);
}

#[test]
fn a_reply_parses_with_optional_fields_missing_and_unknown_fields_ignored() {
    let text =
        r#"{"groups":[{"ids":[1,10],"canonical_text":"x","confidence":0.9,"reason":"r","extra":1}],"summary":"s"}"#;
    let parsed: JudgeResponse = serde_json::from_str(text).unwrap();
    assert!(parsed.no_match_ids.is_empty() && parsed.notes.is_empty());
    assert!(
        serde_json::from_str::<JudgeResponse>(
            r#"{"groups":[{"ids":[1.5,2],"canonical_text":"x","confidence":1,"reason":""}]}"#
        )
        .is_err()
    );
}

#[test]
fn unknown_ids_are_rejected() {
    let v = violations(&incremental(), reply(vec![group(&[1, 99])], &[2]));
    assert!(v.contains(&Violation::UnknownId { id: 99, place: "group 0".into() }), "{v:?}");
    let v = violations(&incremental(), reply(vec![], &[1, 2, 77]));
    assert!(v.iter().any(|x| matches!(x, Violation::UnknownId { id: 77, .. })), "{v:?}");
}

#[test]
fn non_positive_ids_are_rejected() {
    let v = violations(&incremental(), reply(vec![group(&[1, 0])], &[2]));
    assert!(v.contains(&Violation::NonPositiveId { id: 0 }), "{v:?}");
}

#[test]
fn an_id_in_two_groups_is_rejected() {
    let v = violations(&incremental(), reply(vec![group(&[1, 10]), group(&[2, 10])], &[]));
    assert!(v.iter().any(|x| matches!(x, Violation::PlacedTwice { id: 10, .. })), "{v:?}");
}

#[test]
fn an_id_in_a_group_and_no_match_is_rejected() {
    let v = violations(&incremental(), reply(vec![group(&[1, 10])], &[1, 2]));
    assert!(v.iter().any(|x| matches!(x, Violation::PlacedTwice { id: 1, .. })), "{v:?}");
}

#[test]
fn a_missing_unverified_id_is_rejected() {
    let v = violations(&incremental(), reply(vec![group(&[1, 10])], &[]));
    assert_eq!(v, [Violation::Missing { id: 2 }]);
}

#[test]
fn verified_ids_need_not_be_decided_in_incremental_mode() {
    assert!(validate_response(&incremental(), reply(vec![], &[1, 2]), &ContractLimits::default()).is_ok());
}

#[test]
fn a_verified_id_in_no_match_is_rejected_in_incremental_mode() {
    let v = violations(&incremental(), reply(vec![], &[1, 2, 10]));
    assert_eq!(v, [Violation::VerifiedInNoMatch { id: 10 }]);
}

#[test]
fn a_group_without_an_unverified_id_is_rejected_in_incremental_mode() {
    let v = violations(&incremental(), reply(vec![group(&[10, 11])], &[1, 2]));
    assert_eq!(v, [Violation::NoUnverifiedId { group: 0 }]);
}

#[test]
fn bootstrap_mode_needs_every_id_and_allows_any_group() {
    let ok = reply(vec![group(&[1, 2]), group(&[3, 4])], &[]);
    assert!(validate_response(&bootstrap(), ok, &ContractLimits::default()).is_ok());
    let v = violations(&bootstrap(), reply(vec![group(&[1, 2])], &[3]));
    assert_eq!(v, [Violation::Missing { id: 4 }]);
}

#[test]
fn groups_need_two_distinct_ids() {
    let v = violations(&incremental(), reply(vec![group(&[1])], &[2]));
    assert!(v.contains(&Violation::GroupTooSmall { group: 0, size: 1 }), "{v:?}");
    let v = violations(&incremental(), reply(vec![group(&[1, 1])], &[2]));
    assert!(v.contains(&Violation::RepeatedInGroup { group: 0, id: 1 }), "{v:?}");
    assert!(v.contains(&Violation::GroupTooSmall { group: 0, size: 1 }), "{v:?}");
}

#[test]
fn confidence_must_be_in_range_and_above_the_hint() {
    for bad in [1.5, -0.1, f64::NAN, f64::INFINITY] {
        let mut g = group(&[1, 10]);
        g.confidence = bad;
        let v = violations(&incremental(), reply(vec![g], &[2]));
        assert!(matches!(v[..], [Violation::ConfidenceOutOfRange { group: 0, .. }]), "{bad}: {v:?}");
    }
    let mut g = group(&[1, 10]);
    g.confidence = 0.5;
    let v = violations(&incremental(), reply(vec![g], &[2]));
    assert_eq!(v, [Violation::BelowConfidenceHint { group: 0, confidence: 0.5, hint: 0.8 }]);
}

#[test]
fn a_long_reason_is_rejected() {
    let mut g = group(&[1, 10]);
    g.reason = "x".repeat(300);
    let v = violations(&incremental(), reply(vec![g], &[2]));
    assert_eq!(v, [Violation::ReasonTooLong { group: 0, chars: 300, max: 160 }]);
    let mut g = group(&[1, 10]);
    g.reason = "é".repeat(160);
    assert!(validate_response(&incremental(), reply(vec![g], &[2]), &ContractLimits::default()).is_ok());
}

#[test]
fn canonical_text_must_be_non_blank_and_a_long_one_is_not_a_violation() {
    let mut g = group(&[1, 10]);
    g.canonical_text = "  ".into();
    assert_eq!(violations(&incremental(), reply(vec![g], &[2])), [Violation::EmptyCanonicalText { group: 0 }]);
    // Three sentences: the merge keeps a member's text (group_merge), the batch stands.
    let mut g = group(&[1, 10]);
    g.canonical_text = "One. Two. Three.".into();
    assert!(validate_response(&incremental(), reply(vec![g], &[2]), &ContractLimits::default()).is_ok());
}

#[test]
fn too_many_groups_are_rejected() {
    let mut batch = bootstrap();
    batch.rules.max_groups = 1;
    let v = violations(&batch, reply(vec![group(&[1, 2]), group(&[3, 4])], &[]));
    assert_eq!(v, [Violation::TooManyGroups { count: 2, max: 1 }]);
}

#[test]
fn large_notes_are_trimmed_not_rejected() {
    let mut response = reply(vec![], &[1, 2]);
    response.notes = vec!["n".repeat(1000); 40];
    let valid = validate_response(&incremental(), response, &ContractLimits::default()).unwrap();
    assert_eq!(valid.notes.len(), 16);
    assert!(valid.notes.iter().all(|n| n.chars().count() == 300));
    assert!(valid.notes_trimmed);
}

#[test]
fn the_error_message_lists_the_first_violations() {
    let err =
        validate_response(&incremental(), reply(vec![group(&[1, 99])], &[]), &ContractLimits::default()).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("the judge's reply breaks the contract: group 0 names id 99"), "{text}");
    assert!(text.contains("id 2 is in neither a group nor no_match_ids"), "{text}");
}

#[test]
fn the_schema_names_every_required_field() {
    let schema = JudgeResponse::json_schema();
    assert_eq!(schema["required"], serde_json::json!(["groups", "no_match_ids", "notes"]));
    assert_eq!(
        schema["properties"]["groups"]["items"]["required"],
        serde_json::json!(["ids", "canonical_text", "confidence", "reason"])
    );
}

proptest! {
    /// A passing reply places every id to decide exactly once, and only ids of the batch.
    #[test]
    fn a_passing_reply_decides_each_id_once(
        assignment in proptest::collection::vec(0usize..4, 4),
        extra in proptest::option::of(1i64..8),
    ) {
        let batch = bootstrap();
        // Ids with the same slot form a group; slot 0 means no match.
        let mut slots: std::collections::BTreeMap<usize, Vec<i64>> = Default::default();
        for (i, slot) in assignment.iter().enumerate() {
            slots.entry(*slot).or_default().push(i as i64 + 1);
        }
        let mut no_match = slots.remove(&0).unwrap_or_default();
        let mut groups = Vec::new();
        for (_, ids) in slots {
            if ids.len() == 1 { no_match.extend(ids) } else { groups.push(group(&ids)) }
        }
        if let Some(extra) = extra { no_match.push(extra) }
        let result = validate_response(&batch, reply(groups, &no_match), &ContractLimits::default());
        match result {
            Ok(valid) => {
                let mut placed: Vec<i64> = valid.groups.iter().flat_map(|g| g.ids.clone()).chain(valid.no_match_ids).collect();
                placed.sort_unstable();
                prop_assert_eq!(placed, vec![1, 2, 3, 4]);
            }
            Err(err) => prop_assert!(extra.is_some(), "rejected a valid reply: {}", err),
        }
    }
}
