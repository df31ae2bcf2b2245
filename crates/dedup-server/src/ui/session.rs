//! Sessions of the review page. With tokens configured, a token typed once into the login
//! form becomes a session: an `HttpOnly`, `SameSite=Strict` cookie holding a random id
//! that maps, in this process, to the token's namespace limits and a CSRF token. Without
//! tokens (loopback only) a session is opened on the first page. Every form carries the
//! session's CSRF token, and a request whose `Origin` is not this server's is refused.
//! Sessions live in the memory of the router that made them: a restart signs everyone out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN, SET_COOKIE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use rand::RngCore;

use super::UiError;
use crate::auth::{Principal, constant_time_eq};
use crate::state::AppState;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "memdedup_ui";
/// How long a session lasts after it was opened.
const LIFETIME: Duration = Duration::from_secs(8 * 3600);
/// Most sessions held at once; the oldest goes when a new one would pass it.
const MAX_SESSIONS: usize = 256;

/// A signed-in browser: what its token may see, and the token its forms must carry.
#[derive(Debug, Clone)]
pub(crate) struct UiSession {
    pub(crate) principal: Principal,
    pub(crate) csrf: String,
}

impl UiSession {
    /// 403 unless `presented` is this session's CSRF token.
    pub(crate) fn check_csrf(&self, presented: &str) -> Result<(), UiError> {
        if constant_time_eq(self.csrf.as_bytes(), presented.as_bytes()) {
            Ok(())
        } else {
            Err(UiError::new(StatusCode::FORBIDDEN, "the form's CSRF token is not this session's: reload the page"))
        }
    }
}

/// The open sessions of this process.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<String, (UiSession, Instant)>>,
}

impl Sessions {
    /// Opens a session for `principal`; returns its id (the cookie's value).
    fn open(&self, principal: Principal) -> (String, UiSession) {
        let (id, csrf) = (random_token(), random_token());
        let session = UiSession { principal, csrf };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        open.retain(|_, (_, opened)| now.duration_since(*opened) < LIFETIME);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open.iter().min_by_key(|(_, (_, opened))| *opened).map(|(id, _)| id.clone())
        {
            open.remove(&oldest);
        }
        open.insert(id.clone(), (session.clone(), now));
        (id, session)
    }

    /// The live session with this id.
    fn get(&self, id: &str) -> Option<UiSession> {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(id).filter(|(_, opened)| opened.elapsed() < LIFETIME).map(|(session, _)| session.clone())
    }

    /// Ends the session with this id.
    fn close(&self, id: &str) {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }
}

/// 32 random bytes from the thread's CSPRNG, as hex.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The session cookie for `id`: sent back only to `/ui/` pages of this site, never to
/// scripts, never with a request another site starts.
fn cookie(id: String) -> Cookie<'static> {
    Cookie::build((COOKIE, id)).http_only(true).same_site(SameSite::Strict).path("/ui").build()
}

/// Attaches the caller's [`UiSession`] to every page and form of `/ui/` except the login
/// and the style sheet. Without a session: with tokens configured, a page redirects to the
/// login form and a form post is refused with 401; without tokens, a page opens one.
pub(crate) async fn require_session(
    State(state): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    jar: CookieJar,
    mut request: Request,
    next: Next,
) -> Response {
    if let Err(error) = same_origin(&request) {
        return error.into_response();
    }
    let reading = matches!(*request.method(), Method::GET | Method::HEAD);
    let found = jar.get(COOKIE).and_then(|cookie| sessions.get(cookie.value()));
    if let Some(session) = found {
        request.extensions_mut().insert(session);
        return next.run(request).await;
    }
    if !reading {
        return UiError::new(StatusCode::UNAUTHORIZED, "not signed in, or the session expired: sign in again")
            .into_response();
    }
    if !state.config().tokens.is_empty() {
        return Redirect::to("/ui/login").into_response();
    }
    let (id, session) = sessions.open(Principal::default());
    request.extensions_mut().insert(session);
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(&cookie(id).to_string()) {
        response.headers_mut().append(SET_COOKIE, value);
    }
    response
}

/// Refuses a state-changing request whose `Origin` header names another site than the
/// `Host` it was sent to (a form posted from elsewhere). Browsers send `Origin` with every
/// POST; a request without one is not a cross-site form.
fn same_origin(request: &Request) -> Result<(), UiError> {
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return Ok(());
    }
    let Some(origin) = request.headers().get(ORIGIN) else { return Ok(()) };
    let host = request.headers().get(HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let origin = origin.to_str().unwrap_or_default();
    let origin_host = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
    if !host.is_empty() && origin_host == Some(host) {
        Ok(())
    } else {
        Err(UiError::new(StatusCode::FORBIDDEN, "this form was posted from another site"))
    }
}

/// `POST /ui/login`: the form's token.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

/// `GET /ui/login`: the sign-in form (straight to the overview without tokens).
pub(crate) async fn login_page(State(state): State<AppState>) -> Response {
    if state.config().tokens.is_empty() {
        return Redirect::to("/ui/").into_response();
    }
    super::pages::login(None).into_response()
}

/// `POST /ui/login`: opens a session for a configured token, or says the token is unknown.
pub(crate) async fn login(
    State(state): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    request: Request,
) -> Result<Response, UiError> {
    same_origin(&request)?;
    if state.config().tokens.is_empty() {
        return Ok(Redirect::to("/ui/").into_response());
    }
    let axum::Form(form) = super::form::<LoginForm>(request, &state).await?;
    let Some(principal) = crate::auth::principal_for(&state, form.token.trim()) else {
        let page = super::pages::login(Some("unknown token"));
        return Ok((StatusCode::UNAUTHORIZED, page).into_response());
    };
    let (id, _) = sessions.open(principal);
    let jar = CookieJar::new().add(cookie(id));
    Ok((jar, Redirect::to("/ui/")).into_response())
}

/// `POST /ui/logout`: ends the session.
pub(crate) async fn logout(
    State(state): State<AppState>,
    Extension(sessions): Extension<Arc<Sessions>>,
    Extension(session): Extension<UiSession>,
    jar: CookieJar,
    request: Request,
) -> Result<Response, UiError> {
    let axum::Form(form) = super::form::<super::CsrfForm>(request, &state).await?;
    session.check_csrf(&form.csrf)?;
    if let Some(cookie) = jar.get(COOKIE) {
        sessions.close(cookie.value());
    }
    let jar = jar.remove(Cookie::build(COOKIE).path("/ui"));
    let to = if state.config().tokens.is_empty() { "/ui/" } else { "/ui/login" };
    Ok((jar, Redirect::to(to)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_random_bounded_and_closable() {
        let sessions = Sessions::default();
        let (a, session_a) = sessions.open(Principal::default());
        let (b, session_b) = sessions.open(Principal::default());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert_ne!(session_a.csrf, session_b.csrf);
        assert!(sessions.get(&a).is_some());
        sessions.close(&a);
        assert!(sessions.get(&a).is_none() && sessions.get(&b).is_some());
        for _ in 0..MAX_SESSIONS + 10 {
            sessions.open(Principal::default());
        }
        assert!(sessions.open.lock().unwrap().len() <= MAX_SESSIONS);
    }

    #[test]
    fn a_wrong_csrf_token_is_refused() {
        let session = UiSession { principal: Principal::default(), csrf: "abc".into() };
        assert!(session.check_csrf("abc").is_ok());
        assert_eq!(session.check_csrf("abd").unwrap_err().status, StatusCode::FORBIDDEN);
        assert!(session.check_csrf("").is_err());
    }

    #[test]
    fn a_post_from_another_origin_is_refused() {
        let post = |origin: Option<&str>| {
            let mut builder = Request::builder().method(Method::POST).uri("/ui/logout").header(HOST, "127.0.0.1:3100");
            if let Some(origin) = origin {
                builder = builder.header(ORIGIN, origin);
            }
            same_origin(&builder.body(axum::body::Body::empty()).unwrap())
        };
        assert!(post(Some("http://127.0.0.1:3100")).is_ok());
        assert!(post(None).is_ok());
        assert!(post(Some("http://evil.example")).is_err());
        assert!(post(Some("http://127.0.0.1:3101")).is_err());
        assert!(post(Some("null")).is_err());
    }
}
