//! The Python module `extension_sample`: the rule and the codec as the objects the
//! `datafusion` wheel installs (`add_physical_optimizer_rule`, `with_physical_extension_codec`).

use std::sync::Arc;

use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::physical_optimizer::FFI_PhysicalOptimizerRule;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::{SampleCodec, SampleScans, CODEC_ID};

/// The physical optimizer rule putting a `SampleExec` keeping about one row in `one_in` over
/// every scan: `ctx.add_physical_optimizer_rule(SampleScans(100))`.
#[pyclass(name = "SampleScans", frozen)]
struct PySampleScans {
    one_in: u64,
}

#[pymethods]
impl PySampleScans {
    #[new]
    fn new(one_in: u64) -> PyResult<Self> {
        if one_in == 0 {
            return Err(PyValueError::new_err("one_in must be at least 1"));
        }
        Ok(Self { one_in })
    }

    fn __datafusion_physical_optimizer_rule__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let rule = FFI_PhysicalOptimizerRule::new(Arc::new(SampleScans { one_in: self.one_in }), None);
        PyCapsule::new(py, rule, Some(c"datafusion_physical_optimizer_rule".into()))
    }
}

/// The codec of `SampleExec`, for `SessionContext.with_physical_extension_codec`.
#[pyclass(name = "SampleCodec", frozen)]
struct PySampleCodec;

#[pymethods]
impl PySampleCodec {
    #[new]
    fn new() -> Self {
        PySampleCodec
    }

    #[getter]
    fn __datafusion_codec_id__(&self) -> &'static str {
        CODEC_ID
    }

    /// The nodes of this codec that datafusion-distributed may split across tasks: each
    /// computes, over a share of its input partitions, a share of its output.
    #[getter]
    fn splittable_nodes(&self) -> Vec<&'static str> {
        vec!["SampleExec"]
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
        let codec = FFI_PhysicalExtensionCodec::new(Arc::new(SampleCodec), None, provider);
        PyCapsule::new(py, codec, Some(c"datafusion_physical_extension_codec".into()))
    }
}

#[pymodule]
fn extension_sample(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySampleScans>()?;
    m.add_class::<PySampleCodec>()?;
    m.add("CODEC_ID", CODEC_ID)?;
    Ok(())
}
