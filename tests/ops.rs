//! The operations kit (issue #7): what can be checked on this machine is checked.
//!
//! - Every YAML, JSON and TOML file in ops/ parses; the TOML settings in it are accepted by
//!   the real settings types; every `gpuledger` command line in ops/ (units, manifests, compose,
//!   runbooks) uses only subcommands and flags that `--help` lists.
//! - Every metric named by the alert rules and the Grafana dashboard is served by a running
//!   `gpuledger serve` or `gpuledger agent` (both started here, fed records, scraped), with the
//!   labels the queries match on. PromQL is parsed with a real parser, so a syntax error fails.
//! - The systemd units pass `systemd-analyze verify` (skipped loudly where it is missing).
//! - `kubectl kustomize ops/kubernetes` builds (skipped loudly where kubectl is missing).
//! - `GET /v1/checkpoints` pages on SQLite and PostgreSQL; `--publish-dir` writes every
//!   checkpoint, atomically, and the files verify as signed notes.
//!
//! Docker and Kubernetes clusters cannot run here; ops/README.md says what was and was not run.

mod common;

use common::*;
use gpuledger::core::checkpoint::verify_checkpoint;
use gpuledger::core::merkle;
use gpuledger::core::record::Role;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr};
use rust_decimal::Decimal;
use serde_json::Value as Json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ops() -> PathBuf {
    root().join("ops")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn yaml_docs(p: &Path) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(&read(p))
        .map(|d| {
            serde_yaml_ng::Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", p.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml_json(p: &Path) -> Vec<Json> {
    yaml_docs(p)
        .into_iter()
        .map(|v| serde_json::to_value(v).unwrap())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Files parse, and their settings are the program's.

#[test]
fn every_yaml_json_and_toml_file_in_ops_parses() {
    let mut parsed = BTreeMap::new();
    for p in common::files_under(&ops()) {
        let rel = p.strip_prefix(root()).unwrap().display().to_string();
        match p.extension().and_then(|e| e.to_str()) {
            Some("yml" | "yaml") => {
                let docs = yaml_docs(&p);
                assert!(!docs.is_empty(), "{rel} holds no document");
                for d in &docs {
                    assert!(d.is_mapping(), "{rel}: a document is not a mapping");
                }
                parsed.insert(rel, "yaml");
            }
            Some("json") => {
                serde_json::from_str::<Json>(&read(&p))
                    .unwrap_or_else(|e| panic!("{rel} is not valid JSON: {e}"));
                parsed.insert(rel, "json");
            }
            Some("toml") => {
                toml::from_str::<toml::Value>(&read(&p))
                    .unwrap_or_else(|e| panic!("{rel} is not valid TOML: {e}"));
                parsed.insert(rel, "toml");
            }
            _ => {}
        }
    }
    // The files this kit promises are there (and were parsed above).
    for f in [
        "ops/compose/compose.yaml",
        "ops/prometheus/prometheus.yml",
        "ops/prometheus/kubernetes.yml",
        "ops/prometheus/alerts.yml",
        "ops/prometheus/agents.json",
        "ops/grafana/dashboards/gpuledger.json",
        "ops/grafana/provisioning/datasources/prometheus.yml",
        "ops/grafana/provisioning/dashboards/gpuledger.yml",
        "ops/kubernetes/kustomization.yaml",
        "ops/kubernetes/ledger.yaml",
        "ops/kubernetes/agent.yaml",
        "ops/systemd/gpuledger.toml",
        "ops/systemd/agent.toml",
        "ops/systemd/witness.toml",
    ] {
        assert!(parsed.contains_key(f), "{f} missing; parsed {parsed:?}");
    }
}

fn k8s_docs() -> Vec<Json> {
    ["ledger.yaml", "agent.yaml"]
        .iter()
        .flat_map(|f| yaml_json(&ops().join("kubernetes").join(f)))
        .collect()
}

fn k8s(kind: &str, name: &str) -> Json {
    k8s_docs()
        .into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in ops/kubernetes"))
}

#[test]
fn settings_files_are_accepted_by_the_program() {
    use gpuledger::agent::config::AgentConfig;
    use gpuledger::server::read_config;
    // systemd: the serve settings file and the agent's file.
    let s = read_config(&ops().join("systemd/gpuledger.toml")).unwrap();
    assert!(s.publish_dir.is_some() && s.database_url.is_some());
    let a = AgentConfig::read(&ops().join("systemd/agent.toml")).unwrap();
    assert_eq!(a.metrics_listen.map(|m| m.port()), Some(9101));
    // The witness's file: its keys, and a log key that passes the witness's checks.
    let w =
        gpuledger::witness::WitnessConfigFile::read(&ops().join("systemd/witness.toml")).unwrap();
    assert!(w.name.is_some() && w.key.is_some() && w.state.is_some());
    assert_eq!(w.metrics_listen.map(|m| m.port()), Some(9102));
    gpuledger::witness::logs_from_vkeys(w.logs.iter().map(|l| l.vkey.as_str())).unwrap();
    // Kubernetes: the ConfigMaps' files.
    let dir = tempfile::tempdir().unwrap();
    let cm = k8s("ConfigMap", "gpuledger");
    let p = dir.path().join("gpuledger.toml");
    std::fs::write(&p, cm["data"]["gpuledger.toml"].as_str().unwrap()).unwrap();
    let s = read_config(&p).unwrap();
    assert_eq!(s.listen.unwrap().port(), 8080);
    assert!(
        s.database_url.is_none(),
        "the URL comes from the secret, never the ConfigMap"
    );
    let origin = cm["data"]["origin"].as_str().unwrap();
    assert!(signed_note::is_key_name_valid(origin), "{origin}");
    let cm = k8s("ConfigMap", "gpuledger-agent");
    let text = cm["data"]["agent.toml.in"]
        .as_str()
        .unwrap()
        .replace("@NODE@", "gpu-node-1.example");
    let p = dir.path().join("agent.toml");
    std::fs::write(&p, text).unwrap();
    let a = AgentConfig::read(&p).unwrap();
    assert_eq!(a.signer, "gpu-node-1.example");
    assert_eq!(a.metrics_listen.unwrap().port(), 9101);
    assert!(a.spool_dir.starts_with("/var/lib/gpuledger-agent"));
}

#[test]
fn kubernetes_manifests_have_what_the_issue_asks() {
    let d = k8s("Deployment", "gpuledger");
    let spec = &d["spec"]["template"]["spec"];
    assert!(d["spec"]["replicas"].as_u64().unwrap() >= 2);
    let c = &spec["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let init = spec["initContainers"].as_array().unwrap();
    assert!(
        init.iter()
            .any(|i| i["args"].to_string().contains("gpuledger init")),
        "an init step runs gpuledger init"
    );
    let vols = spec["volumes"].as_array().unwrap();
    assert!(vols
        .iter()
        .any(|v| v["secret"]["secretName"] == "gpuledger-log-key"));
    let env = c["env"].as_array().unwrap();
    assert!(env.iter().any(|e| e["name"] == "GPULEDGER_DATABASE_URL"
        && e["valueFrom"]["secretKeyRef"]["name"] == "gpuledger-database"));
    k8s("Service", "gpuledger");

    let ds = k8s("DaemonSet", "gpuledger-agent");
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert!(spec["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["key"] == "nvidia.com/gpu"));
    let vols = spec["volumes"].as_array().unwrap();
    assert!(vols
        .iter()
        .any(|v| v["hostPath"]["path"] == "/var/lib/gpuledger-agent"));

    match Command::new("kubectl")
        .args(["kustomize"])
        .arg(ops().join("kubernetes"))
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "kubectl kustomize ops/kubernetes: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(_) => eprintln!("\n*** SKIPPED kubectl kustomize: kubectl is not installed ***"),
    }
}

// ---------------------------------------------------------------------------------------------
// Every gpuledger command line in ops/ uses real subcommands and flags.

/// `gpuledger ARGS --help`, or `None` if that is no command.
fn help(args: &[&str]) -> Option<String> {
    let out = bin().args(args).arg("--help").output().unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

/// Checks one command line (the words after `gpuledger`): the subcommand exists and every
/// `--flag` is in its help. Returns an error naming what is wrong.
fn check_invocation(words: &[String]) -> Result<(), String> {
    let sub: Vec<&str> = words
        .iter()
        .take_while(|w| !w.starts_with('-'))
        .take(2)
        .map(String::as_str)
        .collect();
    // `token create`: the longest prefix that is a command.
    let (cmd, text) = (1..=sub.len())
        .rev()
        .find_map(|n| help(&sub[..n]).map(|h| (sub[..n].join(" "), h)))
        .ok_or_else(|| format!("`gpuledger {}` is no command", words.join(" ")))?;
    for w in words.iter().filter(|w| w.starts_with("--")) {
        let flag = w.split('=').next().unwrap();
        if !text
            .split(|c: char| c.is_whitespace() || c == ',')
            .any(|t| t == flag)
        {
            return Err(format!("`gpuledger {cmd}` has no flag {flag}"));
        }
    }
    Ok(())
}

/// Splits text into `gpuledger` invocations: the words after each `gpuledger` (or
/// `/usr/local/bin/gpuledger`) that starts a command, up to a shell separator.
fn invocations(text: &str) -> Vec<Vec<String>> {
    let words: Vec<String> = text
        .split(|c: char| c.is_whitespace() || c == '`' || c == '"' || c == '\'' || c == '(')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if w != "gpuledger" && w != "/usr/local/bin/gpuledger" {
            continue;
        }
        let rest: Vec<String> = words[i + 1..]
            .iter()
            .take_while(|w| {
                !matches!(w.as_str(), "&&" | "||" | ";" | "|" | ">" | "\\")
                    && !w.ends_with(';')
                    && !w.starts_with('#')
            })
            .cloned()
            .collect();
        // Only lines that run it: a subcommand word follows (prose mentions are skipped).
        if rest.first().is_some_and(|s| {
            s.chars().all(|c| c.is_ascii_lowercase() || c == '-') && help(&[s.as_str()]).is_some()
        }) {
            out.push(rest);
        }
    }
    out
}

/// Command lines in ops/: systemd ExecStart, Kubernetes container args, compose commands, and
/// the code blocks of the runbooks and READMEs.
fn command_lines() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for p in common::files_under(&ops()) {
        let rel = p.strip_prefix(root()).unwrap().display().to_string();
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        let text = read(&p);
        let mut push = |v: Vec<String>| out.push((rel.clone(), v));
        match ext {
            "service" => {
                for l in text.lines().filter(|l| l.starts_with("ExecStart=")) {
                    for v in invocations(l.trim_start_matches("ExecStart=")) {
                        push(v);
                    }
                }
            }
            "md" => {
                // Fenced code blocks only.
                let mut inside = false;
                for l in text.lines() {
                    if l.trim_start().starts_with("```") {
                        inside = !inside;
                    } else if inside {
                        for v in invocations(l) {
                            push(v);
                        }
                    }
                }
            }
            "yml" | "yaml" => {
                for doc in yaml_json(&p) {
                    let mut stack = vec![doc];
                    while let Some(v) = stack.pop() {
                        match v {
                            Json::Object(m) => {
                                for (k, v) in m {
                                    // Container args and compose commands (the image's
                                    // entrypoint is gpuledger).
                                    if (k == "args" || k == "command") && v.is_array() {
                                        let words: Vec<String> = v
                                            .as_array()
                                            .unwrap()
                                            .iter()
                                            .filter_map(|w| w.as_str().map(str::to_owned))
                                            .collect();
                                        let first = words.first().cloned().unwrap_or_default();
                                        if help(&[first.as_str()]).is_some() {
                                            push(words.clone());
                                        }
                                        for w in &words {
                                            for inv in invocations(w) {
                                                push(inv);
                                            }
                                        }
                                    } else {
                                        stack.push(v);
                                    }
                                }
                            }
                            Json::Array(a) => stack.extend(a),
                            _ => {}
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_gpuledger_command_in_ops_exists_with_its_flags() {
    let lines = command_lines();
    let mut failures = Vec::new();
    for (file, words) in &lines {
        if let Err(e) = check_invocation(words) {
            failures.push(format!("{file}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Not vacuous: the units, manifests and runbooks were all found.
    let seen: BTreeSet<&str> = lines
        .iter()
        .map(|(_, w)| w[0].as_str())
        .collect::<BTreeSet<_>>();
    for sub in ["serve", "agent", "init", "verify-log", "keygen"] {
        assert!(
            seen.contains(sub),
            "no `gpuledger {sub}` found; saw {seen:?}"
        );
    }
    assert!(lines.len() >= 12, "{lines:?}");
    // And the checker can fail.
    let w = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    assert!(check_invocation(&w("serve --listen x")).is_ok());
    assert!(check_invocation(&w("serve --publish-directory x")).is_err());
    assert!(check_invocation(&w("token create --role admin")).is_ok());
    assert!(check_invocation(&w("verify --log x")).is_err());
}

#[test]
fn every_environment_variable_in_ops_is_read_by_the_program() {
    let mut helps = String::new();
    for sub in ["serve", "init", "agent", "verify-log", "market"] {
        helps += &help(&[sub]).unwrap();
    }
    helps += &help(&["witness", "serve"]).unwrap();
    // Read by the logging set-up (docs/CONFIGURATION.md), not a flag; and the compose file's
    // own variable for the database password.
    let outside_flags = [
        "GPULEDGER_LOG",
        "GPULEDGER_LOG_FORMAT",
        "GPULEDGER_DB_PASSWORD",
    ];
    let mut seen = BTreeSet::new();
    for p in common::files_under(&ops()) {
        let text = read(&p);
        for v in text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("GPULEDGER_"))
        {
            seen.insert(v.to_owned());
            assert!(
                helps.contains(v) || outside_flags.contains(&v),
                "{}: {v} is read by no command",
                p.display()
            );
        }
    }
    assert!(seen.contains("GPULEDGER_DATABASE_URL") && seen.contains("GPULEDGER_PUBLISH_DIR"));
}

// ---------------------------------------------------------------------------------------------
// Alert rules and dashboard: PromQL parses, and every metric is served.

/// A metric a query selects, with the label matchers it uses.
#[derive(Debug, Clone)]
struct Selected {
    name: String,
    /// (label, Some(value)) for `=` matchers, (label, None) for the others.
    labels: Vec<(String, Option<String>)>,
}

fn selected(e: &Expr, out: &mut Vec<Selected>) {
    let mut vs = |v: &promql_parser::parser::VectorSelector| {
        let mut name = v.name.clone();
        let mut labels = Vec::new();
        for m in &v.matchers.matchers {
            if m.name == "__name__" {
                name = Some(m.value.clone());
            } else {
                let value = matches!(m.op, MatchOp::Equal).then(|| m.value.clone());
                labels.push((m.name.clone(), value));
            }
        }
        out.push(Selected {
            name: name.expect("a selector without a metric name"),
            labels,
        });
    };
    match e {
        Expr::VectorSelector(v) => vs(v),
        Expr::MatrixSelector(m) => vs(&m.vs),
        Expr::Aggregate(a) => {
            selected(&a.expr, out);
            if let Some(p) = &a.param {
                selected(p, out);
            }
        }
        Expr::Unary(u) => selected(&u.expr, out),
        Expr::Binary(b) => {
            selected(&b.lhs, out);
            selected(&b.rhs, out);
        }
        Expr::Paren(p) => selected(&p.expr, out),
        Expr::Subquery(s) => selected(&s.expr, out),
        Expr::Call(c) => {
            for a in &c.args.args {
                selected(a, out);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Parses a PromQL expression (Grafana's variables replaced by values of their kind) and
/// returns what it selects.
fn promql(expr: &str) -> Result<Vec<Selected>, String> {
    let e = expr
        .replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$instance", ".*")
        .replace("$agent", ".*");
    let ast = parser::parse(&e).map_err(|m| format!("{expr:?}: {m}"))?;
    let mut out = Vec::new();
    selected(&ast, &mut out);
    Ok(out)
}

/// Every query of the alert rules and the dashboard, with where it is.
fn queries() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rules = &yaml_json(&ops().join("prometheus/alerts.yml"))[0];
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            out.push((
                format!("alert {}", r["alert"].as_str().unwrap()),
                r["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let dash: Json =
        serde_json::from_str(&read(&ops().join("grafana/dashboards/gpuledger.json"))).unwrap();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                format!("panel {:?}", p["title"].as_str().unwrap()),
                t["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    // Template variables: label_values(METRIC, LABEL).
    for v in dash["templating"]["list"].as_array().unwrap() {
        let q = v["definition"].as_str().unwrap();
        let inner = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {q:?} is not label_values(METRIC, LABEL)"));
        let (metric, _label) = inner.split_once(',').unwrap();
        out.push((format!("variable {}", v["name"]), metric.trim().to_owned()));
    }
    out
}

/// Sample names and their labels (name → label → values) in a Prometheus text exposition.
fn exposition(text: &str) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let entry = out.entry(line[..end].to_owned()).or_default();
        if line[end..].starts_with('{') {
            let close = line.rfind('}').unwrap();
            // Label values here never hold `",` (ours are slugs, routes and numbers).
            for pair in line[end + 1..close].split("\",") {
                if let Some((k, v)) = pair.split_once("=\"") {
                    entry
                        .entry(k.trim().to_owned())
                        .or_default()
                        .insert(v.trim_end_matches('"').to_owned());
                }
            }
        }
    }
    out
}

/// What is wrong with the queries against a scrape: names not served, labels not on them,
/// `=` values never seen.
fn missing(
    queries: &[(String, String)],
    served: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
) -> Vec<String> {
    // Written by Prometheus for every target, or attached by it to every series.
    const FROM_PROMETHEUS: [&str; 1] = ["up"];
    const TARGET_LABELS: [&str; 4] = ["instance", "job", "pod", "node"];
    let mut bad = Vec::new();
    for (at, q) in queries {
        let sel = match promql(q) {
            Ok(s) => s,
            Err(e) => {
                bad.push(format!("{at}: does not parse: {e}"));
                continue;
            }
        };
        if sel.is_empty() {
            bad.push(format!("{at}: selects no metric: {q}"));
        }
        for s in sel {
            if FROM_PROMETHEUS.contains(&s.name.as_str()) {
                continue;
            }
            let Some(labels) = served.get(&s.name) else {
                bad.push(format!("{at}: {} is not served", s.name));
                continue;
            };
            for (l, v) in &s.labels {
                if TARGET_LABELS.contains(&l.as_str()) {
                    continue;
                }
                match (labels.get(l), v) {
                    (None, _) => bad.push(format!("{at}: {} has no label {l}", s.name)),
                    (Some(vals), Some(v)) if !vals.contains(v) => bad.push(format!(
                        "{at}: {} never has {l}={v:?} (seen {vals:?})",
                        s.name
                    )),
                    _ => {}
                }
            }
        }
    }
    bad
}

#[test]
fn promql_checker_finds_names_and_can_fail() {
    let s = promql(
        r#"histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{x="1",instance=~"$instance"}[$__rate_interval]))) > 1 and b / on(instance) {__name__="c"}"#,
    )
    .unwrap();
    let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a_seconds_bucket", "b", "c"]);
    assert_eq!(s[0].labels[0], ("x".into(), Some("1".into())));
    assert!(promql("rate(x[5m]").is_err(), "a syntax error is found");
    let served =
        exposition("# TYPE a_seconds histogram\na_seconds_bucket{le=\"1\",x=\"1\"} 3\nb 1\n");
    let q = |e: &str| vec![("q".to_owned(), e.to_owned())];
    assert!(missing(&q("rate(a_seconds_bucket{x=\"1\"}[5m])"), &served).is_empty());
    assert_eq!(
        missing(&q("rate(a_seconds[5m])"), &served).len(),
        1,
        "the bare histogram name is no series"
    );
    assert_eq!(
        missing(&q("b{y=\"2\"}"), &served).len(),
        1,
        "a label it does not have"
    );
    assert_eq!(
        missing(&q("a_seconds_bucket{x=\"2\"}"), &served).len(),
        1,
        "a value never seen"
    );
    assert!(missing(&q("up == 0"), &served).is_empty());
}

#[test]
fn alert_rules_are_complete_and_point_at_runbooks() {
    let rules = &yaml_json(&ops().join("prometheus/alerts.yml"))[0];
    let mut names = BTreeSet::new();
    for g in rules["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            let name = r["alert"].as_str().unwrap();
            assert!(names.insert(name.to_owned()), "{name} twice");
            let sev = r["labels"]["severity"].as_str().unwrap();
            assert!(["warning", "critical"].contains(&sev), "{name}: {sev}");
            assert!(r["annotations"]["summary"].is_string(), "{name}");
            // ops/runbooks/alerts.md, or the witness's own runbook for the witness's alerts.
            let link = r["annotations"]["runbook"].as_str().unwrap();
            let (file, anchor) = link
                .split_once('#')
                .filter(|(f, _)| ["ops/runbooks/alerts.md", "ops/runbooks/witness.md"].contains(f))
                .unwrap_or_else(|| panic!("{name}: runbook {link}"));
            let runbook = read(&root().join(file)).to_lowercase();
            assert!(
                runbook.contains(&format!("## {anchor}\n")),
                "{name}: {file} has no section {anchor}"
            );
        }
    }
    // What the issue asks to alert on.
    for needle in [
        "gpuledger_records_total{outcome=\"rejected\"}",
        "gpuledger_sequencer_queue_depth",
        "gpuledger_commit_seconds_bucket",
        "gpuledger_checkpoint_age_seconds",
        "gpuledger_agent_spool_pending_records",
        "gpuledger_agent_dead_letters_total",
        "gpuledger_agent_last_success_timestamp_seconds",
        "gpuledger_filesystem_available_bytes",
        "gpuledger_agent_spool_filesystem_available_bytes",
        "gpuledger_witness_server_fork_evidence_total",
        "gpuledger_witness_server_last_cosignature_timestamp_seconds",
    ] {
        assert!(
            queries()
                .iter()
                .any(|(a, q)| a.starts_with("alert") && q.contains(needle)),
            "no alert on {needle}"
        );
    }
    // The dashboard uses the provisioned datasource.
    let ds = &yaml_json(&ops().join("grafana/provisioning/datasources/prometheus.yml"))[0];
    let uid = ds["datasources"][0]["uid"].as_str().unwrap();
    let dash = read(&ops().join("grafana/dashboards/gpuledger.json"));
    let dash: Json = serde_json::from_str(&dash).unwrap();
    for p in dash["panels"].as_array().unwrap() {
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], uid, "panel {}", p["title"]);
        }
    }
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A log with `node` registered, and tenant-a's lease l-a of the node's four H20-96G GPUs
/// (those [`spawn_agent`] simulates and bills under l-a), its log key in a file; returns (db,
/// dir, log key path).
fn ledger_with_node(node: &str) -> (TestDb, tempfile::TempDir, PathBuf) {
    use gpuledger::core::record::{Body, TenantRegistered};
    let db = common::sqlite();
    let ledger = open(&db);
    signer(&ledger, node, Role::Node);
    ledger
        .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
            tenant: "tenant-a".into(),
        }))
        .unwrap();
    lease_with(
        &ledger,
        "l-a",
        "tenant-a",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[(node, "H20-96G", 4)],
    );
    drop(ledger);
    let dir = tempfile::tempdir().unwrap();
    let key = log_key_file(dir.path());
    (db, dir, key)
}

/// Starts `gpuledger serve` checkpointing every second into `publish`; returns it and its
/// base URL.
fn serve_publishing(url: &str, log_key: &Path, publish: &Path) -> (Proc, String) {
    serve_publishing_with(url, log_key, publish, "")
}

/// [`serve_publishing`] with `more` (further `[[witnesses]]` entries) in its settings file.
fn serve_publishing_with(url: &str, log_key: &Path, publish: &Path, more: &str) -> (Proc, String) {
    // A witness nobody answers for (port 9), so the per-witness metrics are served too.
    let config = publish.with_extension("witnesses.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "[[witnesses]]\nname = \"witness.example.org\"\n\
             vkey = \"witness.example.org+701d0dd8+BOpKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs\"\n\
             url = \"http://127.0.0.1:9\"\n{more}"
        ),
    )
    .unwrap();
    // A mirror too, so its metrics are served.
    let mirror = publish.with_extension("mirror");
    let args = [
        "--checkpoint-interval-seconds",
        "1",
        "--workers",
        "1",
        "--publish-dir",
        publish.to_str().unwrap(),
        "--mirror-dir",
        mirror.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    let (child, base) = spawn_serve(url, log_key, 0, &args);
    (Proc(child), base)
}

/// Starts `gpuledger agent` on simulated GPUs with its metrics listener on a free port;
/// returns it and the listener's base URL.
fn spawn_agent(dir: &Path, node: &str, server: &str) -> (Proc, String) {
    let cfg = write_agent_config(
        &dir.join(node),
        node,
        server,
        gpuledger::sample::REGION,
        "[[lease]]\nid = \"l-a\"\ntenant = \"tenant-a\"\ngpus = [0, 1, 2, 3]\n",
        r#"metrics_listen = "127.0.0.1:1"

[collector]
kind = "simulated"
gpus = [{ model = "H20-96G", count = 4, idle_watts = 60, max_watts = "400" }]

[limits]
max_spool_records = 5000
max_backoff_seconds = 1
"#,
    );
    // The flag wins over the file's metrics_listen (port 1 would fail to bind).
    let mut child = bin()
        .args(["agent", "--config"])
        .arg(&cfg)
        .args(["--metrics-listen", "127.0.0.1:0"])
        .env("GPULEDGER_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The line comes once the listener is bound, maybe after the first `spooled` lines.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("the agent ended").unwrap();
        if let Some(b) = line.strip_prefix("metrics listening on ") {
            break b.to_owned();
        }
        assert!(line.starts_with("spooled seq "), "agent said {line:?}");
    };
    std::thread::spawn(move || lines.for_each(drop));
    (Proc(child), base)
}

/// Starts `gpuledger witness serve` following the test log (its key from `witness keygen`),
/// with its metrics on a listener of their own; returns it, the `[[witnesses]]` entry that
/// attaches it to `serve`, its base URL and the metrics listener's.
fn spawn_witness(dir: &Path) -> (Proc, String, String, String) {
    let key = dir.join("witness.key");
    let out = bin()
        .args(["witness", "keygen", "--name", "witness.test/ops", "--key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vkey = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let log_vkey = gpuledger::core::checkpoint::LogSigner::new(sample::ORIGIN, log_key())
        .unwrap()
        .verifier_key();
    let mut child = bin()
        .args(["witness", "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--metrics-listen",
            "127.0.0.1:0",
            "--name",
            "witness.test/ops",
        ])
        .arg("--key")
        .arg(&key)
        .arg("--state")
        .arg(dir.join("witness-state.db"))
        .args(["--log", &log_vkey])
        .env("GPULEDGER_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = |prefix: &str| {
        let line = lines.next().expect("the witness ended").unwrap();
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("witness said {line:?}"))
            .to_owned()
    };
    let base = next("listening on ");
    let metrics = next("metrics listening on ");
    let entry = format!(
        "\n[[witnesses]]\nname = \"witness.test/ops\"\nvkey = \"{vkey}\"\nurl = \"{base}\"\n"
    );
    (Proc(child), entry, base, metrics)
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn every_metric_of_the_alerts_and_dashboard_is_served() {
    let node = "node-ops-1";
    let (db, dir, key) = ledger_with_node(node);
    let publish = dir.path().join("publish");
    let (_witness, entry, witness_public, witness_base) = spawn_witness(dir.path());
    let (_serve, base) = serve_publishing_with(&db.url, &key, &publish, &entry);
    let (_agent, agent_base) = spawn_agent(dir.path(), node, &base);
    let ledger = Http::new(&base);
    let agent = Http::new(&agent_base);
    let witness = Http::new(&witness_base);
    let metrics = |h: &Http| h.get("/metrics", None).text();

    // Records flow: the agent's are accepted; one from an unknown signer is rejected.
    wait_for("accepted records", Duration::from_secs(30), || {
        value(
            &metrics(&agent),
            "gpuledger_agent_records_total{outcome=\"accepted\"}",
        )
        .unwrap_or(0.0)
            > 0.0
    });
    let stranger = sample::key("stranger");
    let env = sample::usage("stranger", &stranger, 1, "tenant-a", Decimal::ONE, slot(1));
    let r = ledger.post_records(&[env]);
    assert_eq!(r["outcomes"][0]["reason"], "unknown_signer", "{r}");
    wait_for(
        "a checkpoint and its publication",
        Duration::from_secs(20),
        || {
            let m = metrics(&ledger);
            m.contains("gpuledger_checkpoint_age_seconds ")
                && value(&m, "gpuledger_checkpoint_published_size").unwrap_or(0.0) > 0.0
                && value(&m, "gpuledger_mirror_size").unwrap_or(0.0) > 0.0
        },
    );

    // The witness cosigns the log's checkpoints as they come.
    let cosigned = format!(
        "gpuledger_witness_server_cosigned_size{{origin=\"{}\"}}",
        sample::ORIGIN
    );
    wait_for("a cosigned checkpoint", Duration::from_secs(30), || {
        value(&metrics(&witness), &cosigned).unwrap_or(0.0) > 0.0
    });

    let ledger_text = metrics(&ledger);
    let agent_text = metrics(&agent);
    let witness_text = metrics(&witness);
    let mut served = exposition(&ledger_text);
    served.extend(exposition(&agent_text));
    served.extend(exposition(&witness_text));

    let qs = queries();
    let bad = missing(&qs, &served);
    assert!(
        bad.is_empty(),
        "{}\n\nserved: {:?}",
        bad.join("\n"),
        served.keys().collect::<Vec<_>>()
    );
    // Not vacuous: both processes' metrics are used, and many of them.
    let used: BTreeSet<String> = qs
        .iter()
        .flat_map(|(_, q)| promql(q).unwrap())
        .map(|s| s.name)
        .collect();
    assert!(used.len() >= 20, "{used:?}");
    assert!(used.iter().any(|n| n.starts_with("gpuledger_agent_")));
    assert!(used.iter().any(|n| n.starts_with("gpuledger_commit_")));
    assert!(used
        .iter()
        .any(|n| n.starts_with("gpuledger_witness_server_")));

    // The witness's numbers are real: it cosigned, refused nothing, and the log's view of it
    // agrees with its own.
    let w = |s: &str| value(&witness_text, s).unwrap_or_else(|| panic!("{s} in\n{witness_text}"));
    assert!(w("gpuledger_witness_server_requests_total{outcome=\"cosigned\"}") >= 1.0);
    assert_eq!(
        w("gpuledger_witness_server_requests_total{outcome=\"error\"}"),
        0.0
    );
    let origin = |n: &str| format!("{n}{{origin=\"{}\"}}", sample::ORIGIN);
    assert_eq!(
        w(&origin("gpuledger_witness_server_fork_evidence_total")),
        0.0
    );
    let now = Timestamp::now().unix() as f64;
    assert!(
        (now - w(&origin(
            "gpuledger_witness_server_last_cosignature_timestamp_seconds"
        )))
        .abs()
            < 60.0
    );
    // Its metrics are on the metrics listener alone, and in a recorder of its own.
    assert_eq!(Http::new(&witness_public).get("/metrics", None).status, 404);
    assert!(!witness_text.contains("gpuledger_http_requests_total"));

    // The agent's numbers are real: what it delivered, its bound, a recent success.
    let v = |s: &str| value(&agent_text, s).unwrap_or_else(|| panic!("{s} in\n{agent_text}"));
    assert!(
        v("gpuledger_agent_records_spooled_total")
            >= v("gpuledger_agent_records_total{outcome=\"accepted\"}")
    );
    assert!(v("gpuledger_agent_records_sent_total") >= 1.0);
    assert_eq!(v("gpuledger_agent_spool_max_records"), 5000.0);
    assert_eq!(v("gpuledger_agent_dead_letters_total"), 0.0);
    assert_eq!(v("gpuledger_agent_spool_full"), 0.0);
    assert!((now - v("gpuledger_agent_last_success_timestamp_seconds")).abs() < 60.0);
    assert!(v("gpuledger_agent_spool_filesystem_available_bytes") > 0.0);
    assert!(agent_text.contains("gpuledger_agent_send_seconds_bucket{le="));
    // And the ledger's disk gauge for SQLite.
    assert!(ledger_text.contains("gpuledger_filesystem_available_bytes{volume=\"database\"}"));
}

// ---------------------------------------------------------------------------------------------
// systemd units.

/// `systemd-analyze verify` of the units in `dir`: `Ok(output)` when it ran, `Err` when the
/// tool is missing. Its exit status is 0 even for unknown keys and bad values (it only warns),
/// so a clean unit is one with no output at all.
fn systemd_verify(units: &[PathBuf]) -> Result<(bool, String), ()> {
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(units)
        .output()
        .map_err(|_| ())?;
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Ok((out.status.success(), text))
}

#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let dir = tempfile::tempdir().unwrap();
    let mut units = Vec::new();
    for name in [
        "gpuledger.service",
        "gpuledger-agent.service",
        "gpuledger-witness.service",
    ] {
        let text = read(&ops().join("systemd").join(name));
        // `verify` checks that ExecStart's program exists: point it at the binary under test.
        assert!(
            text.contains("ExecStart=/usr/local/bin/gpuledger "),
            "{name}"
        );
        for must in [
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "PrivateTmp=yes",
            "CapabilityBoundingSet=\n",
            "StateDirectory=",
            "User=gpuledger",
        ] {
            assert!(text.contains(must), "{name} lacks {must}");
        }
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            text.replace("/usr/local/bin/gpuledger", env!("CARGO_BIN_EXE_gpuledger")),
        )
        .unwrap();
        units.push(p);
    }
    let Ok((ok, out)) = systemd_verify(&units) else {
        eprintln!("\n*** SKIPPED systemd-analyze verify: systemd-analyze is not installed ***");
        return;
    };
    assert!(
        ok && out.trim().is_empty(),
        "systemd-analyze verify:\n{out}"
    );
    // The check can fail: a misspelt setting is reported.
    let bad = dir.path().join("bad.service");
    std::fs::write(
        &bad,
        read(&units[0]).replace("ProtectSystem=strict", "ProtectSystem=strictest"),
    )
    .unwrap();
    let (_, out) = systemd_verify(&[bad]).unwrap();
    assert!(
        out.contains("ProtectSystem") || out.contains("protect system"),
        "{out}"
    );
    // The users the units run as are declared for systemd-sysusers.
    let sysusers = read(&ops().join("systemd/gpuledger.sysusers.conf"));
    for u in ["u gpuledger ", "u gpuledger-agent ", "u gpuledger-witness "] {
        assert!(sysusers.contains(u), "{u}");
    }
}

// ---------------------------------------------------------------------------------------------
// GET /v1/checkpoints and --publish-dir.

/// Appends `n` usage records of `node` from seq `from`, then signs a checkpoint.
fn grow(
    ledger: &gpuledger::store::Ledger,
    key: &ed25519_dalek::SigningKey,
    from: u64,
    n: u64,
) -> u64 {
    let batch = usage_run("node-a", key, "tenant-a", from..from + n);
    let outcomes = ledger.append(batch).unwrap();
    assert!(outcomes.iter().all(|o| o.index().is_some()), "{outcomes:?}");
    ledger.checkpoint().unwrap().0
}

both_backends!(checkpoints_are_listed_and_paged, |db: &TestDb| {
    let ledger = open(db);
    // Opening a new log signs its first checkpoint (of the log policy entry).
    let opened = ledger
        .reads()
        .latest_checkpoint()
        .unwrap()
        .expect("signed on open")
        .0;
    let key = signer(&ledger, "node-a", Role::Node);
    parties_on(&ledger, &["tenant-a"], &["node-a"]);
    let mut sizes = vec![opened, ledger.checkpoint().unwrap().0];
    for round in 0..4 {
        sizes.push(grow(&ledger, &key, 1 + round * 3, 3));
    }
    assert_eq!(sizes.len(), 6);
    let vkey = ledger.info().verifier_key.clone();
    let roots: Vec<String> = sizes
        .iter()
        .map(|s| merkle::encode_hash(&ledger.reads().root_at(*s).unwrap()))
        .collect();
    drop(ledger);
    let dir = tempfile::tempdir().unwrap();
    let key_path = log_key_file(dir.path());
    // A long interval: the server signs nothing new while the test reads.
    let (child, base) = spawn_serve(
        &db.url,
        &key_path,
        0,
        &["--checkpoint-interval-seconds", "3600", "--workers", "1"],
    );
    let _serve = Proc(child);
    let h = Http::new(&base);
    let page = |q: &str| h.get(&format!("/v1/checkpoints{q}"), None);
    let sizes_of = |v: &Json| each_u64(&v["checkpoints"], "/size");

    // Newest first, every field right, every note verifies with the log's verifier key.
    let all = page("").ok_json(200);
    let mut newest_first = sizes.clone();
    newest_first.reverse();
    assert_eq!(sizes_of(&all), newest_first);
    assert!(all["next"].is_null());
    for c in all["checkpoints"].as_array().unwrap() {
        let size = c["size"].as_u64().unwrap();
        let i = sizes.iter().position(|s| *s == size).unwrap();
        assert_eq!(c["root"], roots[i].as_str());
        let cp = verify_checkpoint(c["note"].as_str().unwrap().as_bytes(), &vkey).unwrap();
        assert_eq!(cp.size(), size);
        assert_eq!(merkle::encode_hash(cp.hash()), roots[i]);
        let at = Timestamp::parse(c["signed_at"].as_str().unwrap()).unwrap();
        assert!(at.seconds_until(Timestamp::now()).abs() < 600);
    }

    // Paging back in time with `next`, two at a time, visits every checkpoint once.
    let mut seen = Vec::new();
    let mut next = Some("/v1/checkpoints?limit=2".to_owned());
    while let Some(path) = next {
        let page = h.get(&path, None).ok_json(200);
        assert!(page["checkpoints"].as_array().unwrap().len() <= 2);
        seen.extend(sizes_of(&page));
        next = page["next"].as_str().map(str::to_owned);
        assert!(seen.len() <= sizes.len() + 2, "paging does not end");
    }
    assert_eq!(seen, newest_first);

    // Following the log: after a size, oldest first.
    let after = page(&format!("?after={}&limit=3", sizes[1])).ok_json(200);
    assert_eq!(sizes_of(&after), sizes[2..5]);
    assert_eq!(
        after["next"].as_str().unwrap(),
        format!("/v1/checkpoints?after={}&limit=3", sizes[4])
    );
    for (q, want) in [
        (format!("?after={}", sizes[4]), &sizes[5..]),
        (format!("?after={}", sizes[5]), &[][..]),
        (format!("?before={}&limit=1", sizes[3]), &sizes[2..3]),
    ] {
        assert_eq!(sizes_of(&page(&q).ok_json(200)), want, "{q}");
    }

    // Bad parameters are 400 problems naming the parameter.
    for (q, param) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?after=x", "after"),
        // Sizes are bounded (so `after + 1` cannot overflow).
        ("?after=18446744073709551615", "after"),
        ("?before=-1", "before"),
        ("?after=1&before=9", "before"),
    ] {
        let r = page(q);
        assert_eq!(r.status, 400, "{q}: {}", r.lossy());
        assert!(r.lossy().contains(param), "{q}: {}", r.lossy());
    }
});

fn published(dir: &Path) -> BTreeMap<u64, String> {
    std::fs::read_dir(dir.join("checkpoints"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            let size = name
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("stray file checkpoints/{name}"));
            (size, read(&e.path()))
        })
        .collect()
}

both_backends!(publish_dir_gets_every_checkpoint, |db: &TestDb| {
    use std::os::unix::fs::PermissionsExt;
    let ledger = open(db);
    let opened = ledger
        .reads()
        .latest_checkpoint()
        .unwrap()
        .expect("signed on open")
        .0;
    let key = signer(&ledger, "node-a", Role::Node);
    parties_on(&ledger, &["tenant-a"], &["node-a"]);
    let mut sizes = vec![opened, ledger.checkpoint().unwrap().0];
    sizes.push(grow(&ledger, &key, 1, 4));
    sizes.push(grow(&ledger, &key, 5, 4));
    let vkey = ledger.info().verifier_key.clone();
    let dir = tempfile::tempdir().unwrap();
    let key_path = log_key_file(dir.path());
    let publish = dir.path().join("www/log");
    let (serve, _base) = serve_publishing(&db.url, &key_path, &publish);

    // The history is back-filled and the latest is `checkpoint`.
    wait_for(
        "the history in checkpoints/",
        Duration::from_secs(20),
        || publish.join("checkpoint").exists() && published(&publish).len() == sizes.len(),
    );
    let files = published(&publish);
    assert_eq!(files.keys().copied().collect::<Vec<_>>(), sizes);
    for (size, note) in &files {
        let cp = verify_checkpoint(note.as_bytes(), &vkey).unwrap();
        assert_eq!(cp.size(), *size);
        assert_eq!(*cp.hash(), ledger.reads().root_at(*size).unwrap());
    }
    let latest = read(&publish.join("checkpoint"));
    assert_eq!(
        verify_checkpoint(latest.as_bytes(), &vkey).unwrap().size(),
        *sizes.last().unwrap()
    );
    let mode = std::fs::metadata(publish.join("checkpoint"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "public files are world-readable");

    // The log grows while serving (another writer on the same database): the new checkpoint
    // appears in both places.
    sizes.push(grow(&ledger, &key, 9, 5));
    let last = *sizes.last().unwrap();
    wait_for("the new checkpoint", Duration::from_secs(20), || {
        verify_checkpoint(read(&publish.join("checkpoint")).as_bytes(), &vkey)
            .map(|c| c.size() == last)
            .unwrap_or(false)
    });
    assert!(published(&publish).contains_key(&last));
    // Nothing half-written is left behind.
    for d in [publish.clone(), publish.join("checkpoints")] {
        for e in std::fs::read_dir(&d).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            assert!(
                !n.ends_with(".tmp"),
                "temporary file {n} left in {}",
                d.display()
            );
        }
    }
    drop(serve);

    // A publish directory that cannot be made stops the start with a message naming it.
    let blocker = dir.path().join("not-a-dir");
    std::fs::write(&blocker, "x").unwrap();
    let out = bin()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db.url,
            "--log-key",
        ])
        .arg(&key_path)
        .arg("--publish-dir")
        .arg(blocker.join("sub"))
        .env("GPULEDGER_LOG", "error")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not-a-dir"), "{err}");
});

#[test]
fn publish_dir_resolves_flag_over_environment_over_file() {
    use gpuledger::server::ServeSettings;
    let file = ServeSettings {
        publish_dir: Some("/from/file".into()),
        ..Default::default()
    };
    assert_eq!(
        ServeSettings::default().resolve(file.clone()).publish_dir,
        Some(PathBuf::from("/from/file"))
    );
    let flag = ServeSettings {
        publish_dir: Some("/from/flag".into()),
        ..Default::default()
    };
    assert_eq!(
        flag.resolve(file).publish_dir,
        Some(PathBuf::from("/from/flag"))
    );
    assert_eq!(
        ServeSettings::default()
            .resolve(ServeSettings::default())
            .publish_dir,
        None
    );
    // The environment reaches the same field through clap (`env = "GPULEDGER_PUBLISH_DIR"`).
    let h = help(&["serve"]).unwrap();
    assert!(
        h.contains("--publish-dir") && h.contains("GPULEDGER_PUBLISH_DIR"),
        "{h}"
    );
}

#[test]
fn agent_flags_and_keys_are_documented() {
    let agent_doc = read(&root().join("docs/AGENT.md"));
    let conf_doc = read(&root().join("docs/CONFIGURATION.md"));
    let h = help(&["agent"]).unwrap();
    let flags = help_flags(&h);
    assert!(flags.len() >= 2, "parsed flags from --help: {flags:?}");
    let missing = not_in_backticks(&conf_doc, flags.iter().copied());
    assert!(missing.is_empty(), "CONFIGURATION.md: {missing:?}");
    for flag in flags {
        assert!(agent_doc.contains(flag), "AGENT.md: {flag}");
    }
    for word in ["`metrics_listen`", "GPULEDGER_AGENT_METRICS_LISTEN"] {
        assert!(
            conf_doc.contains(word) && agent_doc.contains(word),
            "{word}"
        );
    }
    // Every metric the agent serves is listed in AGENT.md.
    let names: BTreeSet<String> = gpuledger::agent::metrics::AgentMetrics::new()
        .names()
        .into_iter()
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let missing = not_in_backticks(&agent_doc, names.iter().map(String::as_str));
    assert!(missing.is_empty(), "AGENT.md does not list {missing:?}");
}

#[test]
fn checkpoints_listing_is_in_the_openapi_document() {
    let doc: Json = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let get = &doc["paths"]["/v1/checkpoints"]["get"];
    let params: BTreeSet<&str> = get["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(params, BTreeSet::from(["after", "before", "limit"]));
    assert!(get["security"].is_null(), "public, like /v1/checkpoint");
    let page = &doc["components"]["schemas"]["CheckpointView"]["properties"];
    for f in ["size", "root", "note", "signed_at"] {
        assert!(page.get(f).is_some(), "CheckpointView.{f}");
    }
}
