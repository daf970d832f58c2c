//! The accept loop: every connection gets the limits a public HTTP server needs before any request
//! of it is read (OWASP API Security Top 10, API4:2023 "Unrestricted Resource Consumption"):
//!
//! - **Heads in time.** A request's head must arrive within [`ConnLimits::header_timeout`] of the
//!   moment the connection starts waiting for one: its opening, or the end of the previous
//!   response. hyper starts that timer whenever an HTTP/1 connection waits for a head, so it is
//!   the keep-alive idle timeout as well: idle and header-trickling connections are closed. (A
//!   slow *body* is bounded by the request timeout, 408.)
//! - **Caps.** At most [`ConnLimits::max_connections`] connections are served in all and
//!   [`ConnLimits::max_per_address`] from one client address, so file descriptors cannot run out
//!   and one address cannot take every slot.
//! - **Health at the cap.** Beyond either cap a connection is still answered, from a small reserve
//!   of [`OVERFLOW_CONNECTIONS`] with a short head timeout and no keep-alive: `/healthz` and
//!   `/readyz` as usual (an orchestrator sees the service alive during a flood instead of
//!   restarting it), anything else 503 `too_many_connections` with Retry-After. Beyond the reserve
//!   a connection is closed at once (the kernel's backlog does not fill up either).
//! - **Accept errors** (out of file descriptors) back off briefly instead of spinning.
//! - **Every error has a body.** hyper answers a request it cannot parse itself, before any
//!   service sees it: 400 (bad method, target, version or header), 414 (target beyond 65,534
//!   bytes), 431 (more than 100 header fields, or a head beyond its buffer), each with an empty
//!   body. [`JsonErrors`] writes those answers with the service's JSON error body instead.
//!
//! Only HTTP/1.1 is served: its head timeout is what closes idle connections (behind a TLS
//! terminator or a proxy, the hop to the service is HTTP/1.1 anyway).

use super::error::ApiError;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

/// The limits every connection is served under (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Longest a connection may take to send a request's head, or sit idle between requests.
    pub header_timeout: Duration,
    /// Connections served at once, in all.
    pub max_connections: usize,
    /// Connections served at once from one client address.
    pub max_per_address: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(15),
            max_connections: 4096,
            max_per_address: 512,
        }
    }
}

/// Connections answered beyond the caps (health checks, and a 503 for anything else).
pub const OVERFLOW_CONNECTIONS: usize = 64;

/// Head timeout of a connection answered beyond the caps.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// Paths a connection beyond the caps is still served.
const HEALTH_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Connections open per client address.
type Addresses = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// A connection's place under both caps; given back when the connection ends.
struct Slot {
    _permit: OwnedSemaphorePermit,
    ip: IpAddr,
    addresses: Addresses,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.addresses.lock().expect("addresses");
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A slot for a connection from `ip` under both caps, if one is free.
fn slot(total: &Arc<Semaphore>, addresses: &Addresses, ip: IpAddr, per: usize) -> Option<Slot> {
    let mut m = addresses.lock().expect("addresses");
    // No entry is made for a refused address (the map holds only addresses with a connection).
    if m.get(&ip).is_some_and(|n| *n >= per) {
        return None;
    }
    let permit = total.clone().try_acquire_owned().ok()?;
    *m.entry(ip).or_insert(0) += 1;
    drop(m);
    Some(Slot {
        _permit: permit,
        ip,
        addresses: addresses.clone(),
    })
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes, then lets requests in
/// flight finish (idle connections close at once).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let total = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let addresses: Addresses = Arc::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; pausing");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        if let Some(slot) = slot(&total, &addresses, peer.ip(), limits.max_per_address) {
            let conn = connection(limits.header_timeout, true).serve_connection(
                TokioIo::new(JsonErrors::new(stream)),
                TowerToHyperService::new(with_peer(router.clone(), peer)),
            );
            let conn = graceful.watch(conn);
            tokio::spawn(async move {
                let _ = conn.await;
                drop(slot);
            });
        } else if let Ok(permit) = overflow.clone().try_acquire_owned() {
            beyond_caps(&graceful, stream, peer, router.clone(), permit);
        } else {
            drop(stream);
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An HTTP/1.1 connection's settings.
fn connection(header_timeout: Duration, keep_alive: bool) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(keep_alive);
    b
}

/// Serves a connection beyond the caps: health checks, else 503 (see the module docs).
fn beyond_caps(
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    permit: OwnedSemaphorePermit,
) {
    let svc = tower::service_fn(move |req: Request<Incoming>| {
        let router = router.clone();
        async move {
            if HEALTH_PATHS.contains(&req.uri().path()) {
                return with_peer(router, peer).oneshot(req).await;
            }
            let e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_connections",
                "the service serves as many connections as it may (in all, or from this \
                 address); retry later, reusing a connection",
            )
            .with_retry_after(1);
            Ok::<_, Infallible>(e.into_response())
        }
    });
    let conn = connection(OVERFLOW_HEADER_TIMEOUT, false).serve_connection(
        TokioIo::new(JsonErrors::new(stream)),
        TowerToHyperService::new(svc),
    );
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        let _ = conn.await;
        drop(permit);
    });
}

/// A connection's stream that gives hyper's own parse-error answers (see the module docs) the
/// service's JSON error body. hyper writes such an answer as a head only, `content-length: 0`,
/// and closes the connection after it; every answer of the service to a 400 has a body, so a
/// bodiless 400, 414 or 431 head is hyper's. The head is replaced as a whole by one with the
/// body; hyper is told its bytes were written once the replacement is.
struct JsonErrors<S> {
    inner: S,
    /// The replacement being written: its bytes, how many are written, and how many of hyper's
    /// bytes it stands for.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<S> JsonErrors<S> {
    fn new(inner: S) -> Self {
        JsonErrors {
            inner,
            pending: None,
        }
    }
}

/// The replacement of `buf` when it starts with hyper's bodiless answer to an unparsable
/// request: the answer with a JSON body, and the length of the head it replaces.
fn parse_error_answer(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let status = match buf.get(..13)? {
        b"HTTP/1.1 400 " => StatusCode::BAD_REQUEST,
        b"HTTP/1.1 414 " => StatusCode::URI_TOO_LONG,
        b"HTTP/1.1 431 " => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        _ => return None,
    };
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = buf[..end].to_ascii_lowercase();
    if !head.windows(21).any(|w| w == b"\r\ncontent-length: 0\r\n") {
        return None;
    }
    let body = super::error::for_status(status).body().to_string();
    let answer = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    Some((answer.into_bytes(), end))
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> JsonErrors<S> {
    /// Writes what is pending; `Ready(Ok(n))` with the bytes of hyper's it stood for once done.
    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        let Some((bytes, done, stands_for)) = &mut self.pending else {
            return std::task::Poll::Ready(Ok(0));
        };
        while *done < bytes.len() {
            let n = std::task::ready!(
                std::pin::Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..])
            )?;
            if n == 0 {
                return std::task::Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        let n = *stands_for;
        self.pending = None;
        std::task::Poll::Ready(Ok(n))
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for JsonErrors<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.pending.is_none() {
            match parse_error_answer(buf) {
                Some((answer, stands_for)) => self.pending = Some((answer, 0, stands_for)),
                None => return std::pin::Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.poll_pending(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        // A head is the first slice hyper queues (it is written before anything after it).
        let first = bufs.iter().find(|b| !b.is_empty()).map(|b| &b[..]);
        if self.pending.is_some() || first.is_some_and(|b| parse_error_answer(b).is_some()) {
            return self.poll_write(cx, first.unwrap_or_default());
        }
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // A replacement is written by the write hyper repeats until it completes, never here.
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// `router` with the client's address in each request (as `ConnectInfo`, for the audit log).
fn with_peer(
    router: Router,
    peer: SocketAddr,
) -> impl tower::Service<
    Request<Incoming>,
    Response = axum::response::Response,
    Error = Infallible,
    Future = impl Future<Output = Result<axum::response::Response, Infallible>> + Send,
> + Clone
       + Send {
    tower::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        router.clone().oneshot(req.map(axum::body::Body::new))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_hold_both_caps_and_leave_no_trace() {
        let total = Arc::new(Semaphore::new(2));
        let addresses: Addresses = Arc::default();
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "192.0.2.1".parse().unwrap(),
            "192.0.2.2".parse().unwrap(),
            "192.0.2.3".parse().unwrap(),
        );
        let first = slot(&total, &addresses, a, 1).expect("free");
        assert!(slot(&total, &addresses, a, 1).is_none(), "per address");
        let second = slot(&total, &addresses, b, 1).expect("free");
        assert!(slot(&total, &addresses, c, 1).is_none(), "in all");
        // A refused address leaves no entry; a closed connection gives its place back.
        assert_eq!(addresses.lock().unwrap().len(), 2);
        drop((first, second));
        assert!(addresses.lock().unwrap().is_empty());
        assert!(slot(&total, &addresses, c, 1).is_some());
    }
}
