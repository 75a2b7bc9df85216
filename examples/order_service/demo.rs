//! The parent process: sets up Redis and SQLite, runs both phases with worker
//! processes, prints the tables and the verdict.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::{Instant, timeout_at};

use crate::db;
use crate::report::{Phase, PhaseSummary, WorkerReport};
use crate::topology::{self, Target, Topology};

/// The one product every order is for.
const PRODUCT_ID: i64 = 1;

/// How long workers get to connect to Redis and SQLite and say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Upper bound for one phase, after `go`.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DemoArgs {
    /// Units of the product in stock at the start of each phase.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(0..=1_000_000))]
    stock: i64,
    /// Service instances (worker processes).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=32))]
    instances: u32,
    /// Orders each instance attempts.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    orders_per_instance: u32,
    /// Orders in flight at once per instance (one SQLite connection each).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: u32,
    /// Simulated work between reading and writing the stock, in ms.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=5_000))]
    work_ms: u64,
    /// Redis to lock on (single topology only); without it the demo starts its own servers on
    /// free ports.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    /// What to lock on: one node, a Sentinel set-up, a cluster, or Redlock over 5 nodes.
    #[arg(long, value_enum, default_value_t = Topology::Single)]
    topology: Topology,
    /// Draw the lock-wait distribution of both phases into this PNG file.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

/// Runs both phases. `Ok(false)` when the locked phase oversold (or the data
/// is inconsistent): the process then exits non-zero.
pub(crate) async fn run(args: DemoArgs) -> Result<bool, Box<dyn Error>> {
    let attempted = u64::from(args.instances) * u64::from(args.orders_per_instance);

    let mut private_redis = None;
    let target = match (&args.redis_url, args.topology) {
        (Some(url), Topology::Single) => Target {
            topology: Topology::Single,
            urls: vec![url.clone()],
            master_name: None,
        },
        (Some(_), other) => {
            return Err(format!(
                "REDIS_URL / --redis-url is for the single topology, not {other:?}"
            )
            .into());
        }
        (None, topology) => {
            // Blocking (it polls the servers): keep it off the runtime threads.
            let started = tokio::task::spawn_blocking(move || topology::start(topology))
                .await
                .map_err(|e| format!("could not start the servers: {e}"))?;
            let (servers, target) = started.map_err(|e| e.to_string())?;
            private_redis = Some(servers);
            target
        }
    };
    let url = target.describe();
    // Fail fast, with a clear message, before any worker starts.
    target
        .connect()
        .await
        .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;

    let dir = tempfile::Builder::new()
        .prefix("order-service-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir for the SQLite database: {e}"))?;
    let db_path = dir.path().join("shop.sqlite3");
    db::create(&db_path, PRODUCT_ID, args.stock)
        .map_err(|e| format!("cannot create {}: {e}", db_path.display()))?;

    println!(
        "order_service: product {PRODUCT_ID} with stock {}; {} instances x {} orders ({} in flight each), \
         {} ms work per order; redis {url}{}",
        args.stock,
        args.instances,
        args.orders_per_instance,
        args.concurrency.min(args.orders_per_instance),
        args.work_ms,
        if private_redis.is_some() {
            " (private servers)"
        } else {
            ""
        },
    );
    if attempted <= args.stock.unsigned_abs() {
        println!(
            "warning: {attempted} attempts cannot exceed stock {}: nothing to oversell",
            args.stock
        );
    }
    println!();

    let mut summaries = Vec::new();
    for phase in [Phase::NoLock, Phase::WithLock] {
        db::reset_at(&db_path, PRODUCT_ID, args.stock)
            .map_err(|e| format!("cannot reset {}: {e}", db_path.display()))?;
        let summary = run_phase(phase, &args, &db_path, &target, attempted).await?;
        println!("{}", summary.table());
        summaries.push(summary);
    }

    let mut ok = true;
    for s in &summaries {
        if !s.consistent() {
            ok = false;
            eprintln!(
                "error: {}: stock {} does not match {} - {} orders",
                s.phase, s.stock, s.initial_stock, s.orders
            );
        }
        match s.phase {
            Phase::NoLock if s.oversold() == 0 => eprintln!(
                "warning: the no-lock phase did not oversell this time; raise --concurrency or --work-ms"
            ),
            Phase::WithLock if s.oversold() > 0 => {
                ok = false;
                eprintln!("error: the with-lock phase oversold {} units", s.oversold());
            }
            Phase::WithLock
                if s.orders != s.initial_stock && attempted >= s.initial_stock.unsigned_abs() =>
            {
                eprintln!(
                    "warning: the with-lock phase placed {} orders, not {} ({} busy, {} failed); \
                     raise wait_ms or lower the load",
                    s.orders, s.initial_stock, s.busy, s.failed
                );
            }
            _ => {}
        }
    }
    for s in &summaries {
        println!("{}", s.summary_line());
    }
    if let Some(path) = &args.plot {
        crate::plot::draw(path, &summaries)
            .map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
        eprintln!(
            "order_service: lock-wait plot written to {}",
            path.display()
        );
    }

    drop(private_redis);
    Ok(ok)
}

struct Worker {
    instance: u32,
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

async fn run_phase(
    phase: Phase,
    args: &DemoArgs,
    db_path: &Path,
    target: &Target,
    attempted: u64,
) -> Result<PhaseSummary, Box<dyn Error>> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this program's executable: {e}"))?;

    // Start every instance; `kill_on_drop` cleans up on any early return.
    let mut workers = Vec::new();
    for instance in 1..=args.instances {
        let mut child = Command::new(&exe)
            .arg("worker")
            .args(["--instance", &instance.to_string()])
            .args(["--phase", phase.name()])
            .arg("--db")
            .arg(db_path)
            .args(target.args())
            .args(["--product-id", &PRODUCT_ID.to_string()])
            .args(["--orders", &args.orders_per_instance.to_string()])
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--work-ms", &args.work_ms.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start worker {instance} ({}): {e}", exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(format!("worker {instance}: stdin/stdout not piped").into());
        };
        workers.push(Worker {
            instance,
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        });
    }

    // Barrier: all connected, then all fire at once, like a burst of traffic
    // hitting every instance behind a load balancer.
    let ready_deadline = Instant::now() + READY_TIMEOUT;
    for w in &mut workers {
        let line = next_line(w, ready_deadline).await?;
        if line != "ready" {
            return Err(format!("worker {}: expected `ready`, got {line:?}", w.instance).into());
        }
    }
    let started = Instant::now();
    for w in &mut workers {
        w.stdin.write_all(b"go\n").await?;
        w.stdin.flush().await?;
    }

    let deadline = started + PHASE_TIMEOUT;
    let bar = progress_bar(phase, attempted);
    let mut reports = Vec::new();
    for w in &mut workers {
        // `progress N` lines (N more orders processed), then the report.
        let line = loop {
            let line = next_line(w, deadline).await?;
            match line.strip_prefix("progress ").map(str::parse::<u64>) {
                Some(Ok(n)) => bar.inc(n),
                _ => break line,
            }
        };
        reports
            .push(WorkerReport::parse(&line).map_err(|e| format!("worker {}: {e}", w.instance))?);
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    for w in &mut workers {
        let status = timeout_at(deadline, w.child.wait())
            .await
            .map_err(|_| format!("worker {} did not exit", w.instance))??;
        if !status.success() {
            return Err(format!("worker {} exited with {status}", w.instance).into());
        }
    }

    let state = db::final_state(db_path, PRODUCT_ID)
        .map_err(|e| format!("cannot read the final state: {e}"))?;
    Ok(PhaseSummary::new(
        phase, args.stock, attempted, state, &reports, elapsed,
    ))
}

/// A progress bar on stderr for one phase; indicatif draws nothing when stderr is not a
/// terminal, so piped output stays as it was.
fn progress_bar(phase: Phase, attempted: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(attempted),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix:>10} [{bar:40}] {pos}/{len} orders {elapsed}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(phase.name());
    bar
}

async fn next_line(w: &mut Worker, deadline: Instant) -> Result<String, Box<dyn Error>> {
    match timeout_at(deadline, w.stdout.next_line()).await {
        Err(_) => Err(format!("worker {} timed out", w.instance).into()),
        Ok(Err(e)) => Err(format!("worker {}: reading its output: {e}", w.instance).into()),
        Ok(Ok(None)) => {
            let status = w.child.wait().await?;
            Err(format!("worker {} exited ({status}) before reporting", w.instance).into())
        }
        Ok(Ok(Some(line))) => Ok(line),
    }
}
