//! What gpuledger's shells (the server and the node agent) share about the machine they run
//! on: [`keyfile`] (key files: private keys 0600, refused when others can read them, never
//! logged), [`disk`] (free space for the `*_filesystem_available_bytes` gauges),
//! [`atomic_file`] (a small file replaced atomically and durably) and [`logging`] (one setup
//! of the log lines). No database, no HTTP.

pub mod atomic_file;
pub mod clock;
pub mod disk;
pub mod keyfile;
pub mod logging;
