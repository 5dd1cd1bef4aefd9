//! The tower layer in front of every service: each request authenticated
//! and checked against the rule table before a service sees it.

use super::{Access, CLIENT_NAME_HEADER, Caller, Need, check_role, display_name, need};
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;

/// The layer in front of every service: authenticates each request,
/// refuses one its caller may not make, and hands the [`Caller`] on in the
/// request's extensions.
#[derive(Debug, Clone)]
pub(crate) struct AccessLayer {
    access: Arc<Access>,
}

impl AccessLayer {
    pub(crate) fn new(access: Arc<Access>) -> AccessLayer {
        AccessLayer { access }
    }
}

impl<S> tower::Layer<S> for AccessLayer {
    type Service = AccessService<S>;

    fn layer(&self, inner: S) -> AccessService<S> {
        AccessService {
            inner,
            access: self.access.clone(),
        }
    }
}

/// See [`AccessLayer`].
#[derive(Debug, Clone)]
pub(crate) struct AccessService<S> {
    inner: S,
    access: Arc<Access>,
}

/// The caller of `request`, or why it may not call.
fn admit(access: &Access, request: &http::Request<Body>) -> Result<Caller, Status> {
    let Some(peer) = request
        .extensions()
        .get::<crate::grpc::ConnInfo>()
        .map(|info| info.peer)
    else {
        return Err(Status::internal("a request from an unknown connection"));
    };
    let name = request
        .headers()
        .get(CLIENT_NAME_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(display_name);
    let caller = access.authenticate(
        peer,
        request.headers().get(http::header::AUTHORIZATION),
        name,
    )?;
    let (need, what) = need(request.uri().path());
    match need {
        Need::Role(role) => check_role(caller.role, role, what)?,
        Need::Local if caller.remote.is_some() => {
            return Err(Status::permission_denied(format!(
                "{what} is served on the local socket only: a remote client (role {}) cannot manage tokens or trust",
                caller.role
            )));
        }
        Need::Local => {}
    }
    Ok(caller)
}

impl<S> tower::Service<http::Request<Body>> for AccessService<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<http::Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        // A remote connection is busy while this call is in progress: until
        // its response's body ends (or the call is dropped unanswered).
        let busy = request
            .extensions()
            .get::<crate::grpc::ConnInfo>()
            .and_then(|info| info.activity.as_ref())
            .map(|activity| activity.call());
        match admit(&self.access, &request) {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                // The clone that was made ready is the one that serves.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let call = inner.call(request);
                match busy {
                    None => Box::pin(call),
                    Some(busy) => Box::pin(async move {
                        let response = call.await?;
                        Ok(response.map(|body| Body::new(Busy { body, _busy: busy })))
                    }),
                }
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

/// A response body that keeps its connection counted busy until it ends.
struct Busy {
    body: Body,
    _busy: crate::grpc::limits::CallGuard,
}

impl http_body::Body for Busy {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Status>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
