//! datafusion-distributed's compiled data plane: exchanges that stream batches between the
//! tasks of a query, inside DataFusion plans, with no Python on the path of a batch.
//!
//! `exchange` holds the two plan nodes, `channels` the process's streams between them,
//! `net` the server and client that carry streams between processes, and `codec` the way the
//! nodes travel in plan bytes. `pruning` tells the planner which files of a table a scan can skip. `python` (the `python` feature) is the module Python imports.

use std::sync::LazyLock;

pub mod channels;
pub mod codec;
pub mod exchange;
pub mod net;
pub mod pruning;
#[cfg(feature = "python")]
mod python;

/// The data plane's own threads: network I/O, and the context its FFI calls run in.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("datafusion-distributed-data-plane")
            .enable_all()
            .build()
            .expect("the data plane's threads start")
    });
    &RUNTIME
}
