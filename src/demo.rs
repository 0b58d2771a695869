//! `gpuledger demo`: the service in-process on a SQLite file under `./demo-data`, demo tenants,
//! a western training hub and an eastern inference hub of simulated nodes, and a market signer,
//! all posting signed records over HTTP to the in-process server, with a live progress line.
//!
//! Everything it measures is synthetic (the `simulated` collector), and it says so.

use gpuledger::agent::config::{AgentConfig, CollectorConfig, Limits, SimulatedGpus};
use gpuledger::agent::market::{self, MarketConfig, Series, Source};
use gpuledger::agent::run::{self, AgentOptions, Running};
use gpuledger::agent::AgentError;
use gpuledger::core::keys;
use gpuledger::core::record::{KeyScope, Role};
use gpuledger::core::time::Timestamp;
use gpuledger::keyfile;
use gpuledger::server::{self, Resolved};
use gpuledger::store::{self, access, read, Ledger};
use rust_decimal::Decimal;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the demo stopped.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The demo's settings or directory cannot be used.
    #[error("{0}")]
    Config(String),
    /// An agent or the market signer failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// A key file could not be written or read.
    #[error(transparent)]
    Key(#[from] keyfile::KeyFileError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The in-process server failed.
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// The demo log's origin.
pub const DEMO_ORIGIN: &str = "demo.gpuledger.local/log";
/// A file that marks a directory as the demo's, so `--fresh` never deletes anything else.
pub const DEMO_MARKER: &str = ".gpuledger-demo";

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The demo directory (default `./demo-data`).
    pub dir: PathBuf,
    /// Delete the demo directory first.
    pub fresh: bool,
    /// Address to serve on.
    pub listen: SocketAddr,
    /// Measurement interval of the simulated agents, seconds.
    pub interval_seconds: u64,
}

struct NodeSpec {
    node: &'static str,
    region: &'static str,
    model: &'static str,
    idle: i64,
    max: i64,
    load: &'static str,
    leases: &'static str,
}

/// The demo tenants: id, display name and billing address (synthetic). One has a Chinese
/// name and address, as many tenants of a Chinese provider do, so its invoices show them.
const TENANTS: [(&str, &str, &[&str]); 3] = [
    ("acme-ai", "Acme AI (demo tenant)", &[]),
    (
        "bluefin-labs",
        "蓝鳍实验室（演示租户）",
        &["上海市浦东新区张江路 88 号 (示例地址)", "200120 中国"],
    ),
    ("corvid-research", "Corvid Research (demo tenant)", &[]),
];

/// What the demo's invoice PDFs show besides the document: synthetic payment instructions and
/// the demo tenant's (synthetic) tax id, labelled as such.
fn demo_invoice_pdf() -> store::invoices::InvoicePdfSettings {
    store::invoices::InvoicePdfSettings {
        payment_instructions: vec![
            "Bank transfer (DEMO DATA, not a real account)".into(),
            "Bank: Demo Bank of Inner Mongolia · Account: 6222 0000 0000 0000".into(),
            "SWIFT/BIC: DEMOCNBJ · Reference: the invoice number".into(),
        ],
        bill_to_tax_ids: [(
            DEMO_TENANT.to_owned(),
            "91110000DEMO000000 (demo)".to_owned(),
        )]
        .into_iter()
        .collect(),
    }
}

/// The demo's invoice settings: a synthetic issuer with a Chinese name and address, 30 days'
/// terms, and VAT of 6 % (IT services in China) in every region.
fn demo_invoicing(public_url: String) -> store::invoices::InvoiceSettings {
    use gpuledger::core::invoice::{Issuer, Tax, TaxTable};
    store::invoices::InvoiceSettings {
        issuer: Issuer {
            name: "算力账本演示云计算有限公司 (gpuledger demo provider)".into(),
            address: vec![
                "北京市海淀区中关村大街 1 号 (示例地址)".into(),
                "100080 中国".into(),
            ],
            tax_id: Some("91110108DEMO00000X".into()),
            email: Some("billing@demo.invalid".into()),
        },
        payment_terms_days: store::invoices::DEFAULT_PAYMENT_TERMS_DAYS,
        taxes: TaxTable {
            by_region: Default::default(),
            default: Some(Tax {
                name: Some("VAT".into()),
                rate: rust_decimal::Decimal::new(6, 2),
            }),
        },
        public_url: Some(public_url),
    }
}

/// A bare-metal 8×H100 server of the western training hub (`cn-north-imx`), under `load`,
/// with the lease file `leases`.
const fn imx_h100(node: &'static str, load: &'static str, leases: &'static str) -> NodeSpec {
    NodeSpec {
        node,
        region: "cn-north-imx",
        model: "H100-SXM-80G",
        idle: 70,
        max: 700,
        load,
        leases,
    }
}

/// The demo's nodes: a western training hub of bare-metal 8×H100 servers and an eastern
/// inference hub of cloud GPUs shared between tenants.
const NODES: [NodeSpec; 6] = [
    imx_h100("imx-h100-01", "training", "[[lease]]\nid = \"acme-bm-01\"\ntenant = \"acme-ai\"\nwhole_node = true\n"),
    imx_h100("imx-h100-02", "training", "[[lease]]\nid = \"acme-bm-02\"\ntenant = \"acme-ai\"\nwhole_node = true\n"),
    imx_h100("imx-h100-03", "training", "[[lease]]\nid = \"corvid-bm-03\"\ntenant = \"corvid-research\"\nwhole_node = true\n"),
    imx_h100("imx-h100-04", "idle", "# not leased: its energy is recorded unattributed\n"),
    NodeSpec { node: "sh-h20-01", region: "cn-east-sh", model: "H20-96G", idle: 60, max: 400, load: "inference",
        leases: "[[lease]]\nid = \"bluefin-c-101\"\ntenant = \"bluefin-labs\"\ngpus = [0, 1, 2, 3]\nslices = [{ gpu = 6, fraction = \"0.5\" }]\n\n[[lease]]\nid = \"corvid-c-102\"\ntenant = \"corvid-research\"\ngpus = [4, 5]\nslices = [{ gpu = 6, fraction = \"0.5\" }]\n" },
    NodeSpec { node: "sh-l40s-01", region: "cn-east-sh", model: "L40S-48G", idle: 35, max: 350, load: "inference",
        leases: "[[lease]]\nid = \"acme-c-201\"\ntenant = \"acme-ai\"\ngpus = [0, 1]\nslices = [{ gpu = 2, fraction = \"0.25\" }]\n\n[[lease]]\nid = \"bluefin-c-202\"\ntenant = \"bluefin-labs\"\nslices = [{ gpu = 2, fraction = \"0.75\" }, { gpu = 3, fraction = \"0.5\" }]\n" },
];

const MARKET: &str = "market-cn";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DemoError + '_ {
    move |source| DemoError::Io {
        path: path.to_owned(),
        source,
    }
}

/// GPUs per demo node (its simulated collector measures as many).
const DEMO_NODE_GPUS: u32 = 8;

/// The simulated collector of the demo's `i`th node `n`: its eight GPUs, seeded by its place.
fn simulated_collector(n: &NodeSpec, i: usize) -> CollectorConfig {
    CollectorConfig::Simulated {
        seed: i as u64 + 1,
        load: n.load.into(),
        gpus: vec![SimulatedGpus {
            model: n.model.into(),
            count: DEMO_NODE_GPUS,
            idle_watts: Decimal::from(n.idle),
            max_watts: Decimal::from(n.max),
        }],
    }
}

/// Registers the `i`th node `n` on the log unless it is: its region and the GPUs its simulated
/// collector reports (index, UUID, model, as an operator copies them from `nvidia-smi`), each
/// drawing at most the simulated maximum, which bounds its energy records (node keys may name
/// only registered nodes).
fn ensure_node(ledger: &Ledger, n: &NodeSpec, i: usize) -> Result<(), DemoError> {
    use gpuledger::core::record::{Body, NodeGpu, NodeRegistered};
    let mut collector = gpuledger::agent::collector::from_config(&simulated_collector(n, i))
        .map_err(AgentError::from)?;
    let reading = collector.read(ledger.now()).map_err(AgentError::from)?;
    let body = Body::NodeRegistered(NodeRegistered {
        node: n.node.into(),
        region: n.region.into(),
        hub: Some(n.region.into()),
        gpus: reading
            .gpus
            .iter()
            .map(|g| NodeGpu {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                mig: None,
            })
            .collect(),
        max_watts_per_gpu: Decimal::from(n.max),
    });
    match ledger.append_ledger_entry(body) {
        Ok(_) | Err(gpuledger::store::StoreError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Registers `signer` with the key in `dir/keys/<signer>.key` unless that key is registered.
fn ensure_signer(
    ledger: &Ledger,
    dir: &Path,
    signer: &str,
    role: Role,
    scope: KeyScope,
) -> Result<ed25519_dalek::SigningKey, DemoError> {
    let (key, _) = keyfile::read_or_create(&dir.join("keys").join(format!("{signer}.key")))?;
    let id = keys::key_id(&key.verifying_key());
    let known = ledger
        .reads()
        .run(|c| read::keys(c, Some(&[id.as_str()])))?;
    if !known.iter().any(|k| k.signer == signer) {
        ledger.register_key(
            signer,
            role,
            &keys::encode_public(&key.verifying_key()),
            Some(scope),
        )?;
    }
    Ok(key)
}

/// Registers the demo tenants on the log (once) and acme-ai's prepaid lots.
fn ensure_parties(ledger: &Ledger) -> Result<(), DemoError> {
    for (id, _, _) in TENANTS {
        tolerate(ledger.register_tenant(id))?;
    }
    for lot in demo_prepayments(ledger.now()) {
        tolerate(ledger.append_ledger_entry(lot))?;
    }
    Ok(())
}

/// The demo's prepaid cloud-GPU tenant (synthetic): acme-ai, billed by the GPU-hour, topped up
/// 20,000 CNY (充值) and granted 500 CNY of welcome credit for 90 days from the start of the
/// day; its invoices draw on them (docs/RATING.md, "Prepaid balances"). A restarted demo finds
/// both references recorded (a reference is recorded once).
fn demo_prepayments(now: Timestamp) -> [gpuledger::core::record::Body; 2] {
    use gpuledger::core::record::{Body, Prepayment, PrepaymentSource};
    let day = Timestamp::from_unix(now.unix() - now.unix() % 86_400).expect("in range");
    let lot = |reference: &str, source, amount: &str, expires_at| {
        Body::Prepayment(Prepayment {
            tenant: "acme-ai".into(),
            reference: reference.into(),
            source,
            currency: "CNY".into(),
            amount: amount.parse().expect("demo amount"),
            expires_at,
        })
    };
    [
        lot(
            "DEMO-TOPUP-0001",
            PrepaymentSource::Purchase,
            "20000.00",
            None,
        ),
        lot(
            "DEMO-WELCOME",
            PrepaymentSource::Grant,
            "500.00",
            Some(day.plus(90 * 86_400)),
        ),
    ]
}

/// The demo's contract (synthetic): bluefin-labs rents its H20 GPUs on sh-h20-01 (lease
/// `bluefin-c-101`, 4½ GPUs) by the month (包月) for a year from the start of the minute the
/// demo log is made, billed on calendar months: 96,000 CNY a month in advance (prorated by the
/// second for the first and last month), 2,000 once for rack setup, public IPs at 300 a month
/// in arrears; the fee includes the lease's H20 time (3 348 GPU-hours a month: 4½ GPUs × 744
/// hours, so the rate card never bills it again; 12.80 an hour above); an SLA of 99.9 %
/// availability a month on the lease (10 % of the month's fee below it, 25 % below 99 %).
/// Registered after the lease; a restarted demo finds it.
fn demo_contract(now: Timestamp) -> gpuledger::core::record::Body {
    use gpuledger::core::record::{
        BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, FeeCategory,
        FeeTiming, Included, Sla, SlaStep,
    };
    let from = Timestamp::from_unix(now.unix() - now.unix() % 60).expect("in range");
    let fee = |name: &str, amount: &str, timing, category, lease: Option<&str>| ContractFee {
        name: name.into(),
        amount: amount.parse().expect("demo amount"),
        timing,
        category,
        lease: lease.map(Into::into),
        included: None,
    };
    let mut monthly = fee(
        "H20 GPU 服务器 4.5 卡 包月 (demo)",
        "96000",
        FeeTiming::Advance,
        FeeCategory::Compute,
        Some("bluefin-c-101"),
    );
    monthly.included = Some(vec![Included {
        gpu_model: "H20-96G".into(),
        gpu_hours: "3348".parse().expect("demo hours"),
        overage_rate: "12.80".parse().expect("demo rate"),
    }]);
    let step = |below: &str, percent: &str| SlaStep {
        below: below.parse().expect("demo percentage"),
        percent: percent.parse().expect("demo percentage"),
    };
    Body::ContractRegistered(ContractRegistered {
        tenant: "bluefin-labs".into(),
        contract: "C-bluefin-baremetal".into(),
        currency: "CNY".into(),
        region: "cn-east-sh".into(),
        term_from: from,
        term_to: from.plus(365 * 86_400),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: Some(vec![
            monthly,
            fee(
                "Rack setup (demo)",
                "2000",
                FeeTiming::Once,
                FeeCategory::Support,
                None,
            ),
            fee(
                "Public IPs (demo)",
                "300",
                FeeTiming::Arrears,
                FeeCategory::Networking,
                None,
            ),
        ]),
        commitment: None,
        sla: Some(Sla {
            target: "99.9".parse().expect("demo percentage"),
            credits: vec![step("99.9", "10"), step("99", "25")],
        }),
    })
}

/// Ok for an entry written now or before (a demo restarted on its directory).
fn tolerate(r: Result<u64, gpuledger::store::StoreError>) -> Result<(), DemoError> {
    match r {
        Ok(_) | Err(gpuledger::store::StoreError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(DemoError::from(e)),
    }
}

/// Registers the leases of node `n`'s lease file on the log (once), each covering the GPUs the
/// file gives it (records may name only a lease that covers their node, model and interval),
/// on-demand and open-ended from the start of the current minute, when the demo's prices take
/// effect too.
fn ensure_leases(ledger: &Ledger, n: &NodeSpec) -> Result<(), DemoError> {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::{Body, LeaseRegistered};
    let leases = gpuledger::agent::lease::parse(n.leases).map_err(DemoError::Config)?;
    let now = ledger.now().unix();
    let from = Timestamp::from_unix(now - now % 60).expect("in range");
    let gpus: Vec<u32> = (0..DEMO_NODE_GPUS).collect();
    for l in leases {
        tolerate(
            ledger.append_ledger_entry(Body::LeaseRegistered(LeaseRegistered {
                lease: l.id.clone(),
                tenant: l.tenant.clone(),
                class: LeaseClass::OnDemand,
                from,
                to: None,
                nodes: l.registration_items(n.node, &gpus),
            })),
        )?;
    }
    Ok(())
}

/// Demo prices (synthetic): on-demand rate cards for every demo region and GPU model, and
/// region parameters (the western hub's green power at 0.28 CNY/kWh, PUE 1.08), in force from
/// the start of the minute the fresh demo log is made (no price takes effect in the past,
/// PROTOCOL §6.7; the demo's usage starts after it). Appended once, as ledger entries.
fn ensure_prices(ledger: &Ledger) -> Result<(), DemoError> {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::{Body, RateCard, RegionParameters};
    let size = ledger.reads().head()?.0;
    if !ledger
        .reads()
        .run(|c| gpuledger::store::pricing::pricing_entries(c, size))?
        .is_empty()
    {
        return Ok(());
    }
    let now = ledger.now().unix();
    let from = Timestamp::from_unix(now - now % 60).expect("in range");
    let dec = |s: &str| s.parse::<rust_decimal::Decimal>().expect("demo decimal");
    for (region, model, price) in [
        ("cn-north-imx", "H100-SXM-80G", "18.5"),
        ("cn-east-sh", "H20-96G", "12.8"),
        ("cn-east-sh", "L40S-48G", "6.4"),
    ] {
        ledger.append_ledger_entry(Body::RateCard(RateCard {
            region: region.into(),
            gpu_model: model.into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec(price),
            effective_from: from,
        }))?;
    }
    for (region, kwh, pue, carbon) in [
        ("cn-north-imx", "0.28", "1.08", "530"),
        ("cn-east-sh", "0.65", "1.3", "580"),
    ] {
        ledger.append_ledger_entry(Body::RegionParams(RegionParameters {
            region: region.into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec(kwh),
            pue: dec(pue),
            carbon_g_per_kwh: dec(carbon),
            effective_from: from,
        }))?;
    }
    Ok(())
}

fn sender_limits() -> Limits {
    Limits {
        max_backoff_seconds: 5,
        ..Limits::default()
    }
}

/// Runs the demo until Ctrl-C or SIGTERM.
pub fn run(opts: DemoOptions) -> Result<(), DemoError> {
    let dir = &opts.dir;
    let resumed = prepare_dir(dir, opts.fresh)?;
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let log_key_path = dir.join("log.key");
    let (log_key, _) = keyfile::read_or_create(&log_key_path)?;
    store::init(&url, &log_key, DEMO_ORIGIN)?;
    // The demo's periods end "now" (its printed commands invoice and certify until the moment
    // they run), so they close at once instead of the log policy's skew later.
    let clock = gpuledger::core::clock::ClockPolicy {
        close_seconds: Some(0),
        ..Default::default()
    };
    let ledger = Arc::new(Ledger::open_with_high_water(&url, log_key, None, clock)?);
    ledger.set_invoice_pdf(demo_invoice_pdf());
    print_banner(dir, resumed, ledger.reads().head()?.0);
    let tokens = prepare_log(&ledger)?;
    let signers = ensure_signers(&ledger, dir)?;
    // bluefin-labs' contract, once the lease its SLA is measured on is registered.
    tolerate(ledger.append_ledger_entry(demo_contract(ledger.now())))?;
    let witness = start_witness(dir, &ledger.info().verifier_key)?;

    let settings = Resolved {
        listen: opts.listen,
        database_url: url.clone(),
        log_key: log_key_path.clone(),
        checkpoint_interval: Duration::from_secs(5),
        workers: 2,
        publish_dir: None,
        mirror_dir: None,
        clock,
        // The demo's ledger keeps its mark in memory (no high-water file).
        high_water_file: store::high_water::default_file(&log_key_path),
        allow_async_standbys: false,
        invoicing: demo_invoicing(format!("http://{}", opts.listen)),
        witnesses: server::witnessing::WitnessSettings {
            witnesses: vec![witness.setting()],
            quorum: 1,
            wait: server::witnessing::DEFAULT_WAIT,
        },
    };
    let mut started = Started::default();
    let stop_progress = Arc::new(AtomicBool::new(false));
    let result = server::serve_ledger(ledger.clone(), &settings, |addrs| {
        let Some(addr) = addrs.first() else { return };
        let base = format!("http://{addr}");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {base}");
        started.start_signers(&signers, &base, dir, opts.interval_seconds);
        let vkey = ledger.info().verifier_key.clone();
        print_try(&mut out, &base, &tokens, &url, &vkey, dir, &witness);
        let ledger = ledger.clone();
        let stop = stop_progress.clone();
        started.progress = std::thread::Builder::new()
            .name("demo-progress".into())
            .spawn(move || progress_line(&ledger, &stop))
            .ok();
    });
    stop_progress.store(true, Ordering::SeqCst);
    started.stop()?;
    result?;
    let size = ledger.reads().head()?.0;
    drop(ledger);
    drop(witness);
    eprintln!(
        "\ndemo stopped; the log holds {size} entries in {} (run `gpuledger demo` again to resume)",
        dir.display()
    );
    Ok(())
}

/// The demo's witness name (its note key name).
pub const DEMO_WITNESS: &str = "witness.demo.gpuledger.local";

/// Starts the demo's witness in this process: its key in `dir/witness.key`, its state in
/// `dir/witness.db`, following the demo log (`log_vkey`), on a free loopback port.
fn start_witness(
    dir: &Path,
    log_vkey: &str,
) -> Result<server::witnessing::LocalWitness, DemoError> {
    let (key, _) = keyfile::read_or_create(&dir.join("witness.key"))?;
    let logs = gpuledger::witness::logs_from_vkeys([log_vkey])
        .map_err(|e| DemoError::Config(e.to_string()))?;
    server::witnessing::LocalWitness::start(gpuledger::witness::WitnessSettings {
        listen: "127.0.0.1:0".parse().expect("an address"),
        name: DEMO_WITNESS.into(),
        key,
        state: dir.join("witness.db"),
        logs,
        workers: 1,
    })
    .map_err(DemoError::Config)
}

/// Makes `dir` the demo directory (deleting it first with `fresh`, if it is the demo's) and
/// marks it; returns whether it already held a demo log to resume.
fn prepare_dir(dir: &Path, fresh: bool) -> Result<bool, DemoError> {
    if fresh && dir.exists() {
        if !dir.join(DEMO_MARKER).exists() {
            return Err(DemoError::Config(format!(
                "{} exists but is not a demo directory (no {DEMO_MARKER}); not deleting it",
                dir.display()
            )));
        }
        std::fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    let resumed = dir.join("ledger.db").exists();
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::write(
        dir.join(DEMO_MARKER),
        "gpuledger demo directory; `gpuledger demo --fresh` deletes it\n",
    )
    .map_err(io(dir))?;
    Ok(resumed)
}

/// Says that the data is synthetic, and whether the log in `dir` (of `size` entries) is new.
fn print_banner(dir: &Path, resumed: bool, size: u64) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "gpuledger demo: simulated GPUs and prices (synthetic data, not real measurements)"
    );
    if resumed {
        let _ = writeln!(
            out,
            "resuming the demo log in {} ({size} entries); `--fresh` starts clean",
            dir.display()
        );
    } else {
        let _ = writeln!(out, "started a fresh demo log in {}", dir.display());
    }
}

/// The tokens a demo run prints (new for each run): one for each role the console serves.
struct DemoTokens {
    admin: String,
    auditor: String,
    /// For the tenant [`DEMO_TENANT`].
    tenant: String,
}

/// The tenant whose token the demo prints and whose commands it suggests.
const DEMO_TENANT: &str = "acme-ai";

/// The labels of the tokens a demo run creates; a new run revokes the earlier runs' tokens of
/// these labels, so "new for this run" is true: only the tokens printed last work.
const DEMO_TOKEN_LABELS: [&str; 3] = [
    "gpuledger demo",
    "gpuledger demo auditor",
    "gpuledger demo tenant",
];

/// How long a demo token works, should the demo be left running: a week.
const DEMO_TOKEN_LIFETIME_SECONDS: i64 = 7 * 86_400;

/// Revokes the active tokens that earlier demo runs created (by their labels); returns how
/// many. Tokens made by hand (`gpuledger token create`, `POST /v1/tokens`) are left alone.
fn revoke_earlier_demo_tokens(c: &mut store::DbConn) -> Result<usize, store::StoreError> {
    let mut revoked = 0;
    for t in access::list_tokens(c)? {
        if t.revoked_at.is_none() && DEMO_TOKEN_LABELS.contains(&t.label.as_str()) {
            access::revoke_token(c, &t.id)?;
            revoked += 1;
        }
    }
    Ok(revoked)
}

/// Creates the demo tenants' accounts (once) and new admin, auditor and tenant tokens for this
/// run (revoking the earlier runs'), then puts the demo prices, tenants and leases on the log
/// (once); returns the tokens.
fn prepare_log(ledger: &Ledger) -> Result<DemoTokens, DemoError> {
    let tokens = ledger.with_account_writer(|c| {
        for (id, name, address) in TENANTS {
            if !access::tenant_exists(c, id)? {
                let address: Vec<String> = address.iter().map(|l| l.to_string()).collect();
                access::create_tenant_with_address(c, id, name, &address)?;
            }
        }
        let revoked = revoke_earlier_demo_tokens(c)?;
        if revoked > 0 {
            println!("revoked {revoked} token(s) printed by earlier demo runs");
        }
        let expires = Some(Timestamp::now().plus(DEMO_TOKEN_LIFETIME_SECONDS));
        let [admin_label, auditor_label, tenant_label] = DEMO_TOKEN_LABELS;
        let new = |c: &mut store::DbConn, role, tenant, label| {
            access::create_token_expiring(c, role, tenant, label, expires).map(|(_, t)| t)
        };
        let admin = new(c, access::ApiRole::Admin, None, admin_label)?;
        let auditor = new(c, access::ApiRole::Auditor, None, auditor_label)?;
        let tenant = new(c, access::ApiRole::Tenant, Some(DEMO_TENANT), tenant_label)?;
        Ok(DemoTokens {
            admin,
            auditor,
            tenant,
        })
    })?;
    ensure_prices(ledger)?;
    ensure_parties(ledger)?;
    Ok(tokens)
}

/// The demo's signers, registered on its log.
struct Signers {
    /// Each node, with its key and its lease file.
    nodes: Vec<(&'static NodeSpec, ed25519_dalek::SigningKey, PathBuf)>,
    /// The market signer's key.
    market: ed25519_dalek::SigningKey,
}

/// Registers the nodes' keys (each scoped to its node and region) and the market signer's
/// (all the demo's regions), unless registered; writes a node's lease file unless it exists.
fn ensure_signers(ledger: &Ledger, dir: &Path) -> Result<Signers, DemoError> {
    let mut nodes = Vec::new();
    for (i, n) in NODES.iter().enumerate() {
        ensure_node(ledger, n, i)?;
        ensure_leases(ledger, n)?;
        let scope = KeyScope::new(Some(vec![n.node.into()]), vec![n.region.into()]);
        let key = ensure_signer(ledger, dir, n.node, Role::Node, scope)?;
        let lease_file = dir.join("leases").join(format!("{}.toml", n.node));
        if !lease_file.exists() {
            std::fs::create_dir_all(lease_file.parent().expect("has a parent")).map_err(io(dir))?;
            std::fs::write(&lease_file, n.leases).map_err(io(&lease_file))?;
        }
        nodes.push((n, key, lease_file));
    }
    let market_scope = KeyScope::new(None, NODES.iter().map(|n| n.region.to_owned()).collect());
    let market = ensure_signer(ledger, dir, MARKET, Role::Market, market_scope)?;
    Ok(Signers { nodes, market })
}

/// What the demo starts once its server listens, stopped when the server returns.
#[derive(Default)]
struct Started {
    /// The node agents and the market signer that started.
    running: Vec<Running>,
    /// Why the last of them that failed to start failed.
    start_error: Option<AgentError>,
    /// The progress line's thread.
    progress: Option<std::thread::JoinHandle<()>>,
}

impl Started {
    /// Starts a simulated agent per node, then the market signer, posting to `base`.
    fn start_signers(&mut self, signers: &Signers, base: &str, dir: &Path, interval_seconds: u64) {
        for (i, (n, key, lease_file)) in signers.nodes.iter().enumerate() {
            let cfg = agent_config(n, i, base, lease_file, dir, interval_seconds);
            let started = gpuledger::agent::collector::from_config(&cfg.collector)
                .map_err(AgentError::from)
                .and_then(|c| run::start_agent(cfg, key.clone(), c, AgentOptions::default()));
            self.add(started);
        }
        let mcfg = market_config(base, dir, interval_seconds);
        self.add(market::start_market(mcfg, signers.market.clone()));
    }

    fn add(&mut self, started: Result<Running, AgentError>) {
        match started {
            Ok(r) => self.running.push(r),
            Err(e) => self.start_error = Some(e),
        }
    }

    /// Stops the signers, then waits for the progress line (already told to stop); an error
    /// if one of the signers had failed to start.
    fn stop(self) -> Result<(), DemoError> {
        for r in self.running {
            r.stop();
        }
        if let Some(p) = self.progress {
            let _ = p.join();
        }
        match self.start_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// The simulated agent of node `n` (the `i`th), posting to `base` every `interval_seconds`.
fn agent_config(
    n: &NodeSpec,
    i: usize,
    base: &str,
    lease_file: &Path,
    dir: &Path,
    interval_seconds: u64,
) -> AgentConfig {
    AgentConfig {
        signer: n.node.into(),
        key_file: PathBuf::new(),
        server_url: base.to_owned(),
        interval_seconds,
        region: n.region.into(),
        node: n.node.into(),
        lease_file: lease_file.to_owned(),
        spool_dir: dir.join("spool").join(n.node),
        collector: simulated_collector(n, i),
        limits: sender_limits(),
        metrics_listen: None,
        origin: Some(DEMO_ORIGIN.into()),
        tls: Default::default(),
    }
}

/// The market signer: a random walk of spot prices per region and GPU model, posting to
/// `base` every three agent intervals (at least every 15 s).
fn market_config(base: &str, dir: &Path, interval_seconds: u64) -> MarketConfig {
    let series = [
        ("cn-north-imx", "H100-SXM-80G", "9.8"),
        ("cn-east-sh", "H20-96G", "7.2"),
        ("cn-east-sh", "L40S-48G", "4.6"),
    ]
    .map(|(region, model, start)| {
        let start: Decimal = start.parse().expect("a decimal");
        Series {
            region: region.into(),
            gpu_model: model.into(),
            start,
            min: start * Decimal::new(6, 1),
            max: start * Decimal::new(14, 1),
            step: Decimal::new(5, 2),
        }
    });
    MarketConfig {
        signer: MARKET.into(),
        key_file: PathBuf::new(),
        server_url: base.to_owned(),
        spool_dir: dir.join("spool").join(MARKET),
        source: Source::Walk {
            seed: 42,
            interval_seconds: (interval_seconds * 3).max(15),
            currency: "CNY".into(),
            series: series.to_vec(),
        },
        limits: sender_limits(),
        origin: Some(DEMO_ORIGIN.into()),
        tls: Default::default(),
    }
}

/// Prints the console's address with a token for each role, then commands to try against the
/// server at `base` (today's usage, an invoice from this run's start until the command runs,
/// proofs against the latest checkpoint, a
/// certificate checked offline with the log's verifier key `vkey` and a quorum of one
/// cosignature of the demo's `witness`).
fn print_try(
    out: &mut impl Write,
    base: &str,
    tokens: &DemoTokens,
    url: &str,
    vkey: &str,
    dir: &Path,
    witness: &server::witnessing::LocalWitness,
) {
    let wkey = witness.witness_key().vkey();
    let token = &tokens.admin;
    let now = Timestamp::now().unix();
    let today = now / 86_400 * 86_400;
    let from = Timestamp::from_unix(today).expect("in range");
    let to = from.plus(86_400);
    // An invoice is for a period that has ended: from this run's start (whole minute) to the
    // moment the command is run (`$(date …)`, evaluated then), so it works when first tried.
    let run_start = Timestamp::from_unix(now / 60 * 60).expect("in range");
    let until_now = "$(date -u +%Y-%m-%dT%H:%M:%SZ)";
    print_sign_in(out, base, tokens, witness);
    print_reads(out, base, token, (from, to));
    let cmds = TryCommands {
        base,
        url,
        vkey,
        wkey: &wkey,
        run_start,
        from,
        until_now,
    };
    cmds.print(out);
    let _ = writeln!(out, "Nodes: {} in cn-north-imx (8×H100 bare metal), {} in cn-east-sh (shared H20 and L40S); leases in {}/leases/ (edit them while it runs; a new lease id must first be registered with POST /v1/leases).",
        NODES.iter().filter(|n| n.region == "cn-north-imx").count(),
        NODES.iter().filter(|n| n.region == "cn-east-sh").count(),
        dir.display());
    let _ = writeln!(out, "Ctrl-C stops.\n");
    let _ = out.flush();
}

/// The console's address, a token for each role, and the demo's witness.
fn print_sign_in(
    out: &mut impl Write,
    base: &str,
    tokens: &DemoTokens,
    witness: &server::witnessing::LocalWitness,
) {
    let wkey = witness.witness_key().vkey();
    let token = &tokens.admin;
    let _ = writeln!(out, "\nOpen the console in a browser: {base}/console/");
    let _ = writeln!(out, "  sign in as tenant {DEMO_TENANT}: {}", tokens.tenant);
    let _ = writeln!(out, "  sign in as auditor:         {}", tokens.auditor);
    let _ = writeln!(out, "  sign in as admin:           {token}");
    let _ = writeln!(
        out,
        "  (the tokens are new for this run and shown only here)\n"
    );
    let _ = writeln!(out, "admin token: {token}   (new for this run; shown once)");
    let _ = writeln!(
        out,
        "witness: {} at {} cosigns every checkpoint (curl {base}/v1/checkpoint shows its line); invoices and certificates wait for its cosignature (quorum 1)",
        witness.witness_key().name(),
        witness.url()
    );
    let _ = writeln!(out, "witness vkey: {wkey}");
}

/// Public and authenticated reads to try with the admin token, over `(from, to)` (today).
fn print_reads(out: &mut impl Write, base: &str, token: &str, (from, to): (Timestamp, Timestamp)) {
    let _ = writeln!(out, "\nTry, in another terminal:");
    let _ = writeln!(out, "  TOKEN={token}");
    let _ = writeln!(
        out,
        "  curl -s {base}/v1/checkpoint                       # the signed checkpoint (public)"
    );
    let _ = writeln!(
        out,
        "  curl -s {base}/v1/log                              # origin and verifier key (public)"
    );
    let _ = writeln!(out, "  curl -s -H \"Authorization: Bearer $TOKEN\" '{base}/v1/usage?tenant=acme-ai&from={from}&to={to}&group_by=region,gpu_model&window=hour'");
    let _ = writeln!(
        out,
        "  curl -s -H \"Authorization: Bearer $TOKEN\" '{base}/v1/entries?start=0&end=20'"
    );
    let _ = writeln!(out, "  curl -s -H \"Authorization: Bearer $TOKEN\" '{base}/v1/invoices/preview?tenant=acme-ai&from={from}&to={to}'");
}

/// The invoice, proof and certificate commands of the demo, and their offline checks.
struct TryCommands<'a> {
    base: &'a str,
    url: &'a str,
    vkey: &'a str,
    wkey: &'a str,
    run_start: Timestamp,
    from: Timestamp,
    until_now: &'a str,
}

impl TryCommands<'_> {
    fn print(&self, out: &mut impl Write) {
        let TryCommands {
            base,
            url,
            vkey,
            wkey,
            run_start,
            from,
            until_now,
        } = *self;
        let _ = writeln!(out, "An invoice for acme-ai from this run's start until now (a period that has ended), its PDF and its offline check:");
        let _ = writeln!(out, "  curl -sS -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d \"{{\\\"tenant\\\":\\\"acme-ai\\\",\\\"from\\\":\\\"{run_start}\\\",\\\"to\\\":\\\"{until_now}\\\"}}\" {base}/v1/invoices | tee invoice.json");
        let _ = writeln!(
            out,
            "  N=$(sed 's/.*\"number\":\"\\([^\"]*\\)\".*/\\1/' invoice.json)   # its number, INV-…"
        );
        let _ = writeln!(out, "  curl -fsS -H \"Authorization: Bearer $TOKEN\" -o \"$N.pdf\" {base}/v1/invoices/$N/pdf        # also /json and /csv");
        let _ = writeln!(out, "  curl -fsS -H \"Authorization: Bearer $TOKEN\" -o \"$N.bundle.jsonl\" {base}/v1/invoices/$N/bundle");
        let _ = writeln!(out, "  cargo run -q --release -- verify --invoice invoice.json --bundle \"$N.bundle.jsonl\" --log-key '{vkey}' --witness '{wkey}'");
        let _ = writeln!(
            out,
            "Proofs against the latest checkpoint (its second line is the tree size):"
        );
        let _ = writeln!(out, "  S=$(curl -fsS {base}/v1/checkpoint | sed -n 2p)");
        let _ = writeln!(out, "  curl -sS -H \"Authorization: Bearer $TOKEN\" \"{base}/v1/proofs/inclusion?index=$((S - 1))&size=$S\"");
        let _ = writeln!(out, "  curl -sS -H \"Authorization: Bearer $TOKEN\" \"{base}/v1/proofs/consistency?from=1&to=$S\"");
        let _ = writeln!(out, "A compute-usage certificate for acme-ai from the start of today until now, its evidence bundle, and the offline check:");
        let _ = writeln!(out, "  curl -sS -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d \"{{\\\"tenant\\\":\\\"acme-ai\\\",\\\"from\\\":\\\"{from}\\\",\\\"to\\\":\\\"{until_now}\\\"}}\" {base}/v1/certificates | tee cert.json");
        let _ = writeln!(out, "  curl -fsS -H \"Authorization: Bearer $TOKEN\" -o bundle.jsonl {base}/v1/certificates/$(sed 's/.*\"id\":\"\\([^\"]*\\)\".*/\\1/' cert.json)/bundle");
        let _ = writeln!(out, "  cargo run -q --release -- verify --certificate cert.json --bundle bundle.jsonl --log-key '{vkey}' --witness '{wkey}' --quorum 1");
        let _ = writeln!(
            out,
            "  cargo run -q --release -- verify-log --database-url {url}   # after Ctrl-C, or while it runs"
        );
        let _ = writeln!(
            out,
            "  {base}/docs                                         # the API, browsable offline"
        );
    }
}

/// Prints log size and records/s: one updating line on a terminal, else a line every 10 s.
fn progress_line(ledger: &Ledger, stop: &AtomicBool) {
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let first = ledger.reads().head().map_or(0, |h| h.0);
    let mut last_size = first;
    let mut printed = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_secs(1));
        let size = ledger.reads().head().map_or(last_size, |h| h.0);
        // Averaged over the whole run: agents report once per interval, so a one-second
        // window would mostly read zero.
        let rate = (size - first) as f64 / started.elapsed().as_secs_f64();
        last_size = size;
        let cosigned = ledger
            .reads()
            .run(store::cosignatures::cosigned_sizes)
            .ok()
            .and_then(|m| m.get(DEMO_WITNESS).copied())
            .unwrap_or(0);
        let line = format!(
            "[demo {:>5}s] log size {size} entries · {rate:.1} records/s · {} new this run · witness cosigned {cosigned}",
            started.elapsed().as_secs(),
            size - first
        );
        if tty {
            eprint!("\r{line}   ");
        } else if printed.elapsed() >= Duration::from_secs(10) {
            eprintln!("{line}");
            printed = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new demo run revokes the tokens of earlier runs (by their labels) and only those:
    /// a token made by hand keeps working.
    #[test]
    fn a_new_run_revokes_the_earlier_runs_tokens_only() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
        store::init(&url, &keyfile::generate(), DEMO_ORIGIN).unwrap();
        let mut c = store::connect(&url).unwrap();
        let (_, by_hand) =
            access::create_token(&mut c, access::ApiRole::Admin, None, "ops").unwrap();
        let (_, earlier) =
            access::create_token(&mut c, access::ApiRole::Admin, None, DEMO_TOKEN_LABELS[0])
                .unwrap();
        let (_, auditor) =
            access::create_token(&mut c, access::ApiRole::Auditor, None, DEMO_TOKEN_LABELS[1])
                .unwrap();
        assert_eq!(revoke_earlier_demo_tokens(&mut c).unwrap(), 2);
        let works = |c: &mut store::DbConn, t: &str| access::authenticate(c, t).unwrap().is_some();
        assert!(works(&mut c, &by_hand));
        assert!(!works(&mut c, &earlier) && !works(&mut c, &auditor));
        // Nothing left to revoke: a second call changes nothing.
        assert_eq!(revoke_earlier_demo_tokens(&mut c).unwrap(), 0);
    }
}
