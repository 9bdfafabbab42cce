//! The Python module `datafusion_distributed._native`.

use std::sync::Arc;

use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};

use crate::channels;
use crate::codec::{self, ExchangeCodec, CODEC_ID};
use crate::exchange::{ChannelRef, SinkKey};
use crate::{net, pruning, runtime};

/// The codec of the exchange nodes, for `SessionContext.with_physical_extension_codec`.
#[pyclass(name = "ExchangeCodec", frozen)]
struct PyExchangeCodec;

#[pymethods]
impl PyExchangeCodec {
    #[new]
    fn new() -> Self {
        PyExchangeCodec
    }

    #[getter]
    fn __datafusion_codec_id__(&self) -> &'static str {
        CODEC_ID
    }

    fn __datafusion_physical_extension_codec__<'py>(
        &self,
        py: Python<'py>,
        session: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let provider = session.getattr("__datafusion_task_context_provider__")?.call0()?;
        let provider = provider.downcast::<PyCapsule>()?;
        // SAFETY: the session hands out a capsule holding an FFI_TaskContextProvider
        let provider = unsafe { provider.reference::<FFI_TaskContextProvider>() }.clone();
        let codec =
            FFI_PhysicalExtensionCodec::new(Arc::new(ExchangeCodec), Some(runtime().handle().clone()), provider);
        PyCapsule::new(py, codec, Some(c"datafusion_physical_extension_codec".into()))
    }
}

/// Plan bytes of a sink over the plan `child`: its partitions stream into the channels of
/// attempt `attempt` of task `task` of stage `stage` of `query`.
#[pyfunction]
fn sink_plan<'py>(
    py: Python<'py>,
    child: &[u8],
    query: String,
    stage: u32,
    task: u32,
    attempt: u32,
) -> Bound<'py, PyBytes> {
    let payload = codec::sink_payload(&SinkKey {
        query,
        stage,
        task,
        attempt,
    });
    PyBytes::new(py, &codec::extension_plan(&payload, &[child]))
}

/// A channel as Python names it: (address, query, stage, task, attempt, partition).
type PyChannel = (String, String, u32, u32, u32, u32);

/// Plan bytes of a source reading, as its partition k, the channels `partitions[k]`; its
/// schema is that of the plan `schema_of`, the subtree it stands for.
#[pyfunction]
fn source_plan<'py>(
    py: Python<'py>,
    schema_of: &[u8],
    partitions: Vec<Vec<PyChannel>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let payload =
        codec::source_payload(&channel_refs(partitions), None).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &codec::extension_plan(&payload, &[schema_of])))
}

fn channel_refs(partitions: Vec<Vec<PyChannel>>) -> Vec<Vec<ChannelRef>> {
    partitions
        .into_iter()
        .map(|channels| {
            channels
                .into_iter()
                .map(|(address, query, stage, task, attempt, partition)| {
                    ChannelRef::new(address, query, stage, task, attempt, partition)
                })
                .collect()
        })
        .collect()
}

/// Plan bytes of a source reading, as its partition k, the channels `partitions[k]`, declaring
/// the schema `schema` (from `inline_schema`).
#[pyfunction]
fn source_plan_with_schema<'py>(
    py: Python<'py>,
    schema: &[u8],
    partitions: Vec<Vec<PyChannel>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let schema = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(schema), None)
        .map_err(|e| PyValueError::new_err(format!("a bad exchange schema: {e}")))?
        .schema();
    let payload = codec::source_payload(&channel_refs(partitions), Some(&schema))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &codec::extension_plan(&payload, &[])))
}

/// The schema a source's plan bytes declare inline, as DataFusion encodes a decoded source.
#[pyfunction]
fn inline_schema<'py>(py: Python<'py>, plan: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let schema = codec::inline_schema(plan).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &schema))
}

/// Drop the channels of `query` and stop its streaming tasks in this process.
#[pyfunction]
fn release(query: &str) {
    channels::release(query);
}

/// Stage `stage` of `query` has no reader any more: its sinks here stop sending.
#[pyfunction]
fn close_stage(query: &str, stage: u32) {
    channels::close_stage(query, stage);
}

/// Channels of this process with an end not yet taken.
#[pyfunction]
fn open_channels() -> usize {
    channels::open_channels()
}

/// Serve this process's channels to other processes on `host` and `port` (0: any); the port.
/// For each file of `statistics`, whether rows of it may satisfy the predicate of the Parquet
/// scan `scan`; None when it has none (see `pruning`).
#[pyfunction]
fn files_to_read(scan: &[u8], statistics: &[u8]) -> PyResult<Option<Vec<bool>>> {
    pruning::files_to_read(scan, statistics).map_err(|e| PyValueError::new_err(e.to_string()))
}

#[pyfunction]
fn serve(host: &str, port: u16) -> PyResult<u16> {
    net::serve(host, port)
        .map_err(|e| PyOSError::new_err(format!("the data plane cannot listen on {host}:{port}: {e}")))
}

/// The token data-plane requests carry and must carry.
#[pyfunction]
fn set_token(token: &str) {
    net::set_token(token);
}

/// The token requests to the data plane at `address` carry (another cluster's than this
/// process's own).
#[pyfunction]
fn set_peer_token(address: &str, token: &str) {
    net::set_peer_token(address, token);
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyExchangeCodec>()?;
    m.add_function(wrap_pyfunction!(sink_plan, m)?)?;
    m.add_function(wrap_pyfunction!(source_plan, m)?)?;
    m.add_function(wrap_pyfunction!(release, m)?)?;
    m.add_function(wrap_pyfunction!(open_channels, m)?)?;
    m.add_function(wrap_pyfunction!(close_stage, m)?)?;
    m.add_function(wrap_pyfunction!(source_plan_with_schema, m)?)?;
    m.add_function(wrap_pyfunction!(inline_schema, m)?)?;
    m.add_function(wrap_pyfunction!(serve, m)?)?;
    m.add_function(wrap_pyfunction!(files_to_read, m)?)?;
    m.add_function(wrap_pyfunction!(set_token, m)?)?;
    m.add_function(wrap_pyfunction!(set_peer_token, m)?)?;
    m.add("CODEC_ID", CODEC_ID)?;
    Ok(())
}
