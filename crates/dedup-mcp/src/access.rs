//! Which namespaces a call may use: all over stdio, those of the bearer token over HTTP.

use dedup_server::Principal;
use memdedup::Scope;
use rmcp::RoleServer;
use rmcp::service::RequestContext;

use crate::reply::ToolError;

/// The caller's namespace limits for one tool call.
#[derive(Debug, Clone, Default)]
pub(crate) struct Access {
    principal: Option<Principal>,
}

impl Access {
    /// The limits of the request behind `context`: over HTTP the [`Principal`] the auth
    /// middleware attached to the request; over stdio (no HTTP request) none, since the
    /// process belongs to whoever launched it.
    pub(crate) fn of(context: &RequestContext<RoleServer>) -> Access {
        let principal = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())
            .cloned();
        Access { principal }
    }

    /// Refuses a namespace the token may not use.
    pub(crate) fn check(&self, scope: &Scope) -> Result<(), ToolError> {
        match &self.principal {
            Some(principal) => principal
                .allow(scope.namespace_name())
                .map_err(|error| ToolError::Forbidden(error.message().to_owned())),
            None => Ok(()),
        }
    }

    /// Whether the namespace is allowed (for filtering lists).
    pub(crate) fn allows(&self, namespace: &str) -> bool {
        self.principal.as_ref().is_none_or(|principal| principal.allow(namespace).is_ok())
    }
}
