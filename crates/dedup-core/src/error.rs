//! The crate's one error type.

/// Everything that can go wrong in `dedup-core`: always a problem with the input.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// A vector was empty.
    #[error("invalid embedding: vector is empty")]
    EmptyVector,
    /// A vector held a NaN or infinite component.
    #[error("invalid embedding: component {index} is {value} (must be finite)")]
    NonFiniteComponent {
        /// Index of the first offending component.
        index: usize,
        /// The offending value.
        value: f32,
    },
    /// A vector had zero length, so it has no direction.
    #[error("invalid embedding: vector has zero norm")]
    ZeroVector,
    /// Two embeddings that must be compared have different dimensions.
    #[error("dimension mismatch: expected {expected} dims, got {actual}")]
    DimensionMismatch {
        /// Dimensions of the first vector (or the expected count).
        expected: usize,
        /// Dimensions of the other vector.
        actual: usize,
    },
    /// Matryoshka truncation to zero or more dimensions than the vector has.
    #[error("cannot truncate a {dims}-dim embedding to {requested} dims")]
    InvalidTruncation {
        /// Dimensions the embedding has.
        dims: usize,
        /// Dimensions that were asked for.
        requested: usize,
    },
    /// A threshold value was NaN.
    #[error("invalid threshold: {0} is not a number")]
    InvalidThreshold(f64),
    /// The input is not well-formed JSON.
    #[error("malformed JSON at line {line}, column {column}: {message}")]
    MalformedJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser expected.
        message: String,
    },
    /// The playbook document does not have the expected shape.
    #[error("invalid playbook at {path}: {message}")]
    InvalidPlaybook {
        /// JSON path of the offending value, e.g. `sections.OTHERS[3].text`.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// A local judge's parameter file is malformed or out of range.
    #[error("invalid judge parameters: {0}")]
    InvalidJudgeParams(String),
    /// A counter sum does not fit in the counter type.
    #[error("counter overflow while merging `{field}` of {survivor}")]
    CounterOverflow {
        /// `helpful` or `harmful`.
        field: &'static str,
        /// Name of the surviving entry.
        survivor: String,
    },
    /// A confirmed link, or a judge's score for a pair, that grouping cannot use.
    #[error("invalid link ({a}, {b}) among {n} items: {problem}")]
    InvalidLink {
        /// The link's first index.
        a: usize,
        /// The link's second index.
        b: usize,
        /// How many items there are.
        n: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
