//! Log lines to stderr, set up the same way by every gpuledger binary.

/// Starts logging to stderr: `GPULEDGER_LOG` (or `RUST_LOG`) filters, default `info`;
/// `GPULEDGER_LOG_FORMAT=json` for JSON lines. Colours only when stderr is a terminal and
/// `NO_COLOR` is unset, so redirected logs carry no escape codes. Calling it again does nothing.
pub fn init() {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GPULEDGER_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colours(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ));
    let _ = if std::env::var("GPULEDGER_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Whether log lines get ANSI colours: on a terminal, unless `NO_COLOR` is set to anything
/// non-empty (https://no-color.org).
fn colours(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colours;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some("".into())));
        assert!(!colours(true, Some("1".into())));
        assert!(!colours(false, None));
    }
}
