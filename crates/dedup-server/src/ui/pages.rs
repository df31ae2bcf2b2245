//! The pages of `/ui/` and the forms they post. Every form answers with a redirect to a
//! page (post, redirect, get), so a reload never repeats a decision.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use dedup_core::DiffWord;
use dedup_precompact::HistoryEvent;
use dedup_store::{
    ChangeId, MemoryId, MergeFilter, MergeId, MergeRecord, Review, ReviewDecision, ReviewFilter, ReviewId, ReviewStatus,
};
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::session::UiSession;
use super::{CsrfForm, UiError, form};
use crate::lifecycle::visible_memory;
use crate::state::AppState;

/// Most pending pairs one review page shows.
const PAIRS_PER_PAGE: usize = 50;
/// Most merges the ledger page shows, newest first.
const MERGES_PER_PAGE: usize = 200;
/// The `source` the memory history records for a change made here.
const SOURCE: &str = "ui";

type Page = Result<Html<String>, UiError>;

/// A whole page: the navigation, the title, `body`.
fn layout(title: &str, session: Option<&UiSession>, body: Markup) -> Html<String> {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · memdedup" }
                link rel="stylesheet" href="/ui/style.css";
            }
            body {
                header {
                    nav {
                        a.brand href="/ui/" { "memdedup" }
                        a href="/ui/" { "Namespaces" }
                        a href="/ui/review" { "Review" }
                        a href="/ui/merges" { "Merges" }
                        @if let Some(session) = session {
                            form.signout method="post" action="/ui/logout" {
                                input type="hidden" name="csrf" value=(session.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    Html(markup.into_string())
}

/// "1 merge", "2 merges".
fn plural(count: usize, noun: &str) -> String {
    if count == 1 { format!("1 {noun}") } else { format!("{count} {noun}s") }
}

/// The page of a failure.
pub(super) fn error_page(status: StatusCode, message: &str) -> Html<String> {
    let title = status.canonical_reason().unwrap_or("Error");
    layout(
        title,
        None,
        html! {
            p.error role="alert" { (status.as_u16()) ": " (message) }
            p { a href="/ui/" { "Back to the namespaces" } }
        },
    )
}

/// The sign-in form, with `problem` above it after a failed attempt.
pub(super) fn login(problem: Option<&str>) -> Html<String> {
    layout(
        "Sign in",
        None,
        html! {
            @if let Some(problem) = problem { p.error role="alert" { (problem) } }
            form.login method="post" action="/ui/login" {
                label for="token" { "API token" }
                input #token type="password" name="token" autocomplete="current-password" required;
                button type="submit" { "Sign in" }
            }
            p.hint { "A token of the server's configuration ([[server.tokens]] or MEMDEDUP_API_TOKEN). "
                     "The page then shows only the namespaces that token may use." }
        },
    )
}

/// A query string that did not parse: 400.
fn bad_query(rejection: QueryRejection) -> UiError {
    UiError::new(StatusCode::BAD_REQUEST, format!("the query string is not valid: {}", rejection.body_text()))
}

/// 400 for a namespace filter that is no namespace name, 403 for one the token may not use.
fn check_filter(state: &AppState, session: &UiSession, namespace: Option<&str>) -> Result<(), UiError> {
    if let Some(namespace) = namespace {
        dedup_store::Scope::new(&state.config().domain, namespace)
            .map_err(|e| UiError::new(StatusCode::BAD_REQUEST, e.to_string()))?;
        session.principal.allow(namespace)?;
    }
    Ok(())
}

/// The pending entries of the server's domain the session may see (of `namespace` only,
/// if given), lowest id first.
async fn pending(state: &AppState, session: &UiSession, namespace: Option<&str>) -> Result<Vec<Review>, UiError> {
    check_filter(state, session, namespace)?;
    let filter = ReviewFilter {
        domain: Some(state.config().domain.clone()),
        namespace: namespace.map(str::to_owned),
        ..ReviewFilter::default()
    };
    let mut reviews = state.store().reviews(&filter).await?;
    reviews.retain(|r| session.principal.allow(r.scope.namespace_name()).is_ok());
    Ok(reviews)
}

/// `GET /ui/`: the namespaces the session may see, with their counts.
pub(crate) async fn overview(State(state): State<AppState>, Extension(session): Extension<UiSession>) -> Page {
    let domain = state.config().domain.clone();
    let stats = state.store().stats().await?;
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    for review in pending(&state, &session, None).await? {
        *waiting.entry(review.scope.namespace_name().to_owned()).or_default() += 1;
    }
    let rows: Vec<_> = stats
        .namespaces
        .iter()
        .filter(|n| n.domain == domain && session.principal.allow(&n.namespace).is_ok())
        .collect();
    Ok(layout(
        "Namespaces",
        Some(&session),
        html! {
            p { "Domain " code { (domain) } ". " (plural(waiting.values().sum::<usize>(), "pair")) " to review." }
            @if rows.is_empty() {
                p.empty { "No memories yet." }
            } @else {
                table.namespaces {
                    thead { tr { th { "Namespace" } th.num { "Live memories" } th.num { "Retired" } th.num { "To review" } th { "" } } }
                    tbody {
                        @for row in &rows {
                            tr data-namespace=(row.namespace) {
                                td { code { (row.namespace) } }
                                td.num { (row.live) }
                                td.num { (row.deprecated) }
                                td.num { (waiting.get(&row.namespace).copied().unwrap_or(0)) }
                                td {
                                    a href={ "/ui/review?namespace=" (row.namespace) } { "Review" } " · "
                                    a href={ "/ui/merges?namespace=" (row.namespace) } { "Merges" }
                                }
                            }
                        }
                    }
                }
            }
        },
    ))
}

/// `GET /ui/review` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReviewQuery {
    namespace: Option<String>,
    /// After a decision: the entry decided, how, and the merge it made.
    decided: Option<i64>,
    decision: Option<String>,
    merge: Option<i64>,
}

/// A text with the words the other text lacks marked.
fn diffed(words: &[DiffWord<'_>]) -> Markup {
    html! {
        @for (i, (word, differs)) in words.iter().enumerate() {
            @if i > 0 { " " }
            @if *differs { mark { (word) } } @else { (word) }
        }
    }
}

/// `GET /ui/review`: the pending pairs, the two texts side by side, a form per pair.
pub(crate) async fn review(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    query: Result<Query<ReviewQuery>, QueryRejection>,
) -> Page {
    let Query(query) = query.map_err(bad_query)?;
    let namespace = query.namespace.as_deref().filter(|n| !n.is_empty());
    let reviews = pending(&state, &session, namespace).await?;
    let total = reviews.len();
    let mut pairs = Vec::new();
    for review in reviews.into_iter().take(PAIRS_PER_PAGE) {
        let low = state.store().get(review.low).await?.map(|m| m.content);
        let high = state.store().get(review.high).await?.map(|m| m.content);
        pairs.push((review, low, high));
    }
    let notice = match (query.decided, query.decision.as_deref()) {
        (Some(id), Some(decision @ ("merge" | "apart" | "skip"))) => Some((id, decision, query.merge)),
        _ => None,
    };
    let title = match namespace {
        Some(namespace) => format!("Review: {namespace}"),
        None => "Review".to_owned(),
    };
    Ok(layout(
        &title,
        Some(&session),
        html! {
            @if let Some((id, decision, merge)) = notice {
                p.notice role="status" {
                    "Pair " (id) ": "
                    @match decision { "merge" => "merged", "apart" => "kept apart", _ => "skipped" }
                    @if let Some(merge) = merge {
                        " (merge " (merge) "; "
                        a href={ "/ui/merges" @if let Some(n) = namespace { "?namespace=" (n) } } { "undo it in the ledger" }
                        ")"
                    }
                    "."
                }
            }
            p.progress { (plural(total, "pair")) " " @if total == 1 { "waits" } @else { "wait" } @if total > PAIRS_PER_PAGE { "; the first " (PAIRS_PER_PAGE) " are shown" } "." }
            @if pairs.is_empty() { p.empty { "Nothing to review." } }
            @for (review, low, high) in &pairs {
                (pair(review, low.as_deref(), high.as_deref(), &session.csrf, namespace))
            }
        },
    ))
}

/// One pending pair: what the judge said, the two texts with their word diff, the form.
/// `filter` is the page's namespace filter, kept by the redirect after the decision.
fn pair(review: &Review, low: Option<&str>, high: Option<&str>, csrf: &str, filter: Option<&str>) -> Markup {
    let (left, right) = dedup_core::word_diff(low.unwrap_or_default(), high.unwrap_or_default());
    let side = |id: MemoryId, text: Option<&str>, words: &[DiffWord<'_>]| {
        html! {
            div.side {
                h3 { a href={ "/ui/memory/" (id) } { "Memory " (id) } }
                @if text.is_some() { p.text { (diffed(words)) } } @else { p.text.gone { "(deleted)" } }
            }
        }
    };
    html! {
        section.pair id={ "review-" (review.id) } data-review=(review.id) {
            h2 { "Pair " (review.id) }
            p.meta {
                "Namespace " code { (review.scope.namespace_name()) }
                " · cosine " (format!("{:.3}", review.cosine))
                @if let Some(p) = review.probability { " · P(duplicate) " (format!("{p:.2}")) }
                " · judge " (review.judge) " · from " (review.source)
                " · queued " (review.created_at.format("%Y-%m-%d %H:%M UTC"))
            }
            @if !review.reasons.is_empty() {
                ul.reasons { @for reason in &review.reasons { li { (reason) } } }
            }
            div.sides {
                (side(review.low, low, &left))
                (side(review.high, high, &right))
            }
            form.decide method="post" action={ "/ui/review/" (review.id) "/decide" } {
                input type="hidden" name="csrf" value=(csrf);
                @if let Some(filter) = filter { input type="hidden" name="namespace" value=(filter); }
                fieldset.keep {
                    legend { "On merge, keep" }
                    label { input type="radio" name="survivor" value=(review.low) checked; " memory " (review.low) }
                    label { input type="radio" name="survivor" value=(review.high); " memory " (review.high) }
                }
                button.merge type="submit" name="decision" value="merge" { "Merge" }
                button.apart type="submit" name="decision" value="apart" { "Keep apart" }
                button.skip type="submit" name="decision" value="skip" { "Skip" }
            }
        }
    }
}

/// `POST /ui/review/{id}/decide` form.
#[derive(Debug, Deserialize)]
pub(crate) struct DecideForm {
    csrf: String,
    decision: String,
    survivor: Option<i64>,
    /// The namespace filter of the page the form was on.
    namespace: Option<String>,
}

/// Whether the session may see something of `scope`: the server's domain, a namespace its
/// token may use.
fn visible_to(state: &AppState, session: &UiSession, scope: &dedup_store::Scope) -> bool {
    scope.domain() == state.config().domain && session.principal.allow(scope.namespace_name()).is_ok()
}

/// A form that carries the session's CSRF token.
trait Posted: serde::de::DeserializeOwned {
    fn csrf(&self) -> &str;
}

/// The posted form, once its CSRF token is found to be the session's.
async fn posted<T: Posted>(request: Request, state: &AppState, session: &UiSession) -> Result<T, UiError> {
    let axum::Form(form) = form::<T>(request, state).await?;
    session.check_csrf(form.csrf())?;
    Ok(form)
}

/// The number in a path, or 404 in the words of a missing `what`.
fn path_id<T: std::str::FromStr>(raw: &str, what: &str) -> Result<T, UiError> {
    raw.trim().parse().map_err(|_| UiError::new(StatusCode::NOT_FOUND, format!("no {what} with id {raw:?}")))
}

/// `POST /ui/review/{id}/decide`: merge (keeping the chosen memory), keep apart or skip.
pub(crate) async fn decide(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    axum::extract::Path(raw): axum::extract::Path<String>,
    request: Request,
) -> Result<Response, UiError> {
    let form: DecideForm = posted(request, &state, &session).await?;
    let id: ReviewId = path_id(&raw, "review entry")?;
    let store = state.store();
    let review = store
        .review(id)
        .await?
        .filter(|r| visible_to(&state, &session, &r.scope))
        .ok_or_else(|| UiError::new(StatusCode::NOT_FOUND, format!("no review entry with id {id}")))?;
    let merge = match form.decision.as_str() {
        "merge" => {
            let survivor = form.survivor.map(MemoryId::new);
            let reason = format!("decided on the review page (entry {id})");
            Some(store.merge_review_keeping(id, survivor, 1.0, &reason, "review").await?.1.id)
        }
        "apart" => {
            store.decide_review(id, ReviewDecision::Apart).await?;
            None
        }
        "skip" => {
            store.decide_review(id, ReviewDecision::Skip).await?;
            None
        }
        other => {
            let message = format!("decision {other:?} is not merge, apart or skip");
            return Err(UiError::new(StatusCode::BAD_REQUEST, message));
        }
    };
    // Back to the page the form was on: its namespace filter, if it had one.
    let mut to = format!("/ui/review?decided={id}&decision={}", form.decision);
    if form.namespace.is_some_and(|n| n == review.scope.namespace_name()) {
        to.push_str(&format!("&namespace={}", review.scope.namespace_name()));
    }
    if let Some(merge) = merge {
        to.push_str(&format!("&merge={merge}"));
    }
    Ok(Redirect::to(&to).into_response())
}

/// `GET /ui/merges` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MergesQuery {
    namespace: Option<String>,
    /// After an undo: the merge undone, or how many merges of a run.
    undone: Option<i64>,
    undone_run: Option<usize>,
}

/// `GET /ui/merges`: the ledger, newest first, grouped by run, with the undo forms.
pub(crate) async fn merges(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    query: Result<Query<MergesQuery>, QueryRejection>,
) -> Page {
    let Query(query) = query.map_err(bad_query)?;
    let namespace = query.namespace.as_deref().filter(|n| !n.is_empty());
    check_filter(&state, &session, namespace)?;
    let filter = MergeFilter {
        domain: Some(state.config().domain.clone()),
        namespace: namespace.map(str::to_owned),
        run_id: None,
        include_undone: true,
    };
    let mut records = state.store().merges(&filter).await?;
    records.retain(|m| session.principal.allow(m.scope.namespace_name()).is_ok());
    let total = records.len();
    records.reverse();
    records.truncate(MERGES_PER_PAGE);
    // Runs in the order of their newest merge, each with its merges newest first.
    let mut runs: Vec<(String, Vec<&MergeRecord>)> = Vec::new();
    for record in &records {
        match runs.iter_mut().find(|(run, _)| *run == record.run_id) {
            Some((_, members)) => members.push(record),
            None => runs.push((record.run_id.clone(), vec![record])),
        }
    }
    let title = match namespace {
        Some(namespace) => format!("Merges: {namespace}"),
        None => "Merges".to_owned(),
    };
    Ok(layout(
        &title,
        Some(&session),
        html! {
            @if let Some(id) = query.undone { p.notice role="status" { "Merge " (id) " undone: its memories are back as they were." } }
            @if let Some(count) = query.undone_run { p.notice role="status" { "Run undone: " (plural(count, "merge")) "." } }
            p.progress { (plural(total, "merge")) " in the ledger" @if total > MERGES_PER_PAGE { "; the newest " (MERGES_PER_PAGE) " are shown" } "." }
            @if runs.is_empty() { p.empty { "No merges yet." } }
            @for (run, members) in &runs {
                (run_section(run, members, &session.csrf))
            }
        },
    ))
}

/// A run of the ledger: its merges and the undo forms.
fn run_section(run: &str, members: &[&MergeRecord], csrf: &str) -> Markup {
    let live = members.iter().filter(|m| m.undone_at.is_none()).count();
    html! {
        section.run data-run=(run) {
            h2 { "Run " code { (run) } }
            @if live > 0 {
                form.undo-run method="post" action="/ui/runs/undo" {
                    input type="hidden" name="csrf" value=(csrf);
                    input type="hidden" name="run" value=(run);
                    button type="submit" { "Undo the run (" (plural(live, "merge")) ")" }
                }
            }
            table.merges {
                thead { tr { th { "Merge" } th { "Kept" } th { "Absorbed" } th { "Judge" } th { "Reason" } th { "When" } th { "" } } }
                tbody {
                    @for m in members {
                        tr data-merge=(m.id) {
                            td { (m.id) }
                            td { a href={ "/ui/memory/" (m.survivor) } { (m.survivor) } }
                            td { @for (i, a) in m.absorbed.iter().enumerate() { @if i > 0 { ", " } a href={ "/ui/memory/" (a) } { (a) } } }
                            td { (m.judge) " " (format!("{:.2}", m.confidence)) }
                            td { (m.reason) }
                            td { (m.created_at.format("%Y-%m-%d %H:%M")) }
                            td {
                                @if let Some(undone) = m.undone_at {
                                    span.undone { "undone " (undone.format("%Y-%m-%d %H:%M")) }
                                } @else {
                                    form.undo method="post" action={ "/ui/merges/" (m.id) "/undo" } {
                                        input type="hidden" name="csrf" value=(csrf);
                                        button type="submit" { "Undo" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The merge with this id, if the session may see it.
async fn visible_merge(state: &AppState, session: &UiSession, id: MergeId) -> Result<MergeRecord, UiError> {
    state
        .store()
        .merge(id)
        .await?
        .filter(|m| visible_to(state, session, &m.scope))
        .ok_or_else(|| UiError::new(StatusCode::NOT_FOUND, format!("no merge with id {id}")))
}

/// After an undo of a merge a review decision made: the entry is recorded `apart`, as the
/// undo keeps the pair from being merged again.
async fn record_apart(state: &AppState, record: &MergeRecord) -> Result<(), UiError> {
    let Some(review) = record.run_id.strip_prefix("review-").and_then(|id| id.parse::<ReviewId>().ok()) else {
        return Ok(());
    };
    let Some(entry) = state.store().review(review).await? else { return Ok(()) };
    if entry.merge_id == Some(record.id) && entry.status == ReviewStatus::Merged {
        state.store().reopen_review(review).await?;
        state.store().decide_review(review, ReviewDecision::Apart).await?;
    }
    Ok(())
}

/// `POST /ui/merges/{id}/undo`: undoes one merge, as `memdedup undo --merge` does (the
/// pair is not merged again).
pub(crate) async fn undo_merge(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    axum::extract::Path(raw): axum::extract::Path<String>,
    request: Request,
) -> Result<Response, UiError> {
    let _: CsrfForm = posted(request, &state, &session).await?;
    let record = visible_merge(&state, &session, path_id(&raw, "merge")?).await?;
    state.store().undo_merge(record.id, true).await?;
    record_apart(&state, &record).await?;
    let to = format!("/ui/merges?namespace={}&undone={}", record.scope.namespace_name(), record.id);
    Ok(Redirect::to(&to).into_response())
}

/// `POST /ui/runs/undo` form.
#[derive(Debug, Deserialize)]
pub(crate) struct UndoRunForm {
    csrf: String,
    run: String,
}

/// `POST /ui/runs/undo`: undoes every merge of a run still applied, newest first, as
/// `memdedup undo --run` does. 404 when the run has a merge the session may not see.
pub(crate) async fn undo_run(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    request: Request,
) -> Result<Response, UiError> {
    let form: UndoRunForm = posted(request, &state, &session).await?;
    let filter = MergeFilter { run_id: Some(form.run.clone()), include_undone: false, ..MergeFilter::default() };
    let records = state.store().merges(&filter).await?;
    if records.is_empty() || !records.iter().all(|m| visible_to(&state, &session, &m.scope)) {
        return Err(UiError::new(StatusCode::NOT_FOUND, "no run with that id has a merge to undo"));
    }
    let undone = state.store().undo_run(&form.run, true).await?;
    for record in &records {
        record_apart(&state, record).await?;
    }
    let namespaces: std::collections::BTreeSet<_> = records.iter().map(|m| m.scope.namespace_name()).collect();
    let mut to = format!("/ui/merges?undone_run={}", undone.len());
    if let [namespace] = namespaces.into_iter().collect::<Vec<_>>()[..] {
        to.push_str(&format!("&namespace={namespace}"));
    }
    Ok(Redirect::to(&to).into_response())
}

/// `GET /ui/memory/{id}`: a memory, where it stands, and its history.
pub(crate) async fn memory(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    axum::extract::Path(raw): axum::extract::Path<String>,
) -> Page {
    let memory = visible_memory(&state, &session.principal, &raw).await?;
    let events = match state.memory_service() {
        Some(service) => {
            service.history(memory.id).await.map_err(|e| crate::memory::failed("reading the history", e))?.events
        }
        None => state.store().changes(memory.id).await?.into_iter().map(HistoryEvent::Change).collect(),
    };
    let status = match (memory.deprecated, memory.merged_into) {
        (false, _) => html! { "live" },
        (true, Some(into)) => html! { "merged into " a href={ "/ui/memory/" (into) } { "memory " (into) } },
        (true, None) => html! { "forgotten" },
    };
    Ok(layout(
        &format!("Memory {}", memory.id),
        Some(&session),
        html! {
            blockquote.memory-text { (memory.content) }
            dl.facts {
                dt { "Status" } dd.status { (status) }
                dt { "URN" } dd { code { (memory.urn()) } }
                dt { "Kind" } dd { (memory.kind) }
                dt { "Seen" } dd { (plural(usize::try_from(memory.occurrence_count).unwrap_or(usize::MAX), "time")) " · helpful " (memory.helpful) " · harmful " (memory.harmful) }
                dt { "Stored" } dd { (memory.created_at.format("%Y-%m-%d %H:%M UTC")) }
            }
            h2 { "History" }
            @if events.is_empty() { p.empty { "Stored, never changed." } }
            @else {
                ol.history { @for event in &events { (history_event(event, memory.id, &session.csrf)) } }
            }
        },
    ))
}

/// One line of a memory's history, with an undo form for an edit or a deletion.
fn history_event(event: &HistoryEvent, id: MemoryId, csrf: &str) -> Markup {
    let when = event.at().format("%Y-%m-%d %H:%M UTC").to_string();
    match event {
        HistoryEvent::Change(change) => html! {
            li.change data-change=(change.id) {
                span.when { (when) } " "
                strong { (change.action.as_str()) } " (change " (change.id) ", from " (change.source) ")"
                @if let (Some(before), Some(after)) = (&change.before, &change.after) {
                    @let (old, new) = dedup_core::word_diff(before, after);
                    div.sides {
                        div.side { h3 { "Before" } p.text { (diffed(&old)) } }
                        div.side { h3 { "After" } p.text { (diffed(&new)) } }
                    }
                }
                @if let Some(undone) = change.undone_by { " · undone by change " (undone) }
                @if change.undoable() {
                    form.undo method="post" action={ "/ui/changes/" (change.id) "/undo" } {
                        input type="hidden" name="csrf" value=(csrf);
                        button type="submit" { "Undo" }
                    }
                }
            }
        },
        HistoryEvent::Merge(merge) => html! {
            li.merge data-merge=(merge.id) {
                span.when { (when) } " "
                strong { "merge " (merge.id) } " · "
                @if merge.survivor == id {
                    "absorbed " @for (i, a) in merge.absorbed.iter().enumerate() { @if i > 0 { ", " } a href={ "/ui/memory/" (a) } { "memory " (a) } }
                } @else {
                    "merged into " a href={ "/ui/memory/" (merge.survivor) } { "memory " (merge.survivor) }
                }
                " by " (merge.judge) " (run " code { (merge.run_id) } ")"
                @if merge.undone_at.is_some() { " · undone" }
            }
        },
    }
}

/// `POST /ui/changes/{id}/undo`: undoes an edit or a deletion.
pub(crate) async fn undo_change(
    State(state): State<AppState>,
    Extension(session): Extension<UiSession>,
    axum::extract::Path(raw): axum::extract::Path<String>,
    request: Request,
) -> Result<Response, UiError> {
    let _: CsrfForm = posted(request, &state, &session).await?;
    let id: ChangeId = path_id(&raw, "change")?;
    let change = state
        .store()
        .change(id)
        .await?
        .filter(|c| visible_to(&state, &session, &c.scope))
        .ok_or_else(|| UiError::new(StatusCode::NOT_FOUND, format!("no change with id {id}")))?;
    let service = crate::memory::service(&state).map_err(UiError::from)?;
    service
        .undo_change(change.id, SOURCE)
        .await
        .map_err(|e| UiError::from(crate::memory::failed(&format!("undoing change {id}"), e)))?;
    Ok(Redirect::to(&format!("/ui/memory/{}", change.memory)).into_response())
}

impl Posted for DecideForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl Posted for UndoRunForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl Posted for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}
