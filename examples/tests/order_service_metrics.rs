//! The order demo serves Prometheus metrics while it runs, and `--plot` writes a PNG.
//!
//! Runs the `order_service` example binary that `cargo test` builds beside this test
//! (`target/<profile>/examples/order_service`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn demo_binary() -> PathBuf {
    support::example_binary("order_service")
}

/// `GET /metrics`; `None` once the worker (and its exporter) is gone.
fn scrape(url: &str) -> Option<String> {
    let addr = url.strip_prefix("http://")?.split('/').next()?;
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn the_demo_serves_lock_metrics_while_it_runs_and_plots_the_waits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let png = dir.path().join("waits.png");
    let mut child = Command::new(demo_binary())
        .args([
            "--stock",
            "30",
            "--instances",
            "2",
            "--orders-per-instance",
            "30",
        ])
        .args(["--concurrency", "10", "--work-ms", "20"])
        .arg("--plot")
        .arg(&png)
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut scraped = Vec::new();
    let mut log = Vec::new();
    for line in stderr.lines() {
        let line = line.expect("stderr line");
        log.push(line.clone());
        // The workers are processes that share this stderr: two of their lines can come out
        // interleaved on one line, so every announcement in the line counts.
        const ANNOUNCED: &str = "(with-lock): Prometheus metrics on ";
        for (at, _) in line.match_indices(ANNOUNCED) {
            let Some(url) = line[at + ANNOUNCED.len()..].split_whitespace().next() else {
                continue;
            };
            // Poll this worker's endpoint until its lock metrics show (it serves from before
            // the phase starts until it exits, which takes at least 30 orders x 20 ms under
            // the lock).
            while let Some(body) = scrape(url) {
                assert!(body.starts_with("HTTP/1.1 200"), "{body}");
                if body.contains("lockcore_acquisitions_total{") {
                    scraped.push(body);
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let out = child.wait_with_output().expect("demo output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed: {stdout}\n{log:#?}");
    assert!(
        stdout.contains("with-lock: orders=30 stock=0 oversold=0"),
        "{stdout}"
    );
    assert!(
        !scraped.is_empty(),
        "no with-lock worker served lock metrics: {log:#?}"
    );
    for body in &scraped {
        assert!(body.contains("outcome=\"acquired\""), "{body}");
        assert!(body.contains("lockcore_wait_seconds"), "{body}");
        // Labelled by template, never by the rendered key.
        assert!(
            body.contains("key_template=\"order:lock:product:<product_id>\""),
            "{body}"
        );
        assert!(!body.contains("product:1\""), "{body}");
    }
    let image = std::fs::read(&png).expect("the plot was written");
    assert!(image.starts_with(b"\x89PNG"), "not a PNG");
}
