//! The two faces' connections, each bounded in time: a peer that connects
//! and then stalls (a head, a body or an HTTP/2 preface that never comes)
//! is dropped, a listener out of file descriptors backs off instead of
//! spinning, and a shutdown waits for open connections no longer than
//! [`GRACE`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Sleep, sleep, timeout};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The longest one request may take, head to answer, on either face (the
/// gRPC face's deadline per request, and what an HTTP request whose body
/// stalls is given before it is answered 408).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a connection may take to send an HTTP/1 request head, or
/// its HTTP/2 preface (the first bytes of a gRPC connection).
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest a shutdown waits for open connections to finish.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

/// The pause after a failed accept (most often: out of file descriptors),
/// so that the listener does not retry in a loop that takes a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` completes, then lets open
/// connections finish for up to [`GRACE`].
pub(crate) async fn http(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let app = app.layer(middleware::from_fn(within_request_timeout));
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("http: accept failed ({e}); backing off");
                    sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A peer that went away, or a head too slow: nothing to answer.
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = timeout(GRACE, graceful.shutdown()).await;
    Ok(())
}

/// Answers 408 for a request (its body read included) that takes longer
/// than [`REQUEST_TIMEOUT`].
async fn within_request_timeout(request: Request, next: Next) -> Response {
    match timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!("the request took longer than {REQUEST_TIMEOUT:?}\n"),
        )
            .into_response(),
    }
}

/// The gRPC face's connections: accepted with no delay, a failed accept
/// backed off rather than handed to tonic (which would retry at once), each
/// connection dropped if its first bytes do not come within
/// [`HEAD_TIMEOUT`].
pub(crate) struct Incoming {
    listener: TcpListener,
    backoff: Option<Pin<Box<Sleep>>>,
}

impl Incoming {
    pub(crate) fn new(listener: TcpListener) -> Incoming {
        Incoming {
            listener,
            backoff: None,
        }
    }
}

impl futures_core::Stream for Incoming {
    type Item = io::Result<FirstBytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(backoff) = &mut this.backoff {
                ready!(backoff.as_mut().poll(cx));
                this.backoff = None;
            }
            match ready!(this.listener.poll_accept(cx)) {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    return Poll::Ready(Some(Ok(FirstBytes::new(stream))));
                }
                Err(e) => {
                    tracing::warn!("grpc: accept failed ({e}); backing off");
                    this.backoff = Some(Box::pin(sleep(ACCEPT_BACKOFF)));
                }
            }
        }
    }
}

/// A connection whose reads fail with `TimedOut` if no byte has come
/// within [`HEAD_TIMEOUT`] of its accept (after the first byte, the HTTP/2
/// keepalive and the per-request deadline bound it).
pub(crate) struct FirstBytes {
    stream: TcpStream,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl FirstBytes {
    fn new(stream: TcpStream) -> FirstBytes {
        FirstBytes {
            stream,
            deadline: Some(Box::pin(sleep(HEAD_TIMEOUT))),
        }
    }
}

impl AsyncRead for FirstBytes {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Some(deadline) = &mut this.deadline {
            match read {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.deadline = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no bytes within the head timeout",
                    )));
                }
                _ => {}
            }
        }
        read
    }
}

impl AsyncWrite for FirstBytes {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl Connected for FirstBytes {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}
