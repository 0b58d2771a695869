//! Log lines to stderr, set up the same way by every gpuledger binary.

/// Starts logging to stderr: `GPULEDGER_LOG` (or `RUST_LOG`) filters, default `info`;
/// `GPULEDGER_LOG_FORMAT=json` for JSON lines. Calling it again does nothing.
pub fn init() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GPULEDGER_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("GPULEDGER_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
