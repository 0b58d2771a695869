//! The issuing door, [`Issuance`]: invoices, certificates and settlements. Invoices and
//! certificates share one draft-and-recheck loop: the draft is computed on a read-only
//! connection outside the head lock, and the sequencer only rechecks that nothing logged since
//! changes it before it appends (`store::invoices`, `store::certificates`); a draft overtaken
//! by the log is computed again, a bounded number of times.

use crate::ledger::{Job, Ledger, Reply};
use crate::read;
use crate::DbConn;
use crate::StoreError;
use gpuledger_core::admission;
use gpuledger_core::time::Timestamp;

/// Issues documents of one ledger ([`Ledger::issuance`]).
pub struct Issuance<'a> {
    pub(crate) ledger: &'a Ledger,
}

impl Issuance<'_> {
    /// Issues the invoices (one per currency) of `tenant` for `period`, which must have closed
    /// (`PeriodNotEnded` otherwise, by the ledger's clock: ended by the policy's skew). The rating is computed
    /// in this thread on a read connection, outside the head lock; the sequencer only rechecks
    /// that nothing logged since changes it, and appends (`store::invoices`). After
    /// [`crate::invoices::MAX_ISSUE_ATTEMPTS`] computations overtaken by the log, `Busy`.
    pub fn invoices(
        &self,
        tenant: &str,
        period: gpuledger_core::invoice::Period,
    ) -> Result<Vec<gpuledger_core::invoice::Invoice>, StoreError> {
        self.check_closed("an invoice", period.to)?;
        self.issue_drafted(
            |c, w| crate::invoices::draft(c, tenant, period, w, self.ledger.invoicing()),
            |draft, reply| Job::Issue(Box::new(draft), reply),
            || {
                format!(
                    "the invoice of {tenant} for [{}, {})",
                    period.from, period.to
                )
            },
        )
    }

    /// Issues every contract invoice that is due (`serve` runs it on a timer; docs/RATING.md,
    /// "Scheduled issuance"): for each contract, each of its billing periods that has closed by
    /// the ledger's checked clock, that charges something (a fee anchored in it, or a
    /// commitment) and that no invoice of its tenant overlaps yet is invoiced, as
    /// `POST /v1/invoices` would for that period. Idempotent: an issued invoice covers its
    /// billing period, so the next run (after a restart too, or in another process on the same
    /// database, whose invoice this one's refusal names) issues it no more. Returns the issued
    /// invoices and, per billing period that could not be invoiced, why (the others go on).
    pub fn due_contract_invoices(&self) -> Result<ContractRun, StoreError> {
        let now = self.ledger.checked_now()?;
        let close = self.ledger.guard.close_seconds();
        let due = self
            .ledger
            .reads()
            .run(|c| crate::invoices::due_contract_periods(c, now, close))?;
        let mut run = ContractRun::default();
        for (tenant, period) in due {
            match self.invoices(&tenant, period) {
                Ok(issued) => run.issued.extend(issued),
                // Another process issued it between the read and the write.
                Err(StoreError::AlreadyExists(_)) => {}
                Err(e) => run.failed.push((tenant, period, e)),
            }
        }
        Ok(run)
    }

    /// Enqueues the usage alerts crossed by the ledger's checked clock
    /// ([`crate::alerts::crossings`]: spend thresholds, commitment draw-downs), each once: an
    /// event whose crossing was enqueued before (by an earlier run, another process, or before
    /// a restart) is not enqueued again. Returns how many crossings it found.
    pub fn usage_alerts(&self) -> Result<usize, StoreError> {
        let now = self.ledger.checked_now()?;
        let settings = self.ledger.invoicing();
        let events = self
            .ledger
            .reads()
            .run(|c| crate::alerts::crossings(c, now, &settings))?;
        if !events.is_empty() {
            self.ledger.with_account_writer(|c| {
                diesel::Connection::transaction(c, |c| {
                    for e in &events {
                        crate::webhooks::enqueue(c, e, now)?;
                    }
                    Ok::<_, StoreError>(())
                })
            })?;
        }
        Ok(events.len())
    }

    /// `PeriodNotEnded` unless a period ending at `to` has closed by the ledger's checked clock
    /// (`core::admission::period_closes_at`: the configured `close_seconds`, or the skew of
    /// the log policy in force), checked before the draft is computed. Time only moves forward
    /// (`store::clock`), so a period closed now is still closed when the sequencer writes.
    fn check_closed(&self, what: &'static str, to: Timestamp) -> Result<(), StoreError> {
        let now = self.ledger.checked_now()?;
        let policy = self
            .ledger
            .reads()
            .run(|c| read::policy(c, i64::MAX as u64))?;
        let closes_at = admission::period_closes_at(to, &policy, self.ledger.guard.close_seconds());
        if now < closes_at {
            return Err(StoreError::PeriodNotEnded {
                what,
                to,
                closes_at,
                now,
            });
        }
        Ok(())
    }

    /// Computes a draft on a read connection, outside the head lock, and submits it; the
    /// sequencer answers `None` when the log changed it meanwhile, and it is computed again, at
    /// most [`crate::invoices::MAX_ISSUE_ATTEMPTS`] times, then `Busy` naming `what`.
    ///
    /// With a witness quorum, each attempt first waits for a checkpoint that reached it
    /// ([`Issuance::witnessed_checkpoint`]) and drafts at that checkpoint's size.
    fn issue_drafted<D, T>(
        &self,
        draft: impl Fn(&mut DbConn, Option<crate::cosignatures::Witnessed>) -> Result<D, StoreError>,
        job: impl Fn(D, Reply<Option<T>>) -> Job,
        what: impl FnOnce() -> String,
    ) -> Result<T, StoreError> {
        for attempt in 1..=crate::invoices::MAX_ISSUE_ATTEMPTS {
            let witnessed = self.witnessed_checkpoint()?;
            let d = self.ledger.reads().run(|c| draft(c, witnessed.clone()))?;
            crate::invoices::before_issue(attempt);
            let issued = self.ledger.submit(|reply| job(d, reply));
            // Without a quorum the issuance signed a checkpoint of its own.
            self.ledger.signal_checkpoint();
            if let Some(issued) = issued? {
                return Ok(issued);
            }
        }
        Err(StoreError::Busy(format!(
            "the log kept changing while {} was computed; nothing was issued; retry",
            what()
        )))
    }

    /// Issues a compute-usage certificate (docs/PROTOCOL.md §13) for a period that has closed
    /// (`PeriodNotEnded` otherwise, by the ledger's clock: ended by the policy's skew). The tally is computed in this
    /// thread on a read connection, outside the head lock; the sequencer only rechecks that
    /// nothing logged since changes it, and appends (`store::certificates`). After
    /// [`crate::invoices::MAX_ISSUE_ATTEMPTS`] computations overtaken by the log, `Busy`.
    pub fn certificate(
        &self,
        req: crate::certificates::CertificateRequest,
    ) -> Result<gpuledger_core::certificate::Certificate, StoreError> {
        // A certificate states totals; for a period still open they would not be final.
        self.check_closed("a certificate", req.period.to)?;
        self.issue_drafted(
            |c, w| crate::certificates::draft(c, &req, w),
            |draft, reply| Job::Certify(Box::new(draft), reply),
            || {
                format!(
                    "the certificate of {} for [{}, {})",
                    req.tenant, req.period.from, req.period.to
                )
            },
        )
    }

    /// Records a payment or credit note (a `Body::Payment` or `Body::CreditNote`); a payment
    /// above the invoice's open balance is refused (`StoreError::Overpayment`).
    pub fn settle(&self, body: gpuledger_core::record::Body) -> Result<u64, StoreError> {
        self.settle_with_excess(body, false)
    }

    /// [`Issuance::settle`], where with `excess_credit` a payment above the invoice's open
    /// balance is accepted and its excess becomes the tenant's credit.
    pub fn settle_with_excess(
        &self,
        body: gpuledger_core::record::Body,
        excess_credit: bool,
    ) -> Result<u64, StoreError> {
        self.ledger
            .submit(|reply| Job::Settle(Box::new(body), excess_credit, reply))
    }

    /// With a quorum: signs (or finds) a checkpoint of the current head, then waits up to
    /// `witness_wait_seconds` for a checkpoint at least that large to carry the quorum's
    /// cosignatures, and returns it; `WitnessesBehind` if none does in time. Without a quorum,
    /// `None`: the issuance signs its own checkpoint under the head lock.
    fn witnessed_checkpoint(&self) -> Result<Option<crate::cosignatures::Witnessed>, StoreError> {
        use crate::cosignatures::{quorum_checkpoint, quorum_size};
        let Some(w) = self.ledger.witnessing().filter(|w| w.quorum() > 0) else {
            return Ok(None);
        };
        let deadline = std::time::Instant::now() + w.wait();
        let (needed, _) = self.ledger.checkpoint()?;
        loop {
            let seen = w.cosignatures_stored();
            if let Some(found) = self
                .ledger
                .reads()
                .run(|c| quorum_checkpoint(c, w.witnesses(), w.quorum(), needed))?
            {
                return Ok(Some(found));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let cosigned = self
                    .ledger
                    .reads()
                    .run(|c| quorum_size(c, w.witnesses(), w.quorum()))?;
                metrics::counter!("gpuledger_witness_quorum_timeouts_total").increment(1);
                return Err(StoreError::WitnessesBehind {
                    cosigned,
                    needed,
                    quorum: w.quorum(),
                });
            }
            w.wait_for_cosignature(seen, left.min(std::time::Duration::from_millis(250)));
        }
    }
}

/// What one run of [`Issuance::due_contract_invoices`] did.
#[derive(Debug, Default)]
pub struct ContractRun {
    /// The invoices issued (one per currency per billing period).
    pub issued: Vec<gpuledger_core::invoice::Invoice>,
    /// The billing periods that could not be invoiced: tenant, period and why.
    pub failed: Vec<(String, gpuledger_core::invoice::Period, StoreError)>,
}
