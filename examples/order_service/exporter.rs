//! Each worker process exposes its lock metrics (lockcore's `metrics` feature) in the
//! Prometheus text format on `127.0.0.1`, while it runs.

use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use metrics_exporter_prometheus::PrometheusBuilder;

/// Starts the exporter on a free loopback port (on the current tokio runtime) and announces
/// its URL on stderr: `order_service: <who>: Prometheus metrics on http://127.0.0.1:PORT/metrics`.
pub(crate) fn serve(who: &str) -> Result<(), Box<dyn Error>> {
    // A free port: bind port 0, read it, let it go, and bind the exporter to it.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    PrometheusBuilder::new()
        .with_http_listener(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
        .install()
        .map_err(|e| format!("{who}: cannot start the Prometheus exporter: {e}"))?;
    // One write of the whole line: stderr is unbuffered, and the workers share it, so a
    // line written in pieces can interleave with another worker's.
    let line =
        format!("order_service: {who}: Prometheus metrics on http://127.0.0.1:{port}/metrics\n");
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    Ok(())
}
