//! Unit tests of the configuration: defaults, environment and file overlays, precedence.

use std::collections::HashMap;

use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|&(k, v)| (k.to_owned(), v.to_owned())).collect();
    move |name| map.get(name).cloned()
}

fn from_env(pairs: &[(&str, &str)]) -> Result<DeduplicationConfig> {
    let mut config = DeduplicationConfig::default();
    config.apply_env(env(pairs))?;
    Ok(config)
}

fn toml(text: &str) -> toml::Table {
    text.parse().unwrap()
}

fn from_toml(text: &str) -> Result<DeduplicationConfig> {
    let mut config = DeduplicationConfig::default();
    config.apply_toml(&toml(text), "memdedup.toml")?;
    Ok(config)
}

#[track_caller]
fn assert_config_error(result: Result<DeduplicationConfig>, want_origin: &str, message_contains: &str) {
    match result {
        Err(Error::Config { origin, message }) => {
            assert_eq!(origin, want_origin, "message: {message}");
            assert!(message.contains(message_contains), "{origin}: {message:?} lacks {message_contains:?}");
        }
        other => panic!("expected a config error at {want_origin}, got {other:?}"),
    }
}

#[test]
fn defaults_are_the_seed_table() {
    let config = DeduplicationConfig::default();
    assert!(config.enabled);
    assert_eq!(
        config.similarity_thresholds,
        BTreeMap::from([("decisions".to_owned(), 0.92), ("patterns".to_owned(), 0.90), ("learnings".to_owned(), 0.88)])
    );
    assert_eq!(config.default_threshold, 0.90);
    assert_eq!(config.recent_window, Duration::from_secs(300));
    assert_eq!(config.cache_capacity, 1000);
    assert_eq!(config.min_semantic_length, 0, "seed 004's 50 characters is an override");
    assert_eq!(config.min_semantic_words, 3);
    assert_eq!(config.redis_url, None);
    config.validate().unwrap();
}

#[test]
fn every_variable_carries_the_prefix() {
    for name in ENV_VARS {
        assert!(name.starts_with(ENV_PREFIX), "{name}");
    }
}

#[test]
fn threshold_for_falls_back_to_the_default() {
    let mut config = DeduplicationConfig::default();
    assert_eq!(config.threshold_for("decisions"), 0.92);
    assert_eq!(config.threshold_for("patterns"), 0.90);
    assert_eq!(config.threshold_for("learnings"), 0.88);
    assert_eq!(config.threshold_for("default"), 0.90);
    config.default_threshold = 0.75;
    config.similarity_thresholds.insert("lessons".into(), 0.5);
    assert_eq!(config.threshold_for("anything-else"), 0.75);
    assert_eq!(config.threshold_for("lessons"), 0.5);
    assert_eq!(config.threshold_for("decisions"), 0.92);
}

#[test]
fn env_overlays_every_variable() {
    let config = from_env(&[
        ("SUBCOG_DEDUP_ENABLED", "false"),
        ("SUBCOG_DEDUP_THRESHOLD_DECISIONS", "0.95"),
        ("SUBCOG_DEDUP_THRESHOLD_PATTERNS", "0.5"),
        ("SUBCOG_DEDUP_THRESHOLD_LEARNINGS", "1"),
        ("SUBCOG_DEDUP_THRESHOLD_DEFAULT", "0"),
        ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "60"),
        ("SUBCOG_DEDUP_CACHE_CAPACITY", "7"),
        ("SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH", "0"),
        ("SUBCOG_DEDUP_REDIS_URL", " redis://127.0.0.1:6379/ "),
    ])
    .unwrap();
    assert_eq!(
        config,
        DeduplicationConfig {
            enabled: false,
            similarity_thresholds: BTreeMap::from([
                ("decisions".to_owned(), 0.95),
                ("patterns".to_owned(), 0.5),
                ("learnings".to_owned(), 1.0),
            ]),
            default_threshold: 0.0,
            recent_window: Duration::from_secs(60),
            cache_capacity: 7,
            min_semantic_length: 0,
            redis_url: Some("redis://127.0.0.1:6379/".into()),
            ..DeduplicationConfig::default()
        }
    );
}

#[test]
fn env_booleans_accept_the_usual_spellings() {
    for (value, want) in [
        ("true", true),
        ("TRUE", true),
        ("1", true),
        ("yes", true),
        ("Yes", true),
        ("on", true),
        ("ON", true),
        ("false", false),
        ("False", false),
        ("0", false),
        ("no", false),
        ("NO", false),
        ("off", false),
        (" Off ", false),
    ] {
        let mut config = DeduplicationConfig { enabled: !want, ..DeduplicationConfig::default() };
        config.apply_env(env(&[("SUBCOG_DEDUP_ENABLED", value)])).unwrap();
        assert_eq!(config.enabled, want, "{value:?}");
    }
}

#[test]
fn env_empty_values_count_as_unset() {
    for value in ["", "  ", "\t"] {
        let pairs: Vec<(&str, &str)> = ENV_VARS.iter().map(|&name| (name, value)).collect();
        assert_eq!(from_env(&pairs).unwrap(), DeduplicationConfig::default(), "{value:?}");
    }
}

#[test]
fn env_unknown_variables_are_ignored() {
    let config = from_env(&[
        ("SUBCOG_DEDUP_THRESHOLD_LESSONS", "0.1"),
        ("SUBCOG_DEDUP_TRESHOLD_DEFAULT", "not even a number"),
        ("SUBCOG_DEDUP_SOMETHING", "x"),
    ])
    .unwrap();
    assert_eq!(config, DeduplicationConfig::default());
}

#[test]
fn env_invalid_values_name_the_variable_and_the_value() {
    let cases = [
        ("SUBCOG_DEDUP_ENABLED", "maybe"),
        ("SUBCOG_DEDUP_ENABLED", "2"),
        ("SUBCOG_DEDUP_THRESHOLD_DECISIONS", "high"),
        ("SUBCOG_DEDUP_THRESHOLD_DECISIONS", "1.5"),
        ("SUBCOG_DEDUP_THRESHOLD_PATTERNS", "-0.1"),
        ("SUBCOG_DEDUP_THRESHOLD_LEARNINGS", "NaN"),
        ("SUBCOG_DEDUP_THRESHOLD_LEARNINGS", "inf"),
        ("SUBCOG_DEDUP_THRESHOLD_DEFAULT", "0,9"),
        ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "0"),
        ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "-5"),
        ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "1.5"),
        ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "5m"),
        ("SUBCOG_DEDUP_CACHE_CAPACITY", "0"),
        ("SUBCOG_DEDUP_CACHE_CAPACITY", "lots"),
        ("SUBCOG_DEDUP_CACHE_CAPACITY", "99999999999999999999999"),
        ("SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH", "-1"),
        ("SUBCOG_DEDUP_MIN_SEMANTIC_LENGTH", "fifty"),
    ];
    for (name, value) in cases {
        assert_config_error(from_env(&[(name, value)]), name, &format!("{value:?}"));
        let err = from_env(&[(name, value)]).unwrap_err();
        assert!(err.to_string().starts_with(&format!("invalid configuration: {name}: ")), "{err}");
        assert!(!err.is_unavailable());
    }
}

#[test]
fn env_error_leaves_the_config_unchanged() {
    let mut config = DeduplicationConfig::default();
    let err = config
        .apply_env(env(&[("SUBCOG_DEDUP_ENABLED", "false"), ("SUBCOG_DEDUP_CACHE_CAPACITY", "none")]))
        .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
    assert_eq!(config, DeduplicationConfig::default());
}

#[test]
fn toml_overlays_every_key() {
    let config = from_toml(
        r#"
        [other]
        anything = "belongs to someone else"

        [dedup]
        enabled = false
        default_threshold = 0.8
        time_window_secs = 120
        cache_capacity = 10
        min_semantic_length = 20
        redis_url = "redis://cache:6379/2"

        [dedup.thresholds]
        decisions = 0.97
        lessons = 0.85
        "#,
    )
    .unwrap();
    assert_eq!(
        config,
        DeduplicationConfig {
            enabled: false,
            similarity_thresholds: BTreeMap::from([
                ("decisions".to_owned(), 0.97),
                ("patterns".to_owned(), 0.90),
                ("learnings".to_owned(), 0.88),
                ("lessons".to_owned(), 0.85),
            ]),
            default_threshold: 0.8,
            recent_window: Duration::from_secs(120),
            cache_capacity: 10,
            min_semantic_length: 20,
            redis_url: Some("redis://cache:6379/2".into()),
            ..DeduplicationConfig::default()
        }
    );
}

#[test]
fn toml_without_a_dedup_table_changes_nothing() {
    assert_eq!(from_toml("").unwrap(), DeduplicationConfig::default());
    assert_eq!(from_toml("[store]\ndb = \"x.sqlite\"\n").unwrap(), DeduplicationConfig::default());
    assert_eq!(from_toml("[dedup]\n").unwrap(), DeduplicationConfig::default());
}

#[test]
fn toml_accepts_integers_where_numbers_are_expected() {
    let config = from_toml("[dedup]\ndefault_threshold = 1\nthresholds = { patterns = 0 }\n").unwrap();
    assert_eq!(config.default_threshold, 1.0);
    assert_eq!(config.threshold_for("patterns"), 0.0);
}

#[test]
fn toml_unknown_key_is_an_error_naming_it() {
    assert_config_error(
        from_toml("[dedup]\ndefault_treshold = 0.9\n"),
        "memdedup.toml: dedup.default_treshold",
        "unknown key (expected one of enabled, default_threshold,",
    );
}

#[test]
fn toml_wrong_types_name_the_key_and_the_expected_type() {
    let cases = [
        ("dedup = 3", "memdedup.toml: dedup", "expected a table, found integer"),
        ("[dedup]\nenabled = \"yes\"", "memdedup.toml: dedup.enabled", "expected a boolean, found string"),
        (
            "[dedup]\ndefault_threshold = \"0.9\"",
            "memdedup.toml: dedup.default_threshold",
            "expected a number, found string",
        ),
        (
            "[dedup]\ntime_window_secs = 1.5",
            "memdedup.toml: dedup.time_window_secs",
            "expected an integer, found float",
        ),
        ("[dedup]\ncache_capacity = true", "memdedup.toml: dedup.cache_capacity", "expected an integer, found boolean"),
        (
            "[dedup]\nmin_semantic_length = [1]",
            "memdedup.toml: dedup.min_semantic_length",
            "expected an integer, found array",
        ),
        ("[dedup]\nredis_url = 6379", "memdedup.toml: dedup.redis_url", "expected a string, found integer"),
        ("[dedup]\nthresholds = 0.9", "memdedup.toml: dedup.thresholds", "expected a table, found float"),
        (
            "[dedup.thresholds]\ndecisions = \"high\"",
            "memdedup.toml: dedup.thresholds.decisions",
            "expected a number, found string",
        ),
    ];
    for (text, origin, message) in cases {
        assert_config_error(from_toml(text), origin, message);
    }
}

#[test]
fn toml_out_of_range_values_name_the_key() {
    let cases = [
        ("[dedup]\ndefault_threshold = 1.5", "memdedup.toml: dedup.default_threshold", "from 0 to 1, got 1.5"),
        ("[dedup]\ndefault_threshold = nan", "memdedup.toml: dedup.default_threshold", "from 0 to 1, got NaN"),
        ("[dedup.thresholds]\ndecisions = -1", "memdedup.toml: dedup.thresholds.decisions", "got -1"),
        ("[dedup]\ntime_window_secs = 0", "memdedup.toml: dedup.time_window_secs", "at least 1, got 0"),
        ("[dedup]\ncache_capacity = -3", "memdedup.toml: dedup.cache_capacity", "at least 1, got -3"),
        ("[dedup]\nmin_semantic_length = -1", "memdedup.toml: dedup.min_semantic_length", "at least 0, got -1"),
        ("[dedup]\nredis_url = \" \"", "memdedup.toml: dedup.redis_url", "must not be empty"),
        ("[dedup.thresholds]\n\"bad name\" = 0.9", "memdedup.toml: dedup.thresholds.bad name", "invalid namespace"),
    ];
    for (text, origin, message) in cases {
        assert_config_error(from_toml(text), origin, message);
    }
}

#[test]
fn toml_error_leaves_the_config_unchanged() {
    let mut config = DeduplicationConfig::default();
    let file = toml("[dedup]\nenabled = false\ncache_capacity = 0\n");
    assert!(config.apply_toml(&file, "memdedup.toml").is_err());
    assert_eq!(config, DeduplicationConfig::default());
}

#[test]
fn precedence_is_default_then_file_then_environment() {
    let file = toml("[dedup]\ndefault_threshold = 0.8\ncache_capacity = 10\n[dedup.thresholds]\ndecisions = 0.97\n");
    let origin = "/etc/memdedup.toml";

    let defaults_only = DeduplicationConfig::load_with(None, env(&[])).unwrap();
    assert_eq!(defaults_only, DeduplicationConfig::default());

    let file_only = DeduplicationConfig::load_with(Some((&file, origin)), env(&[])).unwrap();
    assert_eq!(file_only.default_threshold, 0.8);
    assert_eq!(file_only.cache_capacity, 10);
    assert_eq!(file_only.threshold_for("decisions"), 0.97);
    assert_eq!(file_only.threshold_for("learnings"), 0.88);
    assert_eq!(file_only.recent_window, Duration::from_secs(300));

    let both = DeduplicationConfig::load_with(
        Some((&file, origin)),
        env(&[
            ("SUBCOG_DEDUP_THRESHOLD_DECISIONS", "0.93"),
            ("SUBCOG_DEDUP_CACHE_CAPACITY", ""),
            ("SUBCOG_DEDUP_TIME_WINDOW_SECS", "30"),
        ]),
    )
    .unwrap();
    assert_eq!(both.threshold_for("decisions"), 0.93, "environment beats the file");
    assert_eq!(both.cache_capacity, 10, "an empty variable leaves the file's value");
    assert_eq!(both.default_threshold, 0.8, "the file beats the default");
    assert_eq!(both.recent_window, Duration::from_secs(30), "environment beats the default");

    let bad_file = toml("[dedup]\ncache_capacity = 0\n");
    assert_config_error(
        DeduplicationConfig::load_with(Some((&bad_file, origin)), env(&[("SUBCOG_DEDUP_CACHE_CAPACITY", "5")])),
        "/etc/memdedup.toml: dedup.cache_capacity",
        "at least 1",
    );
}

#[test]
fn load_reads_the_process_environment() {
    // Only checks that `load` runs against the real environment; what it reads is covered
    // above through `load_with`, without mutating process-wide state.
    let expected = DeduplicationConfig::load_with(None, |name| std::env::var(name).ok());
    match (DeduplicationConfig::load(None), expected) {
        (Ok(got), Ok(want)) => assert_eq!(got, want),
        (Err(got), Err(want)) => assert_eq!(got.to_string(), want.to_string()),
        (got, want) => panic!("load: {got:?}, load_with: {want:?}"),
    }
}

#[test]
fn validate_rejects_broken_invariants() {
    let ok = DeduplicationConfig::default();
    let cases: [(DeduplicationConfig, &str); 7] = [
        (DeduplicationConfig { default_threshold: f32::NAN, ..ok.clone() }, "default_threshold"),
        (DeduplicationConfig { default_threshold: 1.01, ..ok.clone() }, "default_threshold"),
        (
            DeduplicationConfig {
                similarity_thresholds: BTreeMap::from([("decisions".to_owned(), -0.5)]),
                ..ok.clone()
            },
            "similarity_thresholds.decisions",
        ),
        (
            DeduplicationConfig { similarity_thresholds: BTreeMap::from([("a/b".to_owned(), 0.5)]), ..ok.clone() },
            "similarity_thresholds.a/b",
        ),
        (DeduplicationConfig { cache_capacity: 0, ..ok.clone() }, "cache_capacity"),
        (DeduplicationConfig { recent_window: Duration::from_millis(999), ..ok.clone() }, "recent_window"),
        (DeduplicationConfig { redis_url: Some(String::new()), ..ok.clone() }, "redis_url"),
    ];
    for (config, origin) in cases {
        match config.validate() {
            Err(Error::Config { origin: got, .. }) => assert_eq!(got, origin),
            other => panic!("{config:?}: expected a config error at {origin}, got {other:?}"),
        }
    }
    let edges = DeduplicationConfig {
        default_threshold: 0.0,
        similarity_thresholds: BTreeMap::from([("decisions".to_owned(), 1.0)]),
        recent_window: Duration::from_secs(1),
        cache_capacity: 1,
        min_semantic_length: 0,
        ..ok
    };
    edges.validate().unwrap();
}

#[test]
fn debug_masks_the_redis_password() {
    let config =
        DeduplicationConfig { redis_url: Some("redis://user:s3cret@cache:6379/0".into()), ..Default::default() };
    let debug = format!("{config:?}");
    assert!(debug.contains("redis://user:***@cache:6379/0"), "{debug}");
    assert!(!debug.contains("s3cret"), "{debug}");
}

#[test]
fn redact_url_hides_only_the_password() {
    assert_eq!(redact_url("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    assert_eq!(redact_url("redis://:pw@host:6379/1"), "redis://:***@host:6379/1");
    assert_eq!(redact_url("rediss://me:p@ss@host/0"), "rediss://me:***@host/0");
    assert_eq!(redact_url("redis://token@host"), "redis://***@host");
    assert_eq!(redact_url("redis://host/0?x=a@b"), "redis://host/0?x=a@b");
    assert_eq!(redact_url("not a url"), "not a url");
}

#[test]
fn judge_comes_from_the_file_the_environment_and_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let origin = dir.path().join("memdedup.toml").display().to_string();
    std::fs::write(dir.path().join("judge.json"), r#"{"duplicate_floor": 0.7, "related_floor": 0.5, "vetoes": []}"#)
        .unwrap();
    let table = |text: &str| -> toml::Table { text.parse().unwrap() };
    let no_env = |_: &str| None;

    let default = DeduplicationConfig::load_with(None, no_env).unwrap();
    assert_eq!(default.pair_judge, PairJudgeChoice::Cosine);

    let file = table("[dedup]\njudge = \"local\"\njudge_params = \"judge.json\"\n");
    let local = DeduplicationConfig::load_with(Some((&file, &origin)), no_env).unwrap();
    assert_eq!(local.pair_judge.name(), "local");
    assert_eq!(local.pair_judge.floor(0.9), 0.7, "the file's parameters, relative to the config file");
    assert_eq!(local.judge_params, Some(dir.path().join("judge.json")));

    // Parameters without `judge = "local"` wait for the environment or a flag.
    let params_only = table("[dedup]\njudge_params = \"judge.json\"\n");
    let env = |name: &str| (name == PAIR_JUDGE_ENV_VAR).then(|| " Local ".to_owned());
    let config = DeduplicationConfig::load_with(Some((&params_only, &origin)), no_env).unwrap();
    assert_eq!(config.pair_judge, PairJudgeChoice::Cosine);
    let from_env = DeduplicationConfig::load_with(Some((&params_only, &origin)), env).unwrap();
    assert_eq!(from_env.pair_judge.floor(0.9), 0.7);

    let mut flagged = config.clone();
    flagged.apply_judge(Some("local"), "--judge", None, "--judge-params").unwrap();
    assert_eq!(flagged.pair_judge.floor(0.9), 0.7);
    flagged.apply_judge(Some("cosine"), "--judge", None, "--judge-params").unwrap();
    assert_eq!(flagged.pair_judge, PairJudgeChoice::Cosine);
    let err = flagged.apply_judge(None, "--judge", Some(Path::new("judge.json")), "--judge-params").unwrap_err();
    assert!(err.to_string().contains("--judge-params: is for the local judge"), "{err}");
    assert_eq!(flagged.pair_judge, PairJudgeChoice::Cosine, "unchanged on error");

    for (text, expected) in [
        ("[dedup]\njudge = \"gpt\"\n", "dedup.judge: expected \"learned\", \"cosine\" or \"local\", got \"gpt\""),
        ("[dedup]\njudge = 1\n", "dedup.judge: expected a string, found integer"),
        ("[dedup]\njudge_params = \"nope.json\"\n", "dedup.judge_params: cannot read "),
        ("[dedup]\njudge_params = \" \"\n", "dedup.judge_params: must not be empty"),
    ] {
        let err = DeduplicationConfig::load_with(Some((&table(text), &origin)), no_env).unwrap_err().to_string();
        assert!(err.contains(&origin) && err.contains(expected), "{text}: {err}");
    }
    let env = |name: &str| (name == PAIR_JUDGE_ENV_VAR).then(|| "gpt".to_owned());
    let err = DeduplicationConfig::load_with(None, env).unwrap_err().to_string();
    assert!(err.contains("MEMDEDUP_DEDUP_JUDGE: expected"), "{err}");
}
