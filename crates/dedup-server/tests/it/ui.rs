//! The review page's server side on both backends, over real HTTP without a browser
//! (tests/cli/ui_browser.rs drives it in Chromium): a session opened on the first page
//! when the server has no tokens, memory text escaped, the CSRF token and the decisions'
//! refusals, an undo from the ledger, and the security headers.

use std::sync::Arc;

use dedup_store::{MemoryId, NewMemory, NewReview, Scope};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};

use crate::support::{TableEmbedder, TestServer, axis, toward};

/// A rule whose text a page must escape, and a paraphrase.
const RULE: &str = "Never paste <script>alert(1)</script> into the wiki & rotate keys monthly.";
const PARAPHRASE: &str = "Rotate the keys monthly and never paste scripts into the wiki.";

/// A browser without cookies of its own or redirects followed.
struct Visitor {
    client: reqwest::Client,
    base: String,
    cookie: Option<String>,
}

impl Visitor {
    fn new(server: &TestServer) -> Visitor {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("a client");
        Visitor { client, base: server.url.clone(), cookie: None }
    }

    async fn get(&mut self, path: &str) -> anyhow::Result<(StatusCode, reqwest::header::HeaderMap, String)> {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        let response = request.send().await?;
        if let Some(set) = response.headers().get(SET_COOKIE) {
            self.cookie = Some(set.to_str()?.split(';').next().unwrap_or_default().to_owned());
        }
        Ok((response.status(), response.headers().clone(), response.text().await?))
    }

    async fn post(&self, path: &str, form: &str) -> anyhow::Result<(StatusCode, Option<String>, String)> {
        let mut request = self
            .client
            .post(format!("{}{path}", self.base))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form.to_owned());
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        let response = request.send().await?;
        let location = response.headers().get(LOCATION).and_then(|l| l.to_str().ok()).map(str::to_owned);
        Ok((response.status(), location, response.text().await?))
    }
}

/// The CSRF token of the first form of a page.
fn csrf(page: &str) -> String {
    let start = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + 19;
    page[start..].split('"').next().expect("the value").to_owned()
}

on_both_backends! {
    async fn review_page_decides_with_a_session_and_csrf_and_escapes_memory_text(backend) {
        let embedder = TableEmbedder::new().with_text(RULE, axis(0)).with_text(PARAPHRASE, toward(0, 0.5, 1));
        let server = TestServer::builder().backend(backend).embedder(Arc::new(embedder)).memory_routes().start().await?;
        let store = server.db().open().await?;
        let scope = Scope::new("global", "rules")?;
        for text in [RULE, PARAPHRASE] {
            store.insert_checked(NewMemory::new(scope.clone(), text), None, None).await?;
        }
        let (a, b) = (MemoryId::new(1), MemoryId::new(2));
        let review = NewReview {
            scope, a, b, cosine: 0.91, probability: Some(0.45), judge: "learned".into(),
            reasons: vec!["in the uncertain band".into()], source: "add".into(),
        };
        let id = store.enqueue_review(&review).await?.expect("queued");

        // No tokens: the first page opens a session.
        let mut visitor = Visitor::new(&server);
        let (status, headers, page) = visitor.get("/ui/").await?;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(visitor.cookie.as_deref().is_some_and(|c| c.starts_with("memdedup_ui=")));
        let set_cookie = headers.get(SET_COOKIE).expect("a cookie").to_str()?;
        assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"), "{set_cookie}");
        assert!(headers.get(CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("default-src 'none'")));
        assert!(page.contains("data-namespace=\"rules\""), "{page}");

        // The queue, with the text escaped.
        let (status, _, page) = visitor.get("/ui/review?namespace=rules").await?;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !page.contains("<script>"), "{page}");
        assert!(page.contains(&format!("data-review=\"{id}\"")));
        let token = csrf(&page);
        let decide = format!("/ui/review/{id}/decide");

        // Refused: no CSRF token, a wrong one, no session, a decision that is none.
        let (status, _, _) = visitor.post(&decide, "decision=merge").await?;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        let (status, _, page) = visitor.post(&decide, "decision=merge&csrf=0123").await?;
        assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
        let stranger = Visitor::new(&server);
        let (status, _, _) = stranger.post(&decide, &format!("decision=merge&csrf={token}")).await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _, page) = visitor.post(&decide, &format!("decision=later&csrf={token}")).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{page}");
        let (status, _, _) = visitor.post("/ui/review/999/decide", &format!("decision=apart&csrf={token}")).await?;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(!store.get(b).await?.expect("b").deprecated, "nothing changed");

        // Merge keeping the newer memory, then again: 409.
        let (status, location, _) =
            visitor.post(&decide, &format!("decision=merge&survivor=2&namespace=rules&csrf={token}")).await?;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert_eq!(location.as_deref(), Some(format!("/ui/review?decided={id}&decision=merge&namespace=rules&merge=1").as_str()));
        assert_eq!(store.get(a).await?.expect("a").merged_into, Some(b));
        let (status, _, page) = visitor.post(&decide, &format!("decision=apart&csrf={token}")).await?;
        assert_eq!(status, StatusCode::CONFLICT, "{page}");
        let (_, _, page) = visitor.get(&format!("/ui/memory/{a}")).await?;
        assert!(page.contains("merged into"), "{page}");

        // Undo from the ledger: both live again, the entry kept apart.
        let (status, _, page) = visitor.get("/ui/merges").await?;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("data-run=\"review-1\""), "{page}");
        let (status, location, _) = visitor.post("/ui/merges/1/undo", &format!("csrf={token}")).await?;
        assert_eq!((status, location.as_deref()), (StatusCode::SEE_OTHER, Some("/ui/merges?namespace=rules&undone=1")));
        assert!(!store.get(a).await?.expect("a").deprecated);
        assert_eq!(store.review(id).await?.expect("the entry").status, dedup_store::ReviewStatus::Apart);
        let (status, _, _) = visitor.post("/ui/merges/1/undo", &format!("csrf={token}")).await?;
        assert_eq!(status, StatusCode::CONFLICT, "undone already");

        // Sign out: the session is gone.
        let (status, location, _) = visitor.post("/ui/logout", &format!("csrf={token}")).await?;
        assert_eq!((status, location.as_deref()), (StatusCode::SEE_OTHER, Some("/ui/")));
        let (status, _, _) = visitor.post(&decide, &format!("decision=skip&csrf={token}")).await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        Ok(())
    }
}
