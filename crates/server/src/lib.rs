//! gpuledger's server: the HTTP API (`api`, actix-web), `serve` and what runs beside it
//! (`server`: settings, checkpoint publishing, the mirror, witnessing), webhook delivery
//! (`webhooks`), the witness (`witness`), and the renderings of issued documents
//! (`invoice_render`: PDF and CSV; `focus`: FOCUS exports). Over core and the store; the
//! `gpuledger` binary's commands call it. See ARCHITECTURE.md.

pub mod api;
pub mod focus;
pub mod invoice_render;
pub mod server;
pub mod webhooks;
pub mod witness;
