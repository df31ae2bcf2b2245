"""Checks hand-written judge data files (data/judge/raw/*.jsonl): one group per line.

Usage: python3 xtask/judge/check_raw.py FILE [FILE...]
Prints each problem as FILE:LINE: message and a summary; exits 1 on any problem.
"""
import json
import sys

POSITIVE_KINDS = {"anchor", "synonym", "abbreviation", "reorder", "typo", "low_overlap",
                  "register", "converse", "negated_form", "expanded", "periphrasis",
                  "number_form", "filler", "format", "light_edit", "scope_form"}
NEGATIVE_KINDS = {"opposite", "negation", "added_condition", "narrower", "broader",
                  "other_number", "other_entity", "same_topic_other_claim", "swapped_roles",
                  "quantifier", "modality", "tense_aspect", "attitude", "cause", "order", "part"}
DOMAINS = {"coding", "tool_usage", "operations", "security", "trading", "research",
           "user_facts", "preferences", "personal_health", "decisions", "project_context",
           "support", "general_everyday", "general_questions", "general_instructions",
           "general_scenes", "general_news"}


def check(path):
    problems, groups, texts = [], 0, 0
    seen_ids, seen_texts = set(), set()
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            where = f"{path}:{n}"
            if not line.strip():
                continue
            try:
                g = json.loads(line)
            except json.JSONDecodeError as e:
                problems.append(f"{where}: not JSON: {e}")
                continue
            if set(g) - {"group", "domain", "namespace", "register", "members", "negatives"}:
                problems.append(f"{where}: unknown keys {sorted(set(g) - {'group','domain','namespace','register','members','negatives'})}")
            gid = g.get("group")
            if not isinstance(gid, str) or gid in seen_ids:
                problems.append(f"{where}: missing or repeated group id {gid!r}")
            seen_ids.add(gid)
            if g.get("domain") not in DOMAINS:
                problems.append(f"{where}: domain {g.get('domain')!r} not one of {sorted(DOMAINS)}")
            if not isinstance(g.get("namespace"), str) or not g["namespace"]:
                problems.append(f"{where}: missing namespace")
            members, negatives = g.get("members", []), g.get("negatives", [])
            if not (3 <= len(members) <= 5):
                problems.append(f"{where}: {len(members)} members, want 3-5 (anchor + 2-4 paraphrases)")
            if not (2 <= len(negatives) <= 6):
                problems.append(f"{where}: {len(negatives)} negatives, want 2-6")
            if members and members[0].get("kind") != "anchor":
                problems.append(f"{where}: first member must have kind 'anchor'")
            for m in members:
                if m.get("kind") not in POSITIVE_KINDS:
                    problems.append(f"{where}: member kind {m.get('kind')!r} not one of {sorted(POSITIVE_KINDS)}")
            for m in negatives:
                if m.get("kind") not in NEGATIVE_KINDS:
                    problems.append(f"{where}: negative kind {m.get('kind')!r} not one of {sorted(NEGATIVE_KINDS)}")
            for m in members + negatives:
                t = m.get("text")
                if not isinstance(t, str) or len(t.split()) < 2:
                    problems.append(f"{where}: text {t!r} missing or under two words")
                    continue
                if set(m) - {"text", "kind"}:
                    problems.append(f"{where}: unknown keys in {m}")
                key = " ".join(t.lower().split())
                if key in seen_texts:
                    problems.append(f"{where}: text repeated in this file: {t!r}")
                seen_texts.add(key)
                texts += 1
            groups += 1
    return problems, groups, texts


def main():
    bad = 0
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for path in sys.argv[1:]:
        try:
            problems, groups, texts = check(path)
        except OSError as e:
            print(f"{path}: cannot read: {e.strerror}")
            bad += 1
            continue
        for p in problems[:50]:
            print(p)
        print(f"{path}: {groups} groups, {texts} texts, {len(problems)} problems")
        bad += len(problems)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
